"""TCP baselines: ``tcp.stream`` (iperf3-style goodput) and ``tcp.rr`` (sockperf-style latency).

Both talk to ``netbench serve`` (a remote peer, or the loopback server the runner starts), which
runs the ``serve`` half of the same class. Goodput is counted by the receiver; latency is half
the measured round trip, as sockperf and netperf TCP_RR report it.
"""

from __future__ import annotations

import errno
import os
import socket
import struct
import threading
import time
from array import array
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from netbench.api import (
    Benchmark,
    Case,
    Context,
    CpuMeter,
    Measurement,
    Metric,
    Param,
    PeerError,
    ServerSession,
    Traits,
    UsageError,
    stats,
)

from .loops import LOOP_NOTE, STREAM_LOOP_NOTE, StreamLoop, choose_loop

SETUP_TIMEOUT = 15.0      # to open data connections and agree to start
STALL_TIMEOUT = 10.0      # a data socket that moves nothing this long means the peer is gone
RECV_BUFFER = 256 << 10   # each receiving stream's buffer, whatever msg_size is
MAX_SERIES = 20_000       # interval samples per run, keeps the result message bounded

_AFFINITY = Param("affinity", "str", "", "pin the client[,server] to CPU ids (iperf3 -A n,m)",
                  pattern=r"(\d{1,5}(,\d{1,5})?)?", pattern_help="'', 'C' or 'C,S' (CPU ids)")

def _cpu_metrics(work: str) -> tuple[Metric, ...]:
    """The two ends' CPU, each a cost of ``work`` (compare judges it per unit of that work
    where the work itself changed)."""
    return (Metric("cpu_client", "%core", "lower", "client process CPU, 100 = one core busy",
                   per=work),
            Metric("cpu_server", "%core", "lower", "server process CPU, 100 = one core busy",
                   per=work))


def _set_stall_timeout(sock: socket.socket, seconds: float) -> None:
    """Kernel-side send/recv timeouts: no extra poll() per call, unlike settimeout()."""
    tv = struct.pack("ll", int(seconds), int((seconds % 1) * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)


def _affinity(params: Mapping[str, Any], side: int) -> int | None:
    parts = [int(p) for p in params["affinity"].split(",") if p]
    return parts[side] if side < len(parts) else None


@contextmanager
def _pinned(cpu: int | None) -> Iterator[None]:
    """Pin the calling thread (and the threads it starts) to one CPU for a benchmark."""
    if cpu is None:
        yield
        return
    old = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {cpu})
    except OSError as exc:
        raise UsageError(f"affinity: cannot pin to CPU {cpu} ({exc.strerror}); this host "
                         f"allows CPUs {','.join(map(str, sorted(old)))}") from None
    try:
        yield
    finally:
        os.sched_setaffinity(0, old)


def where_thread_ran() -> int | None:
    """The CPU the calling thread last ran on (/proc/thread-self/stat's processor field), or
    None where that cannot be read."""
    try:
        with open("/proc/thread-self/stat", "rb") as f:
            fields = f.read(4096).rsplit(b")", 1)[1].split()
        return int(fields[36])             # field 39; fields here start at field 3 (state)
    except (OSError, IndexError, ValueError):
        return None


def _boot_id() -> str:
    """This kernel's boot id: two ends reading the same one share the host's CPUs."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            return f.read(64).strip()
    except OSError:
        return ""


def placement(mine: Sequence[int | None], far: Any, far_boot: Any) -> str:
    """Where a ping-pong's two ends ran, where they shared a host: on an idle VM two ends on one
    CPU answer in 2.5 us (a context switch) and on separate CPUs in 40 us (each message wakes
    a halted vCPU), so a verdict must know which it compared. "" where unknown (another host,
    an older far end, no /proc)."""
    def cpu(c: Any) -> bool:
        return isinstance(c, int) and not isinstance(c, bool)

    if (not far_boot or far_boot != _boot_id() or not isinstance(far, list) or not far
            or not mine or not all(map(cpu, [*mine, *far]))):
        return ""
    ends = [set(mine), set(far)]
    if len(ends[0]) == len(ends[1]) == 1:
        return "ends on one CPU" if ends[0] == ends[1] else "ends on separate CPUs"
    return "ends moved between CPUs"


def _prepare(socks: Sequence[socket.socket], window: int) -> None:
    for sock in socks:
        sock.settimeout(None)
        _set_stall_timeout(sock, STALL_TIMEOUT)
        if window:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, window)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, window)


def _shutdown_all(socks: Sequence[socket.socket]) -> Callable[[], None]:
    def shutdown() -> None:
        for sock in socks:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
    return shutdown


def _interface_of(sock: socket.socket) -> str:
    """The local network interface a connected socket uses, by its address."""
    import psutil

    local_ip = sock.getsockname()[0]
    for name, addrs in psutil.net_if_addrs().items():
        if any(addr.address.split("%")[0] == local_ip for addr in addrs):
            return name
    return local_ip


def _stall_error(exc: OSError, what: str) -> PeerError:
    if isinstance(exc, BlockingIOError) or exc.errno == errno.EAGAIN:
        return PeerError(f"peer stopped {what} for {STALL_TIMEOUT:g} s")
    if exc.errno in (errno.ECONNRESET, errno.EPIPE):
        return PeerError(f"the peer vanished while {what} ({exc.strerror})")
    return PeerError(f"data connection failed while {what}: {exc.strerror or exc}")


# --- tcp.stream --------------------------------------------------------------------------------

class _Transfer:
    """Senders and receivers over a set of data sockets, with an interval sampler.

    Receivers count bytes into per-socket slots that a sampler thread sums every ``interval``;
    the series (time, cumulative bytes) lets goodput omit the warm-up like iperf3 ``-O``.
    """

    def __init__(self, receive_socks: Sequence[socket.socket],
                 send_socks: Sequence[socket.socket], msg_size: int, seconds: float,
                 interval: float, every: float = 0.0,
                 announce: Callable[[float, float, dict[str, tuple[float, str]]], None]
                 | None = None) -> None:
        self.receive_socks, self.send_socks = list(receive_socks), list(send_socks)
        self.msg_size, self.seconds, self.interval = msg_size, seconds, interval
        # The user's interval lines (run --interval), as iperf3's: each ``every`` seconds the
        # bytes the far end acknowledged (TCP_INFO) plus those received here, and the
        # senders' retransmits.
        self.every, self.announce = every, announce
        self.loop = StreamLoop()
        # One int64 a receiver: its running total, written by the loop, summed by _sample.
        self.counters = [array("q", [0]) for _ in self.receive_socks]
        self.ends = [0.0] * len(self.receive_socks)
        self.errors: list[BaseException] = []
        self.series: list[tuple[float, int]] = []
        self._done = threading.Event()

    def run(self) -> None:
        payload = os.urandom(self.msg_size)
        self.t0 = time.monotonic()
        stop_at = self.t0 + self.seconds
        threads = [threading.Thread(target=self._guard, args=(self._send, sock, payload,
                                                              stop_at), daemon=True)
                   for sock in self.send_socks]
        threads += [threading.Thread(target=self._guard, args=(self._receive, sock, i),
                                     daemon=True)
                    for i, sock in enumerate(self.receive_socks)]
        sampler = threading.Thread(target=self._sample, daemon=True)
        sampler.start()
        if self.every > 0 and self.announce is not None:
            threading.Thread(target=self._announce_intervals, daemon=True).start()
        for thread in threads:
            thread.start()
        limit = stop_at + 2 * STALL_TIMEOUT
        for thread in threads:
            thread.join(max(limit - time.monotonic(), 0.0))
        self._done.set()
        sampler.join()
        if any(thread.is_alive() for thread in threads):
            self.errors.append(PeerError("data transfer did not finish; peer unresponsive"))
            # A C loop holds the fd number, not the socket: end it before the caller closes
            # the socket, or it would go on with whatever socket reuses that number.
            _shutdown_all(self.receive_socks + self.send_socks)()
            for thread in threads:
                thread.join(STALL_TIMEOUT)
        if self.errors:
            raise self.errors[0]

    def _guard(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except PeerError as exc:
            self.errors.append(exc)
        except OSError as exc:
            self.errors.append(_stall_error(exc, "moving data"))
        except Exception as exc:     # noqa: BLE001 - a dead thread must not pass for a done one
            self.errors.append(PeerError(f"data transfer failed: {type(exc).__name__}: {exc}"))

    def _send(self, sock: socket.socket, payload: bytes, stop_at: float) -> None:
        self.loop.send_until(sock, payload, stop_at)
        sock.shutdown(socket.SHUT_WR)

    def _receive(self, sock: socket.socket, index: int) -> None:
        buf = bytearray(RECV_BUFFER)       # a stream: the receiver's chunk need not be msg_size
        self.loop.receive(sock, buf, self.counters[index])
        self.ends[index] = time.monotonic() - self.t0

    def received(self) -> int:
        return sum(counter[0] for counter in self.counters)

    def _sample(self) -> None:
        t0, series = self.t0, self.series
        while not self._done.wait(self.interval):
            series.append((time.monotonic() - t0, self.received()))
        series.append((max(self.ends, default=0.0), self.received()))

    def _moved(self) -> tuple[int, int | None]:
        """Bytes the far end acknowledged of this end's sends plus bytes received here, and
        the senders' retransmitted segments (None with no sender here, or no TCP_INFO)."""
        acked, retrans = 0, None
        for sock in self.send_socks:
            info = _tcp_info(sock)
            if info is not None:
                acked += info[1]
                retrans = (retrans or 0) + info[0]
        return acked + self.received(), retrans

    def _announce_intervals(self) -> None:
        before, retr_before, at = *self._moved(), 0.0
        while not self._done.wait(max(at + self.every - (time.monotonic() - self.t0), 0.0)):
            now = time.monotonic() - self.t0
            moved, retr = self._moved()
            values: dict[str, tuple[float, str]] = {
                "goodput": ((moved - before) * 8 / max(now - at, 1e-9) / 1e9, "Gbit/s")}
            if retr is not None and retr_before is not None:
                values["retr"] = (float(retr - retr_before), "")
            assert self.announce is not None
            self.announce(at, now, values)
            before, retr_before, at = moved, retr, now

    def report(self) -> dict[str, Any]:
        return {"bytes": self.received(), "t_end": max(self.ends, default=0.0),
                "series": [[round(t, 6), c] for t, c in self.series]}


_TCP_INFO = struct.Struct("=100xI16xQ")   # tcpi_total_retrans (100), tcpi_bytes_acked (120)


def _tcp_info(sock: socket.socket) -> tuple[int, int] | None:
    """A connection's (retransmitted segments, bytes acknowledged) from the kernel's
    TCP_INFO (Linux 4.1+), or None where it cannot say."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 192)
    except (OSError, AttributeError):
        return None
    if len(raw) < _TCP_INFO.size:
        return None
    retrans, acked = _TCP_INFO.unpack_from(raw)
    return int(retrans), int(acked)


def goodput_from(report: Mapping[str, Any], warmup: float) -> tuple[float, list[float]]:
    """Receiver-counted goodput in Gbit/s after the warm-up, and per-interval rates."""
    series = [(float(t), int(c)) for t, c in report["series"]]
    total, t_end = int(report["bytes"]), float(report["t_end"])
    start_t, start_c = 0.0, 0
    for t, c in series:
        if t >= warmup:
            start_t, start_c = t, c
            break
    window = t_end - start_t
    if total <= 0 or window <= 0:
        raise PeerError("the receiver counted no data after the warm-up; run longer")
    rates = []
    tail = [(t, c) for t, c in series if t >= start_t]
    for (t1, c1), (t2, c2) in zip(tail, tail[1:]):
        if t2 - t1 > 1e-6:
            rates.append((c2 - c1) * 8 / (t2 - t1) / 1e9)
    return (total - start_c) * 8 / window / 1e9, rates


def _sum_series(a: Sequence[float], b: Sequence[float]) -> list[float]:
    return [x + y for x, y in zip(a, b)]


class _TcpBenchmark(Benchmark):
    """Both ends run pinned where ``affinity`` says; the subclasses do the work."""

    transport = "tcp"
    needs_peer = True

    def run(self, case: Case, ctx: Context) -> Measurement:
        with _pinned(_affinity(case.params, 0)):
            return self._run(case, ctx)

    def serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        with _pinned(_affinity(params, 1)):
            self._serve(params, session)

    def server_memory(self, params: Mapping[str, Any]) -> int:
        return self._far_end_bytes(params)

    def _far_end_bytes(self, params: Mapping[str, Any]) -> int:
        raise NotImplementedError

    def _run(self, case: Case, ctx: Context) -> Measurement:
        raise NotImplementedError

    def _serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        raise NotImplementedError


class TcpStream(_TcpBenchmark):
    traces = True                 # its client's data connections, with ctx.trace
    name = "tcp.stream"
    headline = "goodput"
    description = "bulk TCP goodput counted by the receiver (iperf3-style), with CPU cost"
    metrics = (
        Metric("goodput", "Gbit/s", "higher", "receiver-counted payload rate, all directions"),
        Metric("goodput_fwd", "Gbit/s", "higher", "client to server"),
        Metric("goodput_rev", "Gbit/s", "higher", "server to client"),
        *_cpu_metrics("goodput"),
        Metric("cpu_per_gbit", "CPU-s/Gbit", "lower",
               "CPU seconds of both ends per Gbit of payload moved", cost=True),
    )
    params = (
        Param("msg_size", "size", 128 * 1024, "bytes per send() call (iperf3 -l)",
              minimum=1, maximum=64 << 20, sweep=True),
        Param("streams", "int", 1, "parallel connections per direction (iperf3 -P)",
              minimum=1, maximum=128, sweep=True),
        Param("direction", "choice", "forward", "forward: client sends; reverse: server "
              "sends; both: at once", choices=("forward", "reverse", "both")),
        Param("duration", "float", 5.0, "seconds measured (after the warm-up)",
              minimum=0.1, maximum=3600),
        Param("warmup", "float", 0.5, "seconds sent first and not counted (iperf3 -O)",
              minimum=0, maximum=600),
        Param("interval", "float", 0.1, "seconds per goodput sample", minimum=0.01,
              maximum=60),
        Param("window", "size", 0, "socket buffer size, 0 = system default (iperf3 -w)",
              minimum=0, maximum=1 << 30),
        _AFFINITY,
    )

    def window_params(self, seconds: float) -> dict[str, Any] | None:
        # Samples of 0.1 s: a window of fewer than 5 says nothing of a dip inside it.
        if seconds < 0.5:
            raise UsageError(f"tcp.stream: a window of {seconds:g} s is shorter than it can "
                             "measure; at least 0.5 s (5 goodput samples)")
        return {"duration": seconds, "warmup": 0.0}   # the stream never idles between them

    def traits(self, case: Case, measured: Measurement | None = None) -> Traits:
        return replace(super().traits(case, measured), flow=case.params["direction"])

    def _far_end_bytes(self, params: Mapping[str, Any]) -> int:
        fwd, rev = self._split(params)      # it receives fwd streams, sends rev (one payload)
        return fwd * RECV_BUFFER + (params["msg_size"] if rev else 0)

    @staticmethod
    def _split(params: Mapping[str, Any]) -> tuple[int, int]:
        streams, direction = int(params["streams"]), params["direction"]
        fwd = streams if direction in ("forward", "both") else 0
        rev = streams if direction in ("reverse", "both") else 0
        return fwd, rev

    @staticmethod
    def _check(params: Mapping[str, Any]) -> None:
        if (params["warmup"] + params["duration"]) / params["interval"] > MAX_SERIES:
            raise UsageError(f"tcp.stream: (warmup + duration) / interval exceeds {MAX_SERIES} "
                             "samples; raise interval")

    def _run(self, case: Case, ctx: Context) -> Measurement:
        params = case.params
        self._check(params)
        fwd, rev = self._split(params)
        seconds = params["warmup"] + params["duration"]
        session = ctx.connect()
        try:
            session.run_remote(self.name, params, SETUP_TIMEOUT)
            # Traced (netbench fabric --trace): one forward stream, whose data goes out the
            # way its trace went (several streams take several paths; a reverse stream's is
            # the far end's to trace).
            traced = ctx.trace and fwd == 1 and not rev
            socks = session.open_data(fwd + rev, SETUP_TIMEOUT, traced=traced)
            ctx.on_cancel(_shutdown_all(socks))
            try:
                _prepare(socks, params["window"])
                session.channel.expect(SETUP_TIMEOUT)            # "go": the far end is ready
                meter = CpuMeter()
                transfer = _Transfer(socks[fwd:], socks[:fwd], params["msg_size"], seconds,
                                     params["interval"], ctx.every, ctx.interval)
                transfer.run()
                client_cpu = meter.stop()
                far = session.channel.expect(seconds + 3 * STALL_TIMEOUT)
                device = _interface_of(socks[0])
            finally:
                for sock in socks:
                    sock.close()
        finally:
            session.close()
        measured = self._measure(params, fwd, rev, transfer.report(), far, client_cpu, device)
        # Bytes moved by a Python loop at either end (the C loops not built there) is said,
        # as tcp.rr says it; the far end reports its own (an older one, nothing).
        python_ends = [end for end, plane in (("this end", transfer.loop.name),
                                              ("the far end", far.get("data_plane")))
                       if plane == "python"]
        if python_ends:
            measured.note = f"{STREAM_LOOP_NOTE} at {' and '.join(python_ends)}"
        if traced:
            measured.routes = [list(r) for r in session.routes]
        return measured

    def _measure(self, params: Mapping[str, Any], fwd: int, rev: int,
                 local: Mapping[str, Any], far: Mapping[str, Any],
                 client_cpu: Mapping[str, float], device: str) -> Measurement:
        warmup = params["warmup"]
        values: dict[str, float] = {}
        samples: dict[str, list[float]] = {}
        if fwd:
            values["goodput_fwd"], samples["goodput_fwd"] = goodput_from(far["received"],
                                                                         warmup)
        if rev:
            values["goodput_rev"], samples["goodput_rev"] = goodput_from(local, warmup)
        values["goodput"] = values.get("goodput_fwd", 0.0) + values.get("goodput_rev", 0.0)
        parts = [samples[k] for k in ("goodput_fwd", "goodput_rev") if k in samples]
        samples["goodput"] = parts[0] if len(parts) == 1 else _sum_series(*parts)
        server_cpu = far["cpu"]
        values["cpu_client"] = client_cpu["process_pct"]
        values["cpu_server"] = float(server_cpu["process_pct"])
        moved_gbit = (int(far["received"]["bytes"]) if fwd else 0) * 8e-9 + (
            int(local["bytes"]) * 8e-9 if rev else 0.0)
        values["cpu_per_gbit"] = (client_cpu["process_cpu_s"]
                                  + float(server_cpu["process_cpu_s"])) / moved_gbit
        return Measurement(values, samples, device=device)

    def _serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        self._check(params)
        fwd, rev = self._split(params)
        session.channel.send({"ok": True})
        socks = session.accept_data(fwd + rev, SETUP_TIMEOUT)
        try:
            _prepare(socks, params["window"])
            session.channel.send({"go": True})
            meter = CpuMeter()
            transfer = _Transfer(socks[:fwd], socks[fwd:], params["msg_size"],
                                 params["warmup"] + params["duration"], params["interval"])
            transfer.run()
            session.channel.send({"ok": True, "received": transfer.report(),
                                  "cpu": meter.stop(), "data_plane": transfer.loop.name})
        finally:
            for sock in socks:
                sock.close()


# --- tcp.rr ------------------------------------------------------------------------------------

class TcpRr(_TcpBenchmark):
    name = "tcp.rr"
    headline = "lat_p50"
    flow = "both"             # a request and its response
    description = "TCP request/response latency, half the round trip (sockperf ping-pong)"
    metrics = (
        *(Metric(f"lat_{q}", "us (half RTT)", "lower", f"{q} of half the round trip",
                 *(("lat_p50", q) if q != "p50" else ()))
          for q in ("min", "p50", "avg", "stdev", "p99", "p99.9", "max")),
        Metric("tps", "transactions/s", "higher", "round trips completed per second"),
        *_cpu_metrics("tps"),
    )
    params = (
        Param("msg_size", "size", 64, "request and response size in bytes",
              minimum=1, maximum=16 << 20, sweep=True),
        Param("iterations", "int", 20_000, "timed round trips (ignored when duration > 0)",
              minimum=10, maximum=100_000_000),
        Param("duration", "float", 0.0, "seconds of timed round trips; 0 = use iterations",
              minimum=0, maximum=3600),
        Param("warmup", "int", 1_000, "untimed round trips first", minimum=0,
              maximum=10_000_000),
        _AFFINITY,
        Param("data_plane", "choice", "auto", "who times the loop: compiled (C, as sockperf), "
              "python (the fallback), auto = compiled where built",
              choices=("auto", "compiled", "python")),
    )

    def window_params(self, seconds: float) -> dict[str, Any] | None:
        if seconds < 0.1:
            raise UsageError(f"tcp.rr: a window of {seconds:g} s is shorter than it can "
                             "measure; at least 0.1 s")
        return {"duration": seconds}

    def _run(self, case: Case, ctx: Context) -> Measurement:
        params = case.params
        size = params["msg_size"]
        loop = choose_loop(params["data_plane"])
        session = ctx.connect()
        try:
            session.run_remote(self.name, params, SETUP_TIMEOUT)
            (sock,) = session.open_data(1, SETUP_TIMEOUT)
            ctx.on_cancel(_shutdown_all([sock]))
            try:
                _prepare([sock], 0)
                session.channel.expect(SETUP_TIMEOUT)
                meter = CpuMeter()
                first = where_thread_ran()
                try:
                    rtts_ns, elapsed = loop.client(sock, size, params["iterations"],
                                                   params["warmup"],
                                                   int(params["duration"] * 1e9))
                except OSError as exc:
                    raise _stall_error(exc, "answering") from None
                ran_on = (first, where_thread_ran())
                client_cpu = meter.stop()
                sock.shutdown(socket.SHUT_WR)
                far = session.channel.expect(3 * STALL_TIMEOUT)
                device = _interface_of(sock)
            finally:
                sock.close()
        finally:
            session.close()
        half_us = stats.scaled(rtts_ns, 2000.0)
        summary = stats.latency_summary(half_us)
        values = {f"lat_{k}": v for k, v in summary.items()}
        values["tps"] = len(rtts_ns) / elapsed
        values["cpu_client"] = client_cpu["process_pct"]
        values["cpu_server"] = float(far["cpu"]["process_pct"])
        return Measurement(values, {"lat_p50": half_us}, device=device,
                           note=LOOP_NOTE if loop.name == "python" else "",
                           resolved={"data_plane": loop.name},
                           placement=placement(ran_on, far.get("cpus"), far.get("boot")))

    def _far_end_bytes(self, params: Mapping[str, Any]) -> int:
        return int(params["msg_size"])          # the echo buffer

    def _serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        size = params["msg_size"]
        session.channel.send({"ok": True})
        (sock,) = session.accept_data(1, SETUP_TIMEOUT)
        try:
            _prepare([sock], 0)
            session.channel.send({"go": True})
            meter = CpuMeter()
            first = where_thread_ran()
            try:
                choose_loop(params.get("data_plane", "auto")).echo(sock, size)
            except OSError as exc:
                raise _stall_error(exc, "echoing") from None
            session.channel.send({"ok": True, "cpu": meter.stop(), "boot": _boot_id(),
                                  "cpus": [first, where_thread_ran()]})
        finally:
            sock.close()
