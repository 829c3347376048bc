"""netbench fabric: real processes started with the environment a launcher sets (torchrun's
RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT), each its own host (a UTS namespace with its own
hostname), meeting through torch's TCPStore.

The known answer: four network namespaces on a bridge, each host's egress shaped with tc tbf
(one to 200 Mbit/s, the others to 500), a sweep of tcp.stream in each direction. Exactly that
host must be flagged, as slow sending with every peer, its pairs at 0.90-1.0 of its rate, and
nothing else flagged.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
from conftest import ROOT, assert_clean_error, netbench

from netbench import load as netbench_load

SLOW_MBIT, FAST_MBIT = 200, 500


def _needs_root():
    if os.geteuid() != 0:
        pytest.skip("separate hosts need namespaces: run the tests as root, as CI does")
    if not shutil.which("unshare") or not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("needs unshare (util-linux) and iproute2 (ip, tc)")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, args, host, netns=None, master="127.0.0.1", launcher=None):
    env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_RANK": "0",
           "MASTER_ADDR": master, "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "t",
           "PYTHONPATH": str(ROOT)}
    if launcher is not None:              # srun's environment instead of torchrun's
        for var in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                    "TORCHELASTIC_RUN_ID"):
            env.pop(var)
        env.update({k: v.format(rank=rank) for k, v in launcher.items()})
    inner = ["unshare", "--uts", "sh", "-c", f'hostname {host} && exec "$@"', "sh",
             sys.executable, "-m", "netbench", "fabric", *args]
    cmd = (["ip", "netns", "exec", netns] if netns else []) + inner
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _finish(procs, timeout=240):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        outs.append((p.returncode, out, err))
    return outs


STREAM = ["tcp.stream", "-p", "duration=0.5", "-p", "warmup=0.1", "--timeout", "30"]


@pytest.mark.root
@pytest.mark.parametrize("store", ["torch", "builtin"])
def test_three_hosts_sweep_every_pair_and_store_every_fingerprint(tmp_path, store):
    _needs_root()
    port, res = _free_port(), tmp_path / "res"
    procs = [_rank(r, 3, port, [*STREAM, "--results", str(res), "--label", "fab",
                                "--threshold", "0.9", "--rendezvous-store", store], f"node{r}")
             for r in range(3)]
    outs = _finish(procs)
    assert [o[0] for o in outs] == [0, 0, 0], outs
    assert "6 rounds of at most 1 pairs" in outs[0][2] and "nothing flagged" in outs[0][1]
    rows = netbench_load(res)
    good = rows[rows.metric == "goodput"]
    assert sorted(zip(good.host, good.peer)) == sorted(
        (f"node{a}", f"node{b}") for a in range(3) for b in range(3) if a != b)
    assert (good.value > 0).all() and good.case_index.is_unique
    # Every host's own fingerprint, kept once per host, joined back on its rows.
    hosts = {h: json.loads(e)["host"] for h, e in zip(rows.host, rows.env_json)}
    assert hosts == {"node0": "node0", "node1": "node1", "node2": "node2"}
    assert rows.run_id.nunique() == 1 and set(rows.label) == {"fab"}
    listed = netbench("runs", "--results", str(res))
    assert "3 hosts" in listed.stdout, listed.stdout


def _free_slurm_job_id():
    """A job id whose Slurm-derived port (15000 + its last 4 digits) is free here."""
    for job in range(int(time.time()) % 9000 + 1000, 10000):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", 15000 + job % 10000))
                return str(700000 + job)
            except OSError:
                continue
    pytest.skip("no free port in 16000-24999")


@pytest.mark.root
def test_under_srun_the_rendezvous_comes_from_slurms_environment(tmp_path):
    """No --rendezvous and no MASTER_ADDR: rank 0's host is the first node of the step's node
    list, the port 15000 + the job id's last four digits (what srun sets, three tasks on one
    node, each in its own UTS namespace)."""
    _needs_root()
    res, job = tmp_path / "res", _free_slurm_job_id()
    slurm = {"SLURM_PROCID": "{rank}", "SLURM_NTASKS": "3", "SLURM_LOCALID": "{rank}",
             "SLURM_NTASKS_PER_NODE": "3", "SLURM_JOB_ID": job, "SLURM_STEP_ID": "0",
             "SLURM_STEP_NODELIST": "localhost", "SLURM_JOB_NODELIST": "localhost"}
    procs = [_rank(r, 3, 0, [*STREAM, "--results", str(res), "--threshold", "0.9",
                             "--rendezvous-store", "builtin"], f"s{r}", launcher=slurm)
             for r in range(3)]
    outs = _finish(procs)
    assert [o[0] for o in outs] == [0, 0, 0], outs
    port = 15000 + int(job[-4:])
    assert f"rendezvous at localhost:{port} (SLURM_STEP_NODELIST)" in outs[0][2]
    rows = netbench_load(res)
    assert sorted(set(zip(rows.host, rows.peer))) == sorted(
        (f"s{a}", f"s{b}") for a in range(3) for b in range(3) if a != b)
    assert {json.loads(e)["launcher"]["name"] for e in rows.env_json} == {"slurm"}


@pytest.mark.root
def test_under_a_real_mpirun(tmp_path):
    """Open MPI's mpirun starts the ranks (OMPI_COMM_WORLD_*); it says nothing of where rank
    0 is, so MASTER_ADDR/PORT go with -x. Without them: one clear error naming the fix."""
    _needs_root()
    if not shutil.which("mpirun"):
        pytest.skip("needs mpirun (openmpi-bin)")
    res, port = tmp_path / "res", _free_port()
    mpirun = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "3",
              "-x", f"PYTHONPATH={ROOT}", "-x", "PATH"]
    inner = ["unshare", "--uts", "sh", "-c",
             'hostname "mpi$OMPI_COMM_WORLD_RANK" && exec "$@"', "sh",
             sys.executable, "-m", "netbench", "fabric", *STREAM, "--results", str(res),
             "--threshold", "0.9", "--rendezvous-store", "builtin"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MASTER_")}
    run = subprocess.run([*mpirun, "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}",
                          *inner], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=240)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "nothing flagged" in run.stdout
    rows = netbench_load(res)
    assert sorted(set(zip(rows.host, rows.peer))) == sorted(
        (f"mpi{a}", f"mpi{b}") for a in range(3) for b in range(3) if a != b)
    assert {json.loads(e)["launcher"]["name"] for e in rows.env_json} == {"mpirun"}
    bare = subprocess.run([*mpirun, *inner], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert bare.returncode != 0
    assert "no rendezvous under mpirun" in bare.stderr and "-x MASTER_ADDR" in bare.stderr
    assert "Traceback" not in bare.stderr


def test_slurm_node_lists_name_their_first_host():
    from netbench.env.launch import LaunchInfo, first_host, rendezvous_address

    assert first_host("gpu[007-012,020],login1") == "gpu007"
    assert first_host("node1,node2") == "node1"
    assert first_host("rack[2-3]-node[01-04]") == "rack2-node01"
    assert first_host("dgx-a100-[4,9]") == "dgx-a100-4"
    assert first_host("localhost") == "localhost"
    for bad in ("node[01-04", "", ",node2"):
        with pytest.raises(ValueError, match="Slurm node list"):
            first_host(bad)
    slurm = LaunchInfo("slurm", 1, 4, 0)
    env = {"SLURM_STEP_NODELIST": "gpu[007-010]", "SLURM_JOB_ID": "1234567"}
    with pytest.MonkeyPatch.context() as mp:
        for k in ("MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_NODELIST", "SLURM_NODELIST"):
            mp.delenv(k, raising=False)
        for k, v in env.items():
            mp.setenv(k, v)
        assert rendezvous_address(slurm) == ("gpu007", 19567, "SLURM_STEP_NODELIST")
        assert rendezvous_address(LaunchInfo("mpirun", 1, 4, 0)) is None
        mp.setenv("MASTER_PORT", "29511")
        assert rendezvous_address(slurm) == ("gpu007", 29511, "SLURM_STEP_NODELIST")
        mp.setenv("MASTER_ADDR", "head")
        assert rendezvous_address(LaunchInfo("mpirun", 1, 4, 0)) == ("head", 29511,
                                                                      "MASTER_ADDR")


@pytest.mark.root
def test_one_rank_per_nic_and_rails_pair_nic_i_with_nic_i(tmp_path):
    """Two hosts with two NICs each, a rank per NIC (--device): the endpoints are host/NIC,
    --rails pairs NIC i only with NIC i, both rails in the same rounds."""
    _needs_root()
    port, res = _free_port(), tmp_path / "res"
    places = [("A", "nic0"), ("A", "nic1"), ("B", "nic0"), ("B", "nic1")]
    procs = [_rank(r, 4, port, [*STREAM, "--results", str(res), "--threshold", "0.9",
                                "--rails", "--device", nic, "--bind", "127.0.0.1"], host)
             for r, (host, nic) in enumerate(places)]
    outs = _finish(procs)
    assert [o[0] for o in outs] == [0, 0, 0, 0], outs
    assert "2 rounds of at most 2 pairs" in outs[0][2], outs[0][2]
    rows = netbench_load(res)
    good = rows[rows.metric == "goodput"]
    assert sorted(zip(good.host, good.peer, good.peer_device)) == [
        ("A/nic0", "B/nic0", "nic0"), ("A/nic1", "B/nic1", "nic1"),
        ("B/nic0", "A/nic0", "nic0"), ("B/nic1", "A/nic1", "nic1")]
    # Both rails' pairs ran side by side: in each round the two cases overlap in time.
    spans = sorted((r.case_started_at, r.case_started_at + pd.Timedelta(seconds=r.case_seconds))
                   for r in good.itertuples())
    for (a0, a1), (b0, b1) in (spans[0:2], spans[2:4]):
        assert b0 < a1 and a0 < b1, spans


@pytest.mark.root
def test_two_ranks_claiming_one_host_are_named(tmp_path):
    _needs_root()
    port = _free_port()
    procs = [_rank(r, 2, port, [*STREAM, "--results", str(tmp_path)], "same")
             for r in range(2)]
    for code, _out, err in _finish(procs, 60):
        assert code == 2 and "ranks 0 and 1 both claim host 'same'" in err, err
        assert "Traceback" not in err


@pytest.mark.root
def test_a_rank_that_never_joins_is_named_after_the_join_timeout(tmp_path):
    _needs_root()
    port = _free_port()
    start = time.monotonic()
    procs = [_rank(r, 3, port, [*STREAM, "--results", str(tmp_path), "--join-timeout", "3"],
                   f"n{r}") for r in range(2)]                     # rank 2 never starts
    outs = _finish(procs, 60)
    assert time.monotonic() - start < 45
    for code, _out, err in outs:
        assert code == 1 and "rank(s) 2 of 3 never joined" in err and "n0" in err, err


@pytest.mark.root
def test_a_host_that_dies_mid_sweep_fails_its_pairs_and_the_sweep_goes_on(tmp_path):
    _needs_root()
    port, res = _free_port(), tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=1.0", "-p", "warmup=0.1", "--timeout", "8",
            "--results", str(res)]
    procs = [_rank(r, 4, port, args, f"h{r}") for r in range(4)]
    deadline = time.monotonic() + 120    # until rank 0 stored the first round: mid-sweep
    while not list(res.glob("*.parts/part-*.parquet")) and time.monotonic() < deadline:
        time.sleep(0.1)
    procs[3].send_signal(signal.SIGKILL)
    outs = _finish(procs)
    assert outs[0][0] == 1, outs[0]                   # something failed: exit 1
    assert outs[1][0] == 0 and outs[2][0] == 0, outs
    rows = pd.read_parquet(res)
    failed = rows[rows.status == "failed"]
    assert not failed.empty
    assert failed.apply(lambda r: "h3" in (r.host, r.peer), axis=1).all()
    assert failed.reason.str.contains("h3").any()
    assert "stopped answering" in " ".join(failed.reason)
    ok = rows[(rows.status == "ok") & (rows.metric == "goodput")]
    pairs = set(zip(ok.host, ok.peer))
    assert {("h0", "h1"), ("h1", "h0"), ("h0", "h2"), ("h2", "h0"), ("h1", "h2"),
            ("h2", "h1")} <= pairs                         # the others all measured
    assert "FAILED" in outs[0][1]


@pytest.mark.root
def test_a_host_that_dies_mid_burn_in_is_named_in_every_pass_after_and_the_burn_in_ends(
        tmp_path):
    """`netbench fabric --soak` with a rank killed after the first pass: the burn-in goes on
    to its end (bounded: the rank is declared gone once, never waited for again), every
    later pass fails its pairs naming it, the others keep measuring, exit 1. The soak is
    long enough that a loaded runner's first pass (6 rounds: 15 s on a CI runner, where a
    12 s soak ended with it) still leaves time for a second."""
    _needs_root()
    port, res = _free_port(), tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=0.5", "-p", "warmup=0.1", "--timeout", "5",
            "--results", str(res), "--soak", "40s", "--json"]
    procs = [_rank(r, 3, port, args, f"h{r}") for r in range(3)]
    deadline = time.monotonic() + 120          # until the first pass is stored
    while len(list(res.glob("*.parts/part-*.parquet"))) < 6 and time.monotonic() < deadline:
        time.sleep(0.1)
    procs[2].send_signal(signal.SIGKILL)
    start = time.monotonic()
    outs = _finish(procs, timeout=300)
    assert time.monotonic() - start < 200, outs[0][2][-2000:]
    assert outs[0][0] == 1 and outs[1][0] == 0, outs[:2]
    out = json.loads(outs[0][1])
    assert len(out["passes"]) >= 2, outs[0][2]
    # (Which live host reads slow on a loaded 2-core runner is the load's: loopback pairs
    # of three hosts say nothing of hosts, so no host verdict is asserted here.)
    rows = pd.read_parquet(res)
    bad = rows[rows.status == "failed"]
    assert not bad.empty and bad.apply(lambda r: "h2" in (r.host, r.peer), axis=1).all()
    ok = rows[(rows.status == "ok") & (rows.metric == "goodput")]
    assert {("h0", "h1"), ("h1", "h0")} <= set(zip(ok.host, ok.peer))
    assert ok["case_index"].max() > bad["case_index"].min(), "the others went on measuring"


def test_usage_errors_are_one_clear_line(tmp_path):
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}
    assert_clean_error(netbench("fabric", "mem.copy", "--results", str(tmp_path),
                                env={**os.environ, **env}), "mem.copy has no far end")
    assert_clean_error(netbench("fabric", "tcp.stream", "--results", str(tmp_path)),
                       "under a launcher")
    assert_clean_error(netbench("fabric", "tcp.stream", "--k", "0", "--results",
                                str(tmp_path), env={**os.environ, **env}), "--k 0")
    one = {**os.environ, "RANK": "0", "WORLD_SIZE": "1", "TORCHELASTIC_RUN_ID": "x"}
    assert_clean_error(netbench("fabric", "tcp.stream", "--results", str(tmp_path), env=one),
                       "at least two ranks")
    assert_clean_error(netbench("fabric", "tcp.rr", "--direction", "bidirectional",
                                "--results", str(tmp_path), env={**os.environ, **env}),
                       "no bidirectional mode")
    # --trace: adaptive only, a topology with the routers' addresses, a benchmark that
    # traces its connections.
    shape = ROOT / "tests" / "fixtures" / "topology" / "lldp-leaf-spine"
    slurm = ROOT / "tests" / "fixtures" / "topology" / "two-leaves.conf"
    for args, needle in (
            (["tcp.stream", "--trace"], "--trace applies to --pattern adaptive"),
            (["tcp.stream", "--trace", "--pattern", "adaptive", "--topology", str(slurm)],
             "--trace names each flow's routers by their addresses"),
            (["tcp.rr", "--trace", "--pattern", "adaptive", "--topology", str(shape)],
             "--trace: tcp.rr cannot trace its connections"),
            (["tcp.stream", "--soak", "0"], "--soak '0': a positive time"),
            (["tcp.stream", "--soak", "forever"], "--soak 'forever': a positive time"),
            (["tcp.stream", "--soak", "1h", "--jsonl", str(tmp_path / "x.jsonl")],
             "--soak stores its passes in Parquet")):
        assert_clean_error(netbench("fabric", *args, "--results", str(tmp_path),
                                    env={**os.environ, **env}), needle)


# --- the known answer: four hosts on a bridge, one slow egress ------------------------------

def _sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


def plug(host: str, bridge: str, inside: str, outside: str, addr: str, mbit: int) -> None:
    """A host namespace's NIC: a veth from it into the bridge namespace's br0, addressed
    (a /24), its egress shaped to ``mbit``."""
    _sh("ip", "link", "add", inside, "type", "veth", "peer", "name", outside)
    _sh("ip", "link", "set", inside, "netns", host)
    _sh("ip", "link", "set", outside, "netns", bridge)
    _sh("ip", "-n", bridge, "link", "set", outside, "master", "br0")
    _sh("ip", "-n", bridge, "link", "set", outside, "up")
    _sh("ip", "-n", host, "addr", "add", f"{addr}/24", "dev", inside)
    _sh("ip", "-n", host, "link", "set", inside, "up")
    _sh("ip", "-n", host, "link", "set", "lo", "up")
    # burst must hold a whole GSO super-packet (64 KiB) or tbf drops it
    _sh("tc", "-n", host, "qdisc", "add", "dev", inside, "root", "tbf", "rate", f"{mbit}mbit",
        "burst", "256kb", "latency", "100ms")


@pytest.fixture
def bridged_hosts():
    _needs_root()
    tag = f"{os.getpid() % 10000}"
    bridge, hosts = f"nbbr{tag}", [f"nbh{i}x{tag}" for i in range(4)]
    made = []
    try:
        for ns in (bridge, *hosts):
            _sh("ip", "netns", "add", ns)
            made.append(ns)
    except subprocess.CalledProcessError as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    try:
        _sh("ip", "-n", bridge, "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", bridge, "link", "set", "br0", "up")
        addrs = []
        for i, ns in enumerate(hosts):
            addrs.append(f"10.204.0.{i + 1}")
            plug(ns, bridge, f"nbf{i}i{tag}", f"nbf{i}o{tag}", addrs[-1],
                 SLOW_MBIT if i == 2 else FAST_MBIT)
        yield hosts, addrs
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


def assert_only_host2_flagged(m: dict, verdict: str) -> None:
    """The shaped-host known answer: host2 (its egress shaped) slow sending to every peer at
    0.90-1.0 of the shaped rate, every other pair fast, nothing else flagged."""
    assert m["faulty_hosts"] == [{"host": "host2", "role": "sending", "slow": 3, "pairs": 3}]
    assert m["slow_links"] == [] and m["failed"] == []
    slow = [c for c in m["cells"] if c["slow"]]
    assert sorted(c["server"] for c in slow) == ["host0", "host1", "host3"]
    assert {c["client"] for c in slow} == {"host2"}
    for c in slow:                      # its shaped direction, measured: 0.90-1.0 of the rate
        assert 0.90 * SLOW_MBIT / 1000 <= c["value"] <= SLOW_MBIT / 1000, c
    for c in m["cells"]:
        if not c["slow"]:
            assert c["value"] <= FAST_MBIT / 1000 and c["ratio"] > 0.9, c
    assert "HOST host2: slow sending with 3 of 3 peers" in verdict


@pytest.mark.root
def test_the_one_shaped_host_is_flagged_and_nothing_else(bridged_hosts, tmp_path):
    hosts, addrs = bridged_hosts
    port, res = 29400 + os.getpid() % 500, tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=1.0", "-p", "warmup=0.3", "--timeout", "30",
            "--results", str(res), "--json"]
    procs = [_rank(r, 4, port, args, f"host{r}", netns=ns, master=addrs[0])
             for r, ns in enumerate(hosts)]
    outs = _finish(procs)
    assert [o[0] for o in outs[1:]] == [0, 0, 0], outs
    assert outs[0][0] == 1, outs[0]                       # something flagged: exit 1
    (m,) = json.loads(outs[0][1])["matrices"]
    assert_only_host2_flagged(m, outs[0][2])
    assert {c["cause"] for c in m["cells"] if c["slow"]} == {"client"}
    rows = netbench_load(res)
    assert set(rows.host) == {f"host{i}" for i in range(4)}


# --- a fabric run in the store: compare, accept and the heatmap, pair by pair ---------------

def _fabric_run(store, run_id, started, slow=None, hosts=4, value=10.0, jitter=0.0,
                label=None):
    """One stored tcp.stream sweep of ``hosts`` endpoints; ``slow``: {(client, server): x};
    ``jitter``: each pair's value moves by that relative sd from run to run."""
    import random
    from datetime import UTC, datetime

    rng = random.Random(run_id)
    rows = []
    names = [f"h{i}" for i in range(hosts)]
    index = 0
    for c in names:
        for s in names:
            if c == s:
                continue
            v = value * (slow or {}).get((c, s), 1.0) * (1 + rng.gauss(0, jitter))
            rows.append({"schema_version": 1, "run_id": run_id, "label": label or run_id,
                         "started_at": datetime.fromisoformat(started).replace(tzinfo=UTC),
                         "host": c, "peer": s, "suite": "fabric", "case_index": index,
                         "benchmark": "tcp.stream", "family": "tcp", "op": "stream",
                         "transport": "tcp", "msg_size": 131072,
                         "params": '{"msg_size":131072}', "metric": "goodput", "value": v,
                         "unit": "Gbit/s", "better": "higher", "status": "ok",
                         "samples": [v * rng.gauss(1, 0.01) for _ in range(21)],
                         "n_samples": 21, "env_json": json.dumps({"host": c})})
            index += 1
    store.write_run(store.path_for(run_id, started), rows)


def test_compare_matches_a_fabric_run_pair_by_pair(tmp_path):
    from netbench.store import ResultStore

    store = ResultStore(tmp_path)
    store.check_writable()
    for i in range(3):      # three sweeps a side: each pair's invocations are the evidence
        _fabric_run(store, f"before00000{i}", f"2026-12-01T00:0{i}:00", jitter=0.01,
                    label="before")
        _fabric_run(store, f"after000000{i}", f"2026-12-01T01:0{i}:00", jitter=0.01,
                    slow={("h1", "h3"): 0.5}, label="after")
    proc = netbench("compare", "before", "after", "--results", str(tmp_path), "--json")
    assert proc.returncode == 1, proc.stderr                  # one pair regressed
    verdicts = json.loads(proc.stdout)["verdicts"]
    assert len(verdicts) == 12                                 # 12 pairs, not one pooled case
    regressed = [v for v in verdicts if v["verdict"] == "regressed"]
    assert [json.loads(v["params"])["pair"] for v in regressed] == ["h1->h3"], regressed


def test_accept_checks_every_pair_and_every_hosts_median(tmp_path):
    from netbench.store import ResultStore

    store = ResultStore(tmp_path)
    store.check_writable()
    _fabric_run(store, "sweep0000001", "2026-12-01T00:00:00",
                slow={("h2", s): 0.6 for s in ("h0", "h1", "h3")})
    spec = tmp_path / "fabric-accept.toml"
    spec.write_text('[[check]]\nbenchmark = "tcp.stream"\nmetric = "goodput"\n'
                    'min_host_median = 0.95\n')
    proc = netbench("accept", str(spec), "--results", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "host h2 sending: median 6 Gbit/s is 0.60 x the fabric's 10 < 0.95" in proc.stdout
    assert "h0 sending" not in proc.stdout and "receiving" not in proc.stdout
    spec.write_text('[[check]]\nbenchmark = "tcp.stream"\nmetric = "goodput"\nmin = 7\n')
    proc = netbench("accept", str(spec), "--results", str(tmp_path))
    assert proc.returncode == 1 and "h2 -> h0: 6 < 7" in proc.stdout, proc.stdout


def test_heatmap_marks_the_slow_pairs_and_tiles_a_large_fabric():
    from netbench.analysis.fabric import analyse
    from netbench.report import heatmap

    def matrix(n, slow_host):
        names = [f"n{i:03d}" for i in range(n)]
        rows = [{"benchmark": "tcp.stream", "params": "{}", "metric": "goodput",
                 "unit": "Gbit/s", "better": "higher", "status": "ok", "reason": None,
                 "host": c, "peer": s, "value": 4.0 if c == names[slow_host] else 10.0}
                for c in names for s in names if c != s]
        (m,) = analyse(pd.DataFrame(rows))
        return m

    small = heatmap.fabric_chart(matrix(5, 3))
    grid, marks = small["data"][0], small["data"][1]
    # The inferred shape puts the slow host in a group of its own: its band comes last.
    assert grid["y"] == ["n000", "n001", "n002", "n004", "n003"]
    assert len(grid["z"]) == 5 and grid["z"][4][0] == 0.4 and grid["z"][0][1] == 1.0
    assert sorted(marks["y"]) == ["n003"] * 4 and "n003 (sending)" in small["layout"]["title"][
        "text"]
    big = heatmap.fabric_chart(matrix(300, 201))               # beyond MAX_SIDE: tiles of 2
    grid = big["data"][0]
    slow = grid["y"].index("n201")                              # a tile of its own band
    assert len(grid["z"]) == 151 and grid["z"][slow][0] == 0.4
    assert grid["z"][0][1] == 1.0 and "tiles of up to 2 hosts" in big["layout"]["title"]["text"]
    assert len(big["data"][1]["x"]) == 299                      # its pairs, marked one by one


def test_pairs_are_set_against_the_link_rate_the_probe_read():
    from netbench.analysis.fabric import analyse

    env = {h: json.dumps({"nics": [{"name": "eth0", "speed_mbps": 25000 if h == "b" else
                                    100000}]}) for h in "abc"}
    rows = pd.DataFrame([{"benchmark": "tcp.stream", "params": "{}", "metric": "goodput",
                          "unit": "Gbit/s", "better": "higher", "status": "ok", "reason": None,
                          "host": c, "peer": s, "device": "eth0", "env_json": env[c],
                          "value": 23.0} for c in "abc" for s in "abc" if c != s])
    (m,) = analyse(rows)
    assert not m.flagged()                              # all alike: nothing vs the median
    assert sorted(m.cells["of_line"].round(2)) == [0.23] * 4 + [0.92] * 2
    (m,) = analyse(rows, min_line_rate=0.9)             # a's and c's 100G links run at 23%
    assert sorted((c.client, c.server) for c in m.all_cells() if c.slow) == [
        ("a", "b"), ("a", "c"), ("c", "a"), ("c", "b")]
    assert {(h.name, h.role) for h in m.faulty_hosts} >= {("a", "sending"), ("c", "sending")}


@pytest.mark.parametrize("bench,op,params,better,role,metric", [
    ("rdma.write_bw", "write_bw", "{}", "higher", "sending", "bw_avg"),
    ("rdma.read_bw", "read_bw", "{}", "higher", "receiving", "bw_avg"),  # data flows in
    ("tcp.stream", "stream", '{"direction":"reverse"}', "higher", "receiving", "goodput"),
    ("rdma.write_bw", "write_bw", '{"bidirectional":true}', "higher", "client", "bw_avg"),
    ("rdma.read_lat", "read_lat", "{}", "lower", "client", "lat_p50"),
])
def test_a_slow_host_is_named_by_what_its_data_does(tmp_path, bench, op, params, better, role,
                                                    metric):
    """host c is slow as client with every peer: the verdict says sending, receiving or (both
    ways, a round trip) client, by the benchmark's data flow as its rows store it (the
    benchmark's declared traits); accept says the same."""
    import json as json_

    from netbench import registry
    from netbench.analysis.fabric import analyse
    from netbench.api import Case
    from netbench.report.console import fabric_text as summary

    declared = registry.get(bench)
    case = Case(bench, {p.name: p.default for p in declared.params} | json_.loads(params))
    flow = declared.traits(case).flow
    slow = 4.0 if better == "higher" else 40.0
    rows = pd.DataFrame([{"benchmark": bench, "op": op, "params": params, "metric": metric,
                          "unit": "x", "better": better, "status": "ok", "reason": None,
                          "host": c, "peer": s, "value": slow if c == "c" else 10.0,
                          "flow": flow} for c in "abcd" for s in "abcd" if c != s])
    (m,) = analyse(rows, metric=metric)
    assert [(h.name, h.role) for h in m.faulty_hosts] == [("c", role)]
    assert f"HOST c: slow {role} with 3 of 3 peers" in summary([m])
    rows["msg_size"], rows["run_id"] = None, "0123456789ab"
    spec = tmp_path / "spec.toml"
    spec.write_text(f'[[check]]\nbenchmark = "{bench}"\nmetric = "{metric}"\n'
                    'min_host_median = 0.95\n')
    from netbench.analysis.accept import evaluate, load_spec

    (outcome,) = evaluate(load_spec(spec), rows)
    assert not outcome.passed and f"host c {role}:" in outcome.message, outcome.message


def test_a_ranks_nic_is_its_cases_device_unless_a_case_names_one():
    from netbench.run.suite import plan_single
    from netbench.sweep.fabric import check_plan

    plan = plan_single("rdma.write_bw", {"msg_size": "1M"}, 30.0)
    (case,) = check_plan(plan, "each", "mlx5_3").cases
    assert case.case.params["device"] == "mlx5_3"
    named = plan_single("rdma.write_bw", {"device": "mlx5_0"}, 30.0)
    assert check_plan(named, "each", "mlx5_3").cases[0].case.params["device"] == "mlx5_0"
    tcp = plan_single("tcp.stream", {}, 30.0)            # no device param: nothing added
    assert "device" not in check_plan(tcp, "each", "eth1").cases[0].case.params


def test_a_rank_per_nic_sweep_is_one_matrix_not_one_per_client_nic():
    """Each rank's NIC is its cases' device param: the endpoint's, so the rails' pairs are
    judged together (a slow NIC against the whole fabric), never split by client NIC."""
    from netbench.analysis.fabric import analyse

    ends = [f"{h}/mlx5_{r}" for h in "abc" for r in (0, 1)]
    rows = pd.DataFrame([{"benchmark": "rdma.write_bw", "op": "write_bw", "metric": "bw_avg",
                          "params": f'{{"device":"{c[2:]}","msg_size":1048576}}',
                          "unit": "Gbit/s", "better": "higher", "status": "ok",
                          "reason": None, "host": c, "peer": s,
                          "value": 90.0 if c == "c/mlx5_1" else 380.0}
                         for c in ends for s in ends if c != s and c[2:] == s[2:]])
    (m,) = analyse(rows)
    assert len(m.endpoints) == 6 and len(m.cells) == 12
    assert json.loads(m.params) == {"msg_size": 1048576}
    assert [(h.name, h.role) for h in m.faulty_hosts] == [("c/mlx5_1", "sending")]
    # A failed pair's row and its measured twins hold the params as planned (data_plane=auto;
    # the twins say in resolved what auto became): a failed cell of the same matrix.
    rows["params"] = rows["params"].str.replace("}", ',"data_plane":"auto"}')
    rows["resolved"] = '{"data_plane":"compiled","timer":"tsc"}'
    rows.loc[0, ["status", "value", "reason", "resolved"]] = [
        "failed", None, "WRITE: work completion failed with REM_INV_REQ_ERR", "{}"]
    (m,) = analyse(rows)
    assert len(m.cells) == 12 and [(c.client, c.server) for c in m.failed] == [
        (rows.host[0], rows.peer[0])]
    # Rows written before params and resolved were kept apart still read: their pairs are
    # judged by the params they hold.
    (m,) = analyse(rows[rows["status"] == "ok"].drop(columns="resolved"))
    assert len(m.cells) == 11 and m.faulty_hosts[0].name == "c/mlx5_1"


def test_the_builtin_rendezvous_survives_garbage_and_bounds_what_it_holds():
    from netbench.run.wire import Channel
    from netbench.sweep import kvstore

    port = _free_port()
    client = kvstore.KVClient("127.0.0.1", port, 2, True, 5)
    try:
        client.set("join/0", '{"host": "a"}')
        assert client.check(["join/0"]) and not client.check(["join/0", "join/1"])
        assert json.loads(client.get("join/0")) == {"host": "a"}
        for junk in (b"\x00\x00\x00\x05hello", b"\xff\xff\xff\xff", b"GET / HTTP/1.0\r\n\r\n"):
            with socket.create_connection(("127.0.0.1", port)) as raw:
                raw.sendall(junk)
        other = Channel(socket.create_connection(("127.0.0.1", port)), "store")

        def ask(request):
            other.send(request)
            return other.recv(5)

        assert "unknown op" in ask({"op": "eval", "key": "x"})["error"]
        assert "list of keys" in ask({"op": "check", "keys": "x"})["error"]
        assert "no key" in ask({"op": "get", "key": "nope"})["error"]
        assert "string value" in ask({"op": "set", "key": "k", "value": {"a": 1}})["error"]
        other.close()
        assert client.check(["join/0"])                   # still serving after all that
        kvstore.MAX_TOTAL, saved = 100, kvstore.MAX_TOTAL
        try:
            with pytest.raises(Exception, match="store is full"):
                client.set("big", "x" * 200)
            # A burn-in's rank 0 lets go of each round it collected: what a delete frees
            # is room again (hours of rounds never fill the store).
            for round_ in range(20):
                client.set(f"rows/{round_}/1", "y" * 60)
                assert client.delete_key(f"rows/{round_}/1")
            assert not client.delete_key("rows/0/1") and not client.check(["rows/0/1"])
        finally:
            kvstore.MAX_TOTAL = saved
    finally:
        client.close()
