"""The collectives soak: `duration` times a coll.* case's ops for that many seconds (rank 0
decides when to stop and tells the others), so `netbench soak` runs it window after window on
real gloo ranks."""

import json
import time

import pandas as pd
import pytest
from conftest import netbench

from netbench import registry
from netbench.api import UsageError

torch = pytest.importorskip("torch", reason="torch not installed (pip install torch==2.13.0)")

COLLECTIVES = sorted(n for n in registry.all_benchmarks() if n.startswith("coll."))


def test_every_collective_can_soak_and_a_counted_run_is_unchanged():
    assert len(COLLECTIVES) == 8
    for name in COLLECTIVES:
        bench = registry.get(name)
        duration = bench.param_spec("duration")
        assert (duration.kind, duration.default, duration.minimum) == ("float", 0.0, 0)
        assert bench.window_params(2.0) == {"duration": 2.0, "warmup": 1}
        (case,) = bench.expand(bench.window_params(0.5))      # values its params accept
        assert case.params["duration"] == 0.5 and case.params["warmup"] == 1
        with pytest.raises(UsageError, match="at least 0.1 s"):
            bench.window_params(0.05)
    # duration 0: the spec the ranks get is the counted run's, key for key, and no note.
    bench = registry.get("coll.all_reduce")
    (case,) = bench.expand({})
    assert case.params["duration"] == 0.0
    assert bench._spec(case.params) == {
        "op": "all_reduce", "bytes": 1 << 20, "dtype": "float32", "iters": 20, "warmup": 5,
        "reduce_op": "sum", "root": 0, "in_place": False}
    (timed,) = bench.expand({"duration": "1.5"})
    assert bench._spec(timed.params)["duration"] == 1.5


def test_the_window_sizes_rank_0_broadcasts():
    from netbench.benchmarks._ranks import CPU_WINDOWS, GROWTH, next_window

    # Growth from one op, at most GROWTH x the window before, to ~1/CPU_WINDOWS of the time.
    assert next_window(1, 1e-3, 1e-3, 10.0, False) == GROWTH
    assert next_window(1000, 1.0, 1.0, 64.0, False) == 1000          # 1 s a window: held
    assert next_window(8, 8e-3, 0.1, 64.0, False) == 64
    # The rest in one window where it is under 1.5 windows; a stop within half an op.
    assert next_window(100, 0.1, 9.85, 10.0, False) == 150
    assert next_window(100, 0.1, 10.0 - 0.0004, 10.0, False) == 0     # 0.4 ms left, 1 ms ops
    assert next_window(100, 0.1, 10.0 - 0.0006, 10.0, False) == 1
    assert next_window(1, 5.0, 5.0, 1.0, False) == 0                  # one op outlasts it
    assert CPU_WINDOWS == 64


def test_duration_bounds_one_invocation_and_every_rank_stops_after_the_same_op():
    """Two real gloo ranks, a 1 s timed case: the invocation (the ranks already up) ends
    within a second and a margin, every rank ran the same ops, many of them, and the time
    per op is what its windows add up to."""
    from netbench.benchmarks import _ranks

    bench = registry.get("coll.all_reduce")
    (case,) = bench.expand({"msg_size": "64K", "duration": "1", "warmup": "1"})
    spec = bench._spec(case.params)
    group = _ranks.RankGroup(2, "gloo", 0, 60.0)
    try:
        t0 = time.monotonic()
        results = group.run(spec, 60)
        took = time.monotonic() - t0
    finally:
        group.close()
    assert 1.0 <= took < 1.0 + 1.5, took       # the timed second, plus a warm-up op and check
    assert {r["kind"] for r in results} == {"result"} and {r["wrong"] for r in results} == {0}
    ops = {r["ops"] for r in results}
    assert len(ops) == 1 and ops.pop() > 10
    for r in results:
        per_op_s = r["time_us"] / 1e6
        assert 0.5 < per_op_s * r["ops"] <= 1.25, r     # the ops' own time: about the second
        assert len(r["window_us"]) > 8


def test_timed_for_on_one_rank_stops_at_the_time_not_the_count():
    """In-process, one gloo rank and a 10 ms op: 1 s is ~100 ops, and the loop ends within a
    couple of ops of the second."""
    import torch.distributed as dist

    from netbench.benchmarks import _ranks

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        t0 = time.perf_counter()
        per_op, windows, ops = _ranks.timed_for(torch, dist, lambda: time.sleep(0.01), 1.0, 0,
                                                torch.device("cpu"))
        took = time.perf_counter() - t0
    finally:
        dist.destroy_process_group()
    assert 1.0 - 0.01 <= took < 1.0 + 0.1, took
    assert 50 < ops <= 100 and 0.01 <= per_op < 0.02
    assert len(windows) >= 3 and all(0.01 <= w < 0.05 for w in windows)


def test_a_soak_of_all_reduce_is_three_windows_each_with_its_busbw(tmp_path):
    proc = netbench("soak", "coll.all_reduce", "--duration", "6s", "--window", "2s",
                    "--results", str(tmp_path), "--json", timeout=120)
    assert proc.returncode == 0, proc.stderr
    (case,) = json.loads(proc.stdout)["cases"]
    assert case["benchmark"] == "coll.all_reduce" and case["metric"] == "busbw"
    assert case["windows"] == 3 and case["failed"] == 0
    assert case["params"]["duration"] == 2.0 and case["params"]["warmup"] == 1
    assert len(case["timeline"]) == 3 and all(value > 0 for _, value, _ in case["timeline"])
    rows = pd.read_parquet(tmp_path)
    busbw = rows[rows["metric"] == "busbw"].sort_values("case_started_at")
    assert list(busbw["status"]) == ["ok"] * 3 and (busbw["value"] > 0).all()
    assert all(len(s) > 8 for s in busbw["samples"])      # windows of the window, as counted
    # The windows after the first run on the ranks the first started (a start is ~3 s here):
    # each is its 2 s of ops and little more.
    assert (busbw["case_seconds"].iloc[1:] < 2.0 + 2.5).all(), list(busbw["case_seconds"])


def test_under_torchrun_a_soak_is_one_run_stored_by_rank_0(tmp_path):
    """Two torchrun workers soak all_reduce together: each window is one collective of both,
    rank 0 alone stores the windows and prints the verdict (every rank storing its own would
    be two burn-ins of one in the store)."""
    import os
    import subprocess
    import sys

    from conftest import ROOT

    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--master_port", str(29900 + os.getpid() % 90), "-m", "netbench", "soak",
         "coll.all_reduce", "--duration", "6s", "--window", "2s", "--results", str(tmp_path),
         "--json"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert len(list(tmp_path.glob("*.parquet"))) == 1, list(tmp_path.iterdir())
    (case,) = json.loads(proc.stdout)["cases"]          # one verdict: rank 0's
    assert case["windows"] == 3 and case["failed"] == 0, case
    rows = pd.read_parquet(tmp_path)
    assert rows["run_id"].nunique() == 1 and set(rows["device"]) == {"2 ranks"}
    assert (rows.loc[rows["metric"] == "busbw", "value"] > 0).sum() == 3
