"""rdma.*_bw threads=N: what runs on the host (the RDMA runs themselves are the VM stage's,
suites/rdma-ci.toml): several senders added up as one, threads that cancel each other on a
failure, and what a peer says about its threads checked before it is believed."""

import select
import socket
import threading
import time
from types import SimpleNamespace

import pytest

from netbench.api import PeerError
from netbench.benchmarks.rdma import (
    Inbox,
    RdmaSendBw,
    RdmaWriteBw,
    _counts,
    _endpoints_from,
    completion_curve,
    time_windows,
)
from netbench.benchmarks.rdma.plane import Clock, MergedSender, VerbsError, in_threads
from netbench.run.wire import Channel


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


def _spin_until_cancelled(own: Clock, limit: float = 10.0) -> None:
    """A loop that stops only when cancelled (bounded: a broken cancel fails, never hangs)."""
    deadline = time.monotonic() + limit
    while not own.cancelled.is_set():
        assert time.monotonic() < deadline, "never cancelled"
        time.sleep(0.01)


def test_a_failing_thread_cancels_its_siblings_and_its_own_error_is_raised():
    runner = threading.Event()
    clock = Clock(time.monotonic() + 30, runner, "WRITE")
    started = threading.Barrier(3)

    def fails(own: Clock) -> None:
        started.wait()
        raise VerbsError("WRITE: work completion RETRY_EXC_ERR")

    def spins(own: Clock) -> None:
        started.wait()
        _spin_until_cancelled(own)
        raise VerbsError("WRITE: cancelled")

    began = time.monotonic()
    with pytest.raises(VerbsError, match="RETRY_EXC_ERR"):
        in_threads(clock, [spins, fails, spins])
    assert time.monotonic() - began < 5
    assert not runner.is_set()        # the runner's own event is never set by a sibling


def test_the_runners_cancel_reaches_every_thread_even_one_made_as_it_came():
    runner = threading.Event()
    clock = Clock(time.monotonic() + 30, runner, "WRITE")
    seen = []

    def spins(own: Clock) -> None:
        _spin_until_cancelled(own)
        seen.append(own)

    timer = threading.Timer(0.2, clock.cancel)
    timer.start()
    in_threads(clock, [spins, spins, spins])
    assert len(seen) == 3
    runner.set()                      # cancelled before the split: the threads know at once
    assert all(kid.cancelled.is_set() for kid in clock.split(2))


def test_a_watch_that_fails_stops_every_thread():
    clock = Clock(time.monotonic() + 30, None, "SEND")

    def hung_up() -> None:
        raise PeerError("netbench serve at hostB closed the connection")

    with pytest.raises(PeerError, match="closed the connection"):
        in_threads(clock, [_spin_until_cancelled] * 3, watch=hung_up)


class _Plane:
    """Just enough of a data plane for _exchange: a sender is done when driven; a receiver's
    drive lasts until its count is known, its loop answering its watch as the C loop does."""

    class Receiver:
        def __init__(self) -> None:
            self.expected, self.got = None, 0

    def sender(self, side, remote, opcode, count, depth, cq_mod, stop_at=0.0, post_list=1):
        return SimpleNamespace(count=count, total_done=lambda: count, t_first=0.0,
                               t_last=1.0, stamps=[])

    def drive(self, owners, clock, what, wait_receivers=True):
        for _cq, _sender, receiver in owners:
            deadline = time.monotonic() + 10
            while wait_receivers and receiver is not None and receiver.expected is None:
                if clock.cancelled is not None and clock.cancelled.is_set():
                    raise VerbsError(f"{what}: cancelled")
                assert time.monotonic() < deadline, "the count never came"
                if clock.watch_fd >= 0 and select.select([clock.watch_fd], [], [], 0.01)[0]:
                    clock.interrupt()
            if wait_receivers and receiver is not None:
                receiver.got = receiver.expected


def _exchange(far_end, threads=3):
    near, far = socket.socketpair()
    peer = threading.Thread(target=far_end, args=(Channel(far, "us"),), daemon=True)
    peer.start()
    plane = _Plane()
    receivers = [plane.Receiver() for _ in range(threads)]
    params = {p.name: p.default for p in RdmaSendBw.params}
    params.update(iterations=100, warmup=10)
    side = SimpleNamespace(cq=None)
    try:
        timed = RdmaSendBw()._exchange(plane, [side] * threads, [None] * threads, params, True,
                                       receivers, Inbox(Channel(near, "hostB")),
                                       Clock(time.monotonic() + 20, None, "SEND"))
    finally:
        near.close()
        peer.join(5)
    return timed, receivers


def test_each_thread_learns_its_own_count_while_the_peer_sends_its_counts_late():
    """The far end says its counts only after a while (its slowest thread): every thread of
    ours keeps receiving meanwhile, then each takes its own count; ours go out once, after
    all our threads have sent."""
    ours = []

    def far_end(channel):
        time.sleep(0.3)
        channel.send({"kind": "sent", "count": 18, "counts": [5, 6, 7]})
        ours.append(channel.recv(5))

    timed, receivers = _exchange(far_end)
    assert [r.got for r in receivers] == [5, 6, 7]
    assert ours == [{"kind": "sent", "count": 330, "counts": [110, 110, 110]}]
    assert [t.count for t in timed] == [100, 100, 100]


def test_a_peer_that_hangs_up_mid_run_is_seen_whichever_threads_are_left():
    def far_end(channel):
        channel.recv(5)                  # our counts, then it is gone without its own
        channel.sock.close()

    began = time.monotonic()
    with pytest.raises(PeerError, match="hostB"):
        _exchange(far_end)
    assert time.monotonic() - began < 5


def test_only_the_split_clocks_own_their_watch():
    clock = Clock(time.monotonic() + 30, None, "SEND", interrupt=lambda: False, watch_fd=7)
    assert [(k.watch_fd, k.interrupt) for k in clock.split(3)] == [(-1, None)] * 3


def test_a_merge_of_many_long_runs_is_quick_and_exact_at_the_ends():
    senders = [_sender(float(i), 1000.0 + i, 10 ** 6, [(i + k / 1000, k) for k in
                                                       range(1, 10 ** 6, 7)])
               for i in range(8)]
    began = time.monotonic()
    merged = MergedSender(senders)
    assert time.monotonic() - began < 10
    assert merged.stamps[-1] == (1007.0, pytest.approx(8 * 10 ** 6))
    rates = time_windows(completion_curve(merged), 50)
    assert sum(rates) / 50 == pytest.approx(8e6 / 1007.0)


def test_what_a_peer_says_about_its_threads_is_checked():
    assert _counts({"count": 5}, 1, "peer") == [5]
    assert _counts({"count": 9, "counts": [4, 5]}, 2, "peer") == [4, 5]
    for bad in ({"count": 9}, {"counts": [4]}, {"counts": [4, -1]}, {"counts": [4, "5"]},
                {"counts": [True, 5]}, {"counts": "45"}):
        with pytest.raises(PeerError, match="malformed message count for threads=2"):
            _counts(bad, 2, "peer")
    with pytest.raises(PeerError, match="more than"):
        _counts({"counts": [4, 1 << 70]}, 2, "peer")
    with pytest.raises(PeerError, match="sent 1 QP endpoints for threads=2"):
        _endpoints_from({"endpoints": [{}]}, 2, "peer")
    with pytest.raises(PeerError, match="sent no QP endpoints for threads=3"):
        _endpoints_from({"endpoint": {}}, 3, "peer")
    with pytest.raises(PeerError, match="malformed QP parameters"):
        _endpoints_from({"endpoints": [{}, {}]}, 2, "peer")
