"""The control protocol: length-prefixed JSON objects, bounded in size, never pickled.

Each message is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON that
must decode to an object. Anything else (oversized, truncated, not JSON, not an object) is a
PeerError naming what was wrong; the server answers it and keeps serving.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import select
import socket
import struct
import time
from typing import Any

from netbench.errors import PeerError

MAX_MESSAGE = 1 << 20   # 1 MiB: room for a run's interval series, small enough to be harmless
# JSON values in one message (the largest, a far end's 20,000-sample series, has ~60,000): a
# message's bytes are bounded, but '[[],[],...' parses to ~20 times them (1 MiB held 24 MiB,
# 32 such hellos 800 MiB; the rendezvous' 64 MiB one 1.5 GiB).
MAX_ITEMS = 1 << 17
PROTOCOL = 1
_HEADER = struct.Struct("!I")


class Channel:
    """One framed-JSON conversation over a connected TCP socket."""

    def __init__(self, sock: socket.socket, peer_name: str,
                 max_message: int = MAX_MESSAGE, max_items: int = MAX_ITEMS) -> None:
        self.sock = sock
        self.peer_name = peer_name
        self.max_message = max_message
        self.max_items = max_items

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":"), allow_nan=False).encode()
        if len(data) > self.max_message:
            raise PeerError(f"message to {self.peer_name} too large ({len(data)} bytes)")
        try:
            self.sock.sendall(_HEADER.pack(len(data)) + data)
        except OSError as exc:
            raise PeerError(f"lost connection to {self.peer_name}: {exc}") from None

    def recv(self, timeout: float | None) -> dict[str, Any]:
        """The next message; PeerError on timeout, EOF or a malformed frame. ``timeout``
        bounds the whole frame, not each read: a sender that trickles a byte every few
        seconds cannot hold the connection past it."""
        deadline = None if timeout is None else time.monotonic() + timeout
        (length,) = _HEADER.unpack(self._read_exact(_HEADER.size, timeout, deadline))
        if length > self.max_message:
            raise PeerError(f"{self.peer_name} sent a {length}-byte message; the limit is "
                            f"{self.max_message}")
        body = self._read_exact(length, timeout, deadline)
        try:
            message = _loads(body.decode("utf-8"), self.max_items)
        except (UnicodeDecodeError, ValueError):
            raise PeerError(f"{self.peer_name} sent a message that is not JSON") from None
        except RecursionError:
            raise PeerError(f"{self.peer_name} sent JSON nested too deeply") from None
        except _TooMany:
            raise PeerError(f"{self.peer_name} sent a message of more than "
                            f"{self.max_items} JSON values") from None
        if not isinstance(message, dict):
            raise PeerError(f"{self.peer_name} sent JSON that is not an object")
        return message

    def request(self, message: dict[str, Any], timeout: float | None) -> dict[str, Any]:
        """Send and wait for the reply; a reply carrying ``error`` raises it."""
        self.send(message)
        return self.expect(timeout)

    def expect(self, timeout: float | None) -> dict[str, Any]:
        reply = self.recv(timeout)
        if reply.get("error"):
            raise PeerError(f"{self.peer_name}: {reply['error']}")
        return reply

    def _read_exact(self, n: int, timeout: float | None, deadline: float | None) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 and not _readable(self.sock):
                    # Past the deadline only bytes already here are taken (non-blocking): a
                    # thread that waited that long for the CPU keeps a client that sent at
                    # once, and a trickling sender still gains nothing.
                    raise PeerError(f"{self.peer_name} did not send a whole message within "
                                    f"{timeout:g} s")
                self.sock.settimeout(max(left, 0.0))
            else:
                self.sock.settimeout(None)
            try:
                chunk = self.sock.recv_into(view[got:], n - got)
            except (TimeoutError, BlockingIOError):
                raise PeerError(f"{self.peer_name} did not answer within {timeout:g} s") from None
            except OSError as exc:
                raise PeerError(f"lost connection to {self.peer_name}: {exc}") from None
            if chunk == 0:
                raise PeerError(f"{self.peer_name} closed the connection")
            got += chunk
        return bytes(buf)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class _TooMany(Exception):
    pass


def _no_constant(name: str) -> None:
    # NaN and Infinity are not JSON (send never writes them); a param checked against a
    # range with NaN passes every comparison.
    raise ValueError(name)


def _loads(text: str, max_items: int) -> Any:
    """json.loads with at most ``max_items`` values. Where the text has fewer commas and
    brackets than that (strings included), it cannot hold more: the C parser. Otherwise a
    parser that counts each value as it is read and stops at the bound."""
    decoder = json.JSONDecoder(parse_constant=_no_constant)
    if text.count(",") + text.count("[") + text.count("{") < max_items:
        return decoder.decode(text)
    left = [max_items]

    def counted(scan_once: Any) -> Any:
        def scan(string: str, idx: int) -> Any:
            left[0] -= 1
            if left[0] < 0:
                raise _TooMany
            return scan_once(string, idx)
        return scan

    decoder.parse_array = lambda s_end, scan_once: json.decoder.JSONArray(
        s_end, counted(scan_once))
    decoder.parse_object = lambda s_end, strict, scan_once, *rest: json.decoder.JSONObject(
        s_end, strict, counted(scan_once), *rest)
    decoder.scan_once = json.scanner.py_make_scanner(decoder)
    return decoder.decode(text)


def _readable(sock: socket.socket) -> bool:
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return False


def parse_hostport(text: str, default_port: int) -> tuple[str, int]:
    """'host', 'host:port', '[v6]:port' -> (host, port), with a clear error for junk."""
    from netbench.errors import UsageError

    host, port_text = text, None
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or (rest and not rest.startswith(":")):
            raise UsageError(f"peer {text!r}: an IPv6 address goes in brackets, then the "
                             "port: [ADDR] or [ADDR]:PORT")
        if rest:
            port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    if not host:
        raise UsageError(f"peer {text!r}: missing host; use HOST or HOST:PORT")
    if port_text is None:
        return host, default_port
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UsageError(f"peer {text!r}: port must be 1-65535")
    return host, int(port_text)


def hang_up(conn: socket.socket) -> None:
    """Shut a connection both ways so the thread blocked in its recv returns at once."""
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
