"""The RDMA data-plane interface: what a plane does, the types every plane shares, and the one
place a case's plane is chosen.

A data plane is who times the loop: ``pyverbs_plane`` (Python loops around pyverbs, the
fallback) and ``compiled_plane`` (``_verbsloop.c``, as perftest). The benchmarks in this
package see a plane only through ``DataPlane``; a new one (a GPU-initiated plane, say)
implements it and is named in ``choose``. Nothing here imports pyverbs: the benchmarks' module
stays importable, and ``netbench list`` works, where pyverbs is missing.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from netbench.api import NetbenchError, PeerError

SPIN_CHECK = 256          # look at the clock and the cancel flag every this many polls
MTU_SIZES = (256, 512, 1024, 2048, 4096)
# enum ibv_wr_opcode: the verbs ABI (libibverbs verbs.h), which both planes post.
OPCODES = {"write": 0, "send": 2, "read": 4}
PYVERBS_PLANE_NOTE = (
    "RDMA timed by the pyverbs fallback data plane (Python loops: ~1 us per operation of the "
    "interpreter's own in every figure): the C data plane was not built ({why}); install "
    "libibverbs-dev and a C compiler, then reinstall netbench (pip install -e .)")


# enum ibv_wc_status, in order: the verbs ABI (libibverbs verbs.h), stable since OFED 1.x.
WC_STATUS = (
    "SUCCESS", "LOC_LEN_ERR", "LOC_QP_OP_ERR", "LOC_EEC_OP_ERR", "LOC_PROT_ERR", "WR_FLUSH_ERR",
    "MW_BIND_ERR", "BAD_RESP_ERR", "LOC_ACCESS_ERR", "REM_INV_REQ_ERR", "REM_ACCESS_ERR",
    "REM_OP_ERR", "RETRY_EXC_ERR", "RNR_RETRY_EXC_ERR", "LOC_RDD_VIOL_ERR", "REM_INV_RD_REQ_ERR",
    "REM_ABORT_ERR", "INV_EECN_ERR", "INV_EEC_STATE_ERR", "FATAL_ERR", "RESP_TIMEOUT_ERR",
    "GENERAL_ERR",
)


class VerbsError(NetbenchError):
    """An RDMA failure, said in verbs terms."""


def wc_status_name(status: int) -> str:
    return WC_STATUS[status] if 0 <= status < len(WC_STATUS) else f"status {status}"


def pattern(size: int, seed: int) -> bytes:
    """Deterministic, position-dependent fill, so a misplaced byte cannot pass validation."""
    block = bytes((i * 131 + seed) & 0xFF for i in range(4096))
    return (block * (size // 4096 + 1))[:size]


@dataclass
class Endpoint:
    """What one side tells the other to connect its QPs (perftest's exchanged fields)."""

    qpns: list[int]
    psns: list[int]
    gid: str
    lid: int
    rkey: int
    addr: int          # where the peer writes (our receive half)
    read_addr: int     # where the peer reads from (our source half)
    size: int
    mtu: int
    link_layer: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_json(cls, data: Any, who: str) -> Endpoint:
        try:
            ep = cls(qpns=[int(q) for q in data["qpns"]], psns=[int(p) for p in data["psns"]],
                     gid=str(data["gid"]), lid=int(data["lid"]), rkey=int(data["rkey"]),
                     addr=int(data["addr"]), read_addr=int(data["read_addr"]),
                     size=int(data["size"]), mtu=int(data["mtu"]),
                     link_layer=str(data["link_layer"]))
        except (KeyError, TypeError, ValueError):
            raise PeerError(f"{who} sent malformed QP parameters") from None
        if not ep.qpns or len(ep.qpns) != len(ep.psns) or ep.mtu not in MTU_SIZES:
            raise PeerError(f"{who} sent inconsistent QP parameters")
        return ep


class Stop(Exception):
    """Raised out of a spin loop when ``Clock.interrupt`` says the peer is done."""


class Clock:
    """Deadline, cancellation and an optional interrupt check for spin loops.

    ``watch_fd`` (the control connection) lets a compiled loop return when the peer speaks or
    hangs up, so ``interrupt`` runs then; ``cancel`` also stops compiled loops in flight."""

    def __init__(self, deadline: float, cancelled: threading.Event | None, what: str,
                 interrupt: Callable[[], bool] | None = None, watch_fd: int = -1) -> None:
        self.deadline, self.cancelled, self.what = deadline, cancelled, what
        self.interrupt = interrupt
        self.watch_fd = watch_fd
        self.spins = 0
        self._running: list[Any] = []        # compiled sides with a loop that may be running
        self._children: list[Clock] = []      # split(): one a thread, cancelled with this one
        self._lock = threading.Lock()

    def split(self, n: int) -> list[Clock]:
        """A clock for each of ``n`` threads: the same deadline, cancelled with this one (and
        together, never this one: the runner's event stays the runner's). None watches the
        control connection: a thread's job sets its own ``interrupt`` and ``watch_fd``."""
        family = threading.Event()
        kids = [Clock(self.deadline, family, self.what) for _ in range(n)]
        with self._lock:
            self._children = kids
        # After they are registered: a cancel from now on reaches them through cancel(), one
        # before it through the event.
        if self.cancelled is not None and self.cancelled.is_set():
            family.set()
        return kids

    def cancel(self) -> None:
        """From any thread (the runner's cancel callback): stop whatever spins now."""
        if self.cancelled is not None:
            self.cancelled.set()
        with self._lock:
            children = list(self._children)
        for child in children:
            child.cancel()
        with self._lock:
            for side in self._running:
                side.cancel()

    def running(self, sides: list[Any]) -> None:
        with self._lock:
            self._running = list(sides)
            stop = self.cancelled is not None and self.cancelled.is_set()
        if stop:
            raise VerbsError(f"{self.what}: cancelled")

    def check(self) -> None:
        self.spins += 1
        if self.spins % SPIN_CHECK:
            return
        if self.cancelled is not None and self.cancelled.is_set():
            raise VerbsError(f"{self.what}: cancelled")
        if self.interrupt is not None and self.interrupt():
            raise Stop()
        if time.monotonic() > self.deadline:
            raise VerbsError(f"{self.what}: no progress before the deadline (peer gone, or "
                             "the link dropped?)")


WATCH_EVERY = 0.05     # seconds between a waiting thread's looks at the control connection


def in_threads(clock: Clock, jobs: Sequence[Callable[[Clock], None]],
               watch: Callable[[], None] | None = None) -> None:
    """Run each job in a thread of its own, each with its own split of ``clock``, and wait for
    all, running ``watch`` every WATCH_EVERY seconds meanwhile (the control connection: read
    by this thread alone, however many of the jobs are still running); the first failure,
    a job's or the watch's, cancels the jobs and is raised (theirs are only the cancellation
    it caused). One job runs in this thread, with ``clock`` itself."""
    if len(jobs) == 1:
        jobs[0](clock)
        return
    clocks, errors = clock.split(len(jobs)), []
    lock = threading.Lock()

    def run(job: Callable[[Clock], None], own: Clock) -> None:
        try:
            job(own)
        except BaseException as exc:          # noqa: BLE001 - handed to the caller below
            with lock:
                errors.append(exc)
            for sibling in clocks:
                sibling.cancel()

    threads = [threading.Thread(target=run, args=(job, own), daemon=True,
                                name=f"{clock.what}-{i}")
               for i, (job, own) in enumerate(zip(jobs, clocks))]
    for thread in threads:
        thread.start()
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(WATCH_EVERY / len(threads))
        if watch is not None and not errors:
            try:
                watch()
            except BaseException as exc:          # noqa: BLE001 - raised below
                with lock:
                    errors.append(exc)
                for sibling in clocks:
                    sibling.cancel()
    if errors:
        # A sibling's wait that the failure broke is a consequence, not the cause.
        causes = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (causes or errors)[0]


MERGE_POINTS = 20000     # a sender's stamps a merge keeps (every k-th, its last always)


class MergedSender:
    """Several senders that ran at once (``threads``) as one: completions added up over one
    clock (the threads share the process's), from the first post of any to the last
    completion of any; each sender's count between its stamps interpolated linearly. The
    sum is swept once over all the senders' points in time order (O(N log k), a slope and a
    level carried a sender), each sender's points first thinned to MERGE_POINTS."""

    def __init__(self, senders: Sequence[Any]) -> None:
        self.t_first = min(s.t_first for s in senders)
        self.t_last = max(s.t_last for s in senders)
        self._total = sum(s.total_done() for s in senders)
        self.stamps = merge_curves([_thinned(_curve(s)) for s in senders])

    def total_done(self) -> int:
        return self._total


def _curve(sender: Any) -> list[tuple[float, float]]:
    points = [(float(sender.t_first), 0.0), *((float(t), float(n)) for t, n in sender.stamps),
              (float(sender.t_last), float(sender.total_done()))]
    points.sort()
    return points


def _thinned(curve: list[tuple[float, float]]) -> list[tuple[float, float]]:
    if len(curve) <= MERGE_POINTS:
        return curve
    step = -(-len(curve) // MERGE_POINTS)
    return curve[::step] + ([curve[-1]] if (len(curve) - 1) % step else [])


def merge_curves(curves: Sequence[list[tuple[float, float]]]) -> list[tuple[float, float]]:
    """The sum of cumulative curves [(t, count so far), ...], each sorted by time, 0 before
    its first point and its last count after its last, linear between: its value at every
    point of any of them."""
    level = [0.0] * len(curves)        # each curve's count at its latest point passed
    since = [0.0] * len(curves)        # that point's time
    slope = [0.0] * len(curves)        # its rate from there to its next point
    total = rate = 0.0
    now: float | None = None
    out: list[tuple[float, float]] = []
    points = heapq.merge(*([(t, i, j) for j, (t, _) in enumerate(c)]
                           for i, c in enumerate(curves)))
    for t, i, j in points:
        if now is not None:
            total += rate * (t - now)
        now = t
        curve = curves[i]
        # Exact at a curve's own point: the interpolated level is replaced by its count (a
        # step where two points share a time, and no drift from adding slopes up).
        total += curve[j][1] - (level[i] + slope[i] * (t - since[i]))
        level[i], since[i] = curve[j][1], t
        nxt = curve[j + 1] if j + 1 < len(curve) else None
        new = (nxt[1] - curve[j][1]) / (nxt[0] - t) if nxt is not None and nxt[0] > t else 0.0
        rate += new - slope[i]
        slope[i] = new
        if out and out[-1][0] == t:
            out[-1] = (t, total)
        else:
            out.append((t, total))
    return out


# --- the interface ------------------------------------------------------------------------------

@runtime_checkable
class Side(Protocol):
    """One end: a device's PD, MR, CQ and RC QPs (``close`` frees all of it). The MR has two
    halves, as perftest keeps them: the source (what we send, what the peer reads) and the
    receive half (where the peer's writes and sends land, where our reads put data)."""

    cq: Any
    device: str
    port: int
    emulated: bool

    def endpoint(self) -> Endpoint: ...
    def connect(self, remote: Endpoint) -> int: ...
    def fill(self, data: bytes) -> None: ...
    def crc(self) -> int: ...
    def close(self) -> None: ...


class Sender(Protocol):
    """Posts ``iterations`` WRs per QP, at most ``depth`` outstanding, signalling every
    ``cq_mod``th, and records when completions came: ``stamps`` (time, completions so far),
    ``t_first`` at the first post, ``t_last`` at the last completion, in the plane's
    ``timer``."""

    stamps: Sequence[tuple[float, int]]
    t_first: float
    t_last: float

    def total_done(self) -> int: ...


class Receiver(Protocol):
    """Keeps receive WRs posted and counts the messages that landed (``got``)."""

    got: int


@runtime_checkable
class DataPlane(Protocol):
    name: str                 # what data_plane=auto resolved to: stored in the row
    timer: str                # the clock its timestamps come from: stored in the row
    failures: tuple[type[BaseException], ...]   # what its verbs calls raise, beside VerbsError

    def side(self, params: Mapping[str, Any], depth: int, role_device: str = "") -> Side: ...

    def loopback_pair(self, params: Mapping[str, Any],
                      depth: int) -> AbstractContextManager[tuple[Side, Side]]: ...

    def sender(self, side: Side, remote: Endpoint | None, opcode: int, iterations: int,
               depth: int, cq_mod: int, stop_at: float = 0.0, post_list: int = 1) -> Sender: ...

    def receiver(self, side: Side, depth: int, expected: int | None = None,
                 source: Sender | None = None) -> Receiver: ...

    def drive(self, owners: list[tuple[Any, Sender | None, Receiver | None]], clock: Clock,
              what: str, wait_receivers: bool = True) -> None:
        """Run the senders and receivers of one or two sides (their CQs) until they finish;
        ``wait_receivers=False`` returns once the senders are done."""

    def pingpong(self, side: Side, remote: Endpoint | None, op: str,
                 two_processes: bool = True) -> Any: ...

    def pingpong_client(self, me: Any, peer: Any, warmup: int, iterations: int, clock: Clock,
                        duration: float = 0.0) -> list[int]:
        """Round trips in ns; with ``peer`` (loopback) this thread also plays the far end."""

    def pingpong_server(self, me: Any, count: int, clock: Clock) -> None: ...

    def read_latency(self, side: Side, remote: Endpoint, warmup: int, iterations: int,
                     clock: Clock, duration: float = 0.0) -> list[int]:
        """The full round trip of one RDMA READ at a time, in ns (ib_read_lat)."""
