"""A small key-value rendezvous for fabric sweeps where torch is not installed (a lean RDMA
host, the soft-RoCE VM): rank 0 serves it, every rank sets and reads keys. It speaks the
control protocol (length-prefixed JSON, never pickled or evaluated) with bounded messages,
a bounded total (keys and values, in bytes), and a bounded number of connections, each with
deadlines; it offers the calls the sweep uses of torch.distributed's TCPStore: ``set``,
``get``, ``check`` and ``compare_set``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from netbench.errors import NetbenchError, PeerError
from netbench.run.wire import Channel, hang_up

MAX_MESSAGE = 64 << 20        # one rank's rows of one round (samples included)
MAX_TOTAL = 2 << 30           # everything the store holds: keys and values, UTF-8 bytes
MAX_KEY = 1024                # bytes; the sweep's keys are short ("rows/12/345")
FIRST_TIMEOUT = 5.0           # a new connection's first request must arrive within this
IDLE_TIMEOUT = 60.0           # then each request within this (a client reconnects after it)
EXTRA_CONNECTIONS = 8         # beyond one a rank
CONNECT_RETRY = 0.2


def _size(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


class KVServer:
    """Rank 0's store: a thread per connection, at most ``world + 8`` connections. When they
    are all taken, one is dropped for the new one: the oldest that has not sent a request yet
    (and each of those is dropped after FIRST_TIMEOUT anyway), else the one idle longest.
    Neither silent connections nor busy ones can keep a rank out: a rank whose connection
    was dropped opens another and repeats its request (every request is idempotent)."""

    def __init__(self, port: int, world: int, bind: str) -> None:
        self.data: dict[str, str] = {}
        self.total = 0
        self.lock = threading.Lock()
        self.max_connections = world + EXTRA_CONNECTIONS
        # -> (accepted at, last request at or None while never heard, answering one now)
        self.open: dict[socket.socket, tuple[float, float | None, bool]] = {}
        try:
            self.sock = socket.create_server((bind, port), reuse_port=False)
        except OSError as exc:
            raise NetbenchError(f"rank 0 cannot serve the rendezvous on {bind}:{port}: "
                                f"{exc.strerror or exc} (another rank 0, or another job's "
                                "rendezvous, on that port?)") from None
        self.sock.settimeout(0.5)
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, name="kvstore", daemon=True).start()

    def _accept(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, addr = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                break
            if not self._admit(conn):
                conn.close()            # every slot is an active rank: the client retries
                continue
            threading.Thread(target=self._serve, args=(conn, f"{addr[0]}:{addr[1]}"),
                             daemon=True).start()
        self.sock.close()

    def _admit(self, conn: socket.socket) -> bool:
        with self.lock:
            if len(self.open) >= self.max_connections:
                idle = [((last is not None, last or accepted), c)
                        for c, (accepted, last, busy) in self.open.items() if not busy]
                if not idle:
                    return False        # every one is being answered this instant: retry
                victim = min(idle, key=lambda item: item[0])[1]
                del self.open[victim]
                hang_up(victim)
            self.open[conn] = (time.monotonic(), None, False)
        return True

    def _serve(self, conn: socket.socket, name: str) -> None:
        channel = Channel(conn, name, MAX_MESSAGE)
        timeout = FIRST_TIMEOUT
        try:
            while not self.stopped.is_set():
                try:
                    request = channel.recv(timeout)
                except PeerError:
                    return                  # gone, silent, or garbage: this connection ends
                with self.lock:
                    if conn not in self.open:
                        return              # dropped for a newcomer meanwhile
                    self.open[conn] = (self.open[conn][0], time.monotonic(), True)
                timeout = IDLE_TIMEOUT
                channel.send(self._answer(request))
                with self.lock:
                    if conn in self.open:
                        accepted, last, _ = self.open[conn]
                        self.open[conn] = (accepted, last, False)
        except PeerError:
            pass
        finally:
            channel.close()
            with self.lock:
                self.open.pop(conn, None)

    def _answer(self, request: dict[str, Any]) -> dict[str, Any]:
        op, key = request.get("op"), request.get("key")
        if op == "check":
            keys = request.get("keys")
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                return {"error": "check needs a list of keys"}
            with self.lock:
                return {"ok": all(k in self.data for k in keys)}
        if not isinstance(key, str):
            return {"error": "a request needs a key (a string)"}
        if _size(key) > MAX_KEY:
            return {"error": f"a key is at most {MAX_KEY} bytes"}
        if op == "get":
            with self.lock:
                value = self.data.get(key)
            return {"value": value} if value is not None else {"error": f"no key {key!r}"}
        if op in ("set", "compare_set"):
            value, expected = request.get("value"), request.get("expected", "")
            if not isinstance(value, str) or not isinstance(expected, str):
                return {"error": f"{op} needs string values"}
            with self.lock:
                current = self.data.get(key)
                if op == "compare_set" and current != expected and not (
                        current is None and expected == ""):
                    # TCPStore's semantics: nothing set; the current value (or, for a key
                    # that is absent, the expected one) comes back.
                    return {"value": expected if current is None else current}
                old = _size(key) + _size(current) if current is not None else 0
                grown = self.total + _size(key) + _size(value) - old
                if grown > MAX_TOTAL:
                    return {"error": f"the store is full ({MAX_TOTAL} bytes)"}
                self.data[key], self.total = value, grown
            return {"ok": True, "value": value} if op == "compare_set" else {"ok": True}
        if op == "delete":        # what a burn-in's rank 0 has collected: the store stays small
            with self.lock:
                current = self.data.pop(key, None)
                if current is not None:
                    self.total -= _size(key) + _size(current)
            return {"ok": current is not None}
        return {"error": f"unknown op {op!r}: set, get, check, compare_set or delete"}

    def close(self) -> None:
        self.stopped.set()


class KVClient:
    """One rank's connection; rank 0 also serves (``serve=True``)."""

    def __init__(self, host: str, port: int, world: int, serve: bool, timeout: float) -> None:
        # Rank 0 listens on the rendezvous address it was given (its own), nowhere else.
        self.server = KVServer(port, world, host) if serve else None
        self.host, self.port = host, port
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = self._connect()
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise NetbenchError(f"cannot reach the rendezvous {host}:{port} within "
                                        f"{timeout:g} s: {exc.strerror or exc}") from None
                time.sleep(CONNECT_RETRY)
        self.channel = Channel(sock, f"rendezvous {host}:{port}", MAX_MESSAGE)
        self.lock = threading.Lock()
        self.timeout = timeout

    def _connect(self) -> socket.socket:
        return socket.create_connection((self.host, self.port), timeout=5)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        """One request; a connection the store dropped (idle, or it was full) is opened again
        and the request repeated (every request is idempotent), up to the store's timeout.
        A store that refuses connections is gone: that fails at once."""
        deadline = time.monotonic() + self.timeout
        with self.lock:
            while True:
                try:
                    self.channel.send(request)
                    reply = self.channel.recv(60.0)
                    break
                except PeerError as exc:
                    dropped = "closed the connection" in str(exc) or \
                        "lost connection" in str(exc)
                    if not dropped or time.monotonic() >= deadline:
                        raise
                self.channel.close()
                time.sleep(CONNECT_RETRY)
                try:
                    sock = self._connect()
                except OSError as exc:
                    raise PeerError(f"the rendezvous {self.host}:{self.port} is gone: "
                                    f"{exc.strerror or exc}") from None
                self.channel = Channel(sock, self.channel.peer_name, MAX_MESSAGE)
        if reply.get("error"):
            raise PeerError(f"{self.channel.peer_name}: {reply['error']}")
        return reply

    def set(self, key: str, value: str | bytes) -> None:
        self._ask({"op": "set", "key": key,
                   "value": value.decode() if isinstance(value, bytes) else value})

    def get(self, key: str) -> bytes:
        """The key's value, waiting for it to be set (as TCPStore's get does), up to the
        store's timeout."""
        deadline = time.monotonic() + self.timeout
        while not self.check([key]):
            if time.monotonic() >= deadline:
                raise NetbenchError(f"the rendezvous has no key {key!r} after "
                                    f"{self.timeout:g} s")
            time.sleep(0.05)
        return str(self._ask({"op": "get", "key": key})["value"]).encode()

    def check(self, keys: Sequence[str]) -> bool:
        return bool(self._ask({"op": "check", "keys": list(keys)})["ok"])

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        """As TCPStore's: set ``desired`` when the key holds ``expected`` (or is absent and
        ``expected`` is empty); the value it holds afterwards."""
        reply = self._ask({"op": "compare_set", "key": key, "expected": expected,
                           "value": desired})
        return str(reply["value"]).encode()

    def delete_key(self, key: str) -> bool:
        """As TCPStore's: the key removed (True if it was there)."""
        return bool(self._ask({"op": "delete", "key": key})["ok"])

    def close(self) -> None:
        self.channel.close()
        if self.server is not None:
            self.server.close()
