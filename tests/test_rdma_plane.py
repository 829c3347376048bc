"""The RDMA data planes on a host without RDMA hardware: the compiled extension is built where
its headers are and survives any input; the timed sender never carries the warm-up; rows say
which plane measured them and the fallback is said once per run.

The loops themselves run against a real rxe device in the VM stage (`make bench-softroce`:
rdma-ci suite on both paths, tools/softroce/faults.py, bench/rdma_vs_perftest.py --gate).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, install_plugin, netbench

from netbench import registry

HEADERS = Path("/usr/include/infiniband/verbs.h").exists()


@pytest.mark.skipif(not HEADERS, reason="no libibverbs headers (apt-get install libibverbs-dev)")
def test_compiled_plane_is_built_where_the_headers_are():
    """`pip install -e .` (make setup) must have built it: a silent pyverbs fallback on a
    machine that could build the C plane would put ~1 us per operation in every figure."""
    proc = subprocess.run([sys.executable, "-c", "import netbench.benchmarks._verbsloop as v;"
                           "print(v.WR_RDMA_WRITE, v.WR_SEND, v.WR_RDMA_READ)"],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["0", "2", "4"]     # enum ibv_wr_opcode, as pyverbs has it


FUZZ = r'''
import itertools, random
import netbench.benchmarks._verbsloop as vl
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


# --- the warm-up is never timed: rdma.py's flows against a recording data plane ------------

class _Recorder:
    """A data plane that records which senders were driven, in which order, with what count;
    the shape rdma.py sees from _verbs and _verbs_c (the hardware cannot exist here)."""

    PLANE = "compiled"

    class VerbsError(Exception):
        pass

    class e:  # noqa: N801  (pyverbs' enum module name)
        IBV_WR_RDMA_WRITE, IBV_WR_SEND, IBV_WR_RDMA_READ = 0, 2, 4

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        rec = self

        class Sender:
            def __init__(self, side, remote, opcode, count, depth, cq_mod, stop_at=0.0,
                         post_list=1):
                self.count, self.stop_at = count, stop_at
                self.done = 0

            def total_done(self):
                return self.done

        class Receiver:
            def __init__(self, side, depth, expected=None, source=None):
                self.got, self.expected = 0, expected

        self.Sender, self.Receiver = Sender, Receiver

        def drive(owners, clock, what, wait_receivers=True):
            for _cq, sender, _receiver in owners:
                if sender is not None:
                    sender.done = sender.count
                    rec.log.append(("timed" if rec.log else "first", sender.count))

        self.drive = drive

    def bandwidth(self, sender, size):
        self.measured = sender.count
        return {"bw_avg": 1.0, "bw_peak": 1.0, "msg_rate": 1.0}, [1.0]


class _Channel:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        r, w = os.pipe()
        self.sock = type("S", (), {"fileno": staticmethod(lambda: r)})()
        self._fds = (r, w)

    def send(self, message):
        self.sent.append(message)


class _Inbox:
    def __init__(self, channel, peer_sent: int) -> None:
        self.channel, self.got = channel, {}
        self.peer_sent = peer_sent

    def poll(self):
        pass

    def take(self, kind, timeout):
        return {"kind": kind, "count": self.peer_sent}


class _Side:
    cq = None


class _Clock:
    deadline = 1e18
    interrupt = None
    watch_fd = -1


@pytest.mark.parametrize("bench", ["rdma.write_bw", "rdma.send_bw"])
def test_peer_path_warmup_is_its_own_untimed_sender(bench):
    """The bug this guards: on the --peer path the timed sender posted iterations + warmup, so
    bw_avg's window held the warm-up. Now the warm-up is a sender of its own, driven first;
    the timed one carries exactly `iterations`, and the peer is told the sum."""
    b = registry.get(bench)
    params = {p.name: p.default for p in b.params}
    params.update(iterations=300, warmup=70)
    v, channel = _Recorder(), _Channel()
    receiver = v.Receiver(None, 128) if bench == "rdma.send_bw" else None
    timed = b._exchange(v, _Side(), None, params, True, receiver,
                        _Inbox(channel, peer_sent=0 if receiver is None else 0), _Clock())
    assert v.log == [("first", 70), ("timed", 300)]
    assert timed.count == 300 and timed.stop_at == 0.0
    assert channel.sent == [{"kind": "sent", "count": 370}]
    values, _ = v.bandwidth(timed, params["msg_size"])
    assert v.measured == 300


def test_duration_mode_times_only_after_the_warmup():
    b = registry.get("rdma.write_bw")
    params = {p.name: p.default for p in b.params}
    params.update(duration=2.0, warmup=50)
    v = _Recorder()
    timed = b._exchange(v, _Side(), None, params, True, None, _Inbox(_Channel(), 0),
                        _Clock())
    assert v.log[0] == ("first", 50)
    assert timed.stop_at > 0 and timed.count == 1 << 40


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
    assert all(json.loads(r["params"])["plane"] == "py" for r in rows)
    lines = [ln for ln in proc.stderr.splitlines() if "slow plane" in ln]
    assert len(lines) == 1 and "3" in lines[0], proc.stderr
