"""Collectives on real torch.distributed ranks (gloo on this CPU host)."""

import json
import os
import socket
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
from conftest import ROOT, assert_clean_error, netbench

from netbench import load as netbench_load
from netbench.api import UsageError

torch = pytest.importorskip("torch", reason="torch not installed (pip install torch==2.13.0)")

ALL = ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
       "send_recv"]
FACTOR = {"all_reduce": 1.0, "all_gather": 0.5, "reduce_scatter": 0.5, "all_to_all": 0.5,
          "broadcast": 1.0, "reduce": 1.0, "send_recv": 1.0}     # at world_size 2


def _suite(tmp_path, body: str):
    path = tmp_path / "s.toml"
    path.write_text(body)
    return path


def test_every_collective_runs_checks_and_reports_nccl_tests_figures(tmp_path):
    body = "".join(f'[[case]]\nbenchmark = "coll.{op}"\nmsg_size = ["4K", "256K"]\n'
                   f'iterations = 5\nwarmup = 1\n' for op in ALL)
    proc = netbench("run", str(_suite(tmp_path, body)), "--json", "--results",
                    str(tmp_path / "r"), timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert {r["status"] for r in rows} == {"ok"}
    by = {}
    for r in rows:
        by.setdefault((r["benchmark"], r["msg_size"]), {})[r["metric"]] = r
    for op in ALL:
        case = by[(f"coll.{op}", 4096)]
        algbw, busbw = case["algbw"]["value"], case["busbw"]["value"]
        assert busbw == pytest.approx(algbw * FACTOR[op])
        assert case["time_us"]["value"] <= case["time_max_us"]["value"]
        assert algbw == pytest.approx(4096 / case["time_us"]["value"] / 1e3, rel=1e-6)
        assert case["time_us"]["transport"] == "gloo"
        # One sample per timing window (5 ops, 5 windows), averaged over the ranks: their
        # mean is the reported time, and the rates are the same windows' rates.
        window = case["time_us"]["samples"]
        assert len(window) == 5
        assert sum(window) / 5 == pytest.approx(case["time_us"]["value"], rel=1e-9)
        assert case["busbw"]["samples"] == pytest.approx(
            [r * FACTOR[op] for r in case["algbw"]["samples"]])
        assert case["algbw"]["samples"] == pytest.approx([4096 / w / 1e3 for w in window])
    df = pd.read_parquet(tmp_path / "r")
    assert df["run_id"].nunique() == 1


def test_timing_windows_cover_every_op_and_spare_the_gpu_stream():
    from netbench.benchmarks import _ranks

    for iters in (1, 5, 20, 63, 64, 65, 1000):
        for gpu in (False, True):
            edges = _ranks.windows(iters, gpu)
            assert edges[0] == 0 and edges[-1] == iters
            sizes = [b - a for a, b in zip(edges, edges[1:])]
            assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1
            if gpu and iters >= _ranks.GPU_WINDOW_OPS:
                assert min(sizes) >= _ranks.GPU_WINDOW_OPS - 1    # an event per ~8 ops
    assert len(_ranks.windows(1000, False)) - 1 == _ranks.CPU_WINDOWS
    assert len(_ranks.windows(20, True)) - 1 == 2


def test_sizes_that_do_not_divide_are_rounded_like_nccl_tests(tmp_path):
    proc = netbench("run", "coll.all_gather", "-p", "msg_size=1001", "-p", "iterations=2",
                    "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    row = json.loads(proc.stdout)[0]
    assert "size rounded from 1001 to 1000 bytes" in row["reason"]
    assert row["msg_size"] == 1001


def test_unsupported_op_or_dtype_is_a_skipped_row(tmp_path):
    proc = netbench("run", "coll.all_reduce", "-p", "reduce_op=avg", "-p", "dtype=int32",
                    "-p", "msg_size=1K", "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["status"] == "skipped"
    assert "gloo cannot run all_reduce on int32 with avg" in row["reason"]
    nccl = netbench("run", "coll.all_reduce", "-p", "backend=nccl", "--json", "--results",
                    str(tmp_path))
    if not torch.cuda.is_available():
        (row,) = json.loads(nccl.stdout)
        assert row["status"] == "skipped" and "needs CUDA GPUs" in row["reason"]


def test_world_size_beyond_the_host(tmp_path):
    assert_clean_error(netbench("run", "coll.all_reduce", "-p", "world_size=1000",
                                "--results", str(tmp_path)), "world_size 1000 needs about")


def test_rendezvous_port_in_use_fails_within_the_timeout(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        start = time.monotonic()
        proc = netbench("run", "coll.broadcast", "-p", f"master_port={port}", "-p",
                        "pg_timeout=10", "--results", str(tmp_path), timeout=200)
    assert time.monotonic() - start < 120
    assert_clean_error(proc, "could not start 2 gloo ranks")


def _ranks_under(pid: int) -> list[psutil.Process]:
    """The live gloo ranks below ``pid``. Short-lived helpers (a counter read's ethtool) may be
    zombies or gone by the time their command line is asked for: they are no ranks."""
    ranks = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if "netbench.benchmarks._ranks" in " ".join(child.cmdline()):
                ranks.append(child)
        except (psutil.ZombieProcess, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return ranks


def test_a_rank_dying_mid_run_ends_the_run_with_a_clear_error(tmp_path):
    run = subprocess.Popen([sys.executable, "-m", "netbench", "run", "coll.all_reduce", "-p",
                            "msg_size=4M", "-p", "iterations=100000", "-p", "pg_timeout=15",
                            "--results", str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    ranks = []
    deadline = time.monotonic() + 60
    while len(ranks) < 2 and time.monotonic() < deadline:
        ranks = _ranks_under(run.pid)
        time.sleep(0.2)
    time.sleep(5)                       # ranks up and timing
    ranks[1].kill()
    start = time.monotonic()
    out, err = run.communicate(timeout=120)
    assert time.monotonic() - start < 60
    proc = subprocess.CompletedProcess(run.args, run.returncode, out, err)
    assert_clean_error(proc, "gloo ranks failed")
    assert "rank 1 exited" in err or "rank 0" in err
    assert pd.read_parquet(tmp_path)["status"].tolist() == ["failed"]
    assert not _ranks_under(os.getpid())


def test_under_torchrun_ranks_share_one_run_and_only_rank_0_stores(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
         "--master_port", str(29400 + os.getpid() % 500), "-m", "netbench", "run",
         "coll.all_reduce", "-p", "msg_size=64K", "-p", "iterations=5", "--results",
         str(tmp_path), "--label", "torchrun"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env=dict(os.environ, OMP_NUM_THREADS="1", NCCL_DEBUG="WARN"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    files = list(tmp_path.glob("*.parquet"))
    assert len(files) == 1
    df = pd.read_parquet(tmp_path)
    assert set(df["status"]) == {"ok"} and set(df["label"]) == {"torchrun"}
    assert set(df["device"]) == {"2 ranks"}
    env = json.loads(netbench_load(tmp_path)["env_json"].iloc[0])
    assert {k: env["launcher"][k] for k in ("name", "rank", "world_size")} == {
        "name": "torchrun", "rank": 0, "world_size": 2}
    assert len(env["launcher"]["job"]) == 12
    assert "MASTER_PORT" in env["collective_env"]


def test_one_torchrun_worker_is_a_launched_run_of_one_rank(tmp_path):
    """The NCCL path on a one-GPU machine runs this way; here gloo shows the shape. Two
    invocations on one port share torchrun's job id ("none"), never a run id."""
    for size in ("64K", "128K"):
        proc = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1",
             "--master_port", str(28900 + os.getpid() % 90), "-m", "netbench", "run",
             "coll.all_reduce", "-p", f"msg_size={size}", "-p", "iterations=5",
             "-p", "backend=gloo", "--results",
             str(tmp_path)], capture_output=True, text=True, timeout=300, cwd=ROOT,
            env=dict(os.environ, OMP_NUM_THREADS="1"))
        assert proc.returncode == 0, proc.stderr[-2000:]
    both = pd.read_parquet(tmp_path)
    assert both.groupby("run_id")["msg_size"].nunique().tolist() == [1, 1]
    df = both[both.msg_size == 65536]
    values = dict(zip(df["metric"], df["value"]))
    assert set(df["status"]) == {"ok"} and set(df["device"]) == {"1 rank"}
    assert values["busbw"] == 0 and values["algbw"] > 0      # 2(n-1)/n is 0 for one rank
    env = netbench_load(tmp_path)
    assert json.loads(env[env.msg_size == 65536]["env_json"].iloc[0])["launcher"][
        "world_size"] == 1
    # the stored params say the world that ran, not the spawn default of 2
    assert set(df["params"].map(lambda p: json.loads(p)["world_size"])) == {1}


def test_ddp_sync_answers_what_the_fabric_costs_a_step(tmp_path):
    proc = netbench("run", "coll.ddp_sync", "-p", "model_params=2000000", "-p",
                    "bucket_mb=1", "-p", "compute_ms=50", "-p", "iterations=3", "-p",
                    "warmup=1", "--json", "--results", str(tmp_path), timeout=300)
    assert proc.returncode == 0, proc.stderr
    v = {r["metric"]: r for r in json.loads(proc.stdout)}
    comm = v["comm_ms"]["value"]
    assert comm > 0
    assert v["scaling_efficiency"]["value"] == pytest.approx(50 / (50 + comm))
    assert v["comm_fraction"]["value"] == pytest.approx(comm / (50 + comm))
    assert "4 buckets of 1 MiB" in v["comm_ms"]["reason"]     # 2M bf16 = 4 MB


def test_wrong_results_are_counted_and_fail_the_row():
    """The checker itself, on a one-rank gloo group: corrupt the output, count the damage."""
    import torch.distributed as dist

    from netbench.benchmarks import _ranks
    from netbench.benchmarks.collectives import CollAllReduce
    from netbench.errors import NetbenchError

    store = dist.HashStore()
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        spec = {"op": "all_reduce", "bytes": 64, "dtype": "float32", "reduce_op": "sum"}
        case = _ranks._Case(torch, dist, spec, 0, 1, torch.device("cpu"))
        case.fill()
        case.run()
        assert case.wrong() == 0
        case.out[3] = 42
        case.out[7] = -1
        assert case.wrong() == 2
    finally:
        dist.destroy_process_group()
    bad = [{"kind": "result", "time_us": 10.0, "wrong": 2, "bytes": 64}] * 2
    with pytest.raises(NetbenchError, match="4 wrong element"):
        CollAllReduce()._measure(bad, 2, "gloo", {"msg_size": 64, "dtype": "float32"})


@pytest.mark.parametrize("launcher,env", [
    ("slurm", {"SLURM_PROCID": "{rank}", "SLURM_NTASKS": "2", "SLURM_LOCALID": "{rank}",
               "SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0"}),
    ("mpirun", {"OMPI_COMM_WORLD_RANK": "{rank}", "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "{rank}", "OMPI_MCA_orte_ess_jobid": "77"}),
])
def test_ranks_from_slurm_or_mpi_environment(tmp_path, launcher, env):
    """What srun and mpirun put in each rank's environment, given to two real processes."""
    port = str(29000 + os.getpid() % 900)
    procs = []
    for rank in range(2):
        rank_env = {k: v.format(rank=rank) for k, v in env.items()}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "netbench", "run", "coll.broadcast", "-p", "msg_size=64K",
             "-p", "iterations=3", "--results", str(tmp_path), "--label", launcher],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=port, **rank_env)))
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert outs[1][0] == "" and "stored" not in outs[1][1]     # rank 1 runs, stays quiet
    df = pd.read_parquet(tmp_path)
    assert len(list(tmp_path.glob("*.parquet"))) == 1 and set(df["status"]) == {"ok"}
    assert json.loads(netbench_load(tmp_path)["env_json"].iloc[0])["launcher"]["name"] == \
        launcher


@pytest.mark.parametrize("requested,here,world,expected", [
    ("auto", 2, 2, "gloo"),         # torchrun --nproc-per-node 2 on one GPU: NCCL would fail
    ("auto", 1, 1, "nccl"),         # one worker per GPU
    ("auto", None, 8, "nccl"),      # srun without --ntasks-per-node: one rank per GPU assumed
    ("nccl", 2, 2, UsageError),
    ("gloo", 1, 1, "gloo"),
])
def test_backend_gives_every_rank_on_a_host_its_own_gpu(monkeypatch, requested, here, world,
                                                        expected):
    """One GPU here (patched: this host has none); every rank decides from the same facts."""
    from netbench.benchmarks.collectives import _backend
    from netbench.env.launch import LaunchInfo

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    launched = LaunchInfo("torchrun", 0, world, 0, here)
    if expected is UsageError:
        with pytest.raises(UsageError, match="2 ranks on this host with nccl need 2 GPUs"):
            _backend(requested, world, launched)
    else:
        assert _backend(requested, world, launched) == expected
    assert _backend("auto", 2, None) == "gloo"          # spawned here: 2 ranks, 1 GPU


def test_cpu_bind_rank_puts_rank_i_on_cpu_i():
    """cpu_bind=rank (mpirun --bind-to core): each spawned rank, and every thread it starts
    later, may run only on its CPU; without it they may run anywhere this process may."""
    from netbench.benchmarks._ranks import RankGroup

    cpus = sorted(os.sched_getaffinity(0))
    for bind, want in (("rank", [{cpus[0]}, {cpus[1 % len(cpus)]}]),
                       ("none", [set(cpus), set(cpus)])):
        group = RankGroup(2, "gloo", 0, 30.0, bind)
        try:
            spec = {"op": "all_reduce", "bytes": 4096, "dtype": "float32", "iters": 3,
                    "warmup": 1}
            results = group.run(spec, 60)
            assert [r["wrong"] for r in results] == [0, 0]
            for proc, cpu_set in zip(group.procs, want):
                threads = psutil.Process(proc.pid).threads()
                assert len(threads) > 1                   # torch and gloo started theirs
                for thread in threads:
                    assert os.sched_getaffinity(thread.id) == cpu_set, (bind, thread.id)
        finally:
            group.close()


def test_path_nic_forces_nccls_ranks_onto_their_nics_and_says_where_it_cannot(
        tmp_path, monkeypatch):
    """path=nic (Azure's IB loopback all_reduce): every spawned rank starts with
    NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1, ranks without it get neither; on gloo there is
    nothing to force and under a launcher NCCL has read its environment already: a skipped
    row saying why and what to do."""
    from netbench.benchmarks import collectives
    from netbench.benchmarks.collectives import NIC_ENV, _path_env

    def environ(proc):
        return dict(line.split("=", 1) for line in
                    open(f"/proc/{proc.pid}/environ").read().split("\0") if "=" in line)

    group = collectives._Group()
    try:
        nic = group.get(2, "gloo", 0, 30.0, "none", "", NIC_ENV)
        assert all({k: environ(p).get(k) for k in NIC_ENV} == NIC_ENV for p in nic.procs)
        plain = group.get(2, "gloo", 0, 30.0, "none", "", {})
        assert plain is not nic and all(
            "NCCL_P2P_DISABLE" not in environ(p) for p in plain.procs)
    finally:
        group.close()
    assert _path_env("auto", "nccl", None) == {} and _path_env("nic", "nccl", None) == NIC_ENV
    proc = netbench("run", "coll.all_reduce", "-p", "path=nic", "-p", "backend=gloo",
                    "-p", "msg_size=1K", "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["status"] == "skipped" and "path=nic forces NCCL off NVLink" in row["reason"]
    monkeypatch.delenv("NCCL_SHM_DISABLE", raising=False)
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    with pytest.raises(collectives.SkipCase, match="export NCCL_SHM_DISABLE=1 in the launcher"):
        _path_env("nic", "nccl", object())


def test_a_repeat_of_a_case_gets_new_ranks(monkeypatch):
    """A repeat is an invocation of its own: the ranks that ran a case are replaced before
    it runs again (whole-run state made repeats agree more than runs do), and the other
    cases of the same pass share the new ranks (one spawn a pass, not one a case)."""
    from netbench.benchmarks import _ranks, collectives

    spawned = []

    class Ranks:
        def __init__(self, *args, **kwargs):
            self.closed = False
            spawned.append(self)

        def close(self):
            self.closed = True

    monkeypatch.setattr(_ranks, "RankGroup", Ranks)
    group = collectives._Group()
    first = group.get(2, "gloo", 0, 60.0, "none", "all_reduce 4K")
    assert group.get(2, "gloo", 0, 60.0, "none", "all_gather 256K") is first
    again = group.get(2, "gloo", 0, 60.0, "none", "all_reduce 4K")     # pass 2
    assert again is not first and first.closed and len(spawned) == 2
    assert group.get(2, "gloo", 0, 60.0, "none", "all_gather 256K") is again
    other = group.get(4, "gloo", 0, 60.0, "none", "all_reduce 4K")     # another shape
    assert other is not again and again.closed and len(spawned) == 3
