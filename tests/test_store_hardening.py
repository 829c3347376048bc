"""Hostile inputs to the store and the readers (issue 21): run ids that would name paths, a
read-only store, inputs that never end or nest without bound, a writer killed while
compacting, parts that turn unreadable, a second name for a run file, plans of millions of
cases, labels that would drive the terminal. Each ends as one `netbench: error:` (or warning)
line or reads as it should; nothing stored is lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, assert_clean_error, install_plugin, netbench

from netbench.errors import UsageError
from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore

STARTED = "2026-12-01T00:00:00+00:00"


def _row(run_id: object = "imported0001", index: int = 0, **extra) -> dict:
    row = {name: None for name, _ in COLUMNS}
    row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label="l", started_at=STARTED,
               case_index=index, benchmark="mem.copy", metric="bw", value=1.0 + index,
               unit="GB/s", better="higher", status="ok", params="{}", host="h")
    row.update(extra)
    return row


def _stored_row(run_id: str, index: int = 0, **extra) -> dict:
    row = _row(run_id, index, **extra)
    row["started_at"] = pd.Timestamp(row["started_at"]).to_pydatetime()
    return row


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- 1: run ids become paths in one place, and are checked there ---------------------------

@pytest.mark.parametrize("bad", ["imported0001.parts/../../ESCAPED", "a\nb", "", "../x", "a-b"])
def test_import_refuses_a_run_id_that_is_not_a_file_name(tmp_path, bad):
    results = tmp_path / "store" / "results"
    rows = _jsonl(tmp_path / "rows.jsonl", [_row("good00000001"), _row(bad)])
    proc = netbench("import", str(rows), "--results", str(results))
    assert_clean_error(proc, f"{rows}:2", "run_id", repr(bad), "letters, digits or underscores")
    assert not list(tmp_path.rglob("*.parquet")), "nothing may be written"


def test_path_for_checks_every_run_id(tmp_path):
    store = ResultStore(tmp_path)
    assert store.path_for("3f2a9c1d0b7e", STARTED).parent == tmp_path
    for bad in ("x/../../y", "x\0y", None, 5, "a" * 65, "x.parts"):
        with pytest.raises(UsageError, match="cannot name a run's file"):
            store.path_for(bad, STARTED)  # type: ignore[arg-type]


# --- 6: readers never write what they cannot, and never read without bound ----------------

def _store_with_a_run(results: Path) -> None:
    """Two runs of one case (history needs two)."""
    results.mkdir(parents=True, exist_ok=True)
    store = ResultStore(results)
    for number, started in ((1, STARTED), (2, "2026-12-01T01:00:00+00:00")):
        run_id = f"run00000000{number}"
        store.write_run(store.path_for(run_id, started),
                        [_stored_row(run_id, started_at=started)])


def test_readers_do_not_need_to_write_the_footer_cache(tmp_path):
    """The catalog is only a cache: where it cannot be written (here its name is taken by a
    directory, which root cannot write over either) every reader still reads."""
    results = tmp_path / "r"
    _store_with_a_run(results)
    (results / "_catalog.parquet").mkdir()
    for args in (["runs"], ["export", "--run", "run000000001"], ["history"]):
        proc = netbench(*args, "--results", str(results))
        assert "Traceback" not in proc.stderr, proc.stderr
        assert proc.returncode == 0, proc.stderr
    assert (results / "_catalog.parquet").is_dir() and not list(results.glob(".*"))


@pytest.mark.root
def test_every_reader_works_on_a_read_only_store(tmp_path):
    results = tmp_path / "r"
    _store_with_a_run(results)
    if os.geteuid() != 0 or subprocess.run(["mount", "--bind", str(results), str(results)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root and a bind mount")
    try:
        assert subprocess.run(["mount", "-o", "remount,ro,bind", str(results)],
                              capture_output=True).returncode == 0
        for args in (["runs"], ["runs", "--json"], ["export", "--run", "run000000001"],
                     ["history"], ["compare", "run000000001", "run000000002"]):
            proc = netbench(*args, "--results", str(results))
            assert "Traceback" not in proc.stderr, (args, proc.stderr)
            assert "._catalog" not in proc.stderr, (args, proc.stderr)
            assert proc.returncode in (0, 3), (args, proc.stderr)
    finally:
        subprocess.run(["umount", str(results)], capture_output=True)


@pytest.mark.parametrize("kind", ["suite", "spec", "thresholds"])
def test_toml_nested_5000_deep_is_one_clear_error(tmp_path, kind):
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    args = {"suite": ["run", str(path), "--dry-run"],
            "spec": ["accept", str(path), "--results", str(tmp_path)],
            "thresholds": ["compare", "run000000001", "run000000001", "--thresholds",
                           str(path), "--results", str(tmp_path)]}[kind]
    if kind != "suite":
        _store_with_a_run(tmp_path)
    assert_clean_error(netbench(*args), str(path), "nested too deeply")


def _sysfs(tmp_path: Path) -> Path:
    root = tmp_path / "sys"
    nic = root / "class" / "net" / "eth9"
    nic.mkdir(parents=True)
    return root


def test_probe_reads_fifos_devices_and_huge_sysfs_files_as_unknown(tmp_path):
    root = _sysfs(tmp_path)
    nic = root / "class" / "net" / "eth9"
    os.mkfifo(nic / "operstate")                 # would block the reader forever
    (nic / "mtu").symlink_to("/dev/zero")        # would never end
    with open(nic / "speed", "wb") as f:         # 64 MiB (sparse): no attribute is that big
        f.truncate(64 << 20)
    proc = netbench("probe", "--sysfs-root", str(root), "--json", timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    nic_env = next(n for n in json.loads(proc.stdout)["nics"] if n["name"] == "eth9")
    assert nic_env["operstate"] is None and nic_env["mtu"] is None
    assert nic_env["speed_mbps"] is None
    warned = [line for line in proc.stderr.splitlines() if line.startswith("netbench: warning:")]
    for name, why in (("operstate", "a FIFO"), ("mtu", "a character device"),
                      ("speed", "larger than")):
        assert any(f"eth9/{name}: {why}" in line and "read as unknown" in line
                   for line in warned), proc.stderr


def test_captured_host_facts_nested_100000_deep_read_as_unknown(tmp_path):
    root = _sysfs(tmp_path)
    (root / "_proc").mkdir()
    deep = root / "_proc" / "netbench-host.json"
    deep.write_text('{"host": ' + "[" * 100_000 + "]" * 100_000 + "}")
    proc = netbench("probe", "--sysfs-root", str(root), "--json", timeout=60)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["captured_host_facts"] is False
    assert f"netbench: warning: {deep}: not a JSON object of host facts" in proc.stderr


def _limited() -> None:              # a reader that reads /dev/zero whole fails fast here
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))


def test_import_of_a_device_or_a_fifo_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "rows.fifo"
    os.mkfifo(fifo)
    for source, kind in (("/dev/zero", "a character device"), (str(fifo), "a FIFO")):
        proc = netbench("import", source, "--results", str(tmp_path / "r"), timeout=60,
                        preexec_fn=_limited)
        assert_clean_error(proc, source, kind, "regular file")
    assert not (tmp_path / "r").exists()


def test_a_large_import_is_streamed(tmp_path):
    """A 40 MB JSON-lines file: the import's peak memory grows by less than the file's size
    (0.6x here, most of it a fixed cost; it was 7.8x: the text, its lines, every row at once)."""
    samples = [1.0 + i / 1000 for i in range(1000)]
    big = tmp_path / "big.jsonl"
    with open(big, "w") as f:
        for i in range(4000):
            f.write(json.dumps(_row("big000000001", i, samples=samples, n_samples=1000)) + "\n")
    small = _jsonl(tmp_path / "small.jsonl", [_row("small0000001")])
    peak = {}
    for name, path in (("small", small), ("big", big)):
        code = ("import resource, sys; from netbench.cli import main; rc = main(sys.argv[1:]); "
                "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr); "
                "sys.exit(rc)")
        proc = subprocess.run([sys.executable, "-c", code, "import", str(path), "--results",
                               str(tmp_path / "r")], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        peak[name] = int(proc.stderr.strip().splitlines()[-1]) * 1024
    size = big.stat().st_size
    assert size > 35e6
    assert peak["big"] - peak["small"] < size, (peak, size)
    stored = pd.read_parquet(tmp_path / "r")
    assert len(stored) == 4001 and stored["n_samples"].max() == 1000
    assert sorted(ResultStore(tmp_path / "r").runs()["ok"]) == [1, 4000]


def _few_files() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))


def test_an_import_of_many_runs_keeps_no_file_open_per_run(tmp_path):
    """Streamed batches of 600 runs (a JSON-lines file keeps every earlier run) under a limit
    of 256 descriptors: no file stays open per run beyond the first few."""
    rows = [_row(f"many{i:08d}", reason="x" * 3000) for i in range(600)]
    path = _jsonl(tmp_path / "rows.jsonl", rows)
    results = tmp_path / "r"
    proc = netbench("import", str(path), "--results", str(results), preexec_fn=_few_files)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(ResultStore(results).runs()) == 600
    assert not list(results.glob(".*"))               # no temp files or batch folders left


@pytest.mark.parametrize("open_files", [32, 0])
def test_a_streamed_import_keeps_the_environment_and_units_in_the_footer(tmp_path, monkeypatch,
                                                                          open_files):
    import netbench.store as store_mod
    import netbench.store.jsonl as jsonl_mod

    monkeypatch.setattr(jsonl_mod, "IMPORT_BATCH_BYTES", 100)    # a batch every row or so
    monkeypatch.setattr(jsonl_mod, "MAX_OPEN_IMPORTS", open_files)
    rows = [_row("envs00000001", i, env_kernel="6.1.0", env_json='{"host": "h"}',
                 unit="us (half RTT)") for i in range(5)]
    store_mod.import_jsonl(_jsonl(tmp_path / "rows.jsonl", rows), ResultStore(tmp_path / "r"))
    stored = store_mod.load(tmp_path / "r")
    assert stored["env_kernel"].tolist() == ["6.1.0"] * 5
    assert set(stored["unit_note"]) == {"half RTT"} and set(stored["unit"]) == {"us"}
    raw = pd.read_parquet(tmp_path / "r")
    assert raw["env_kernel"].isna().all() and len(raw) == 5    # kept once, in the footer
    assert ResultStore(tmp_path / "r").runs()["ok"].tolist() == [5]


def test_an_import_with_a_bad_last_line_writes_nothing(tmp_path):
    rows = [_row("many00000001", i, samples=[1.0] * 2000) for i in range(400)]
    path = _jsonl(tmp_path / "rows.jsonl", rows)
    with open(path, "a") as f:
        f.write('{"not": "a row"}\n')
    results = tmp_path / "r"
    assert_clean_error(netbench("import", str(path), "--results", str(results)),
                       f"{path}:401")
    assert not list(results.glob("*.parquet")) and not list(results.glob(".*.tmp"))


# --- 7: store state ------------------------------------------------------------------------

KILLED_COMPACTING = textwrap.dedent('''
    import os, signal, sys
    import pandas as pd
    import pyarrow.parquet as pq
    from netbench.store import COLUMNS, ResultStore

    store = ResultStore(sys.argv[1])
    store.check_writable()
    path = store.path_for("killed000001", "2026-12-01T00:00:00+00:00")
    plan = sys.argv[2] if len(sys.argv) > 2 else "0123456789abcdef"
    writer = store.open_run(path, {"netbench_plan": plan})
    for i in range(3):
        row = {name: None for name, _ in COLUMNS}
        row.update(schema_version=1, run_id="killed000001", label="k", case_index=i,
                   started_at=pd.Timestamp("2026-12-01", tz="UTC").to_pydatetime(),
                   benchmark="mem.copy", metric="bw", value=1.0, status="ok", params="{}")
        writer.append([row])
    real = pq.write_table

    def dying(table, where, **kw):     # half of the run's file, then kill -9
        name = os.path.basename(str(where))
        if name.startswith("." + path.name + ".") and name.endswith(".tmp"):
            with open(where, "wb") as f:
                f.write(b"PAR1 half a file")
            os.kill(os.getpid(), signal.SIGKILL)
        return real(table, where, **kw)

    pq.write_table = dying
    writer.close()
''')


def _killed_while_compacting(results: Path, *plan: str) -> Path:
    proc = subprocess.run([sys.executable, "-c", KILLED_COMPACTING, str(results), *plan],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr
    parts = next(results.glob("*.parts"))
    assert len(list(parts.glob("part-*.parquet"))) == 3
    return parts


def test_a_run_killed_while_compacting_is_finished_by_the_next_reader(tmp_path):
    results = tmp_path / "r"
    parts = _killed_while_compacting(results)
    proc = netbench("runs", "--results", str(results))
    assert proc.returncode == 0, proc.stderr
    line = next(x for x in proc.stdout.splitlines() if x.startswith("killed000001"))
    assert " finished " in line and "interrupted" not in proc.stdout, proc.stdout
    assert not parts.exists()
    stored = pd.read_parquet(results / (parts.name[:-len(".parts")] + ".parquet"))
    assert sorted(stored["case_index"]) == [0, 1, 2]
    meta = ResultStore(results).runs()
    assert meta["plan"].tolist() == ["0123456789abcdef"] and meta["ok"].tolist() == [3]


def test_a_run_killed_while_compacting_is_finished_by_the_next_writer(tmp_path):
    results = tmp_path / "r"
    parts = _killed_while_compacting(results)
    ResultStore(results).check_writable()     # what `run`, `run --resume` and `import` do first
    assert not parts.exists()
    assert len(pd.read_parquet(results)) == 3
    assert ResultStore(results).runs()["state"].tolist() == ["finished"]


def test_resume_of_a_run_another_process_finished_compacting_is_a_usage_error(tmp_path):
    """Every case was in when its writer was killed compacting; a reader finished the job.
    `--resume` then has nothing to run: it says the run is complete and where, exit 2 (the
    run named is not one to resume), as for any other run that finished."""
    from netbench.run.runner import plan_fingerprint
    from netbench.run.suite import parse_cli_params, plan_single

    params = ["msg_size=64K,128K,256K", "iterations=2"]
    plan = plan_single("mem.copy", parse_cli_params(params))
    results = tmp_path / "r"
    _killed_while_compacting(results, plan_fingerprint(plan))
    assert netbench("runs", "--results", str(results)).returncode == 0   # finishes it
    args = ["run", "mem.copy", "-p", params[0], "-p", params[1], "--results", str(results),
            "--resume", "killed000001"]
    proc = netbench(*args)
    assert proc.returncode == 2, proc.stderr
    assert_clean_error(proc, "nothing to resume: run killed000001 is complete",
                       "3 ok, 0 skipped, 0 failed", "20261201T000000-killed000001.parquet",
                       "without --resume")
    assert "resuming run" not in proc.stderr
    assert len(pd.read_parquet(results)) == 3                   # nothing measured or lost


def test_a_read_only_reader_reports_a_killed_compaction_as_finished(tmp_path):
    results = tmp_path / "r"
    parts = _killed_while_compacting(results)
    (parts / ".lock").unlink()
    (parts / ".lock").mkdir()           # the lock cannot be taken: the parts stay as they are
    index = ResultStore(results).runs()
    assert index["state"].tolist() == ["finished"] and index["ok"].tolist() == [3]
    assert parts.exists()


CORRUPTING_HOOK = '''
import os
from pathlib import Path

seen = []


def case_finished(rows):
    seen.append(rows)
    if len(seen) == 4:          # every case is in: two parts turn unreadable before compaction
        parts = sorted(Path(os.environ["CORRUPT_RESULTS"]).glob("*.parts/part-*.parquet"))
        for part in parts[:2]:
            part.write_bytes(b"not parquet")
'''


def test_the_stored_counts_are_what_the_file_holds_when_parts_turn_unreadable(tmp_path):
    folder = install_plugin(tmp_path, CORRUPTING_HOOK, {"corrupt": "demo_plugin"},
                            group="netbench.hooks")
    results = tmp_path / "r"
    env = dict(os.environ, PYTHONPATH=folder, CORRUPT_RESULTS=str(results))
    proc = netbench("run", "mem.copy", "-p", "msg_size=64K,128K,256K,512K", "-p",
                    "iterations=2", "--results", str(results), env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    stored = pd.read_parquet(results)
    assert sorted(stored["case_index"].unique()) == [2, 3]
    line = next(x for x in proc.stderr.splitlines() if x.startswith("stored "))
    assert line.startswith(f"stored {len(stored)} rows (2 ok, 0 skipped, 0 failed cases)"), line
    index = json.loads(netbench("runs", "--json", "--results", str(results)).stdout)
    assert [r["ok"] for r in index] == [2]
    # The two parts are named, each on one line, as warnings (no Python warning syntax).
    warned = [x for x in proc.stderr.splitlines() if x.startswith("netbench: warning:")]
    assert sum("part-00000" in x and "not a readable Parquet file" in x for x in warned) == 2
    assert "UserWarning" not in proc.stderr and "warnings.warn" not in proc.stderr


@pytest.mark.parametrize("link", [os.link, os.symlink])
def test_a_second_name_for_a_run_file_is_the_same_run(tmp_path, link):
    store = ResultStore(tmp_path)
    path = store.path_for("linked000001", STARTED)
    store.write_run(path, [_stored_row("linked000001", 0), _stored_row("linked000001", 1)])
    link(path, tmp_path / "20261201T000000-zzcopy.parquet")
    index = store.runs()
    assert index["run_id"].tolist() == ["linked000001"] and index["ok"].tolist() == [2]
    assert len(store.read()) == 2


# --- 8: plans have a size limit, checked before the cases are built ------------------------

def test_a_plan_of_too_many_cases_is_refused_before_it_is_built(tmp_path):
    suite = tmp_path / "huge.toml"
    suite.write_text('[[case]]\nbenchmark = "tcp.stream"\nmsg_size = "1K..1M:+1K"\n'
                     f"streams = {list(range(1, 65))}\n")
    proc = netbench("run", str(suite), "--dry-run", timeout=60)
    assert_clean_error(proc, str(suite), "65,536 cases", "at most 50,000")
    proc = netbench("run", "tcp.stream", "-p", "msg_size=1K..1M:+1K", "-p",
                    "streams=" + ",".join(map(str, range(1, 65))), "--dry-run", timeout=60)
    assert_clean_error(proc, "65,536 cases", "at most 50,000")
    proc = netbench("run", "mem.copy", "-p", "msg_size=1K..1M:+1K", "--repeat", "100",
                    "--dry-run", timeout=60)
    assert_clean_error(proc, "1,024 cases x 100 repeats", "102,400", "at most 50,000")


CATALOG_REFRESHER = textwrap.dedent('''
    import os, sys
    import pyarrow.parquet as pq
    from netbench.store import CATALOG, ResultStore

    results, rounds, me = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    run = sorted(n for n in os.listdir(results) if n.endswith(".parquet")
                 and not n.startswith("_"))[0]
    bad = []
    for i in range(rounds):
        # A new mtime makes the cached footer stale: every round, every reader rewrites it.
        os.utime(os.path.join(results, run), ns=(0, (me * rounds + i + 1) * 10**9))
        assert len(ResultStore(results).runs()) == 2
        try:
            pq.read_table(os.path.join(results, CATALOG))
        except Exception as exc:
            bad.append(repr(exc))
    print(len(bad), bad[:1])
''')


def test_readers_refreshing_the_footer_cache_at_once_never_share_a_temp_file(tmp_path):
    """8 processes, each making the cache stale and refreshing it 40 times: with one temp
    name for all, one truncated another's half-written file and renamed it into place."""
    results = tmp_path / "r"
    _store_with_a_run(results)
    ResultStore(results).runs()                         # the cache exists from the start
    procs = [subprocess.Popen([sys.executable, "-c", CATALOG_REFRESHER, str(results), "40",
                               str(me)], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for me in range(8)]
    outs = [p.communicate(timeout=300) for p in procs]
    for proc, (out, err) in zip(procs, outs):
        assert proc.returncode == 0, err[-2000:]
        assert out.startswith("0 "), out                # every read of the cache was whole
        assert "Traceback" not in err and "warning" not in err, err[-2000:]
    import pyarrow.parquet as pq

    assert len(pq.read_table(results / "_catalog.parquet")) == 2
    assert not list(results.glob(".*")), list(results.glob(".*"))   # no temp file left


def test_a_killed_writers_unique_temp_files_are_still_swept(tmp_path):
    from netbench.textfile import STALE_TMP, temp_name

    results = tmp_path / "r"
    _store_with_a_run(results)
    run = next(results.glob("*.parquet"))
    old = temp_name(run)
    old.write_bytes(b"half a file")
    batches = temp_name(run, ".import")
    (batches / "x").mkdir(parents=True)
    then = os.stat(old).st_mtime - STALE_TMP - 60
    for stale in (old, batches):
        os.utime(stale, (then, then))
    live = temp_name(run)                                # a writer at work right now
    live.write_bytes(b"x")
    assert old != live and old.name.startswith(f".{run.name}.") and old.name.endswith(".tmp")
    ResultStore(results).check_writable()
    assert not old.exists() and not batches.exists() and live.exists()


# --- 9: what reaches the terminal ----------------------------------------------------------

def test_runs_shows_control_characters_in_labels_escaped(tmp_path):
    store = ResultStore(tmp_path)
    label = "\x1b[31mred\x1b[0m\nsecond line\r"
    store.write_run(store.path_for("ansi00000001", STARTED),
                    [_stored_row("ansi00000001", label=label, host="h\x07ost")])
    proc = netbench("runs", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\r" not in proc.stdout and "\x07" not in proc.stdout
    assert len(proc.stdout.splitlines()) == 2              # the header and the one run
    assert "\\x1b[31mred" in proc.stdout and "h\\x07ost" in proc.stdout


HOSTILE = "\x1b[31mred\x1b[0m\nsecond line\r\x07"


def _hostile_store(results: Path) -> None:
    """Two runs whose label, host, suite, environment and a skip reason would drive the
    terminal (an import takes them from any JSON-lines file)."""
    results.mkdir(parents=True)
    store = ResultStore(results)
    for number, started in ((1, STARTED), (2, "2026-12-01T01:00:00+00:00")):
        run_id = f"ansi0000000{number}"
        env = json.dumps({"kernel": f"6.{number}{HOSTILE}"})
        rows = [_stored_row(run_id, 0, started_at=started, label=f"l{number}{HOSTILE}",
                            host=f"h{HOSTILE}", suite=f"s{HOSTILE}", env_json=env),
                _stored_row(run_id, 1, started_at=started, label=f"l{number}{HOSTILE}",
                            host=f"h{HOSTILE}", suite=f"s{HOSTILE}", env_json=env,
                            benchmark="tcp.rr", metric=None, value=None, status="skipped",
                            reason=f"no peer{HOSTILE}")]
        store.write_run(store.path_for(run_id, started), rows)


def _assert_inert(text: str) -> None:
    for raw in ("\x1b", "\r", "\x07"):
        assert raw not in text, repr(text)
    assert "\\x1b[31mred" in text, text                # shown, escaped, not dropped


@pytest.mark.parametrize("command", ["compare", "history", "accept"])
def test_labels_hosts_and_suites_reach_no_terminal_raw(tmp_path, command):
    results = tmp_path / "r"
    _hostile_store(results)
    spec = tmp_path / "spec.toml"
    spec.write_text('[accept]\nname = "a\\u001b[2J"\n[[check]]\nname = "bw\\u001b[31m"\n'
                    'benchmark = "mem.copy"\nmetric = "bw"\nmin = 5\n'
                    '[[check]]\nbenchmark = "tcp.rr"\nmetric = "lat_p50"\nmax = 5\n')
    xml = tmp_path / "a.xml"
    args = {"compare": ["compare", f"l1{HOSTILE}", f"l2{HOSTILE}"], "history": ["history"],
            "accept": ["accept", str(spec), "--label", f"l2{HOSTILE}", "--junit",
                       str(xml)]}[command]
    proc = netbench(*args, "--results", str(results))
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode in (0, 1, 3), proc.stderr
    _assert_inert(proc.stdout + proc.stderr)
    assert "second line" not in [line.strip() for line in proc.stdout.splitlines()]
    if command == "accept":
        from xml.etree import ElementTree

        text = xml.read_text()                   # a control character is not legal XML
        _assert_inert(text)
        root = ElementTree.parse(xml).getroot()
        assert root.get("name") == "a\\x1b[2J" and root.find("testcase").get("name") == (
            "bw\\x1b[31m")
        assert "no peer\\x1b[31mred" in text


def test_store_warnings_are_one_line_each(tmp_path):
    _store_with_a_run(tmp_path)
    (tmp_path / "20261201T000000-broken000001.parquet").write_bytes(b"not parquet")
    proc = netbench("runs", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        line for line in proc.stderr.splitlines() if line.startswith("netbench: warning:")]
    assert "broken000001.parquet" in proc.stderr and "UserWarning" not in proc.stderr


# --- beyond the list: what else a store or an import can hold ------------------------------

@pytest.mark.parametrize("where", ["part", "catalog", "lock"])
def test_a_fifo_in_the_store_never_blocks_a_reader(tmp_path, where):
    """A FIFO where a part file, the footer cache or a run's lock would be: opening it to
    read would wait for a writer that never comes."""
    results = tmp_path / "r"
    _store_with_a_run(results)
    parts = results / "20261201T020000-fifo00000001.parts"
    parts.mkdir()
    store = ResultStore(results)
    store.write_run(parts / "part-000001.parquet",
                    [_stored_row("fifo00000001", started_at="2026-12-01T02:00:00+00:00")])
    target = {"part": parts / "part-000002.parquet", "catalog": results / "_catalog.parquet",
              "lock": parts / ".lock"}[where]
    os.mkfifo(target)
    for args in (["runs"], ["export", "--run", "fifo00000001"]):
        proc = netbench(*args, "--results", str(results), timeout=30)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "fifo00000001" in netbench("runs", "--results", str(results), timeout=30).stdout


@pytest.mark.parametrize("params", ["garbage", "[1, 2]", '{"a": ' + "[" * 100_000 + "]" * 100_000
                                    + "}", '"a string"'])
def test_import_refuses_params_that_readers_cannot_parse(tmp_path, params):
    rows = _jsonl(tmp_path / "rows.jsonl", [_row("params000001", params=params)])
    proc = netbench("import", str(rows), "--results", str(tmp_path / "r"))
    assert_clean_error(proc, f"{rows}:1", "params must be")
    assert not list(tmp_path.rglob("*.parquet"))


def test_import_refuses_an_environment_nested_100000_deep(tmp_path):
    deep = '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"
    rows = _jsonl(tmp_path / "rows.jsonl", [_row("envdeep00001", env_json=deep)])
    proc = netbench("import", str(rows), "--results", str(tmp_path / "r"))
    assert_clean_error(proc, f"{rows}:1", "env_json must be")


@pytest.mark.parametrize("footer", [
    {"netbench_cases": "garbage"}, {"netbench_cases": "[1]"},
    {"netbench_cases": '{"ok": "x"}'}, {"netbench_started_at": "not a time"},
    {"netbench_started_at": ""}, {"netbench_benchmarks": "5"},
    {"netbench_run_id": "../../x"}, {"netbench_label": b"\xff\xfe"},
])
def test_a_run_file_with_a_forged_footer_is_skipped_by_name(tmp_path, footer):
    """Every reader lists runs from the files' footers: one that says something else than
    netbench writes is skipped with a warning, and the other runs are listed."""
    import pyarrow.parquet as pq

    _store_with_a_run(tmp_path)
    good = next(tmp_path.glob("*run000000001.parquet"))
    table = pq.read_table(good)
    meta = {**table.schema.metadata, **{k.encode(): v if isinstance(v, bytes) else v.encode()
                                        for k, v in footer.items()}}
    forged = tmp_path / "20261201T030000-forged000001.parquet"
    pq.write_table(table.replace_schema_metadata(meta), forged)
    proc = netbench("runs", "--results", str(tmp_path))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert "run000000001" in proc.stdout and "run000000002" in proc.stdout
    warned = [x for x in proc.stderr.splitlines() if x.startswith("netbench: warning:")]
    assert any(forged.name in x for x in warned) or "forged" not in str(footer), proc.stderr


def test_runs_started_with_and_without_a_zone_list_together(tmp_path):
    _store_with_a_run(tmp_path)
    store = ResultStore(tmp_path)
    row = _stored_row("naive0000001")
    row["started_at"] = row["started_at"].replace(tzinfo=None)
    import pyarrow.parquet as pq

    store.write_run(store.path_for("naive0000001", "2026-12-01T05:00:00"), [row])
    path = next(tmp_path.glob("*naive0000001.parquet"))
    table = pq.read_table(path)
    meta = {**table.schema.metadata, b"netbench_started_at": b"2026-12-01T05:00:00"}
    pq.write_table(table.replace_schema_metadata(meta), path)
    proc = netbench("runs", "--results", str(tmp_path))
    assert proc.returncode == 0 and "naive0000001" in proc.stdout, proc.stderr


@pytest.mark.parametrize("column, value", [("msg_size", 2 ** 70), ("case_index", 2 ** 40),
                                           ("n_samples", -(2 ** 64)), ("load_throttle_events",
                                                                       2 ** 63),
                                           ("value", 10 ** 400)])
def test_import_refuses_integers_beyond_their_column(tmp_path, column, value):
    rows = _jsonl(tmp_path / "rows.jsonl", [_row("bigint000001", **{column: value})])
    proc = netbench("import", str(rows), "--results", str(tmp_path / "r"))
    assert_clean_error(proc, f"{rows}:1", column)
    assert not list(tmp_path.rglob("*.parquet"))


def test_a_suite_beyond_4_mib_is_refused_before_it_is_parsed(tmp_path):
    suite = tmp_path / "big.toml"
    suite.write_text("# padding\n" * (500 << 10))
    assert_clean_error(netbench("run", str(suite), "--dry-run"), str(suite),
                       "larger than 4 MiB")


@pytest.mark.parametrize("kind", ["device", "fifo", "link to a device"])
def test_an_output_that_is_a_device_or_fifo_is_refused_not_replaced(tmp_path, kind):
    """`export -o /dev/null` (or /dev/stdout) wrote a temp file and renamed it over the device
    node: as root, the host's /dev/null became a regular file. A node made here stands in."""
    import stat

    _store_with_a_run(tmp_path / "r")
    node = tmp_path / "null"
    if kind == "fifo":
        os.mkfifo(node)
    else:
        try:
            os.mknod(node, stat.S_IFCHR | 0o666, os.makedev(1, 3))
        except PermissionError:
            pytest.skip("needs root to make a device node")
    out = node
    if kind == "link to a device":
        out = tmp_path / "link"
        out.symlink_to(node)
    proc = netbench("export", "--results", str(tmp_path / "r"), "--run", "run000000001",
                    "-o", str(out), timeout=60)
    assert_clean_error(proc, str(out), "a character device" if kind != "fifo" else "a FIFO",
                       "regular file")
    mode = os.stat(node).st_mode
    assert (stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISCHR(mode)), oct(mode)
    assert out.exists() and (kind != "link to a device" or out.is_symlink())


def test_an_import_never_replaces_a_stored_run_with_fewer_cases(tmp_path):
    """A JSON-lines file keeps every earlier run, so it is imported again and again: a run
    already stored is replaced only by one holding every case it holds."""
    results = tmp_path / "r"
    full = _jsonl(tmp_path / "full.jsonl", [_row("again0000001", i) for i in range(3)])
    assert netbench("import", str(full), "--results", str(results)).returncode == 0
    assert netbench("import", str(full), "--results", str(results)).returncode == 0
    part = _jsonl(tmp_path / "part.jsonl", [_row("again0000001", 0), _row("other0000001")])
    proc = netbench("import", str(part), "--results", str(results))
    assert_clean_error(proc, "again0000001", "already stored", "2 of its 3 cases")
    assert sorted(pd.read_parquet(results)["case_index"]) == [0, 1, 2]   # nothing lost
    assert ResultStore(results).runs()["run_id"].tolist() == ["again0000001"]


def test_resume_of_a_run_whose_writer_died_before_compacting_finishes_it(tmp_path):
    """Every case in its parts, the writer gone before it compacted them: `runs` says
    interrupted and names --resume; the resume runs nothing and compacts, and the run is
    finished (it said "every case already finished; nothing to resume", exit 1, and the run
    stayed interrupted for good)."""
    import pyarrow.parquet as pq

    from netbench.store import ResultStore

    results = tmp_path / "r"
    made = netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2", "--results",
                    str(results))
    assert made.returncode == 0, made.stderr
    (done,) = results.glob("2*.parquet")
    run_id = done.stem.split("-", 1)[1]
    table = pq.read_table(done)
    extra = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
    rows = table.to_pylist()
    done.unlink()
    store = ResultStore(results)
    writer = store.open_run(done, {k: v for k, v in extra.items()
                                   if k.startswith("netbench_plan")})
    writer.append(rows)
    writer._lock.close()                 # the writer is gone: its lock with it
    listed = netbench("runs", "--results", str(results))
    assert " interrupted " in listed.stdout, listed.stdout
    resumed = netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                       "--results", str(results), "--resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 finished case(s) kept, 0 to run" in resumed.stderr, resumed.stderr
    listed = netbench("runs", "--results", str(results))
    assert " finished " in listed.stdout and " interrupted " not in listed.stdout, listed.stdout
    assert done.exists() and not done.with_name(done.stem + ".parts").exists()


def test_a_footer_whose_host_environment_is_no_object_reads_as_unrecorded(tmp_path):
    """A real run whose footer was rewritten to netbench_envs = {"vm": [1, 2]}: runs,
    compare, history and report read it (the environment unrecorded), no AttributeError."""
    import pyarrow.parquet as pq

    res = tmp_path / "r"
    for label in ("a", "b"):
        assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                        "--label", label, "--results", str(res)).returncode == 0
    path = sorted(res.glob("2*.parquet"))[-1]
    table = pq.read_table(path)
    meta = dict(table.schema.metadata)
    meta[b"netbench_envs"] = json.dumps({"vm": [1, 2]}).encode()
    pq.write_table(table.replace_schema_metadata(meta), path)
    for args in (("runs",), ("compare", "a", "b"), ("history",),
                 ("report", "-o", str(tmp_path / "d.html"))):
        proc = netbench(*args, "--results", str(res))
        assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, (args, proc.stderr)


# --- issue 37: what one file or the catalog may bring a reader ------------------------------

def _forge(results: Path, name: str, table, meta=None) -> Path:
    import pyarrow.parquet as pq

    good = next(results.glob("*run000000001.parquet"))
    meta = {**(meta or pq.read_schema(good).metadata),
            b"netbench_run_id": name[:-len(".parquet")].rsplit("-", 1)[1].encode(),
            b"netbench_started_at": b"2026-12-01T02:00:00+00:00"}
    path = results / name
    pq.write_table(table.replace_schema_metadata(meta), path, compression="zstd")
    return path


def _limited_memory(gib: float) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (int(gib * (1 << 30)),) * 2)


@pytest.mark.parametrize("command", [("runs",), ("history",), ("compare", "run000000001",
                                                                 "run000000003"),
                                     ("report", "-o", "{out}")])
@pytest.mark.parametrize("shape", ["samples", "rows"])
def test_a_file_beyond_what_a_run_stores_is_skipped_by_name(tmp_path, command, shape):
    """One row of 3 x 10^7 samples (zeros: kilobytes on disk; 10^8 had cost every reader
    2.5 GB) and 3 x 10^6 identical rows (3 GB): each is named and left unread, the readers
    work on within 3 GiB of address space, and the other runs read as before."""
    import pyarrow as pa

    from netbench.store.parquet import MAX_FILE_ROWS, MAX_FILE_SAMPLES

    results = tmp_path / "r"
    _store_with_a_run(results)
    row = _stored_row("run000000003", started_at="2026-12-01T02:00:00+00:00")
    table = pa.Table.from_pylist([row], schema=_schema())
    if shape == "samples":
        import numpy as np

        n = MAX_FILE_SAMPLES + 1
        big = pa.ListArray.from_arrays(pa.array([0, n], pa.int32()), pa.array(np.zeros(n)))
        table = table.set_column(table.schema.get_field_index("samples"), "samples", big)
    else:
        table = table.take(pa.array([0] * (MAX_FILE_ROWS + 1)))
    path = _forge(results, "20261201T020000-run000000003.parquet", table)
    del table
    args = [a.format(out=tmp_path / "d.html") for a in command]
    proc = subprocess.run([sys.executable, "-m", "netbench", *args, "--results", str(results)],
                          capture_output=True, text=True, timeout=300, cwd=ROOT,
                          preexec_fn=lambda: _limited_memory(3))
    assert "Traceback" not in proc.stderr and "MemoryError" not in proc.stderr, proc.stderr
    assert f"skipping {path}" in proc.stderr and (
        "a reader takes" in proc.stderr), proc.stderr
    if command[0] == "runs":
        assert proc.returncode == 0 and "run000000002" in proc.stdout


def _schema():
    from netbench.store import arrow_schema

    return arrow_schema().remove_metadata()


@pytest.mark.root
def test_a_catalog_beyond_any_store_or_written_by_another_user_is_not_read(tmp_path):
    """A catalog of 10^7 entries had cost `runs` 2.85 GB; one that lies (size and mtime
    matching a real file, forged counts) was shown without a word. A catalog is a cache of
    ours: another user's, or one beyond any store, is read afresh from the files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from netbench.store.parquet import CATALOG, MAX_CATALOG_ENTRIES

    _store_with_a_run(tmp_path)
    assert netbench("runs", "--results", str(tmp_path)).returncode == 0
    catalog = tmp_path / CATALOG
    entries = pq.read_table(catalog).to_pydict()
    lied = [f.replace('"ok": 1', '"ok": 777') for f in entries["facts"]]
    pq.write_table(pa.table({**entries, "facts": lied}), catalog)
    os.chown(catalog, 65534, 65534)                 # nobody's
    proc = netbench("runs", "--results", str(tmp_path))
    assert proc.returncode == 0 and " 777 " not in proc.stdout, proc.stdout
    n = MAX_CATALOG_ENTRIES + 1
    huge = pa.table({"name": ["x"] * n, "size": [0] * n, "mtime_ns": [0] * n,
                     "facts": ["{}"] * n})
    catalog.unlink()
    pq.write_table(huge, catalog)
    proc = subprocess.run([sys.executable, "-m", "netbench", "runs", "--results",
                           str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, preexec_fn=lambda: _limited_memory(1.0))
    assert proc.returncode == 0 and "run000000002" in proc.stdout, proc.stderr


@pytest.mark.parametrize("column", ["started_at", "case_started_at"])
def test_a_time_no_run_wrote_skips_its_file_by_name(tmp_path, column):
    """int64's largest as a start (year 2262) had stopped history and report with a
    NotImplementedError; rows never read zero columns either (report's KeyError)."""
    import pyarrow as pa

    _store_with_a_run(tmp_path)
    row = _stored_row("run000000003", started_at="2026-12-01T02:00:00+00:00")
    table = pa.Table.from_pylist([row], schema=_schema())
    at = table.schema.get_field_index(column)
    table = table.set_column(at, column, pa.array([2**63 - 1], pa.int64()).cast(
        table.schema.field(column).type))
    path = _forge(tmp_path, "20261201T020000-run000000003.parquet", table)
    for command in (("history",), ("report", "-o", str(tmp_path / "d.html"))):
        proc = netbench(*command, "--results", str(tmp_path))
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        assert f"skipping {path}" in proc.stderr and "not a time a run wrote" in proc.stderr


def test_a_run_file_whose_data_pages_are_zeroed_is_skipped_by_name(tmp_path):
    """Its footer intact, its pages zeros (a disk that lost them): report had stopped with a
    KeyError (the rows it kept had no columns); every reader names the file and goes on."""
    import pyarrow.parquet as pq

    _store_with_a_run(tmp_path)
    path = next(tmp_path.glob("*run000000002.parquet"))
    data = bytearray(path.read_bytes())
    footer = int.from_bytes(data[-8:-4], "little") + 8      # its length, and PAR1 after it
    data[4:len(data) - footer] = bytes(len(data) - footer - 4)
    path.write_bytes(bytes(data))
    assert pq.read_metadata(path).num_rows == 1             # the footer still reads
    for command in (("history",), ("report", "-o", str(tmp_path / "d.html")),
                    ("compare", "run000000001", "run000000002")):
        proc = netbench(*command, "--results", str(tmp_path))
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 1, 2), proc.stderr
        assert f"skipping {path}" in proc.stderr or "no readable rows" in proc.stderr
