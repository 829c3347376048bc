"""The two-host rendezvous: ``netbench serve`` and the client side of it.

One TCP port carries everything, like iperf3: a client opens a control connection
(``hello``), asks the server to run the far end of a benchmark (``run``), and opens data
connections that name the control session's token. The server dispatches ``run`` to the
benchmark's own ``serve`` method, so a new benchmark brings its far end with it.
"""

from __future__ import annotations

import errno
import logging
import os
import queue
import secrets
import select
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from netbench import __version__
from netbench.env import counters
from netbench.errors import NetbenchError, PeerError, UsageError
from netbench.run.wire import PROTOCOL, Channel, hang_up, parse_hostport
from netbench.textfile import printable

DEFAULT_PORT = 5301
HELLO_TIMEOUT = 5.0      # a new connection must say who it is within this (the whole frame)
IDLE_TIMEOUT = 30.0      # a session may sit idle this long between requests (a real client
                         # sends its run right after hello and bye right after the far end)
MAX_CLIENTS = 32         # control sessions at once; data connections are bounded apart
# Connections that have not yet said who they are: bounded apart from the sessions, and when
# full the oldest is dropped, so silent sockets cannot keep a real client (whose first frame
# comes at once) from being heard.
MAX_PENDING = 64
# Data connections announced but not yet taken by a far end: bounded per session and in all,
# so one client cannot queue sockets until the server runs out of file descriptors.
MAX_QUEUED_DATA = 256    # a session's (tcp.stream takes at most 2 x 128 streams)
MAX_QUEUED_DATA_TOTAL = 1024
# Data streams the far ends run at once (a thread each): 32 sessions of 8 streams on 2 cores
# starved the threads that accept and answer, so clients read 'did not answer' rather than
# 'busy'. A lone request may always take its maximum (tcp.stream: 2 x 128).
MAX_STREAMS = max(64, 32 * (os.cpu_count() or 1))
# Memory the far ends may allocate (each benchmark says what a request costs it): per session
# and in all; a request beyond either is refused with the reason.
SESSION_MEMORY = 512 << 20
TOTAL_MEMORY = 1 << 30
LISTEN_BACKLOG = 1024     # the kernel caps it at net.core.somaxconn
# JSON values in one message a client sends (a run's params are a dozen): few enough that a
# message of empty lists costs about what its bytes do, for every connection at once.
REQUEST_ITEMS = 4096
COUNTER_INTERVAL = 0.02  # seconds a counter read is reused for (a flood shares one read)
COUNTER_WAIT = 5.0       # seconds an ask waits for a read in progress (ethtool stuck: gives up)
MAX_COUNTER_NAME = 256   # characters in a counter's name, as a client accepts it
MAX_COUNTER_NOTES = 20
FD_BACKOFF = 0.5         # seconds to stop accepting when the process is out of descriptors

log = logging.getLogger("netbench.serve")


def _describe(addr: Any) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def _clip(value: Any, limit: int = 60) -> str:
    """A client's value in a reply: its repr, cut (a 1 MiB op was sent back whole)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class _ServerSession:
    """One client's control session on the server; data connections are routed here."""

    def __init__(self, channel: Channel, client_name: str, token: str,
                 queued: Callable[[int], bool] | None = None, device: str = "",
                 sessions: Callable[[], int] = lambda: 1,
                 streams: Callable[[int], str | None] = lambda change: None) -> None:
        self.channel = channel
        self.client_name = client_name
        self.token = token
        self.device = device
        self._data: queue.Queue[tuple[int, socket.socket]] = queue.Queue(MAX_QUEUED_DATA)
        self._queued = queued or (lambda change: True)   # the server-wide count
        self._sessions = sessions                          # open at once, this one included
        self._streams = streams                            # books the server-wide streams
        self.streams = 0                                   # this far end's, freed after it

    def deliver(self, index: int, sock: socket.socket) -> bool:
        """Queue a data connection for the far end; False (the caller closes it) when this
        session or the whole server already holds as many as it may."""
        if not self._queued(+1):
            return False
        try:
            self._data.put_nowait((index, sock))
        except queue.Full:
            self._queued(-1)
            return False
        return True

    def _take(self, timeout: float) -> tuple[int, socket.socket]:
        item = self._data.get(timeout=timeout)
        self._queued(-1)
        return item

    def _control_closed(self) -> bool:
        """The client hung up its control connection (EOF waiting, not a message)."""
        sock = self.channel.sock
        try:
            if not select.select([sock], [], [], 0)[0]:
                return False
            return sock.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def accept_data(self, count: int, timeout: float) -> list[socket.socket]:
        refused = self._streams(count)
        if refused:
            raise PeerError(refused)
        self.streams += count
        deadline = time.monotonic() + timeout
        got: dict[int, socket.socket] = {}
        while len(got) < count:
            left = deadline - time.monotonic()
            try:
                # Short waits: a client that hangs up meanwhile frees its far end at once.
                index, sock = self._take(max(min(left, 0.25), 0.001))
            except queue.Empty:
                gone = self._control_closed()
                if not gone and deadline - time.monotonic() > 0:
                    continue
                for sock in got.values():
                    sock.close()
                if gone:
                    raise PeerError(f"{self.client_name} closed the control connection "
                                    "before opening its data connections") from None
                open_now = self._sessions()
                busy = (f"server busy ({open_now} clients have sessions open): "
                        if open_now > 1 else "")
                raise PeerError(f"{busy}{len(got)} of {count} data connections arrived "
                                f"within {timeout:g} s; retry later") from None
            if index in got or not 0 <= index < count:
                sock.close()
                continue
            got[index] = sock
        return [got[i] for i in range(count)]

    def drain(self) -> None:
        while True:
            try:
                self._take(0.0)[1].close()
            except queue.Empty:
                return


class Server:
    """``netbench serve``: answers any number of clients, one thread each, and survives them."""

    def __init__(self, lookup: Callable[[str], Any], bind: str = "127.0.0.1",
                 port: int = DEFAULT_PORT, max_clients: int = MAX_CLIENTS,
                 device: str = "") -> None:
        self._lookup = lookup
        self.device = device                  # the far ends' NIC ("": the host's default)
        self.bind, self.port = bind, port
        self.max_clients = max_clients
        self._slots = threading.BoundedSemaphore(max_clients)
        self._pending: dict[socket.socket, float] = {}   # not yet identified -> since when
        self._sessions: dict[str, _ServerSession] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._queued_data = 0
        self._memory = 0                      # bytes the running far ends reserved
        self._streams = 0                     # data streams the running far ends took
        self._counter_lock = threading.Lock()
        self._counted: tuple[float, dict[str, Any]] | None = None   # the last counter read

    def _count_queued(self, change: int) -> bool:
        with self._lock:
            if change > 0 and self._queued_data >= MAX_QUEUED_DATA_TOTAL:
                return False
            self._queued_data += change
            return True

    def _reserve(self, nbytes: int, session: _ServerSession) -> str | None:
        """Book a far end's memory; the reason it cannot be booked, or None."""
        if nbytes > SESSION_MEMORY:
            return (f"the far end would allocate {nbytes >> 20} MiB; this server allows "
                    f"{SESSION_MEMORY >> 20} MiB per client (lower msg_size or streams)")
        with self._lock:
            if self._memory + nbytes > TOTAL_MEMORY:
                return (f"server busy: the far end would allocate {nbytes >> 20} MiB and "
                        f"{self._memory >> 20} of {TOTAL_MEMORY >> 20} MiB are in use by "
                        "other clients; retry later")
            self._memory += nbytes
        return None

    def _release(self, nbytes: int) -> None:
        with self._lock:
            self._memory -= nbytes

    def _book_streams(self, change: int) -> str | None:
        """Book (or, negative, free) a far end's data streams; the reason it cannot."""
        with self._lock:
            if change > 0 and self._streams and self._streams + change > MAX_STREAMS:
                return (f"server busy: {self._streams} of {MAX_STREAMS} data streams are "
                        f"in use by {len(self._sessions)} clients; retry later")
            self._streams += change
        return None

    def listen(self) -> tuple[str, int]:
        try:
            infos = socket.getaddrinfo(self.bind, self.port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise UsageError(f"cannot bind {self.bind!r}: {exc.strerror}") from None
        family, _, _, _, sockaddr = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(sockaddr)
            # A deep backlog: 50 clients at once with 8 streams each overflowed 64 while the
            # accept thread waited for the GIL, and the kernel's SYN retries (1 s, 3 s, ...)
            # then ran their data connections past the far end's deadline.
            sock.listen(LISTEN_BACKLOG)
        except OSError as exc:
            sock.close()
            if exc.errno == 98:
                raise NetbenchError(f"port {self.port} on {self.bind} is already in use; "
                                    "choose another with --port") from None
            raise NetbenchError(f"cannot listen on {self.bind}:{self.port}: "
                                f"{exc.strerror}") from None
        sock.settimeout(0.5)
        self._listener = sock
        self.port = sock.getsockname()[1]
        return self.bind, self.port

    def serve_forever(self) -> None:
        if self._listener is None:
            self.listen()
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                conn, addr = self._listener.accept()
            except TimeoutError:
                continue
            except OSError as exc:
                if self._stop.is_set():
                    break
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM):
                    # Out of descriptors or memory: stop accepting for a moment, keep serving
                    # the sessions already open (their connections are what holds the fds).
                    log.warning("cannot accept a connection: %s; pausing %g s", exc.strerror,
                                FD_BACKOFF)
                    time.sleep(FD_BACKOFF)
                    continue
                raise
            self._admit(conn)
            threading.Thread(target=self._handle, args=(conn, addr), daemon=True).start()
        self._listener.close()

    def _admit(self, conn: socket.socket) -> None:
        """Count a new connection as pending; at the bound, drop the one silent longest."""
        with self._lock:
            if len(self._pending) >= MAX_PENDING:
                oldest = min(self._pending, key=self._pending.__getitem__)
                del self._pending[oldest]
                hang_up(oldest)
            self._pending[conn] = time.monotonic()

    def _identified(self, conn: socket.socket) -> None:
        with self._lock:
            self._pending.pop(conn, None)

    def stop(self) -> None:
        self._stop.set()

    def _handle(self, conn: socket.socket, addr: Any) -> None:
        name = _describe(addr)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        channel = Channel(conn, name, max_items=REQUEST_ITEMS)
        owned = True
        try:
            try:
                first = channel.recv(HELLO_TIMEOUT)
            finally:
                self._identified(conn)
            op = first.get("op")
            if op == "data":
                owned = not self._route_data(first, conn)
            elif op == "hello":
                if not self._slots.acquire(blocking=False):
                    # The hello was read: the reply arrives whole, never cut by a reset.
                    channel.send({"error": f"server busy: {self.max_clients} clients have "
                                           "sessions open; retry later"})
                    log.info("client %s turned away: server busy", name)
                    return
                try:
                    self._control(channel, first, name)
                finally:
                    self._slots.release()
            else:
                channel.send({"error": f"expected hello or data, got op {_clip(op)}"})
        except PeerError as exc:
            log.info("client %s dropped: %s", name, exc)
        except Exception as exc:  # a bug in a benchmark's far end must not take the server down
            log.exception("client %s: internal error", name)
            try:
                channel.send({"error": f"internal error in netbench serve: "
                                       f"{type(exc).__name__}: {exc}"})
            except PeerError:
                pass
        finally:
            if owned:
                channel.close()

    def _route_data(self, first: Mapping[str, Any], conn: socket.socket) -> bool:
        with self._lock:
            session = self._sessions.get(str(first.get("session")))
        index = first.get("index")
        if session is None or not isinstance(index, int) or isinstance(index, bool):
            return False
        conn.settimeout(None)
        if not session.deliver(index, conn):
            log.info("%s: data connection refused: too many waiting", session.client_name)
            return False
        return True

    def _control(self, channel: Channel, hello: Mapping[str, Any], name: str) -> None:
        protocol = hello.get("protocol")
        if type(protocol) is not int or protocol != PROTOCOL:     # true and 1.0 are not 1
            channel.send({"error": f"protocol {_clip(protocol)} not supported; "
                                   f"this server speaks {PROTOCOL} (netbench {__version__})"})
            return
        token = secrets.token_hex(16)
        session = _ServerSession(channel, name, token, self._count_queued, self.device,
                                 lambda: len(self._sessions), self._book_streams)
        with self._lock:
            self._sessions[token] = session
        try:
            channel.send({"ok": True, "server": "netbench", "version": __version__,
                          "protocol": PROTOCOL, "host": socket.gethostname(),
                          "session": token})
            idle_until = time.monotonic() + IDLE_TIMEOUT
            while True:
                # Only a far end run restarts the idle clock: chatter cannot hold a session.
                request = channel.recv(max(idle_until - time.monotonic(), 0.001))
                op = request.get("op")
                if op == "bye":
                    return
                if op == "counters":
                    channel.send(self._counters(session))
                    continue
                if op != "run":
                    channel.send({"error": f"unknown op {_clip(op)}; expected run, counters "
                                           "or bye"})
                    continue
                if not self._run_far_end(session, request):
                    return
                idle_until = time.monotonic() + IDLE_TIMEOUT
        finally:
            with self._lock:
                self._sessions.pop(token, None)
            session.drain()

    def _counters(self, session: _ServerSession) -> dict[str, Any]:
        """This host's counters (netbench.env.counters), for the client to difference around
        its case. Read at most once every COUNTER_INTERVAL whoever asks (each read is a few
        milliseconds of work, and ethtool runs): clients flooding the op share one read."""
        if not self._counter_lock.acquire(timeout=COUNTER_WAIT):
            return {"error": f"counters: a read has taken over {COUNTER_WAIT:g} s"}
        try:
            now = time.monotonic()
            if self._counted is None or now - self._counted[0] >= COUNTER_INTERVAL:
                snap = counters.snapshot()
                # Stamped when the read began: a client that asks COUNTER_INTERVAL after its
                # case ended gets values read after that end, never a read begun before it.
                self._counted = (now, {
                    "ok": True, "counters": snap.values,
                    "notes": snap.notes[:MAX_COUNTER_NOTES]})
            return self._counted[1]
        finally:
            self._counter_lock.release()

    def _run_far_end(self, session: _ServerSession, request: Mapping[str, Any]) -> bool:
        """Run one benchmark's far end; False when the control connection is unusable."""
        name = str(request.get("benchmark"))
        reserved = 0
        try:
            bench = self._lookup(name)
            params = bench.validate_remote(request.get("params") or {})
            need = int(bench.server_memory(params))
            refused = self._reserve(need, session)
            if refused:
                raise NetbenchError(refused)
            reserved = need
            log.info("%s: %s", session.client_name, name)
            bench.serve(params, session)
        except PeerError as exc:
            log.info("%s: %s aborted: %s", session.client_name, name, exc)
            # Say why where the control connection still works (data connections that never
            # came): the client read "closed the connection" and nothing more.
            try:
                session.channel.send({"error": str(exc)})
            except PeerError:
                pass
            return False
        except NetbenchError as exc:
            session.channel.send({"error": str(exc)})
        except ImportError as exc:     # e.g. rdma.* where pyverbs is missing: a reason, no trace
            why = f"{name} cannot run its far end on this server: {exc}" + (
                f" (install {exc.name} there)" if exc.name else "")
            log.info("%s: %s", session.client_name, why)
            session.channel.send({"error": why})
        finally:
            if reserved:
                self._release(reserved)
            if session.streams:
                self._book_streams(-session.streams)
                session.streams = 0
        session.drain()
        return True


class ClientSession:
    """A control session with a ``netbench serve``."""

    def __init__(self, host: str, port: int, timeout: float = 10.0) -> None:
        self.host, self.port = host, port
        self.routes: list[list[str | None]] = []
        self.traced_to = host
        # Steering (a fabric sweep's re-probe): each entry one switch, as the addresses it
        # answers a trace from; a traced connection's source port is the first whose path
        # crosses them all (up to STEER_TRIES), else the first port tried.
        self.steer: tuple[frozenset[str], ...] = ()
        self.peer_name = f"netbench serve at {host}:{port}"
        sock = _connect(host, port, timeout, self.peer_name)
        self.channel = Channel(sock, self.peer_name)
        hello = self.channel.request({"op": "hello", "protocol": PROTOCOL,
                                      "client": socket.gethostname(),
                                      "version": __version__}, timeout)
        if hello.get("server") != "netbench" or not isinstance(hello.get("session"), str):
            self.channel.close()
            raise PeerError(f"{host}:{port} is not a netbench server")
        self.token = hello["session"]
        self.server_version = str(hello.get("version"))
        self.server_host = str(hello.get("host"))

    def run_remote(self, benchmark: str, params: Mapping[str, Any],
                   timeout: float) -> dict[str, Any]:
        """Ask the server to start a benchmark's far end; returns its first reply."""
        return self.channel.request({"op": "run", "benchmark": benchmark,
                                     "params": dict(params)}, timeout)

    def open_data(self, count: int, timeout: float,
                  traced: bool = False) -> list[socket.socket]:
        socks: list[socket.socket] = []
        self.routes = []
        try:
            for index in range(count):
                source = self._traced_port(timeout) if traced else None
                # The traced address, not the name again (another A record is another path).
                sock = _connect(self.traced_to if source else self.host, self.port, timeout,
                                self.peer_name, source or None)
                socks.append(sock)
                Channel(sock, self.peer_name).send({"op": "data", "session": self.token,
                                                    "index": index})
                sock.settimeout(None)
        except BaseException:
            for sock in socks:
                sock.close()
            raise
        return socks

    def _traced_port(self, timeout: float) -> int:
        """A free source port whose path to the server was traced (``routes``): the data
        connection bound to it next hashes onto the same ECMP path as the probes did."""
        from netbench.env import tracepath

        if self.channel.sock.family != socket.AF_INET:      # the tracer speaks IPv4
            self.routes.append([])
            return 0
        self.traced_to = self.channel.sock.getpeername()[0]
        deadline = time.monotonic() + timeout / 2
        taken: tuple[int, list[str | None]] | None = None
        for _ in range(tracepath.STEER_TRIES if self.steer else 1):
            port = tracepath.free_port()
            # A retry asks from the second hop on: the first is the host's own gateway.
            gateway = taken[1][:1] if taken and taken[1][:1] != [None] else None
            found = tracepath.trace(self.traced_to, self.port, port,
                                    wait=min(1.0, timeout / 8), deadline=deadline,
                                    known=gateway)
            # Steered: a path that crosses every wanted switch, every hop answered.
            hit = all(want & set(found.hops) for want in self.steer) and None not in found.hops
            if taken is None or hit:
                taken = (port, found.hops)
            if hit or time.monotonic() >= deadline:
                break
        assert taken is not None
        self.routes.append(taken[1])
        return taken[0]

    def counters(self, timeout: float) -> counters.Snapshot:
        """The server's counters now; PeerError where its reply is not counters (an older
        netbench: unknown op) or breaks the bounds."""
        reply = self.channel.request({"op": "counters"}, timeout)
        values, notes = reply.get("counters"), reply.get("notes", [])
        if not isinstance(values, dict) or len(values) > counters.MAX_COUNTERS or not all(
                isinstance(k, str) and len(k) <= MAX_COUNTER_NAME and type(v) is int
                for k, v in values.items()):
            raise PeerError(f"{self.peer_name} sent counters that are not names (at most "
                            f"{MAX_COUNTER_NAME} characters) to whole numbers, at most "
                            f"{counters.MAX_COUNTERS}")
        if not isinstance(notes, list):
            notes = []
        return counters.Snapshot(dict(values), [printable(str(n))[:200] for n in
                                                notes[:MAX_COUNTER_NOTES]])

    def close(self) -> None:
        try:
            self.channel.send({"op": "bye"})
        except PeerError:
            pass
        self.channel.close()


def _connect(host: str, port: int, timeout: float, name: str,
             source_port: int | None = None) -> socket.socket:
    try:
        sock = socket.create_connection((host, port), timeout=timeout, source_address=(
            ("", source_port) if source_port is not None else None))
    except socket.gaierror as exc:
        raise PeerError(f"cannot resolve peer {host!r}: {exc.strerror}") from None
    except TimeoutError:
        raise PeerError(f"cannot reach {name}: no answer within {timeout:g} s") from None
    except OSError as exc:
        hint = " (is `netbench serve` running there?)" if exc.errno == 111 else ""
        raise PeerError(f"cannot reach {name}: {exc.strerror}{hint}") from None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def connect(peer: str, timeout: float = 10.0) -> ClientSession:
    host, port = parse_hostport(peer, DEFAULT_PORT)
    return ClientSession(host, port, timeout)


def _die_with_parent() -> None:
    """In the child: get SIGTERM when the parent dies, so a killed run leaves no server."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class ServerProcess:
    """A ``netbench serve`` in its own process; ``address`` is where it listens.

    The runner's loopback fallback uses one on 127.0.0.1: its own process, so the far end has
    its own interpreter (no shared GIL) and its CPU time is counted apart from the client's,
    exactly as with a real peer. ``prefix`` runs it under another command (ip netns exec ...).
    """

    def __init__(self, bind: str = "127.0.0.1", port: int = 0, prefix: Sequence[str] = (),
                 start_timeout: float = 30.0, stderr: Any = subprocess.DEVNULL) -> None:
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "netbench", "serve", "--bind", bind,
             "--port", str(port)],
            stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL, env=env,
            text=True, preexec_fn=_die_with_parent)
        self.address = self._wait_for_port(start_timeout)
        self.host, port_text = self.address.rsplit(":", 1)
        self.port = int(port_text)

    def _wait_for_port(self, timeout: float) -> str:
        assert self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else ""
        marker = "listening on "
        if marker not in line:
            self.stop()
            raise NetbenchError(f"netbench serve did not start within {timeout:g} s")
        return line.split(marker, 1)[1].split()[0]

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
