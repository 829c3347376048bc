"""The format's version moves with its columns: every column belongs to the version that added
it, a file of every version reads back (what a later version added reads as missing), and a
file from a newer netbench is skipped by name, never half-read."""

from __future__ import annotations

import json
import warnings

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import netbench

from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore
from netbench.store.schema import FORMATS, format_columns, version_problem


def test_every_column_belongs_to_the_version_that_added_it_in_file_order():
    names = [name for name, _ in COLUMNS]
    added = [c for _, cols, _ in FORMATS for c in cols]
    assert len(set(added)) == len(added), "a column added by two versions"
    base = names[:names.index("env_json") + 1]
    # A column appended to COLUMNS without a version of its own fails here.
    assert base + added == names, set(names) - set(base) - set(added)
    assert [v for v, _, _ in FORMATS] == list(range(2, SCHEMA_VERSION + 1))
    assert all(what for _, _, what in FORMATS)
    assert format_columns(SCHEMA_VERSION) == tuple(names)
    assert format_columns(2) == (*base, "case_started_at", "case_seconds")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A real run's file, as this netbench writes it."""
    res = tmp_path_factory.mktemp("run")
    proc = netbench("run", "mem.copy", "-p", "msg_size=64K", "-p", "iterations=2",
                    "--results", str(res), "--json")
    assert proc.returncode == 0, proc.stderr
    (path,) = res.glob("*.parquet")
    return path, pq.read_table(path)


def _as_version(table: pa.Table, version: int, folder, name: str) -> None:
    """The file a netbench of that format version wrote: its columns, its footer's version."""
    kept = table.select(list(format_columns(version) if version > 1 else
                             [c for c in table.column_names
                              if c in format_columns(2)[:-2]]))
    kept = kept.set_column(0, "schema_version",
                           pa.array([version] * kept.num_rows, pa.int32()))
    meta = dict(table.schema.metadata)
    meta[b"netbench_schema_version"] = str(version).encode()
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(kept.replace_schema_metadata(meta), folder / name)


def test_a_file_of_every_version_reads_back_and_what_it_predates_is_missing(real_run,
                                                                           tmp_path):
    path, table = real_run
    current = ResultStore(path.parent).read()
    for version in range(1, SCHEMA_VERSION + 1):
        folder = tmp_path / f"v{version}"
        _as_version(table, version, folder, path.name)
        with warnings.catch_warnings():
            warnings.simplefilter("error")          # nothing about it is skipped
            frame = ResultStore(folder).read()
        assert len(frame) == len(current), version
        held = format_columns(version) if version > 1 else format_columns(2)[:-2]
        assert list(frame["value"]) == list(current["value"]), version
        assert list(frame["schema_version"]) == [version] * len(frame)
        for name, _ in COLUMNS:
            if name in held or name in ("schema_version", "unit"):
                continue
            missing = frame[name].isna().all() if name in frame else True
            assert missing, (version, name)
    # A version that added a column holds it: case_seconds came with version 2, the
    # benchmark's traits with 7.
    assert ResultStore(tmp_path / "v2").read()["case_seconds"].notna().all()
    assert set(ResultStore(tmp_path / "v7").read()["headline"]) == {"bw"}


def test_a_file_from_a_newer_netbench_is_skipped_by_name(real_run, tmp_path):
    path, table = real_run
    folder = tmp_path / "newer"
    _as_version(table, SCHEMA_VERSION, folder, path.name)
    meta = dict(pq.read_schema(folder / path.name).metadata)
    meta[b"netbench_schema_version"] = str(SCHEMA_VERSION + 1).encode()
    pq.write_table(pq.read_table(folder / path.name).replace_schema_metadata(meta),
                   folder / path.name)
    with pytest.warns(UserWarning, match="written by a newer netbench") as seen:
        runs = ResultStore(folder).runs()
    assert len(runs) == 0 and path.name in str(seen[0].message)
    with pytest.warns(UserWarning, match=f"format version {SCHEMA_VERSION + 1}"):
        assert len(ResultStore(folder).read()) == 0
    # The CLI names it too, and finds nothing else to list.
    proc = netbench("runs", "--results", str(folder))
    assert "written by a newer netbench" in proc.stderr and "no stored runs" in proc.stderr


def test_version_problems_are_said_and_a_row_of_a_newer_format_is_refused_on_import(tmp_path):
    assert version_problem(None) == "" and version_problem(b"1") == ""
    assert version_problem(str(SCHEMA_VERSION)) == ""
    assert "none netbench wrote" in version_problem("0")
    assert "none netbench wrote" in version_problem("x" * 500)
    assert "upgrade netbench" in version_problem(str(SCHEMA_VERSION + 1))
    row = {"schema_version": SCHEMA_VERSION + 1, "run_id": "r1", "label": "l",
           "started_at": "2026-12-01T00:00:00+00:00", "metric": "bw"}
    src = tmp_path / "rows.jsonl"
    src.write_text(json.dumps(row) + "\n")
    proc = netbench("import", str(src), "--results", str(tmp_path / "r"))
    assert proc.returncode != 0, proc.stdout
    assert f"{src}:1: this row was written by a newer netbench (format version " \
        f"{SCHEMA_VERSION + 1}" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr
    # A format-3 row holding a column format 14 added: named.
    row.update(schema_version=3, placement="ends on one CPU")
    src.write_text(json.dumps(row) + "\n")
    proc = netbench("import", str(src), "--results", str(tmp_path / "r"))
    assert proc.returncode != 0 and "not a format-3 row (unknown keys: placement)" in \
        proc.stderr, proc.stderr


def test_the_docs_table_lists_every_version_with_its_columns():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "results.md").read_text()
    for version, cols, what in FORMATS:
        line = next((x for x in text.splitlines() if x.startswith(f"| {version} | ")), "")
        assert line, f"docs/results.md has no row for format version {version}"
        assert all(f"`{c}`" in line for c in cols) and what in line, line
