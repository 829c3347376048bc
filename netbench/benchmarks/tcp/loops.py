"""tcp's data planes: tcp.rr's timed ping-pong loop and tcp.stream's send and receive loops,
in C where they were built, else in Python.

Every instruction of the loop is inside the latency it reports, so who runs it is part of the
figure (the Python loop adds about 1 us a round trip): it is a param, ``data_plane``, chosen
here and recorded in the row as what ``auto`` became, as the RDMA family's is.
"""

from __future__ import annotations

import os
import socket
import time
from array import array
from collections.abc import Callable
from typing import Protocol

from netbench.api import PeerError, SkipCase

try:  # _fastloop.c; ImportError where it was not built (no compiler)
    from . import _fastloop
except ImportError as exc:
    _fastloop = None
    _WHY = str(exc)
else:
    _WHY = ""

LOOP_NOTE = "timed in a Python loop (the C loop was not built): adds ~1 us a round trip"
STREAM_LOOP_NOTE = ("bytes moved by Python loops (the C loops were not built; ~10x the "
                    "user-space instructions a send)")


class RrLoop(Protocol):
    name: str       # what data_plane=auto resolved to: stored in the row

    def client(self, sock: socket.socket, size: int, iterations: int, warmup: int,
               duration_ns: int) -> tuple[array, float]:
        """``warmup`` untimed round trips, then ``iterations`` (or ``duration_ns`` of them)
        timed: each round trip in ns, and the seconds the timed ones took."""

    def echo(self, sock: socket.socket, size: int) -> None:
        """Send every ``size``-byte message back until the client hangs up."""


class CompiledLoop:
    name = "compiled"

    def client(self, sock: socket.socket, size: int, iterations: int, warmup: int,
               duration_ns: int) -> tuple[array, float]:
        try:
            data, elapsed_ns = _fastloop.rr_client(sock.fileno(), size, iterations, warmup,
                                                   duration_ns)
        except ConnectionError:
            raise PeerError("peer closed the connection mid-run") from None
        rtts = array("q")
        rtts.frombytes(data)
        return rtts, elapsed_ns / 1e9

    def echo(self, sock: socket.socket, size: int) -> None:
        _fastloop.rr_echo(sock.fileno(), size)


class PythonLoop:
    name = "python"

    def client(self, sock: socket.socket, size: int, iterations: int, warmup: int,
               duration_ns: int) -> tuple[array, float]:
        """Kept flat: every bytecode here is inside the measured latency."""
        payload = memoryview(os.urandom(size))
        view = memoryview(bytearray(size))
        send, recv_into, clock = sock.send, sock.recv_into, time.perf_counter_ns
        rtts = array("q")
        append = rtts.append
        warm = warmup
        end_ns = clock() + duration_ns if duration_ns > 0 else 0
        start = clock()
        while True:
            t0 = clock()
            sent = send(payload)
            if sent != size:
                _send_rest(send, payload, sent)
            got = recv_into(view)
            if got != size and not _recv_rest(recv_into, view, got, size):
                raise PeerError("peer closed the connection mid-run")
            t1 = clock()
            if warm:
                warm -= 1
                start = t1
                if end_ns and not warm:
                    end_ns = t1 + duration_ns
                continue
            append(t1 - t0)
            if end_ns:
                if t1 >= end_ns:
                    break
            elif len(rtts) >= iterations:
                break
        return rtts, (clock() - start) / 1e9

    def echo(self, sock: socket.socket, size: int) -> None:
        view = memoryview(bytearray(size))
        send, recv_into = sock.send, sock.recv_into
        while True:
            got = recv_into(view)
            if got != size and not _recv_rest(recv_into, view, got, size):
                return
            sent = send(view)
            if sent != size:
                _send_rest(send, view, sent)


def choose_loop(data_plane: str) -> RrLoop:
    """The loop a case asked for: ``compiled`` where it was built (asked for by name and not
    built: the case is skipped, saying why), ``python``, or ``auto``, the first of the two."""
    if data_plane == "python":
        return PythonLoop()
    if _fastloop is None:
        if data_plane == "compiled":
            raise SkipCase(f"data_plane=compiled: the C loop is not built ({_WHY}); install a C "
                           "compiler and the Python headers, then reinstall netbench "
                           "(pip install -e .)")
        return PythonLoop()
    return CompiledLoop()


class StreamLoop:
    """tcp.stream's two loops: send until a deadline, receive counting until EOF. In C where
    it was built (a Python send/recv costs ~1,500 user-space instructions a call with its GIL
    hand-off, bench/instructions_per_op.py); the receiver's running total lives in an int64
    counter the sampler thread reads."""

    def __init__(self) -> None:
        # A build from before the stream loops existed has rr's only: Python then.
        self.c = _fastloop if hasattr(_fastloop, "stream_send") else None
        self.name = "python" if self.c is None else "compiled"

    def send_until(self, sock: socket.socket, payload: bytes, stop_at: float) -> None:
        """Send ``payload`` again and again until time.monotonic() reaches ``stop_at``."""
        if self.c is not None:
            self.c.stream_send(sock.fileno(), payload, int(stop_at * 1e9))
            return
        sendall, now = sock.sendall, time.monotonic
        while now() < stop_at:
            sendall(payload)

    def receive(self, sock: socket.socket, buf: bytearray, counter: array) -> None:
        """Until EOF, the bytes received so far kept in ``counter[0]``."""
        if self.c is not None:
            self.c.stream_recv(sock.fileno(), buf, counter)
            return
        recv_into = sock.recv_into
        total = 0
        while True:
            n = recv_into(buf)
            if n == 0:
                return
            total += n
            counter[0] = total


def _recv_rest(recv_into: Callable[..., int], view: memoryview, got: int, n: int) -> bool:
    """Finish a message that arrived in pieces; False on EOF."""
    while got < n:
        more = recv_into(view[got:], n - got)
        if more == 0:
            return False
        got += more
    return True


def _send_rest(send: Callable[..., int], data: memoryview, sent: int) -> None:
    while sent < len(data):
        sent += send(data[sent:])
