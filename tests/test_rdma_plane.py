"""The RDMA data planes on a host without RDMA hardware: the compiled extension is built where
its headers are and survives any input; the timed sender never carries the warm-up; rows say
which plane measured them and the fallback is said once per run.

The loops themselves run against a real rxe device in the VM stage (`make bench-softroce`:
rdma-ci suite on both paths, tools/softroce/faults.py, bench/rdma_vs_perftest.py --gate).
"""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import textwrap
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, install_plugin, netbench

from netbench import registry
from netbench.benchmarks import rdma

HEADERS = Path("/usr/include/infiniband/verbs.h").exists()


@pytest.mark.skipif(not HEADERS, reason="no libibverbs headers (apt-get install libibverbs-dev)")
def test_compiled_plane_is_built_where_the_headers_are():
    """`pip install -e .` (make setup) must have built it: a silent pyverbs fallback on a
    machine that could build the C plane would put ~1 us per operation in every figure."""
    proc = subprocess.run([sys.executable, "-c", "import netbench.benchmarks.rdma._verbsloop as v;"
                           "print(v.WR_RDMA_WRITE, v.WR_SEND, v.WR_RDMA_READ)"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "2", "4"]     # enum ibv_wr_opcode, as pyverbs has it


FUZZ = r'''
import itertools, random
import netbench.benchmarks.rdma._verbsloop as vl
random.seed(7)
values = [None, -1, 0, 1, 2**31, 2**63, -2**63, 2**70, 1.5, float("nan"), "x", b"", b"\0" * 16,
          [], [(1, 2)], (), object()]
closed = vl.Side.__new__(vl.Side)
calls = [
    lambda *a: vl.Side(*a), lambda *a: closed.connect(*a), lambda *a: closed.arm_sender(*a),
    lambda *a: closed.arm_receiver(*a), lambda *a: closed.arm_pingpong(*a),
    lambda *a: closed.write(*a), lambda *a: closed.read(*a), lambda *a: closed.set_expected(*a),
    lambda *a: vl.drive(*a), lambda *a: vl.pingpong(*a), lambda *a: vl.pingpong_serve(*a),
    lambda *a: vl.read_latency(*a), lambda *a: closed.sender_result(*a),
]
seen = 0
for call in calls:
    for n in range(0, 10):
        for _ in range(40):
            args = [random.choice(values) for _ in range(n)]
            if n and random.random() < 0.3:
                args[0] = closed if call is not calls[0] else "rxe9"
            try:
                call(*args)
            except (vl.Error, ValueError, TypeError, OverflowError, MemoryError):
                seen += 1
closed.close(); closed.close(); closed.cancel()
print("survived", seen)
'''


@pytest.mark.skipif(not HEADERS, reason="no libibverbs headers (apt-get install libibverbs-dev)")
def test_compiled_plane_survives_any_input():
    """Random arguments to every entry point of the C module: exceptions, never a crash (the
    fuzz runs in a child so a segfault fails the test instead of the session)."""
    proc = subprocess.run([sys.executable, "-c", FUZZ], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0, f"rc {proc.returncode}: {proc.stderr[-2000:]}"
    assert proc.stdout.startswith("survived")


# --- rdma.py's flows against a recording data plane --------------------------------------

def _steady(count: int, t0: float = 100.0, per: float = 1e-4, every: int = 16,
            stall: tuple[int, float] | None = None) -> tuple[float, float, list]:
    """A sender's timeline: (t_first, t_last, stamps), a completion stamp every ``every``
    messages ``per`` seconds apart each, and ``stall`` = (after this many done, seconds) of
    nothing at all in the middle."""
    t, stamps = t0, []
    for n in range(every, count + every, every):
        n = min(n, count)
        t += (n - (stamps[-1][1] if stamps else 0)) * per
        if stall and (stamps[-1][1] if stamps else 0) < stall[0] <= n:
            t += stall[1]
        stamps.append((t, n))
    return t0, t, stamps


class _Recorder:
    """A data plane that records which senders were driven, in which order, with what count,
    and gives each the completion timeline ``timelines`` says (by the order senders are
    driven; the rest run steadily): a ``DataPlane`` as the benchmarks see one (the hardware
    cannot exist here)."""

    name, timer = "compiled", "tsc"

    class Failure(Exception):
        pass

    failures = (Failure,)

    class _Side:
        cq, device, port, emulated = None, "fake0", 1, True

        def endpoint(self):
            return type("Ep", (), {"to_json": lambda self: {"qpn": 1}})()

        def fill(self, data):
            pass

        def connect(self, remote):
            return 0

        def crc(self):
            return 0

        def close(self):
            pass

    def __init__(self, timelines=None) -> None:
        self.log: list[tuple[str, int]] = []
        self.timelines = list(timelines or [])
        rec = self

        class Sender:
            def __init__(self, side, remote, opcode, iterations, depth, cq_mod, stop_at=0.0,
                         post_list=1):
                self.count, self.stop_at = iterations, stop_at
                self.done, self.t_first, self.t_last, self.stamps = 0, 0.0, 0.0, []

            def total_done(self):
                return self.done

        class Receiver:
            def __init__(self, side, depth, expected=None, source=None):
                self.got, self.expected = 0, expected

        self.sender, self.receiver = Sender, Receiver

        def drive(owners, clock, what, wait_receivers=True):
            for _cq, sender, _receiver in owners:
                if sender is not None:
                    rec.log.append(("timed" if rec.log else "first", sender.count))
                    made = rec.timelines.pop(0) if rec.timelines else None
                    steady = min(sender.count, 10_000)      # duration mode: 2**40
                    done, (t0, t1, stamps) = made if made else (steady, _steady(steady))
                    sender.done, sender.t_first, sender.t_last = done, t0, t1
                    sender.stamps = stamps

        self.drive = drive

    @contextmanager
    def loopback_pair(self, params, depth):
        yield self._Side(), self._Side()

    def side(self, params, depth, role_device=""):
        return self._Side()

    def pingpong(self, side, remote, op, two_processes=True):
        raise NotImplementedError

    def pingpong_client(self, me, peer, warmup, iterations, clock, duration=0.0):
        raise NotImplementedError

    def pingpong_server(self, me, count, clock):
        raise NotImplementedError

    def read_latency(self, side, remote, warmup, iterations, clock, duration=0.0):
        raise NotImplementedError


def test_every_data_plane_implements_the_interface():
    """Both planes and the recorder the tests drive the benchmarks with: every member of
    DataPlane, with the interface's parameters (a plane that drifted fails here, not in the
    VM)."""
    import inspect

    from netbench.benchmarks.rdma.plane import DataPlane

    planes = [_Recorder()]
    for module in ("pyverbs_plane", "compiled_plane"):
        try:
            planes.append(__import__(f"netbench.benchmarks.rdma.{module}",
                                     fromlist=["PLANE"]).PLANE)
        except ImportError:
            pass            # pyverbs or the C plane not built here: test_packages says so
    members = [m for m in dir(DataPlane) if not m.startswith("_")]
    for plane in planes:
        assert isinstance(plane, DataPlane), plane
        for member in members:
            want = getattr(DataPlane, member)
            if not callable(want):
                continue
            have = inspect.signature(getattr(plane, member))
            expect = [p for p in inspect.signature(want).parameters if p != "self"]
            assert list(have.parameters)[:len(expect)] == expect, (plane, member, have)
    assert {p.name for p in planes} >= {"compiled"}


def test_the_shared_opcodes_are_the_verbs_abi():
    e = pytest.importorskip("pyverbs.enums")
    from netbench.benchmarks.rdma.plane import OPCODES

    assert OPCODES == {"write": e.IBV_WR_RDMA_WRITE, "send": e.IBV_WR_SEND,
                       "read": e.IBV_WR_RDMA_READ}


# What a far end's QPs look like on the wire (the fields perftest exchanges).
ENDPOINT = {"qpns": [2], "psns": [7], "gid": "::ffff:127.0.0.1", "lid": 0, "rkey": 1,
            "addr": 4096, "read_addr": 0, "size": 4096, "mtu": 1024, "link_layer": "Ethernet"}


class _Channel:
    """A control channel: what is sent is kept; what is queued is received, and readable to
    select() (a socket pair carries a byte per queued message)."""

    peer_name = "peer"

    def __init__(self, *incoming: dict[str, Any]) -> None:
        self.sent: list[dict[str, Any]] = []
        self.sock, self._w = socket.socketpair()
        self._queue: list[dict[str, Any]] = []
        for message in incoming:
            self.queue(message)

    def queue(self, message):
        self._queue.append(message)
        self._w.send(b"m")

    def send(self, message):
        self.sent.append(json.loads(json.dumps(message)))     # what the wire carries

    def recv(self, timeout):
        self.sock.recv(1)
        return self._queue.pop(0)

    def expect(self, timeout):
        return {"ok": True}


class _Inbox:
    def __init__(self, channel, peer_sent: int) -> None:
        self.channel, self.got = channel, {}
        self.peer_sent = peer_sent

    def poll(self):
        pass

    def send(self, message):
        self.channel.send(message)

    def take(self, kind, timeout):
        return {"kind": kind, "count": self.peer_sent}


class _Side:
    cq = None


class _Clock:
    deadline = 1e18
    interrupt = None
    watch_fd = -1


def _params(bench: str, **kw: Any) -> dict[str, Any]:
    params = {p.name: p.default for p in registry.get(bench).params}
    params.update(kw)
    return params


@pytest.mark.parametrize("bench", ["rdma.write_bw", "rdma.send_bw"])
def test_peer_path_warmup_is_its_own_untimed_sender(bench):
    """The bug this guards: on the --peer path the timed sender posted iterations + warmup, so
    bw_avg's window held the warm-up. Now the warm-up is a sender of its own, driven first;
    the timed one carries exactly `iterations`, and the peer is told the sum."""
    b = registry.get(bench)
    params = _params(bench, iterations=300, warmup=70)
    v, channel = _Recorder(), _Channel()
    receiver = v.receiver(None, 128) if bench == "rdma.send_bw" else None
    (timed,) = b._exchange(v, [_Side()], [None], params, True, [receiver],
                           _Inbox(channel, peer_sent=0 if receiver is None else 0), _Clock())
    assert v.log == [("first", 70), ("timed", 300)]
    assert timed.count == 300 and timed.stop_at == 0.0
    assert channel.sent == [{"kind": "sent", "count": 370, "counts": [370]}]
    values, _ = b._measure(v, timed, params)
    assert values["msg_rate"] == pytest.approx(300 / (timed.t_last - timed.t_first) / 1e6)


def test_duration_mode_times_only_after_the_warmup():
    b = registry.get("rdma.write_bw")
    params = _params("rdma.write_bw", duration=2.0, warmup=50)
    v = _Recorder()
    (timed,) = b._exchange(v, [_Side()], [None], params, True, [None], _Inbox(_Channel(), 0),
                           _Clock())
    assert v.log[0] == ("first", 50)
    assert timed.stop_at > 0 and timed.count == 1 << 40


# --- window samples average to the headline, by construction --------------------------------
# The stored samples of bw_avg and msg_rate are equal-time windows, so their plain mean is the
# row's value however uneven the run. The bug this guards: equal-byte windows (equal shares of
# the completions) average harmonically to the headline, so one stall put their arithmetic
# mean 30% above the value (rdma.write_bw 4 KiB through serve on a loaded CI machine: 0.1955
# vs 0.1509 Gbit/s), and bidirectional runs summed windows of different time spans.

def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs)


def _agrees(values: dict[str, float], samples: dict[str, list[float]]) -> None:
    for metric in ("bw_avg", "msg_rate"):
        assert len(samples[metric]) >= 10, samples
        assert _mean(samples[metric]) == pytest.approx(values[metric], rel=1e-9), metric


STALLED = (300, _steady(300, every=16, stall=(150, 0.5)))   # a 0.5 s stall in a 30 ms run


def test_a_stall_leaves_the_windows_mean_the_value_loopback():
    b = registry.get("rdma.write_bw")
    params = _params("rdma.write_bw", iterations=300, tx_depth=16, cq_mod=4, msg_size=4096)
    values, samples, _ = b._run_loopback(_Recorder([STALLED]), params, _Clock())
    _agrees(values, samples)
    t0, t1, _ = STALLED[1]
    assert values["bw_avg"] == pytest.approx(300 * 4096 * 8 / (t1 - t0) / 1e9)
    # The stall is in the samples (windows of next to nothing), and the peak is the fast part.
    assert min(samples["bw_avg"]) < 0.05 * max(samples["bw_avg"])
    assert values["bw_peak"] > 10 * values["bw_avg"]


def test_bidirectional_windows_sum_to_the_value_whatever_each_direction_did():
    """Duration mode: the two directions complete different counts over different spans (so
    a different number of windows each), one stalls early and the other late."""
    b = registry.get("rdma.write_bw")
    params = _params("rdma.write_bw", duration=1.0, tx_depth=16, cq_mod=4, msg_size=65536,
                     bidirectional=True, qps=2)
    ours = (1000, _steady(1000, t0=5.0, per=2e-4, stall=(100, 0.3)))
    theirs = (640, _steady(640, t0=5.01, per=3e-4, every=32, stall=(600, 0.05)))
    values, samples, _ = b._run_loopback(_Recorder([ours, theirs]), params, _Clock())
    _agrees(values, samples)
    assert len(samples["bw_avg"]) == 640 // 32          # the fewer of the two directions'


def _serve(bench: str, params: dict[str, Any], timeline: tuple, client_sent: int,
           monkeypatch) -> dict[str, Any]:
    """The far end's side of a bidirectional case, run for real on the fake plane: its
    report."""
    monkeypatch.setattr(rdma, "choose", lambda p: (_Recorder([timeline]), ""))
    channel = _Channel({"endpoint": ENDPOINT}, {"kind": "sent", "count": client_sent})
    session = type("S", (), {"channel": channel, "client_name": "client", "device": ""})()
    registry.get(bench).serve(params, session)
    return next(m for m in channel.sent if m.get("kind") == "report")


def _client(bench: str, params: dict[str, Any], timeline: tuple, far: dict[str, Any],
            far_sent: int) -> tuple[dict[str, float], dict[str, list[float]]]:
    channel = _Channel({"kind": "sent", "count": far_sent}, far)
    session = type("S", (), {
        "channel": channel, "peer_name": "far", "close": lambda self: None,
        "run_remote": lambda self, name, p, timeout: {"endpoint": ENDPOINT}})()
    ctx = type("C", (), {"connect": lambda self: session})()
    values, samples, _ = registry.get(bench)._run_remote(_Recorder([timeline]), params, ctx,
                                                         _Clock())
    return values, samples


def test_a_stall_at_the_far_end_leaves_the_windows_mean_the_value(monkeypatch):
    """Through `netbench serve`: the far end reports its own equal-time windows (bounded), the
    client stalls elsewhere, and the stored sums still average to the row's value."""
    bench = "rdma.write_bw"
    params = _params(bench, iterations=400, tx_depth=16, cq_mod=4, msg_size=4096,
                     bidirectional=True, qps=2)
    far = _serve(bench, params, (800, _steady(800, t0=7.0, stall=(700, 2.0))), 800,
                 monkeypatch)
    assert 10 <= len(far["windows"]) <= rdma.WINDOWS
    assert _mean(far["windows"]) == pytest.approx(far["bw_avg"], rel=1e-9)
    values, samples = _client(bench, params, (800, _steady(800, stall=(40, 0.7))), far, 800)
    _agrees(values, samples)
    assert values["bw_avg"] == pytest.approx(
        far["bw_avg"] + 800 * 4096 * 8 / (_steady(800, stall=(40, 0.7))[1] - 100.0) / 1e9)


def test_one_way_through_serve_stalled_agrees(monkeypatch):
    bench = "rdma.write_bw"
    params = _params(bench, iterations=300, tx_depth=16, cq_mod=4, msg_size=4096)
    values, samples = _client(bench, params, STALLED, {"kind": "report", "crc": 0}, 0)
    _agrees(values, samples)


@pytest.mark.parametrize("windows", [
    None,                                   # an older far end: none, or the equal-byte kind
    "rates",
    [],
    [1.0] * (rdma.MAX_WINDOWS + 1),         # beyond the bound
    [1.0, float("nan"), 1.0],
    [1.0, -1.0, 1.0],
    [1.0, True, 1.0],
    [1.0, "1", 1.0],
    [2.0, 3.0, 9.0],                        # does not average to the far end's own bw_avg
])
def test_far_windows_that_do_not_add_up_leave_no_samples(windows, monkeypatch):
    """Nothing off the wire is trusted: far-end windows that are not this version's (their
    mean the far end's bw_avg), not numbers or not bounded give a row with its value and no
    samples, never samples that disagree with it."""
    bench = "rdma.write_bw"
    params = _params(bench, iterations=300, tx_depth=16, cq_mod=4, msg_size=4096,
                     bidirectional=True)
    far = _serve(bench, params, (300, _steady(300)), 300, monkeypatch)
    good = far.pop("windows")
    if windows == "rates":
        far["rates"] = good[::-1][:-3]
    elif windows is not None:
        far["windows"] = windows
    values, samples = _client(bench, params, STALLED, far, 300)
    assert samples == {"bw_avg": [], "msg_rate": []}
    assert values["bw_avg"] > far["bw_avg"] > 0


def test_time_windows_mean_is_the_curve_rate_for_any_curve():
    """The pure functions under it, on random uneven curves (stalls, bursts, repeated stamps,
    stamps finer or coarser than the windows): every window >= 0, the mean exact, and
    re-cutting into another count keeps it."""
    rng = random.Random(20)
    for _ in range(500):
        t, n, curve = rng.uniform(0, 1e4), 0.0, []
        curve.append((t, n))
        for _ in range(rng.randint(1, 80)):
            t += rng.choice([0.0, 1e-4, 1e-3, 3.0]) * rng.random()
            n += rng.randint(0, 32)
            curve.append((t, n))
        if n == 0 or t == curve[0][0]:
            continue
        k = rng.randint(1, 60)
        windows = rdma.time_windows(curve, k)
        assert len(windows) == k and min(windows) >= 0
        assert _mean(windows) == pytest.approx(n / (t - curve[0][0]), rel=1e-9)
        k2 = rng.randint(1, 60)
        again = rdma.rebin(windows, k2)
        assert len(again) == k2 and _mean(again) == pytest.approx(_mean(windows), rel=1e-9)


def _param(bench: str, name: str) -> Any:
    return next(p for p in registry.get(bench).params if p.name == name)


def test_latency_defaults_inline_as_perftest():
    assert _param("rdma.write_lat", "inline_size").default == 220
    assert _param("rdma.send_lat", "inline_size").default == 236
    assert _param("rdma.read_lat", "inline_size").default == 0
    assert _param("rdma.write_bw", "data_plane").choices == ("auto", "compiled", "pyverbs")


# --- rows say what measured them; the fallback is one line per run ----------------------------

PLUGIN = '''
from netbench.api import Benchmark, Measurement, Metric, Param


class Planes(Benchmark):
    name = "demo.plane"
    transport = "none"
    metrics = (Metric("value", "x", "higher"),)
    params = (Param("plane", "choice", "auto", "who measures", choices=("auto", "c", "py")),
              Param("n", "int", 1, "a sweep", sweep=True))

    def run(self, case, ctx):
        return Measurement({"value": 1.0}, resolved={"plane": "py"},
                           fallback="timed by the slow plane: build the fast one")
'''


def test_resolved_params_are_stored_and_the_fallback_said_once(tmp_path):
    folder = install_plugin(tmp_path, textwrap.dedent(PLUGIN), {"demo.plane": "demo_plugin:Planes"})
    env = dict(os.environ, PYTHONPATH=folder)
    proc = netbench("run", "demo.plane", "-p", "n=1,2,3", "--json", "--results",
                    str(tmp_path / "r"), env=env)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert len(rows) == 3
    # The case as planned (its identity), what auto became beside it.
    assert all(json.loads(r["params"])["plane"] == "auto" for r in rows)
    assert all(json.loads(r["resolved"]) == {"plane": "py"} for r in rows)
    lines = [ln for ln in proc.stderr.splitlines() if "slow plane" in ln]
    assert len(lines) == 1 and "3" in lines[0], proc.stderr
