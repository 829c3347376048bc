"""The append-only store: a part file per case, compaction at the end, kill -9 loses at most
the case in flight, and `netbench run --resume` continues an interrupted run."""

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import ROOT, assert_clean_error, netbench

from netbench import load as netbench_load
from netbench.errors import NetbenchError
from netbench.run.runner import prepare_resume
from netbench.run.suite import load_suite
from netbench.store import ResultStore

SUITE = ('[suite]\nname = "long"\n'
         '[[case]]\nbenchmark = "mem.copy"\nmsg_size = ["64K", "128K", "256K"]\n'
         'iterations = 3\n'
         '[[case]]\nbenchmark = "tcp.stream"\nmsg_size = "64K"\nduration = 8\n'
         '[[case]]\nbenchmark = "mem.copy"\nmsg_size = "1M"\niterations = 3\n')


def _rows(run_id, index):
    from netbench.store import COLUMNS, SCHEMA_VERSION

    row = {name: None for name, _ in COLUMNS}
    row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label="l", case_index=index,
               started_at=pd.Timestamp("2026-12-01", tz="UTC").to_pydatetime(),
               benchmark="mem.copy", metric="bw", value=1.0 + index, unit="GB/s",
               better="higher", status="ok", params="{}")
    return [row]


def _three_cases(tmp_path, run_id):
    """A run being written, three cases in: (store, its final path, the writer)."""
    store = ResultStore(tmp_path)
    store.check_writable()
    path = store.path_for(run_id, "2026-12-01T00:00:00")
    writer = store.open_run(path)
    for i in range(3):
        writer.append(_rows(run_id, i))
    return store, path, writer


def test_cases_are_parts_while_running_and_one_file_after(tmp_path):
    store, path, writer = _three_cases(tmp_path, "run000000001")
    parts = sorted((tmp_path / f"{path.stem}.parts").glob("part-*.parquet"))
    assert len(parts) == 3 and not path.exists()
    # Readable while it runs: by the store and by plain pandas.
    assert list(store.runs()["state"]) == ["running"]
    assert len(pd.read_parquet(tmp_path)) == 3
    assert sorted(store.read(["run000000001"])["case_index"]) == [0, 1, 2]
    writer.close()
    assert path.exists() and not (tmp_path / f"{path.stem}.parts").exists()
    index = store.runs()
    assert list(index["state"]) == ["finished"] and int(index["ok"].iloc[0]) == 3
    assert len(pd.read_parquet(tmp_path)) == 3


def test_a_corrupt_part_is_skipped_with_a_warning_naming_it(tmp_path):
    store, path, writer = _three_cases(tmp_path, "run000000002")
    bad = sorted((tmp_path / f"{path.stem}.parts").glob("part-*.parquet"))[1]
    bad.write_bytes(b"not parquet at all")
    with pytest.warns(UserWarning, match=bad.name):
        rows = store.read(["run000000002"])
    assert sorted(rows["case_index"]) == [0, 2]                # the rest of the run is read
    with pytest.warns(UserWarning, match=bad.name):
        writer.close()
    assert sorted(pd.read_parquet(path)["case_index"]) == [0, 2]


def test_a_live_writer_is_never_resumed_and_stale_parts_are_swept(tmp_path):
    store = ResultStore(tmp_path)
    store.check_writable()
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    plan = load_suite(str(suite))
    path = store.path_for("run000000003", "2026-12-01T00:00:00")
    writer = store.open_run(path)
    writer.append(_rows("run000000003", 0))
    with pytest.raises(Exception, match="live process is still writing"):
        prepare_resume(store, "run000000003", plan, None, None)
    with pytest.raises(Exception, match="another live process is writing it"):
        store.open_run(path)              # two writers (or compactions) of one run: refused
    writer.close()
    # A compaction that died after its rename: the parts are ignored, then swept.
    parts = tmp_path / f"{path.stem}.parts"
    parts.mkdir()
    (parts / "part-000001.parquet").write_bytes(path.read_bytes())
    assert len(store.runs()) == 1 and len(store.read()) == 1
    store.check_writable()
    assert not parts.exists()


def test_kill_9_loses_at_most_the_case_in_flight_and_resume_finishes_the_run(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text(SUITE)
    res = tmp_path / "res"
    proc = subprocess.Popen([sys.executable, "-m", "netbench", "run", str(suite), "--results",
                             str(res), "--label", "sweep"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:           # the three quick cases are stored
        if len(list(res.glob("*.parts/part-*.parquet"))) >= 3:
            break
        time.sleep(0.1)
    time.sleep(1.0)                               # inside the 8 s stream
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    store = ResultStore(res)
    index = store.runs()
    assert list(index["state"]) == ["interrupted"] and int(index["ok"].iloc[0]) == 3
    run_id = index["run_id"].iloc[0]
    assert sorted(set(pd.read_parquet(res)["case_index"])) == [0, 1, 2]
    listed = netbench("runs", "--results", str(res))
    assert "interrupted" in listed.stdout, listed.stdout
    # A changed suite is refused, naming why; so is an unknown run.
    changed = tmp_path / "changed.toml"
    changed.write_text(SUITE.replace('"1M"', '"2M"'))
    assert_clean_error(netbench("run", str(changed), "--results", str(res), "--resume",
                                run_id), "the suite changed since that run started")
    assert_clean_error(netbench("run", str(suite), "--results", str(res), "--resume",
                                "nosuchrun"), "no such run", run_id)
    with pytest.raises(Exception, match="it ran on"):
        prepare_resume(store, run_id, load_suite(str(suite)), "another-host", None)
    # Resume: the finished cases are kept, the rest run under the same id.
    resumed = netbench("run", str(suite), "--results", str(res), "--resume", run_id,
                       timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming run {run_id}: 3 finished case(s) kept, 2 to run" in resumed.stderr
    index = store.runs()
    assert list(index["state"]) == ["finished"] and list(index["run_id"]) == [run_id]
    assert list(index["label"]) == ["sweep"] and int(index["ok"].iloc[0]) == 5
    rows = pd.read_parquet(res)
    assert sorted(set(rows["case_index"])) == [0, 1, 2, 3, 4]
    assert rows.groupby("case_index")["metric"].apply(lambda m: m.is_unique).all()
    # The environment is kept once, in the run's footer, not on each row; load() joins it.
    assert rows["env_json"].isna().all()
    tidy = netbench_load(res)
    assert tidy["env_json"].notna().all() and tidy["env_json"].nunique() == 1
    env = json.loads(tidy[tidy["case_index"] == 4]["env_json"].iloc[0])
    assert env["resumes"][0]["redone"] == [3, 4] and env["resumes"][0]["kept"] == 3
    assert_clean_error(netbench("run", str(suite), "--results", str(res), "--resume",
                                run_id), "nothing to resume")


def test_a_results_path_that_is_a_file_is_one_clear_error(tmp_path):
    target = tmp_path / "results"
    target.write_text("x")
    assert_clean_error(netbench("run", "mem.copy", "--results", str(target)), "is a file")
    # Every command that reads the store says the same, not "no results".
    spec = tmp_path / "spec.toml"
    spec.write_text('[[check]]\nbenchmark = "mem.copy"\nmetric = "bw"\nmin = 1\n')
    for command in (["runs"], ["compare", "a", "b"], ["report", "-o", str(tmp_path / "r.html")],
                    ["history"], ["export"], ["accept", str(spec)], ["run", "mem.copy",
                    "--resume", "x"]):
        assert_clean_error(netbench(*command, "--results", str(target)), "is a file", "--results")
    with pytest.raises(NetbenchError, match="is a file"):
        netbench_load(target)
    assert target.read_text() == "x"                       # and nothing was written over it


def test_load_is_tidy_for_pandas(tmp_path):
    """netbench.load: nullable integers, a missing label as missing, one unit spelling with
    its qualifier apart, params as columns, and when each case ran and for how long."""
    import netbench

    res = tmp_path / "res"
    assert netbench_run(res, "tcp.rr", "msg_size=64,1K", "iterations=300").returncode == 0
    assert netbench_run(res, "mem.copy", "msg_size=1M", "iterations=2",
                        label="x").returncode == 0
    rows = netbench.load(res)
    for column in ("case_index", "msg_size", "n_samples"):
        assert str(rows[column].dtype) == "Int64", column
    rr = rows[rows.benchmark == "tcp.rr"]
    assert set(rr["unit"].dropna()) <= {"us", "transactions/s", "%core"}
    assert set(rr.loc[rr.metric == "lat_p50", "unit_note"]) == {"half RTT"}
    assert rr["label"].isna().all() and set(rows.loc[rows.benchmark == "mem.copy",
                                                     "label"]) == {"x"}
    assert sorted(rr["param_msg_size"].unique()) == [64, 1024]
    assert (rr["param_iterations"] == 300).all()
    assert rows["case_started_at"].notna().all() and (rows["case_seconds"] > 0).all()
    first, second = (rr[rr.case_index == i]["case_started_at"].iloc[0] for i in (0, 1))
    assert second > first
    # Raw pandas reads the same rows, stored as tidy: one unit spelling with its note apart,
    # and the run's environment not repeated on them (load joined it back from the footer).
    raw = pd.read_parquet(res)
    assert len(raw) == len(rows)
    assert set(raw.loc[raw.benchmark == "tcp.rr", "unit"].dropna()) <= {"us", "transactions/s",
                                                                         "%core"}
    assert set(raw.loc[raw.metric == "lat_p50", "unit_note"]) == {"half RTT"}
    assert raw["env_json"].isna().all() and raw["env_kernel"].isna().all()
    assert rows["env_kernel"].notna().all() and rows["env_json"].notna().all()
    assert rows["run_id"].nunique() == 2
    assert raw["env_nic"].notna().any()                  # the case's device stays on its row


def netbench_run(res, bench, *params, label=None):
    args = ["run", bench, "--results", str(res)]
    for p in params:
        args += ["-p", p]
    return netbench(*args, *(["--label", label] if label else []))


def test_many_runs_scan_as_one_dataset_with_filters_and_skip_foreign_files(tmp_path):
    store = ResultStore(tmp_path)
    store.check_writable()
    for i in range(20):                                  # beyond 16 files: one dataset scan
        rows = _rows(f"run{i:09d}", 0) + [{**_rows(f"run{i:09d}", 1)[0], "metric": "bw_peak"}]
        store.write_run(store.path_for(f"run{i:09d}", f"2026-12-01T00:00:{i:02d}"), rows)
    pd.DataFrame({"x": [1, 2]}).to_parquet(tmp_path / "foreign.parquet")
    with pytest.warns(UserWarning, match="foreign.parquet: not a netbench result file"):
        rows = store.read()
    assert len(rows) == 40 and rows["run_id"].notna().all()
    picked = store.read(where={"metric": ["bw_peak"]}, columns=["run_id", "metric"])
    assert len(picked) == 20 and set(picked["metric"]) == {"bw_peak"}
    assert list(picked.columns) == ["run_id", "metric"]
    # The footers' cache: written once, then used; a changed file is read afresh.
    assert len(store.runs()) == 20 and (tmp_path / "_catalog.parquet").exists()
    first = store.path_for("run000000000", "2026-12-01T00:00:00")
    store.write_run(first, [{**_rows("run000000000", 0)[0], "label": "relabelled"}])
    assert store.runs().set_index("run_id").loc["run000000000", "label"] == "relabelled"
    with pytest.warns(UserWarning, match="foreign.parquet"):
        assert len(store.read()) == 39


def test_load_gives_whole_number_params_as_int64_beside_benchmarks_without_them(tmp_path):
    """param_msg_size is Int64 like msg_size, even where a benchmark without the param
    (gpu.loader_feed, skipped here or not) leaves it missing."""
    import netbench

    res = tmp_path / "res"
    assert netbench_run(res, "mem.copy", "msg_size=1M", "iterations=2").returncode == 0
    assert netbench_run(res, "gpu.loader_feed", "batches=2", "warmup=0",
                        "device=cuda").returncode == 0
    rows = netbench.load(res)
    assert rows["param_msg_size"].isna().any()
    for column in ("msg_size", "param_msg_size", "param_iterations", "param_batches"):
        assert str(rows[column].dtype) == "Int64", (column, rows[column].dtype)
    assert rows.loc[rows.benchmark == "mem.copy", "param_msg_size"].eq(1 << 20).all()


def test_a_long_run_merges_its_parts_as_it_goes_and_streams_its_compaction(tmp_path,
                                                                         monkeypatch):
    """A soak writes a part a window; every MERGE_PARTS of them become one file (a day of
    1 s windows is hundreds of files, not 86,400), and a run of more than STREAM_FILES files
    is compacted one file at a time: the same rows, footer and order as in memory."""
    from netbench.store import parquet

    monkeypatch.setattr(parquet, "MERGE_PARTS", 4)
    store = ResultStore(tmp_path)
    store.check_writable()
    path = store.path_for("run000000010", "2026-12-01T00:00:00")
    writer = store.open_run(path, {"netbench_plan": "soak"})
    parts = tmp_path / f"{path.stem}.parts"
    for i in range(10):
        writer.append(_rows("run000000010", i))
    names = sorted(p.name for p in parts.glob("part-*.parquet"))
    assert names == ["part-000001-000004.parquet", "part-000005-000008.parquet",
                     "part-000009.parquet", "part-000010.parquet"], names
    assert sorted(store.read(["run000000010"])["case_index"]) == list(range(10))
    in_memory = tmp_path / "copy"
    in_memory.mkdir()
    for name in names:
        (in_memory / name).write_bytes((parts / name).read_bytes())
    monkeypatch.setattr(parquet, "STREAM_FILES", 2)
    writer.close()
    streamed = pd.read_parquet(path)
    assert list(streamed["case_index"]) == list(range(10))
    monkeypatch.setattr(parquet, "STREAM_FILES", 100)
    reference = tmp_path / "ref" / "reference.parquet"       # outside the store
    reference.parent.mkdir()
    store.compact(reference, in_memory, {"netbench_plan": "soak"})
    assert streamed.equals(pd.read_parquet(reference))
    import pyarrow.parquet as pq
    assert pq.read_schema(path).metadata == pq.read_schema(reference).metadata
    index = store.runs()
    assert list(index["state"]) == ["finished"] and int(index["ok"].iloc[0]) == 10


def test_a_merge_killed_before_it_removed_its_singles_loses_and_doubles_nothing(
        tmp_path, monkeypatch):
    """Killed after the merged block was written, before its singles were removed: both
    hold the same rows. The next writer (a resume) removes the singles; its compaction keeps
    each case once; a case measured again later still wins."""
    from netbench.store import parquet

    monkeypatch.setattr(parquet, "MERGE_PARTS", 4)
    store = ResultStore(tmp_path)
    store.check_writable()
    path = store.path_for("run000000011", "2026-12-01T00:00:00")
    writer = store.open_run(path)
    parts = tmp_path / f"{path.stem}.parts"
    for i in range(3):
        writer.append(_rows("run000000011", i))
    kept = {p.name: p.read_bytes() for p in parts.glob("part-*.parquet")}
    writer.append(_rows("run000000011", 3))          # the merge
    for name, data in kept.items():                  # as a kill mid-merge leaves them
        (parts / name).write_bytes(data)
    writer.close(compact=False)
    # A reader before any writer reopens (a live view, `netbench runs`, --resume's check):
    # the block alone, each case once.
    seen = ResultStore(tmp_path).read(["run000000011"])
    assert sorted(seen["case_index"]) == [0, 1, 2, 3], list(seen["case_index"])
    assert int(ResultStore(tmp_path).runs()["ok"].iloc[0]) == 4
    again = store.open_run(path)
    assert sorted(p.name for p in parts.glob("part-*.parquet")) == [
        "part-000001-000004.parquet"]
    redo = _rows("run000000011", 2)
    redo[0]["value"] = 99.0
    again.append(redo)
    assert sorted(p.name for p in parts.glob("part-*.parquet"))[-1] == "part-000005.parquet"
    again.close()
    rows = pd.read_parquet(path)
    assert list(rows["case_index"]) == [0, 1, 2, 3]
    assert rows.set_index("case_index").loc[2, "value"] == 99.0


def test_a_block_of_windows_with_many_samples_closes_before_a_reader_would_refuse_it(
        tmp_path, monkeypatch):
    """tcp.rr keeps every round trip (up to 100,000 samples a window): 256 such windows in
    one block would pass MAX_FILE_SAMPLES, and a reader skips such a file, hiding its windows
    from a live view and from --resume. A block closes at a quarter of the limit."""
    from netbench.store import parquet

    monkeypatch.setattr(parquet, "MAX_FILE_SAMPLES", 400)
    store = ResultStore(tmp_path)
    store.check_writable()
    path = store.path_for("run000000012", "2026-12-01T00:00:00")
    writer = store.open_run(path)
    for i in range(10):
        rows = _rows("run000000012", i)
        rows[0]["samples"] = [1.0] * 30
        rows[0]["n_samples"] = 30
        writer.append(rows)
    names = sorted(p.name for p in (tmp_path / f"{path.stem}.parts").glob("part-*.parquet"))
    assert names[0] == "part-000001-000004.parquet", names    # 4 x 31 >= 100
    assert sorted(store.read(["run000000012"])["case_index"]) == list(range(10))
    writer.close()


def test_a_part_whose_samples_are_corrupt_is_skipped_by_a_streamed_compaction_too(
        tmp_path, monkeypatch):
    """A part whose small columns read but whose samples page is corrupt (a flipped block on
    disk): the streamed compaction's first pass reads it, its second cannot. The run is then
    compacted in memory, which skips that part with a warning naming it, as it skips a part
    no column of which reads: the other cases kept, no exception."""
    import numpy as np
    import pyarrow.parquet as pq

    from netbench.store import parquet

    monkeypatch.setattr(parquet, "STREAM_FILES", 2)
    store = ResultStore(tmp_path)
    store.check_writable()
    path = store.path_for("run000000013", "2026-12-01T00:00:00")
    writer = store.open_run(path)
    rng = np.random.default_rng(1)
    for i in range(5):
        rows = _rows("run000000013", i)
        rows[0]["samples"] = rng.random(20_000).tolist()     # pages of their own
        writer.append(rows)
    bad = sorted((tmp_path / f"{path.stem}.parts").glob("part-*.parquet"))[2]
    meta = pq.ParquetFile(bad).metadata.row_group(0)
    (chunk,) = [meta.column(i) for i in range(meta.num_columns)
                if meta.column(i).path_in_schema.startswith("samples.")]
    data = bytearray(bad.read_bytes())
    start = chunk.dictionary_page_offset or chunk.data_page_offset      # its page header
    data[start:start + 64] = b"\xff" * 64
    bad.write_bytes(bytes(data))
    pq.read_table(bad, columns=["case_index", "status"])      # the small columns still read
    with pytest.raises(OSError):
        pq.read_table(bad)
    with pytest.warns(UserWarning, match=bad.name):
        writer.close()
    assert sorted(pd.read_parquet(path)["case_index"]) == [0, 1, 3, 4]
    assert not list(tmp_path.glob(".*.tmp")) and not list(tmp_path.glob("*.parts"))
