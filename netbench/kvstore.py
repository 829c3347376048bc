"""A small key-value rendezvous for fabric sweeps where torch is not installed (a lean RDMA
host, the soft-RoCE VM): rank 0 serves it, every rank sets and reads keys. It speaks the
control protocol (length-prefixed JSON, never pickled or evaluated) with bounded messages,
a bounded total, and a bounded number of connections; it offers the three calls the sweep
uses of torch.distributed's TCPStore: ``set``, ``get`` and ``check``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from netbench.errors import NetbenchError, PeerError
from netbench.wire import Channel

MAX_MESSAGE = 64 << 20        # one rank's rows of one round (samples included)
MAX_TOTAL = 2 << 30           # everything the store holds
CONNECT_RETRY = 0.2


class KVServer:
    """Rank 0's store: a thread per connection, at most ``world + 8`` connections."""

    def __init__(self, port: int, world: int, bind: str) -> None:
        self.data: dict[str, str] = {}
        self.total = 0
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(world + 8)
        self.sock = socket.create_server((bind, port), reuse_port=False)
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
            if not self.slots.acquire(blocking=False):
                conn.close()
                continue
            threading.Thread(target=self._serve, args=(conn, f"{addr[0]}:{addr[1]}"),
                             daemon=True).start()
        self.sock.close()

    def _serve(self, conn: socket.socket, name: str) -> None:
        channel = Channel(conn, name, MAX_MESSAGE)
        try:
            while not self.stopped.is_set():
                try:
                    request = channel.recv(None)
                except PeerError:
                    return                  # gone, or garbage: this connection ends
                channel.send(self._answer(request))
        except PeerError:
            pass
        finally:
            channel.close()
            self.slots.release()

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
        if op == "get":
            with self.lock:
                value = self.data.get(key)
            return {"value": value} if value is not None else {"error": f"no key {key!r}"}
        if op == "set":
            value = request.get("value")
            if not isinstance(value, str):
                return {"error": "set needs a string value"}
            with self.lock:
                grown = self.total + len(value) - len(self.data.get(key, ""))
                if grown > MAX_TOTAL:
                    return {"error": f"the store is full ({MAX_TOTAL} bytes)"}
                self.data[key], self.total = value, grown
            return {"ok": True}
        return {"error": f"unknown op {op!r}: set, get or check"}

    def close(self) -> None:
        self.stopped.set()


class KVClient:
    """One rank's connection; rank 0 also serves (``serve=True``)."""

    def __init__(self, host: str, port: int, world: int, serve: bool, timeout: float) -> None:
        # Rank 0 listens on the rendezvous address it was given (its own), nowhere else.
        self.server = KVServer(port, world, host) if serve else None
        deadline = time.monotonic() + timeout
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=5)
                break
            except OSError as exc:
                if time.monotonic() >= deadline:
                    raise NetbenchError(f"cannot reach the rendezvous {host}:{port} within "
                                        f"{timeout:g} s: {exc.strerror or exc}") from None
                time.sleep(CONNECT_RETRY)
        self.channel = Channel(sock, f"rendezvous {host}:{port}", MAX_MESSAGE)
        self.lock = threading.Lock()
        self.timeout = timeout

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            return self.channel.request(request, 60.0)

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

    def close(self) -> None:
        self.channel.close()
        if self.server is not None:
            self.server.close()
