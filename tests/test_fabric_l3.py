"""The fabric known answer of a slow leaf-spine link in a routed (L3) fabric, its shape read
from LLDP (root; CI runs it).

Three leaf and two spine routers (network namespaces with IP forwarding on), every leaf
linked to every spine by a /31 veth, two hosts behind each leaf (a /30 each out of the
leaf's /24, the leaf their gateway). Each leaf routes every other leaf's /24 over both
spines (ECMP, hashed on the flow's 5-tuple), each spine every leaf's /24 to its leaf. Every
host's access link is shaped with ``tc tbf`` to HOST_MBIT (both ends) and one leaf-spine
link, leaf1--spine1, to SLOW_MBIT both ways. lldpd runs in every namespace (its own UTS
namespace, so it advertises its node's name: the hosts' are the names the ranks report);
each node's ``lldpcli -f json show neighbors`` is the ``--topology`` directory.

A pair between leaf1 and another leaf takes spine1 or spine2 by its flow's hash, which no one
outside the routers knows: the pairs through leaf1--spine1 read slow, their twins through
leaf1--spine2 fast. Both leaf1 uplinks carry exactly the same path sets, so the honest,
strongest verdict is the shaped link among the named elements (beside what cannot be told
from it), no host blamed, and no other link named.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from conftest import ROOT
from test_fabric import _finish, _free_port, _needs_root, _rank, _sh

HOST_MBIT, SLOW_MBIT = 400, 40
LEAVES, SPINES, PER_LEAF = 3, 2, 2
SHAPED = ("leaf1", "spine1")              # the one slow leaf-spine link
LLDP_WAIT = 30.0                          # seconds for every node to see its neighbours


def _tbf(ns: str, dev: str, mbit: int, latency: str = "100ms") -> None:
    # burst must hold a whole GSO super-packet (64 KiB) or tbf drops it (as test_fabric)
    _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
        "burst", "256kb", "latency", latency)


def _cable(ns_a: str, if_a: str, ns_b: str, if_b: str) -> None:
    """One veth between two namespaces, created in them (names need only be unique there)."""
    _sh("ip", "link", "add", if_a, "netns", ns_a, "type", "veth", "peer", "name", if_b,
        "netns", ns_b)
    _sh("ip", "-n", ns_a, "link", "set", if_a, "up")
    _sh("ip", "-n", ns_b, "link", "set", if_b, "up")


def _sysctl(ns: str, *settings: str) -> None:
    _sh("ip", "netns", "exec", ns, "sysctl", "-qw", *settings)


def _lldpcli(sock: str, *args: str) -> subprocess.CompletedProcess | None:
    """One lldpcli command to one lldpd; None where it did not answer in time (starting)."""
    try:
        return subprocess.run(["lldpcli", "-u", sock, *args], capture_output=True, text=True,
                              timeout=5)
    except subprocess.TimeoutExpired:
        return None


def _neighbours(sock: str) -> tuple[list[str], dict]:
    """The system names one lldpd sees (one per interface with a neighbour), and its JSON."""
    run = _lldpcli(sock, "-f", "json", "show", "neighbors")
    if run is None or run.returncode:
        return [], {}
    doc = json.loads(run.stdout or "{}")
    raw = (doc.get("lldp") or {}).get("interface") or []
    items = [raw] if isinstance(raw, dict) else raw
    names = []
    for item in items:
        for body in item.values():
            chassis = body.get("chassis") or {}
            names += [n for n in chassis if n not in ("id", "name")] or \
                [str((chassis.get("name") or {}).get("value", "?"))]
    return sorted(names), doc


def _plan():
    """The leaves, spines and hosts by name, and the LLDP neighbours each must see."""
    leaves = [f"leaf{i}" for i in range(1, LEAVES + 1)]
    spines = [f"spine{j}" for j in range(1, SPINES + 1)]
    hosts = [f"{leaf}-h{k}" for leaf in leaves for k in range(PER_LEAF)]
    expect = {h: [h.split("-")[0]] for h in hosts}
    for leaf in leaves:
        expect[leaf] = sorted([h for h in hosts if h.startswith(leaf + "-")] + spines)
    for spine in spines:
        expect[spine] = sorted(leaves)
    return leaves, spines, hosts, expect


def _host_addr(i: int, k: int) -> tuple[str, str]:
    """Leaf i's port k: a /30 out of 10.212.i.0/24 (gateway, host)."""
    return f"10.212.{i}.{4 * k + 1}", f"10.212.{i}.{4 * k + 2}"


def _uplink_addr(i: int, j: int) -> tuple[str, str]:
    """Leaf i - spine j: a /31 (leaf's, spine's)."""
    return f"10.213.{10 * i + j}.0", f"10.213.{10 * i + j}.1"


@pytest.fixture(scope="module")
def l3_fabric(tmp_path_factory):
    _needs_root()
    if not shutil.which("lldpd") or not shutil.which("lldpcli"):
        pytest.skip("needs lldpd and lldpcli (Debian: lldpd) for the LLDP topology")
    tag = f"{os.getpid() % 10000}"
    leaves, spines, hosts, expect = _plan()
    ns = {n: f"nb3{n.replace('-', '')}x{tag}" for n in (*leaves, *spines, *hosts)}
    made: list[str] = []
    daemons: list[tuple[str, subprocess.Popen, str, str]] = []
    try:
        for name in ns.values():
            _sh("ip", "netns", "add", name)
            made.append(name)
    except subprocess.CalledProcessError as exc:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    started = time.monotonic()
    try:
        for name in ns.values():
            _sh("ip", "-n", name, "link", "set", "lo", "up")
        for router in (*leaves, *spines):
            _sysctl(ns[router], "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
                    "net.ipv4.conf.default.rp_filter=0")
        # Flows spread over the spines by a hash of their 5-tuple, as a switch hashes them:
        # policy 3 with the address, protocol and port fields. (Policy 1 takes a forwarded
        # packet's hash from the sending socket where it has one, which veths carry across:
        # a random txhash per socket, so two sockets of one 5-tuple could part ways.)
        for leaf in leaves:
            _sysctl(ns[leaf], "net.ipv4.fib_multipath_hash_policy=3",
                    "net.ipv4.fib_multipath_hash_fields=0x0037")
        # Hosts: eth0 to their leaf's swpK, a /30 each, the leaf their gateway; both ends
        # of every access link shaped.
        for i, leaf in enumerate(leaves, 1):
            for k in range(PER_LEAF):
                host, port = f"{leaf}-h{k}", f"swp{k + 1}"
                gw, addr = _host_addr(i, k)
                _cable(ns[host], "eth0", ns[leaf], port)
                _sh("ip", "-n", ns[leaf], "addr", "add", f"{gw}/30", "dev", port)
                _sh("ip", "-n", ns[host], "addr", "add", f"{addr}/30", "dev", "eth0")
                # The fabric's /16 through the leaf; no default route, so a DNS lookup
                # (lldpd resolves its own name) fails at once instead of timing out.
                _sh("ip", "-n", ns[host], "route", "add", "10.212.0.0/16", "via", gw)
                _tbf(ns[host], "eth0", HOST_MBIT)
                _tbf(ns[leaf], port, HOST_MBIT)
        # Leaf-spine: leaf i's swp5j to spine j's swpi, a /31 each; one shaped both ways.
        for i, leaf in enumerate(leaves, 1):
            for j, spine in enumerate(spines, 1):
                mine, theirs = _uplink_addr(i, j)
                _cable(ns[leaf], f"swp5{j}", ns[spine], f"swp{i}")
                _sh("ip", "-n", ns[leaf], "addr", "add", f"{mine}/31", "dev", f"swp5{j}")
                _sh("ip", "-n", ns[spine], "addr", "add", f"{theirs}/31", "dev", f"swp{i}")
                _sh("ip", "-n", ns[spine], "route", "add", f"10.212.{i}.0/24", "via", mine)
                if (leaf, spine) == SHAPED:
                    _tbf(ns[leaf], f"swp5{j}", SLOW_MBIT, "200ms")
                    _tbf(ns[spine], f"swp{i}", SLOW_MBIT, "200ms")
        for i, leaf in enumerate(leaves, 1):     # ECMP toward every other leaf's /24
            for m in range(1, LEAVES + 1):
                if m == i:
                    continue
                hops = []
                for j in range(1, SPINES + 1):
                    hops += ["nexthop", "via", _uplink_addr(i, j)[1]]
                _sh("ip", "-n", ns[leaf], "route", "add", f"10.212.{m}.0/24", *hops)
        # lldpd in every namespace, each in a UTS namespace of its own named as the node
        # (the hosts' names are the ones their ranks report); only LLDP, no config read
        # but its own.
        conf_dir = tmp_path_factory.mktemp("lldpd-conf")
        for node, name in ns.items():
            sock, pid = f"/run/nb-lldpd-{name}.socket", f"/run/nb-lldpd-{name}.pid"
            conf = conf_dir / f"{node}.conf"
            conf.write_text(f"configure system hostname {node}\n")
            proc = subprocess.Popen(
                ["ip", "netns", "exec", name, "unshare", "--uts", "sh", "-c",
                 f'hostname {node} && exec "$@"', "sh", "lldpd", "-d", "-u", sock, "-p", pid,
                 # Every fabric address advertised (lldpd picks one otherwise): a traced
                 # flow's ICMP answers come from whichever interface faces back.
                 "-m", "10.212.*,10.213.*", "-O", str(conf)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            daemons.append((node, proc, sock, pid))
        lldp_dir = tmp_path_factory.mktemp("lldp")
        docs: dict[str, dict] = {}
        deadline, nudged = time.monotonic() + LLDP_WAIT, 0.0
        while True:
            for node, proc, sock, _ in daemons:
                if proc.poll() is not None:
                    pytest.fail(f"lldpd in {node} exited {proc.returncode}: "
                                f"{proc.stderr.read().decode()[-2000:]}")
                if node not in docs:
                    seen, doc = _neighbours(sock)
                    if seen == expect[node]:
                        docs[node] = doc
            if len(docs) == len(daemons) or time.monotonic() > deadline:
                break
            if time.monotonic() - nudged > 2:    # send now rather than at the next tx
                for _node, _proc, sock, _ in daemons:
                    _lldpcli(sock, "update")
                nudged = time.monotonic()
            time.sleep(0.5)
        missing = {n: _neighbours(s)[0] for n, _p, s, _ in daemons if n not in docs}
        assert not missing, f"after {LLDP_WAIT:.0f} s, nodes short of their LLDP " \
            f"neighbours (node: seen; expected {expect}): {missing}"
        for node, doc in docs.items():
            (lldp_dir / f"{node}.json").write_text(json.dumps(doc, indent=1))
        print(f"\nL3 fabric: {len(leaves)} leaves, {len(spines)} spines, {len(hosts)} hosts, "
              f"LLDP from every node in {time.monotonic() - started:.1f} s")
        yield {"hosts": [(h, ns[h]) for h in hosts], "master": _host_addr(1, 0)[1],
               "lldp": lldp_dir, "leaves": leaves, "spines": spines, "ns": ns}
    finally:
        for _node, proc, _sock, _pid in daemons:
            proc.terminate()
        for _node, proc, sock, pid in daemons:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            for leftover in (sock, pid):
                Path(leftover).unlink(missing_ok=True)
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


@pytest.mark.root
def test_lldp_reads_the_l3_fabric_as_it_is_cabled(l3_fabric):
    """netbench's reading of the captured LLDP: the routers are switches, every host on its
    leaf, every leaf linked to every spine."""
    from netbench.env.topology import load

    topo = load(l3_fabric["lldp"])
    leaves, spines = l3_fabric["leaves"], l3_fabric["spines"]
    assert topo.switches == {*leaves, *spines}, topo
    assert topo.hosts == {h: h.split("-")[0] for h, _ in l3_fabric["hosts"]}, topo.hosts
    assert topo.trunks == {(leaf, spine) for leaf in leaves for spine in spines}, topo.trunks
    assert len(topo.switch_paths("leaf1", "leaf2")) == 2          # ECMP: over both spines
    # Every router's addresses, as its neighbours saw them advertised.
    for i, leaf in enumerate(leaves, 1):
        for j, spine in enumerate(spines, 1):
            mine, theirs = _uplink_addr(i, j)
            assert topo.addresses.get(mine) == leaf and topo.addresses.get(theirs) == spine
        assert topo.addresses.get(_host_addr(i, 0)[0]) == leaf
    print("topology notes:", *topo.notes, sep="\n  ")


SINK = """
import socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("0.0.0.0", int(sys.argv[1]))); srv.listen(64); srv.settimeout(60)
while True:
    conn, _ = srv.accept(); conn.settimeout(10)
    try:
        while conn.recv(1 << 16): pass
    except OSError: pass
    conn.close()
"""

TRACE_AND_SEND = """
import json, socket, sys
from netbench.env import tracepath
dst, port, stop = sys.argv[1], int(sys.argv[2]), set(sys.argv[3].split(","))
sport = tracepath.free_port()
found = tracepath.trace(dst, port, sport, wait=2.0, stop=lambda hop: hop in stop)
flow = tracepath.probe_socket("", sport)          # the flow on the traced 5-tuple
flow.settimeout(20); flow.connect((dst, port)); flow.sendall(bytes(2 << 20))
flow.shutdown(socket.SHUT_WR); flow.recv(1); flow.close()   # the sink read it all
print(json.dumps({"sport": sport, "hops": found.hops, "reached": found.reached}))
"""


def _tx_bytes(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "-n", ns, "-j", "-s", "link", "show", "dev", dev],
                         capture_output=True, text=True, check=True).stdout
    return int(json.loads(out)[0]["stats64"]["tx"]["bytes"])


@pytest.mark.root
def test_a_traced_flow_crosses_the_spine_its_trace_names(l3_fabric):
    """A flow's path under ECMP, traced with its own 5-tuple (netbench.env.tracepath: SYNs
    with rising TTL from the flow's source port, the ICMP answers read from the socket's
    error queue) and named by LLDP's addresses: the flow then sent on that 5-tuple leaves
    leaf1 by the uplink to the spine the trace named (the uplinks' byte counters say which),
    six source ports out of six, and both spines are seen."""
    import sys

    from netbench.env.topology import load

    topo = load(l3_fabric["lldp"])
    ns = dict(l3_fabric["hosts"])
    dst, port = _host_addr(2, 0)[1], 45678
    stop = ",".join(a for a, node in topo.addresses.items() if node == "leaf2")
    sink = subprocess.Popen(["ip", "netns", "exec", ns["leaf2-h0"], sys.executable, "-c",
                             SINK, str(port)])
    leaf1 = l3_fabric["ns"]["leaf1"]
    seen = set()
    try:
        time.sleep(0.5)
        # Six source ports at least, up to sixteen until both spines are seen: six ports
        # land on one spine 1 time in 32 (seen once in CI), sixteen 1 in 32,768.
        for tried in range(16):
            if tried >= 6 and len(seen) == SPINES:
                break
            before = {j: _tx_bytes(leaf1, f"swp5{j}") for j in range(1, SPINES + 1)}
            run = subprocess.run(["ip", "netns", "exec", ns["leaf1-h0"], sys.executable,
                                  "-c", TRACE_AND_SEND, dst, str(port), stop],
                                 capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "PYTHONPATH": str(ROOT)})
            assert run.returncode == 0, run.stderr
            got = json.loads(run.stdout)
            sent = {j: _tx_bytes(leaf1, f"swp5{j}") - before[j] for j in before}
            path = topo.path_of(got["hops"], "leaf1-h0", "leaf2-h0")
            carried = f"spine{max(sent, key=sent.get)}"
            print(f"source port {got['sport']}: hops {got['hops']} -> {path}; bytes out of "
                  f"leaf1 by uplink: {sent}")
            assert not got["reached"] and path is not None and len(path) == 3, got
            assert path[1] == carried and sent[int(carried[-1])] > 2 << 20, (path, sent)
            seen.add(path[1])
    finally:
        sink.kill()
        sink.wait(timeout=10)
    assert seen == {"spine1", "spine2"}, seen


def _sweep(fabric, pattern: str, res: Path, *more: str) -> tuple[list, float]:
    hosts = fabric["hosts"]
    args = ["tcp.stream", "-p", "duration=0.6", "-p", "warmup=0.2", "--timeout", "30",
            "--threshold", "0.4", "--topology", str(fabric["lldp"]), "--pattern", pattern,
            "--results", str(res), "--json", *more]
    start = time.monotonic()
    port = _free_port()
    procs = [_rank(r, len(hosts), port, args, name, netns=ns, master=fabric["master"])
             for r, (name, ns) in enumerate(hosts)]
    return _finish(procs, timeout=240), time.monotonic() - start


def _on_shaped_link(element: str) -> bool:
    leaf, spine = SHAPED
    return element in (f"link:{leaf}--{spine}", f"link:{leaf}->{spine}",
                       f"link:{spine}->{leaf}")


# Under ECMP a flow takes ONE path of its equal-cost set, by the hash of its 5-tuple (a random
# source port each connection), so whether a sweep's flows load the shaped uplink is chance:
# all-pairs needs 5 of the 16 pairs through leaf1's uplinks slow for localize to name them
# (4 or fewer hash onto spine1 in 3.8% of sweeps: binomial 16, 1/2), and the adaptive cover
# sends one flow per path set a round, so it may miss the link or leave a slow pair "its own
# path (retest it)". Such a sweep names nothing, and says so; it is never an excuse: the test
# sweeps again and asserts the rate at which the link is named (a sweep that names it ends
# the count early), with k of n from the rates measured here: adaptive named the link in 4 of
# 10 sweeps with the noise-set cut and 6 of 10 with the fixed 40% one (a busy 2-core machine):
# about half, so at least once in 8 (a miss 1 in 250 at one half, 1 in 60 at 0.4); all-pairs
# misses in about 4% of sweeps, so 2 of 3.
ATTEMPTS = {"all": (3, 2), "adaptive": (8, 1)}     # pattern: (sweeps at most, named at least)


def _lone_pairs(stderr: str) -> list[str]:
    return [line.strip() for line in stderr.splitlines()
            if line.strip().startswith("LINK ") and "the pair's own path" in line]


def _one_sweep(fabric, res: Path, pattern: str) -> tuple[bool, str]:
    """One sweep, every part of its verdict that does not rest on the flows' hashes asserted;
    returns whether it named the shaped link, and a line saying what it found."""
    import pyarrow.parquet as pq

    outs, seconds = _sweep(fabric, pattern, res)
    n = len(fabric["hosts"])
    assert [o[0] for o in outs[1:]] == [0] * (n - 1), outs
    assert outs[0][0] in (0, 1), outs[0]
    (m,) = json.loads(outs[0][1])["matrices"]
    (path,) = res.glob("*.parquet")
    facts = json.loads(pq.read_schema(path).metadata[b"netbench_fabric"])
    stderr = outs[0][2]
    verdict = stderr[stderr.find("tcp.stream"):]
    leaf, spine = SHAPED
    slow = {(c["client"], c["server"]) for c in m["cells"] if c["slow"]}
    crossing = {(c["client"], c["server"]) for c in m["cells"]
                if (c["client"].split("-")[0] == leaf) != (c["server"].split("-")[0] == leaf)}
    rounds = facts["rounds"]
    print(f"\n--pattern {pattern}: {rounds} rounds in {seconds:.1f} s, "
          f"{len(m['cells'])} pairs measured, healthy {m['healthy']:.3g} {m['unit']}; "
          f"{len(slow)} of the {len(crossing)} pairs between {leaf} and another leaf read "
          "slow (each flow takes spine1 or spine2 by its hash)")
    for why in facts.get("why") or []:
        print("  round:", why)
    for s in m["suspects"]:
        print("  SUSPECT", s["text"])
    print(verdict)
    # The measurement itself: only pairs between the shaped link's leaf and another leaf
    # can cross it (one way or the other), and the fabric's healthy rate is the hosts'. On
    # a shared 2-core runner a pair beside no slow link may read slow once (the hypervisor
    # stole its sender's core: CI saw one at 0.93 of healthy): the verdict must then leave
    # it as that pair's own path to retest, never a host, a link, or a suspect's evidence.
    stray = slow - crossing
    assert len(stray) <= 1, (slow, crossing)
    lone = _lone_pairs(verdict)
    assert all(any(f"LINK {c} -> {s}:" in line for line in lone) for c, s in stray), (
        stray, verdict)
    if stray:
        print("  a pair beside no slow link read slow once (left to retest):", stray)
    assert m["healthy"] > 0.6 * HOST_MBIT / 1000, m["healthy"]
    # Never a host blamed for a slow link, nor anything but the link or its ECMP twins.
    assert m["faulty_hosts"] == [], m["faulty_hosts"]
    assert "HOST" not in verdict, verdict
    for s in m["suspects"]:          # every suspect holds the shaped link (or else names it
        # beside one the same slow pairs name as well); an unshaped link only beside it
        assert any(_on_shaped_link(e) for e in s["elements"] + s["or_else"]), s
        assert s["kind"] != "host" and not any(e.startswith("host:") for e in s["elements"])
    if pattern == "all":
        assert rounds == 2 * (n - 1), facts               # the circle method, each way
    else:
        assert facts["pattern"] == "adaptive" and rounds < 2 * (n - 1), facts
        assert len(facts["why"]) == rounds and facts["why"][0].startswith("cover:")
    if outs[0][0] == 0:              # no flow took the link: nothing flagged, nothing named
        assert not slow and not m["suspects"], m
        return False, f"{rounds} rounds, nothing flagged: no flow hashed onto {leaf}--{spine}"
    if not m["suspects"]:            # too few slow pairs to name a link: each left as its own
        assert lone and len(lone) == len(slow), verdict
        return False, f"{rounds} rounds, {len(slow)} slow pair(s) left as their own paths"
    # Named: exit 1, every suspect holding the shaped link (beside it only its ECMP twin, which
    # carries exactly the same path sets: no pair tells them apart).
    return True, f"{rounds} rounds, named: " + " | ".join(s["text"] for s in m["suspects"])


@pytest.mark.root
@pytest.mark.parametrize("pattern", ["all", "adaptive"])
def test_a_slow_leaf_spine_link_is_named_and_nothing_else(l3_fabric, tmp_path, pattern):
    """Every sweep blames no host and names nothing but the shaped link (or its ECMP twin);
    the link is named in at least k of n sweeps (ATTEMPTS); a sweep that names nothing is one
    whose flows happened to miss the link (see above), and says so."""
    attempts, needed = ATTEMPTS[pattern]
    found: list[str] = []
    named = 0
    for i in range(attempts):
        if named >= needed or named + attempts - i < needed:
            break                    # decided either way: no sweep left can change it
        hit, what = _one_sweep(l3_fabric, tmp_path / f"res{i}", pattern)
        named += hit
        found.append(what)
    assert named >= needed, (f"{pattern}: the shaped link named in {named} of {len(found)} "
                             f"sweeps, at least {needed} of {attempts} expected", found)


@pytest.mark.root
def test_with_traced_flows_the_slow_uplink_itself_is_named(l3_fabric, tmp_path):
    """``--trace``: each pair's data connection traced from its own 5-tuple first, its
    routers named by LLDP's addresses, so the adaptive sweep knows which spine each flow
    took: the shaped uplink is named alone (not beside its ECMP twin), pinned, no host, in
    fewer rounds than all-pairs; every stored tcp.stream row keeps its route."""
    import pyarrow.parquet as pq

    from netbench.env.topology import load

    res = tmp_path / "res"
    outs, seconds = _sweep(l3_fabric, "adaptive", res, "--trace")
    n = len(l3_fabric["hosts"])
    assert [o[0] for o in outs[1:]] == [0] * (n - 1), outs
    (m,) = json.loads(outs[0][1])["matrices"]
    (path,) = res.glob("*.parquet")
    facts = json.loads(pq.read_schema(path).metadata[b"netbench_fabric"])
    stderr = outs[0][2]
    print(f"\n--trace: {facts['rounds']} rounds in {seconds:.1f} s, {len(m['cells'])} cells")
    for why in facts["why"]:
        print("  round:", why)
    print(stderr[stderr.find("tcp.stream"):])
    assert outs[0][0] == 1, outs[0]
    assert m["faulty_hosts"] == [] and "HOST" not in stderr[stderr.find("tcp.stream"):]
    # Named: the shaped uplink, pinned, never its ECMP twin (leaf1--spine2) nor another
    # leaf's link; beside it at most its own spine, where no measured flow told the two
    # apart (every flow through spine1 also crossed leaf1's uplink to it).
    (suspect,) = m["suspects"]
    assert suspect["pinned"], suspect
    assert any(_on_shaped_link(e) for e in suspect["elements"]), suspect
    assert all(_on_shaped_link(e) or e == f"switch:{SHAPED[1]}" for e in suspect["elements"])
    assert facts["rounds"] < 2 * (n - 1), facts
    # Re-probes were steered through the slow flow's spine (source ports traced until one
    # hashed there), and most took it (a miss is a flow judged where it went).
    print("steered:", facts["steered"])
    assert facts["steered"]["asked"] >= 1 and facts["steered"]["took"] >= (
        facts["steered"]["asked"] + 1) // 2, facts["steered"]
    rows = pq.read_table(path).to_pandas()
    ok = rows[(rows["status"] == "ok") & (rows["metric"] == "goodput")]
    topo = load(l3_fabric["lldp"])
    named = [topo.path_of(json.loads(r)[0], h, p)
             for r, h, p in zip(ok["route"], ok["host"], ok["peer"])]
    assert all(p is not None for p in named), [
        (r, h, p) for r, h, p, x in zip(ok["route"], ok["host"], ok["peer"], named) if x is None]
    assert ok["fair_share"].notna().all()


@pytest.mark.root
def test_an_uplink_at_85_percent_of_a_hosts_rate_is_named_by_its_traced_flows(l3_fabric,
                                                                              tmp_path):
    """Fail-slow on a real uplink: leaf1--spine1 reshaped to 85% of a host's rate (both ends;
    restored after). A traced flow alone on it reads about 0.85 of healthy, short of the
    noise-set cut only by a little, so the verdict rests on the readings of the flows that
    crossed it: the uplink is named with its deficit, no host and no other link."""
    leaf, spine = SHAPED
    ns = l3_fabric["ns"]
    i, j = l3_fabric["leaves"].index(leaf) + 1, l3_fabric["spines"].index(spine) + 1
    ends = ((ns[leaf], f"swp5{j}"), (ns[spine], f"swp{i}"))

    def shape(mbit: int) -> None:
        for name, dev in ends:
            _sh("tc", "-n", name, "qdisc", "change", "dev", dev, "root", "tbf", "rate",
                f"{mbit}mbit", "burst", "256kb", "latency", "200ms")

    shape(HOST_MBIT * 85 // 100)
    try:
        # Six hosts measure three pairs a round: the 20 healthy readings a spread of the
        # noise needs (without it only the fixed 40% cut) take more than the default 9.
        outs, seconds = _sweep(l3_fabric, "adaptive", tmp_path / "res", "--trace",
                               "--rounds", "20")
    finally:
        shape(SLOW_MBIT)
    n = len(l3_fabric["hosts"])
    assert [o[0] for o in outs[1:]] == [0] * (n - 1), outs
    import pyarrow.parquet as pq

    (m,) = json.loads(outs[0][1])["matrices"]
    verdict = outs[0][2][outs[0][2].find("tcp.stream"):]
    (path,) = (tmp_path / "res").glob("*.parquet")
    facts = json.loads(pq.read_schema(path).metadata[b"netbench_fabric"])
    print(f"\n85%: {facts['rounds']} rounds in {seconds:.1f} s", *facts["why"], verdict,
          sep="\n")
    assert m["faulty_hosts"] == [] and "HOST" not in verdict, verdict
    (suspect,) = m["suspects"]
    assert any(_on_shaped_link(e) for e in suspect["elements"]), suspect
    assert all(_on_shaped_link(e) or e == f"switch:{spine}" for e in suspect["elements"])
    assert 0.7 < suspect["of_healthy"] < 0.92, suspect
    assert outs[0][0] == 1, outs[0]
