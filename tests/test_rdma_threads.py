"""rdma.*_bw threads=N: what runs on the host (the RDMA runs themselves are the VM stage's,
suites/rdma-ci.toml): several senders added up as one, threads that cancel each other on a
failure, and what a peer says about its threads checked before it is believed."""

import threading
import time
from types import SimpleNamespace

import pytest

from netbench.api import PeerError
from netbench.benchmarks.rdma import (
    RdmaWriteBw,
    _counts,
    _endpoints_from,
    completion_curve,
    time_windows,
)
from netbench.benchmarks.rdma.plane import Clock, MergedSender, VerbsError, in_threads


def _sender(t_first, t_last, total, stamps):
    return SimpleNamespace(t_first=t_first, t_last=t_last, stamps=stamps,
                           total_done=lambda: total)


def test_two_senders_add_up_over_their_common_span():
    a = _sender(0.0, 10.0, 100, [(5.0, 50)])
    b = _sender(2.0, 12.0, 300, [(7.0, 150)])
    merged = MergedSender([a, b])
    assert (merged.t_first, merged.t_last, merged.total_done()) == (0.0, 12.0, 400)
    counts = dict(merged.stamps)
    assert counts[2.0] == pytest.approx(20.0)            # a at 2 s, b not yet started
    assert counts[10.0] == pytest.approx(100 + 240)       # a done, b 3/5 of its second half
    assert counts[12.0] == pytest.approx(400.0)
    assert all(n2 >= n1 for (_, n1), (_, n2) in zip(merged.stamps, merged.stamps[1:]))
    # The equal-time windows of the merged run average to its rate exactly: a row's samples
    # keep agreeing with its value (total / span), as for one sender.
    rates = time_windows(completion_curve(merged), 6)
    assert sum(rates) / len(rates) == pytest.approx(400 / 12.0)


def test_the_benchmark_declares_threads_and_the_far_end_memory_grows_with_them():
    bench = RdmaWriteBw()
    (threads,) = [p for p in bench.params if p.name == "threads"]
    assert (threads.default, threads.minimum, threads.maximum) == (1, 1, 64)
    params = {"msg_size": 65536, "mem": "host", "threads": 4}
    assert bench.server_memory(params) == 4 * 2 * 65536


def test_a_failing_thread_cancels_its_siblings_and_its_own_error_is_raised():
    clock = Clock(time.monotonic() + 30, None, "WRITE")
    started = threading.Barrier(3)

    def fails(own: Clock) -> None:
        started.wait()
        raise VerbsError("WRITE: work completion RETRY_EXC_ERR")

    def spins(own: Clock) -> None:       # a loop that stops only when cancelled
        started.wait()
        while not own.cancelled.is_set():
            time.sleep(0.01)
        raise VerbsError("WRITE: cancelled")

    began = time.monotonic()
    with pytest.raises(VerbsError, match="RETRY_EXC_ERR"):
        in_threads(clock, [spins, fails, spins])
    assert time.monotonic() - began < 5
    assert clock.cancelled is None          # the runner's own event is never set by a sibling


def test_the_runners_cancel_reaches_every_thread():
    runner = threading.Event()
    clock = Clock(time.monotonic() + 30, runner, "WRITE")
    seen = []

    def spins(own: Clock) -> None:
        while not own.cancelled.is_set():
            time.sleep(0.01)
        seen.append(own)

    timer = threading.Timer(0.2, clock.cancel)
    timer.start()
    in_threads(clock, [spins, spins, spins])
    assert len(seen) == 3


def test_only_the_first_thread_reads_the_control_connection():
    clock = Clock(time.monotonic() + 30, None, "SEND", interrupt=lambda: False, watch_fd=7)
    kids = clock.split(3)
    assert [k.watch_fd for k in kids] == [7, -1, -1]
    assert kids[0].interrupt is clock.interrupt and kids[1].interrupt is None


def test_what_a_peer_says_about_its_threads_is_checked():
    assert _counts({"count": 5}, 1, "peer") == [5]
    assert _counts({"count": 9, "counts": [4, 5]}, 2, "peer") == [4, 5]
    for bad in ({"count": 9}, {"counts": [4]}, {"counts": [4, -1]}, {"counts": [4, "5"]},
                {"counts": [True, 5]}, {"counts": "45"}):
        with pytest.raises(PeerError, match="malformed message count for threads=2"):
            _counts(bad, 2, "peer")
    with pytest.raises(PeerError, match="sent 1 QP endpoints for threads=2"):
        _endpoints_from({"endpoints": [{}]}, 2, "peer")
    with pytest.raises(PeerError, match="sent no QP endpoints for threads=3"):
        _endpoints_from({"endpoint": {}}, 3, "peer")
    with pytest.raises(PeerError, match="malformed QP parameters"):
        _endpoints_from({"endpoints": [{}, {}]}, 2, "peer")
