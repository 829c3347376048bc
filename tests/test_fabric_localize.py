"""The fabric known answer of a slow trunk, in network namespaces (root; CI runs it): eight
hosts on two leaf switches (Linux bridges, each in a namespace of its own) joined by one
trunk shaped with `tc tbf` both ways. Before localization the sweep blamed 7 of the 8 healthy
hosts ("slow receiving with 4 of 7 peers") and sat its median among the slow pairs. Now the
trunk is named, by name with Slurm's topology.conf and as the path between the two inferred
groups without one, and no host is blamed."""

from __future__ import annotations

import json
import os
import subprocess

import pandas as pd
import pytest
from conftest import ROOT
from test_fabric import _finish, _free_port, _needs_root, _rank, _sh, plug

HOST_MBIT, TRUNK_MBIT = 400, 40
FAIL_SLOW_MBIT = HOST_MBIT * 85 // 100
TOPOLOGY = ROOT / "tests" / "fixtures" / "topology" / "two-leaves.conf"


@pytest.fixture
def two_leaves():
    yield from _two_leaves(TRUNK_MBIT)


@pytest.fixture
def two_leaves_fail_slow():
    """The trunk at 85% of one host's rate: a pair alone on it reads 0.85 of healthy."""
    yield from _two_leaves(FAIL_SLOW_MBIT)


@pytest.fixture
def two_leaves_reshaped():
    """The trunk at ten times a host's rate (no bottleneck), and a function that shapes it
    both ways to ``mbit`` while the fabric runs."""
    yield from _two_leaves(HOST_MBIT * 10, reshapable=True)


def _two_leaves(trunk_mbit: int, reshapable: bool = False):
    _needs_root()
    tag = f"{os.getpid() % 10000}"
    leaves = {"leafA": f"nblA{tag}", "leafB": f"nblB{tag}"}
    hosts = [(f"{leaf}-h{i}", f"nb{leaf[-1]}{i}x{tag}") for leaf in leaves for i in range(4)]
    made = []
    try:
        for ns in (*leaves.values(), *(ns for _, ns in hosts)):
            _sh("ip", "netns", "add", ns)
            made.append(ns)
    except subprocess.CalledProcessError as exc:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    try:
        for ns in leaves.values():
            _sh("ip", "-n", ns, "link", "add", "br0", "type", "bridge")
            _sh("ip", "-n", ns, "link", "set", "br0", "up")
        # The trunk: a veth between the two bridges, shaped both ways.
        a, b = f"nbtA{tag}", f"nbtB{tag}"
        _sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        for end, leaf in ((a, "leafA"), (b, "leafB")):
            ns = leaves[leaf]
            _sh("ip", "link", "set", end, "netns", ns)
            _sh("ip", "-n", ns, "link", "set", end, "master", "br0")
            _sh("ip", "-n", ns, "link", "set", end, "up")
            _sh("tc", "-n", ns, "qdisc", "add", "dev", end, "root", "tbf", "rate",
                f"{trunk_mbit}mbit", "burst", "256kb", "latency", "200ms")
        addrs = []
        for i, (name, ns) in enumerate(hosts):
            addrs.append(f"10.205.0.{i + 1}")
            plug(ns, leaves[name.split("-")[0]], f"nbv{i}i{tag}", f"nbv{i}o{tag}", addrs[-1],
                 HOST_MBIT)
        def reshape(mbit: int) -> None:
            for end, leaf in ((a, "leafA"), (b, "leafB")):
                _sh("tc", "-n", leaves[leaf], "qdisc", "change", "dev", end, "root", "tbf",
                    "rate", f"{mbit}mbit", "burst", "256kb", "latency", "200ms")

        yield (hosts, addrs, reshape) if reshapable else (hosts, addrs)
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.root
def test_a_slow_trunk_between_two_leaves_is_named_and_no_host_blamed(two_leaves, tmp_path):
    hosts, addrs = two_leaves
    port, res = _free_port(), tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=0.6", "-p", "warmup=0.2", "--timeout", "30",
            "--threshold", "0.4", "--topology", str(TOPOLOGY), "--results", str(res),
            "--json"]
    procs = [_rank(r, len(hosts), port, args, name, netns=ns, master=addrs[0])
             for r, (name, ns) in enumerate(hosts)]
    outs = _finish(procs, timeout=400)
    assert [o[0] for o in outs[1:]] == [0] * (len(hosts) - 1), outs
    assert outs[0][0] == 1, outs[0]                       # something flagged: exit 1
    (m,) = json.loads(outs[0][1])["matrices"]
    assert m["faulty_hosts"] == [], m["faulty_hosts"]     # no host blamed
    (suspect,) = m["suspects"]
    # Slurm's tree puts a core switch between the leaves: its two links and the core carry
    # exactly the cross pairs, so they are named together.
    assert set(suspect["elements"]) >= {"link:core--leafA", "link:core--leafB"}, suspect
    assert suspect["slow"] == suspect["pairs"] == 32, suspect
    assert m["healthy"] > 0.6 * HOST_MBIT / 1000, m["healthy"]
    verdict = outs[0][2][outs[0][2].find("tcp.stream"):]
    assert "PATH core--leafA / core--leafB / core (carry the same pairs" in verdict, verdict
    assert "HOST" not in verdict and "LINK leaf" not in verdict, verdict
    # The same rows without the topology: the path between the two inferred groups.
    from netbench import load as netbench_load
    from netbench.analysis.fabric import analyse
    from netbench.report.console import fabric_text as summary

    rows = netbench_load(res)
    (inferred,) = analyse(pd.DataFrame(rows[rows["status"] == "ok"]), 0.4)
    assert inferred.faulty_hosts == [] and len(inferred.suspects) == 1
    text = summary([inferred])
    assert "PATH between group0(leafA-h0..leafA-h3) and group1(leafB-h0..leafB-h3)" in text


@pytest.mark.root
def test_an_adaptive_sweep_names_the_trunk_in_fewer_rounds_than_all_pairs(two_leaves,
                                                                          tmp_path):
    """The same known answer, ``--pattern adaptive``: every host and both trunk directions
    covered, then only the suspects re-probed; the trunk named, no host blamed, in fewer
    rounds than all-pairs' 14 (7 a direction), each round's reason kept with the run."""
    import pyarrow.parquet as pq

    hosts, addrs = two_leaves
    port, res = _free_port(), tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=0.6", "-p", "warmup=0.2", "--timeout", "30",
            "--threshold", "0.4", "--topology", str(TOPOLOGY), "--pattern", "adaptive",
            "--results", str(res), "--json"]
    procs = [_rank(r, len(hosts), port, args, name, netns=ns, master=addrs[0])
             for r, (name, ns) in enumerate(hosts)]
    outs = _finish(procs, timeout=400)
    assert [o[0] for o in outs[1:]] == [0] * (len(hosts) - 1), outs
    assert outs[0][0] == 1, outs[0]
    (m,) = json.loads(outs[0][1])["matrices"]
    assert m["faulty_hosts"] == [], m
    (suspect,) = m["suspects"]
    assert set(suspect["elements"]) >= {"link:core--leafA", "link:core--leafB"}, suspect
    (path,) = res.glob("*.parquet")
    facts = json.loads(pq.read_schema(path).metadata[b"netbench_fabric"])
    print(facts["rounds"], facts["why"], suspect)
    assert facts["pattern"] == "adaptive" and 3 <= facts["rounds"] < 14, facts
    assert len(facts["why"]) == facts["rounds"] and facts["why"][0].startswith("cover:")
    stderr = outs[0][2]
    assert "adaptive rounds (at most 10)" in stderr and "[round 1/?]" in stderr, stderr
    # The shape is kept with the run: the stored run, judged again later on its own shape,
    # names the same path.
    from netbench import load as netbench_load
    from netbench.analysis.fabric import analyse
    from netbench.env.topology import from_json
    from netbench.store import ResultStore

    (kept,) = ResultStore(res).runs()["topology"]
    shape = from_json(kept)
    assert sorted(shape.hosts) == sorted(name for name, _ in hosts)
    (again,) = analyse(pd.DataFrame(netbench_load(res)), 0.4, topology=shape)
    assert again.faulty_hosts == [] and again.suspects[0].elements == suspect["elements"]


@pytest.mark.root
def test_a_trunk_at_85_percent_of_a_hosts_rate_is_named_and_no_host_blamed(
        two_leaves_fail_slow, tmp_path):
    """Fail-slow on real links: the trunk shaped to 85% of one host's rate. The adaptive
    sweep's cover puts one flow on it a round, which reads about 0.85 of healthy (the
    intra-leaf pairs beside it read 0.84-1.0 on 2 busy cores): the trunk's path is named with
    its deficit, no host and no leaf switch."""
    hosts, addrs = two_leaves_fail_slow
    port, res = _free_port(), tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=0.6", "-p", "warmup=0.2", "--timeout", "30",
            "--topology", str(TOPOLOGY), "--pattern", "adaptive", "--results", str(res),
            "--json"]
    procs = [_rank(r, len(hosts), port, args, name, netns=ns, master=addrs[0])
             for r, (name, ns) in enumerate(hosts)]
    outs = _finish(procs, timeout=400)
    assert [o[0] for o in outs[1:]] == [0] * (len(hosts) - 1), outs
    (m,) = json.loads(outs[0][1])["matrices"]
    print(outs[0][2][outs[0][2].find("tcp.stream"):])
    assert m["faulty_hosts"] == [], m
    (suspect,) = m["suspects"]
    assert set(suspect["elements"]) >= {"link:core--leafA", "link:core--leafB"}, suspect
    assert not any(e.startswith(("host:", "switch:leaf")) for e in suspect["elements"])
    assert 0.7 < suspect["of_healthy"] < 0.92, suspect
    assert outs[0][0] == 1, outs[0]


@pytest.mark.root
def test_a_fabric_burn_in_names_the_trunk_in_the_passes_after_it_slowed_and_no_host(
        two_leaves_reshaped, tmp_path):
    """Issue 39's known answer 5: `netbench fabric --soak` over the two leaves, the adaptive
    cover again and again; 14 s in, the trunk is shaped to a tenth of a host's rate. Every
    pass that ended before names nothing, every pass that began after names the trunk's path,
    no pass blames a host, and the burn-in exits 1 naming the trunk with its passes."""
    import time

    hosts, addrs, reshape = two_leaves_reshaped
    port, res = _free_port(), tmp_path / "res"
    args = ["tcp.stream", "-p", "duration=0.6", "-p", "warmup=0.2", "--timeout", "30",
            "--threshold", "0.4", "--topology", str(TOPOLOGY), "--pattern", "adaptive",
            "--soak", "32s", "--results", str(res), "--json"]
    procs = [_rank(r, len(hosts), port, args, name, netns=ns, master=addrs[0])
             for r, (name, ns) in enumerate(hosts)]
    time.sleep(14)
    from datetime import UTC, datetime
    reshape(TRUNK_MBIT)
    shaped_at = datetime.now(UTC)
    outs = _finish(procs, timeout=400)
    assert [o[0] for o in outs[1:]] == [0] * (len(hosts) - 1), outs
    out = json.loads(outs[0][1])
    print(outs[0][2][:outs[0][2].find("the last pass")])
    passes = out["passes"]
    assert len(passes) >= 3, outs[0][2]
    trunk = {"link:core--leafA", "link:core--leafB"}
    starts = [datetime.fromisoformat(p["started_at"]) for p in passes]
    for i, one in enumerate(passes):
        (m,) = one["matrices"]
        assert m["faulty_hosts"] == [], (one["pass"], m["faulty_hosts"])   # never a host
        ended = starts[i + 1] if i + 1 < len(starts) else None
        if ended is not None and ended < shaped_at:
            assert m["suspects"] == [], (one["pass"], m["suspects"])
        elif starts[i] > shaped_at:
            (suspect,) = m["suspects"]
            assert trunk <= set(suspect["elements"]), (one["pass"], suspect)
    assert starts[0] < shaped_at < starts[-1], (starts, shaped_at)
    (named,) = out["named"]
    assert trunk <= set(named["elements"].split(" / ")) and named["passes"][-1] == len(passes)
    assert outs[0][0] == 1, outs[0]
    text = outs[0][2]
    assert "NAMED in pass(es)" in text and "HOST" not in text, text
