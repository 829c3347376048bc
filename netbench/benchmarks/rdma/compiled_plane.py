"""The compiled RDMA data plane: ``_verbsloop.c``'s loops behind the names rdma.py uses.

pyverbs still does the discovery (device, port state, link layer, GID table and type, device
limits, ``Side._discover``) and every clear error that comes with it; the PD, MR, CQ and QPs
the loops drive belong to the C module, because its loops need their raw pointers. Importing
this module raises ImportError where the extension was not built (no compiler, or no
libibverbs headers); ``choice.choose`` then falls back to ``pyverbs_plane``.
"""

from __future__ import annotations

import random
import socket
import time
import zlib
from array import array
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
from typing import Any

from . import _verbsloop as vl
from . import pyverbs_plane as _verbs
from .plane import Clock, Endpoint, Stop, VerbsError
from .pyverbs_plane import MTU_ENUM, GpuBuffer, PyverbsError, SkipCase, e

TIMER = vl.TIMER          # the loops' timestamps: the CPU's cycle counter, calibrated


class FastSide(_verbs.Side):
    """A side whose data-plane objects are the C module's (``self.c``)."""

    c: Any = None

    def _create(self, dev: Any) -> None:
        ctx, self.ctx = self.ctx, None
        ctx.close()                      # pyverbs' context served discovery; C opens its own
        fd = -1
        if self.mem == "gpu":
            self.memory = GpuBuffer(None, 2 * self.size, self.device, register=False)
            fd = self.memory.fd
        try:
            self.c = vl.Side(self.device, self.port, self.num_qps, self.depth, self.size,
                             self.inline, fd)
        except vl.Error as exc:
            text = str(exc)
            if fd >= 0 and "dma-buf" in text:
                raise SkipCase(f"{self.device} cannot register GPU memory through dma-buf "
                               f"({text}); needs a NIC and driver with dma-buf MRs (mlx5 on "
                               "kernel >= 5.12; rxe and siw have none)") from None
            if "memory registration" in text:
                text += f"; {_verbs._memlock_hint()}"
            raise VerbsError(text) from None
        self.qps = list(self.c.qp_nums)  # QP numbers: len() is the QP count, as for pyverbs
        self.psns = [random.getrandbits(24) for _ in self.qps]

    def endpoint(self) -> Endpoint:
        base = self.c.base
        return Endpoint(qpns=list(self.qps), psns=list(self.psns), gid=self.gid, lid=self.lid,
                        rkey=self.c.rkey, addr=base + self.size, read_addr=base,
                        size=self.size, mtu=self.mtu_request or self.active_mtu,
                        link_layer=self.link_layer)

    def connect(self, remote: Endpoint) -> int:
        mtu = self._path_mtu(remote)
        dgid = socket.inet_pton(socket.AF_INET6, remote.gid) if \
            self.link_layer == "Ethernet" else None
        try:
            self.c.connect([(q, p) for q, p in zip(remote.qpns, remote.psns)], self.psns,
                           dgid, remote.lid, int(MTU_ENUM[mtu]), self.gid_index,
                           self.max_rd_atomic, self.port)
        except (vl.Error, ValueError, OverflowError) as exc:
            raise VerbsError(str(exc)) from None
        return mtu

    def fill(self, data: bytes) -> None:
        if self.mem == "gpu":
            self.memory.write(data)
        else:
            self.c.write(0, data)

    def crc(self) -> int:
        data = self.memory.read(self.size, self.size) if self.mem == "gpu" else \
            self.c.read(self.size, self.size)
        return zlib.crc32(data)

    def close(self) -> None:
        if self.c is not None:
            try:
                self.c.close()
            except vl.Error:             # a loop still running: the object frees it later
                pass
            self.c = None
        if self.memory is not None:
            self.memory.close()
            self.memory = None
        self.qps = []
        super().close()


def _deadline_ns(clock: Clock) -> int:
    return vl.now_ns() + int(max(clock.deadline - time.monotonic(), 0.0) * 1e9)


def _run(clock: Clock, sides: list[Any], what: str, call: Any, *args: Any) -> Any:
    """One compiled loop, with cancel reaching it and its errors said in verbs terms."""
    clock.running(sides)
    try:
        return call(*args)
    except vl.Cancelled:
        raise VerbsError(f"{what}: cancelled") from None
    except vl.Timeout as exc:
        raise VerbsError(f"{what}: {exc}") from None
    except (vl.Error, ValueError, OverflowError) as exc:
        raise VerbsError(f"{what}: {exc}") from None
    finally:
        clock.running([])


# --- bandwidth ---------------------------------------------------------------------------------

class Sender:
    """The C sender of one side: ``iterations`` WRs per QP, ``depth`` outstanding, every
    ``cq_mod``th signalled, chains of ``post_list`` per doorbell; completion stamps kept in C."""

    def __init__(self, side: FastSide, remote: Endpoint | None, opcode: int, iterations: int,
                 depth: int, cq_mod: int, stop_at: float = 0.0, post_list: int = 1) -> None:
        self.side, self.depth = side, depth
        reading = opcode == e.IBV_WR_RDMA_READ
        raddr = 0 if remote is None or opcode == e.IBV_WR_SEND else \
            (remote.read_addr if reading else remote.addr)
        stop_ns = vl.now_ns() + int((stop_at - time.perf_counter()) * 1e9) if stop_at else 0
        side.c.arm_sender(int(opcode), raddr, remote.rkey if remote else 0, iterations, depth,
                          cq_mod, post_list, bool(side.inline and side.size <= side.inline),
                          max(stop_ns, 1) if stop_at else 0)
        self._result: tuple[float, float, int, list[tuple[float, int]]] | None = None

    def snapshot(self) -> None:
        t_first, t_last, total, raw = self.side.c.sender_result()
        flat = array("q", raw)
        stamps = [(flat[i] / 1e9, flat[i + 1]) for i in range(0, len(flat), 2)]
        self._result = (t_first / 1e9, t_last / 1e9, total, stamps)

    def total_done(self) -> int:
        return self._result[2] if self._result else self.side.c.sent

    @property
    def t_first(self) -> float:
        return self._result[0] if self._result else 0.0

    @property
    def t_last(self) -> float:
        return self._result[1] if self._result else 0.0

    @property
    def stamps(self) -> list[tuple[float, int]]:
        return self._result[3] if self._result else []


class Receiver:
    """The C receiver of one side: keeps receive WRs posted and counts SEND messages."""

    def __init__(self, side: FastSide, depth: int, expected: int | None = None,
                 source: Sender | None = None) -> None:
        self.side, self._expected = side, expected
        side.c.arm_receiver(depth, -1 if expected is None else expected,
                            source.side.c if source is not None else None)

    @property
    def got(self) -> int:
        return self.side.c.got

    @property
    def expected(self) -> int | None:
        return self._expected

    @expected.setter
    def expected(self, count: int | None) -> None:
        self._expected = count
        self.side.c.set_expected(-1 if count is None else int(count))


def drive(owners: list[tuple[Any, Sender | None, Receiver | None]], clock: Clock, what: str,
          wait_receivers: bool = True) -> None:
    """Run the senders and receivers of one or two sides in C until they finish. When the
    control connection speaks (``clock.watch_fd``) the loop returns, ``clock.interrupt`` reads
    it, and the loop goes on."""
    sides: list[Any] = []
    senders = []
    for _cq, sender, receiver in owners:
        for part in (sender, receiver):
            if part is not None and part.side.c not in sides:
                sides.append(part.side.c)
        if sender is not None:
            senders.append(sender)
    if not sides:
        return
    deadline = _deadline_ns(clock)
    while _run(clock, sides, what, vl.drive, tuple(sides), deadline, clock.watch_fd,
               wait_receivers) == vl.WATCH:
        if clock.interrupt is not None and clock.interrupt():
            raise Stop()
    for sender in senders:
        sender.snapshot()


# --- latency -----------------------------------------------------------------------------------

class PingPong:
    """One side of a write or send ping-pong, armed in C."""

    def __init__(self, side: FastSide, remote: Endpoint | None, op: str,
                 two_processes: bool = True) -> None:
        self.side, self.op = side, op
        # Two processes: perftest's own pacing (write: every post signalled and its completion
        # awaited before the reply; send: one in cq_mod). One thread playing both ends (the
        # loopback) cannot overlap the two, so it reaps lazily, outside the timed window.
        sig_every = (1 if op == "write" else 100) if two_processes else 0
        side.c.arm_pingpong(op == "send", remote.addr if remote is not None and op == "write"
                            else 0, remote.rkey if remote is not None else 0,
                            bool(side.inline and side.size <= side.inline), sig_every)


def _rtts(raw: bytes) -> list[int]:
    return array("q", raw).tolist()


def pingpong_client(me: PingPong, peer: PingPong | None, warmup: int, iterations: int,
                    clock: Clock, duration: float = 0.0) -> list[int]:
    """RTTs in ns. With ``peer`` (loopback), this thread also plays the far end."""
    sides = [me.side.c] + ([peer.side.c] if peer is not None else [])
    return _rtts(_run(clock, sides, f"{me.op} ping-pong", vl.pingpong, me.side.c,
                      peer.side.c if peer is not None else None, warmup, iterations,
                      int(duration * 1e9), _deadline_ns(clock), clock.watch_fd))


def pingpong_server(me: PingPong, count: int, clock: Clock) -> None:
    """Answer rounds until ``clock.interrupt`` says the client is done (raises Stop)."""
    deadline, next_round = _deadline_ns(clock), 0
    while True:
        next_round = _run(clock, [me.side.c], f"{me.op} ping-pong", vl.pingpong_serve,
                          me.side.c, next_round, deadline, clock.watch_fd)
        if clock.interrupt is not None and clock.interrupt():
            raise Stop()


def read_latency(side: FastSide, remote: Endpoint, warmup: int, iterations: int, clock: Clock,
                 duration: float = 0.0) -> list[int]:
    """Full round trip of one RDMA READ, posted and completed one at a time (ib_read_lat)."""
    return _rtts(_run(clock, [side.c], "read latency", vl.read_latency, side.c,
                      remote.read_addr, remote.rkey, warmup, iterations, int(duration * 1e9),
                      _deadline_ns(clock), clock.watch_fd))


@contextmanager
def loopback_pair(params: Mapping[str, Any], depth: int) -> Iterator[tuple[Any, Any]]:
    with _verbs.loopback_pair(params, depth, cls=FastSide) as pair:
        yield pair


def side_from(params: Mapping[str, Any], depth: int, role_device: str = "") -> Any:
    return _verbs.side_from(params, depth, role_device, cls=FastSide)


class CompiledPlane:
    """The ``DataPlane`` perftest's figures compare with: the loops in C (``_verbsloop.c``),
    timed by the CPU's cycle counter."""

    name = "compiled"
    timer = TIMER
    failures = (PyverbsError, vl.Error)
    sender = Sender
    receiver = Receiver
    pingpong = PingPong
    drive = staticmethod(drive)
    pingpong_client = staticmethod(pingpong_client)
    pingpong_server = staticmethod(pingpong_server)
    read_latency = staticmethod(read_latency)

    @staticmethod
    def side(params: Mapping[str, Any], depth: int, role_device: str = "") -> FastSide:
        return side_from(params, depth, role_device)

    @staticmethod
    def loopback_pair(params: Mapping[str, Any],
                      depth: int) -> AbstractContextManager[tuple[Any, Any]]:
        return loopback_pair(params, depth)


PLANE = CompiledPlane()
