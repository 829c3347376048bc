import os
from datetime import UTC, datetime

import pandas as pd
import pytest

from netbench.errors import NetbenchError
from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore, params_json, thin


def _row(run_id: str, metric: str, value: float, **extra):
    row = {name: None for name, _ in COLUMNS}
    row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label="lbl",
               started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), benchmark="tcp.stream",
               family="tcp", op="stream", metric=metric, value=value, unit="Gbit/s",
               better="higher", status="ok", case_index=0, params=params_json({"b": 1, "a": 2}),
               samples=[1.0, 2.0])
    row.update(extra)
    return row


def test_runs_round_trip_through_pandas_read_parquet(tmp_path):
    store = ResultStore(tmp_path)
    store.check_writable()
    store.write_run(store.path_for("run1", "2026-01-02T03:04:05"), [_row("run1", "goodput", 9.5)])
    store.write_run(store.path_for("run2", "2026-01-02T03:05:05"),
                    [_row("run2", "goodput", 8.0), _row("run2", "cpu", 50.0, samples=None)])
    # A writer's temp file must never be picked up by readers.
    (tmp_path / ".x.parquet.tmp").write_bytes(b"partial")
    df = pd.read_parquet(tmp_path)
    assert sorted(df["run_id"].unique()) == ["run1", "run2"]
    assert len(df) == 3
    assert list(df.columns) == [name for name, _ in COLUMNS]
    assert str(df["started_at"].dt.tz) == "UTC"
    assert df.loc[df.metric == "goodput", "value"].tolist() == [9.5, 8.0]
    assert list(df.loc[0, "samples"]) == [1.0, 2.0]
    assert df.loc[0, "params"] == '{"a":2,"b":1}'      # sorted keys, canonical JSON


def test_rewrite_is_atomic_and_replaces(tmp_path):
    store = ResultStore(tmp_path)
    path = store.path_for("r", "2026-01-01T00:00:00")
    store.write_run(path, [_row("r", "a", 1.0)])
    store.write_run(path, [_row("r", "a", 1.0), _row("r", "b", 2.0)])
    assert len(pd.read_parquet(path)) == 2
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_unwritable_results_dir_is_a_clear_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a dir")
    with pytest.raises(NetbenchError, match="cannot be written"):
        ResultStore(blocker / "results").check_writable()
    if os.geteuid() != 0:       # root ignores permission bits
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(NetbenchError, match="cannot be written"):
            ResultStore(ro).check_writable()


def test_corrupt_or_foreign_files_are_skipped_with_a_warning(tmp_path):
    store = ResultStore(tmp_path)
    store.write_run(store.path_for("ok", "2026-01-01T00:00:00"), [_row("ok", "a", 1.0)])
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 this is not parquet")
    pd.DataFrame({"x": [1]}).to_parquet(tmp_path / "foreign.parquet")
    with pytest.warns(UserWarning) as caught:
        df = store.read()
    assert df["run_id"].tolist() == ["ok"]
    text = " ".join(str(w.message) for w in caught)
    assert "broken.parquet" in text and "foreign.parquet" in text


def test_thin_keeps_bounded_evenly_spaced_samples():
    data = list(range(250_000))
    out = thin(data, 1000)
    assert len(out) == 1000 and out[0] == 0 and out[-1] >= 249_000
    assert thin([1, 2, 3]) == [1.0, 2.0, 3.0]


def test_runs_lists_each_stored_run_with_its_case_counts(tmp_path):
    import json as _json

    from conftest import assert_clean_error, netbench

    results = tmp_path / "r"
    for label, bench in (("a", "mem.copy"), ("b", "rdma.write_bw")):
        assert netbench("run", bench, "-p", "msg_size=1M,2M", "-p", "iterations=2",
                        "--label", label, "--results", str(results)).returncode == 0
    runs = _json.loads(netbench("runs", "--results", str(results), "--json").stdout)
    assert [(r["label"], r["ok"], r["skipped"], r["failed"]) for r in runs] == [
        ("a", 2, 0, 0), ("b", 0, 2, 0)]                 # no RDMA here: both cases skipped
    text = netbench("runs", "--results", str(results)).stdout
    assert runs[0]["run_id"] in text and "mem.copy" in text
    assert_clean_error(netbench("runs", "--results", str(results), "--label", "nope"),
                       "no stored runs", "'nope'")


def test_runs_reads_files_written_before_case_counts_were_kept(h200_results):
    from conftest import netbench

    proc = netbench("runs", "--results", str(h200_results), "--json")
    assert proc.returncode == 0, proc.stderr
    import json as _json

    runs = _json.loads(proc.stdout)
    assert runs and all(r["ok"] + r["skipped"] + r["failed"] > 0 for r in runs)


@pytest.mark.parametrize("values", [
    [None, [1.0, 2.5], [], None, [3]], [None, None], [], [[float("inf"), 1e308, -0.0]],
    [[True, 2]], [list(range(5000))]])
def test_a_samples_column_built_through_numpy_holds_what_pyarrow_would(values):
    import pyarrow as pa

    from netbench.store.schema import _samples_column
    kind = pa.list_(pa.float64())
    assert _samples_column(values, kind).equals(pa.array(values, type=kind))


@pytest.mark.parametrize("values", [[[1, "x"]], [["1.5"]], [[[1.0]]], [[2 ** 70]]])
def test_samples_that_are_not_numbers_fail_as_pyarrow_fails(values):
    import pyarrow as pa

    from netbench.store.schema import _samples_column
    with pytest.raises(pa.ArrowInvalid):
        _samples_column(values, pa.list_(pa.float64()))
