"""Which routers a TCP flow crosses: TTL-limited SYNs from the flow's own 5-tuple, so an ECMP
hash sends each probe the way it sends the flow (Paris traceroute's rule), read back from the
socket's error queue (``IP_RECVERR``: no raw socket, no root).

A probe with TTL t expires at the t-th router, which answers ICMP time exceeded; the kernel
fails the connect with EHOSTUNREACH and queues the ICMP's offender address. Each probe is a
fresh socket bound to the same source address and port (a connect that never completed
leaves no TIME_WAIT), so the flow opened after the trace, bound to that port too, hashes the
same. The trace stops at the first hop ``stop`` accepts (the destination's own router: a
probe one hop further would reach the server), at the destination itself (a probe that
connects is reset at once: the server sees a client that came and went), after ``max_hops``
or at ``deadline``. Routers police ICMP (Linux: 1,000 a second, bursts of 50; switches in
hardware): at scale some hops go unanswered (None), and such a flow is judged on its path
set.
"""

from __future__ import annotations

import errno
import select
import socket
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass, field

IP_RECVERR = getattr(socket, "IP_RECVERR", 11)
SO_EE_ORIGIN_ICMP = 2
ICMP_TIME_EXCEEDED = 11
_EE = struct.Struct("=IBBBBII")            # struct sock_extended_err
MAX_HOPS = 16
# Source ports a steered flow tries (each traced) for a path through the switches it wants:
# with P equal-cost paths one wanted, 8 tries miss with chance (1 - 1/P)^8 (4% at P = 2...
# 34% at P = 8: then the flow runs where it hashed, and is judged on the path it took).
STEER_TRIES = 8


@dataclass
class Trace:
    hops: list[str | None] = field(default_factory=list)   # None: no answer at that TTL
    reached: bool = False          # a probe reached the destination (it was reset)
    source: tuple[str, int] = ("", 0)
    note: str = ""                 # why it stopped short, where it did


def free_port(source: str = "") -> int:
    """A source port free now (the kernel's choice), for a flow to be traced and then run."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((source, 0))
        return int(sock.getsockname()[1])


def probe_socket(source: str, port: int) -> socket.socket:
    """A TCP socket bound to ``(source, port)`` the way the traced flow must be, so the
    flow's 5-tuple is the probes'."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((source, port))
    return sock


def trace(destination: str, port: int, source_port: int, source: str = "",
          max_hops: int = MAX_HOPS, wait: float = 1.0,
          stop: Callable[[str], bool] | None = None,
          deadline: float | None = None, known: list[str | None] | None = None) -> Trace:
    """The routers a TCP flow ``source:source_port -> destination:port`` crosses, in order;
    ``wait``: seconds a hop may take to answer; ``deadline`` (time.monotonic()): when the
    whole trace gives up, said in ``note``; ``known``: the first hops, already traced from
    another port (the host's own gateway: no hash of the host's picks it), not asked again
    (a router answers each host about once a second after a burst of 6: Linux's
    icmp_ratelimit; a switch's control plane polices harder)."""
    out = Trace(hops=list(known or []), source=(source, source_port))
    for ttl in range(len(out.hops) + 1, max_hops + 1):
        if deadline is not None and time.monotonic() + wait > deadline:
            out.note = f"out of time after {ttl - 1} hop(s)"
            return out
        hop, reached = _probe(destination, port, source, source_port, ttl, wait)
        if reached:
            out.reached = True
            return out
        out.hops.append(hop)
        if hop is not None and stop is not None and stop(hop):
            return out
    out.note = f"no stop within {max_hops} hops"
    return out


def _probe(destination: str, port: int, source: str, source_port: int, ttl: int,
           wait: float) -> tuple[str | None, bool]:
    """One SYN with ``ttl``: the router it expired at (None: no answer in ``wait``), and
    whether it reached the destination instead."""
    sock = probe_socket(source, source_port)
    try:
        sock.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, ttl)
        sock.setsockopt(socket.IPPROTO_IP, IP_RECVERR, 1)
        sock.setblocking(False)
        code = sock.connect_ex((destination, port))
        if code == 0:
            return None, _reset(sock)
        if code not in (errno.EINPROGRESS, errno.EAGAIN):
            return _offender(sock), False
        deadline = time.monotonic() + wait
        poller = select.poll()               # not select(): a rank may hold > 1,024 fds
        poller.register(sock, select.POLLIN | select.POLLOUT | select.POLLERR)
        while (left := deadline - time.monotonic()) > 0:
            events = poller.poll(left * 1000)
            hop = _offender(sock)
            if hop is not None:
                return hop, False
            status = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            writable = any(flags & select.POLLOUT for _, flags in events)
            if writable and status == 0:
                return None, _reset(sock)          # connected: the destination answered
            if status in (errno.ECONNREFUSED,):
                return None, True                  # the destination itself refused
            if not events:
                break
            if status:
                return _offender(sock), False
        return None, False
    finally:
        sock.close()


def _reset(sock: socket.socket) -> bool:
    """Close a probe that connected with a reset, so the server sees no half-open flow."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    return True


def _offender(sock: socket.socket) -> str | None:
    """The address an ICMP time exceeded on the socket's error queue came from."""
    try:
        _, ancillary, _, _ = sock.recvmsg(1, 512, socket.MSG_ERRQUEUE)
    except (BlockingIOError, InterruptedError):
        return None
    except OSError:
        return None
    for level, kind, data in ancillary:
        if level != socket.IPPROTO_IP or kind != IP_RECVERR or len(data) < _EE.size + 8:
            continue
        _err, origin, icmp_type, _code, _pad, _info, _data = _EE.unpack_from(data)
        if origin == SO_EE_ORIGIN_ICMP and icmp_type == ICMP_TIME_EXCEEDED:
            return socket.inet_ntoa(data[_EE.size + 4:_EE.size + 8])
    return None
