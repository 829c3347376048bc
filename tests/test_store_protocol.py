"""One store interface: the Parquet, JSON-lines and null stores implement the Store Protocol
(the Parquet one ReadableStore too), and the runner sees only the Protocol, never which store
is behind it or how that store lays out a run."""

from __future__ import annotations

import inspect

from conftest import ROOT

from netbench.store import JsonlStore, NullStore, ReadableStore, ResultStore, Store
from netbench.store.protocol import RunWriter


def _signature_matches(impl: type, proto: type) -> list[str]:
    wrong = []
    for name, member in vars(proto).items():
        if name.startswith("_") or not callable(member):
            continue
        theirs = getattr(impl, name, None)
        if theirs is None:
            wrong.append(f"{impl.__name__} lacks {name}")
        elif list(inspect.signature(theirs).parameters) != list(
                inspect.signature(member).parameters):
            wrong.append(f"{impl.__name__}.{name}{inspect.signature(theirs)} is not "
                         f"{name}{inspect.signature(member)}")
    return wrong


def test_every_store_implements_the_protocol_with_its_signatures(tmp_path):
    stores = [ResultStore(tmp_path / "r"), JsonlStore(tmp_path / "rows.jsonl"), NullStore()]
    assert all(isinstance(s, Store) for s in stores)
    assert isinstance(stores[0], ReadableStore)
    assert not isinstance(stores[1], ReadableStore) and not isinstance(stores[2], ReadableStore)
    for store in stores:
        assert _signature_matches(type(store), Store) == []
    assert _signature_matches(ResultStore, ReadableStore) == []
    for store in stores:
        store.check_writable()
        path = store.path_for("protocol000001", "2026-12-01T00:00:00")
        writer = store.open_run(path, {})
        assert isinstance(writer, RunWriter)
        assert _signature_matches(type(writer), RunWriter) == []
        # Nothing stored, not finished: the Parquet store leaves no run to resume (its
        # parts' folder gone); a one-file store's run is its file.
        left = writer.close(compact=False)
        assert left == (None if type(store) is ResultStore else path), (store, left)
    assert not list((tmp_path / "r").glob("*.parts"))
    class Half:                                   # it can fail
        def check_writable(self, strict):
            pass
    assert _signature_matches(Half, Store)[0].startswith(
        "Half.check_writable(self, strict) is not check_writable(self)")


def test_the_runner_sees_only_the_protocol():
    source = (ROOT / "netbench" / "run" / "runner.py").read_text()
    for name in ("ResultStore", "JsonlStore", "NullStore", ".parts", "part-", "parquet"):
        assert name not in source, name
