"""RDMA verbs benchmarks on RC queue pairs, the way perftest measures them.

``rdma.{write,read,send}_bw`` and ``rdma.{write,read,send}_lat``. With ``--peer`` the far end is
``netbench serve`` on another host (QP number, PSN, GID, rkey and address go over the control
connection, as perftest exchanges them); without one, two QPs on one device in this process
(single-host acceptance and CI). Rows measured on soft-RoCE (rxe) or soft-iWARP are marked
emulated. pyverbs is imported only when a case runs.
"""

from __future__ import annotations

import importlib.util
import os
import select
import time
import zlib
from collections.abc import Mapping
from typing import Any, ClassVar

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
    SkipCase,
    stats,
)

SETUP_TIMEOUT = 30.0
EMULATED_NOTE = ("emulated RDMA device ({}): functional figures, not hardware performance")
PYVERBS_HINT = ("pyverbs is not importable: install the distribution's python3-pyverbs "
                "(apt-get install python3-pyverbs rdma-core) and run netbench from a venv made "
                "with --system-site-packages (or /usr/bin/python3)")
NO_DEVICE_HINT = ("no RDMA device on this host (/sys/class/infiniband is empty); create a "
                  "soft-RoCE one with `netbench rxe add NETDEV` where the kernel has rdma_rxe, "
                  "or run `make bench-softroce` (a VM with a stock kernel and an rxe device)")


def _common_params(iterations: int, warmup: int, sizes_default: int) -> tuple[Param, ...]:
    return (
        Param("msg_size", "size", sizes_default, "bytes per message; 'all' = 2..8M like "
              "perftest -a", minimum=1, maximum=1 << 30, sweep=True, all_range=(2, 8 << 20)),
        Param("device", "str", "", "RDMA device (default: $NETBENCH_RDMA_DEV or the first)"),
        Param("port", "int", 1, "device port", minimum=1, maximum=255),
        Param("gid_index", "int", -1, "GID index; -1 picks RoCE v2 (Ethernet) or 0 (IB)",
              minimum=-1, maximum=1023),
        Param("iterations", "int", iterations, "timed messages per QP (when duration = 0)",
              minimum=1, maximum=1_000_000_000),
        Param("duration", "float", 0.0, "seconds to run instead of a count; 0 = iterations",
              minimum=0, maximum=3600),
        Param("warmup", "int", warmup, "untimed messages first", minimum=0,
              maximum=10_000_000),
        Param("tx_depth", "int", 128, "outstanding send WRs per QP (perftest -t)", minimum=1,
              maximum=16384),
        Param("qps", "int", 1, "queue pairs (perftest -q)", minimum=1, maximum=256,
              sweep=True),
        Param("bidirectional", "bool", False, "both ends send at once (perftest -b)"),
        Param("mtu", "choice", "auto", "path MTU; auto = the port's active MTU",
              choices=("auto", "256", "512", "1024", "2048", "4096")),
        Param("inline_size", "size", 0, "inline messages up to this size (perftest -I)",
              minimum=0, maximum=4096),
        Param("validate", "bool", False, "check the delivered bytes after the run"),
        Param("mem", "choice", "host", "buffer memory: host, or gpu (GPUDirect via dma-buf)",
              choices=("host", "gpu")),
        Param("cq_mod", "int", 100, "signal one completion every N sends (perftest -Q)",
              minimum=1, maximum=16384),
    )


_CPU = Metric("cpu_client", "%core", "lower", "this process, busy-polling as perftest does")


def _lat_metrics(unit: str, what: str) -> tuple[Metric, ...]:
    return (*(Metric(f"lat_{q}", unit, "lower", f"{q} of {what}")
              for q in ("min", "p50", "avg", "stdev", "p99", "p99.9", "max")), _CPU)


class _Rdma(Benchmark):
    transport = "rdma"
    verb: ClassVar[str]

    def available(self, env: Mapping[str, Any]) -> str | None:
        no_pyverbs = importlib.util.find_spec("pyverbs") is None
        if not env.get("rdma_devices"):
            why = env.get("softroce_error")
            return (f"no RDMA device, and soft-RoCE failed: {why}" if why else NO_DEVICE_HINT) + (
                "; and " + PYVERBS_HINT if no_pyverbs else "")
        return PYVERBS_HINT if no_pyverbs else None

    def run(self, case: Case, ctx: Context) -> Measurement:
        params = case.params
        if params["mem"] == "gpu" and self.name.endswith("_lat"):
            raise SkipCase("mem=gpu applies to bandwidth tests only, as in perftest: the "
                           "latency loop polls its buffer from the CPU")
        if params["mem"] == "gpu" and params["inline_size"]:
            raise SkipCase("mem=gpu with inline_size > 0: inline data is copied by the CPU "
                           "from host memory; use inline_size=0")
        if params["bidirectional"] and self.name.endswith("_lat"):
            raise SkipCase("bidirectional applies to bandwidth tests only")
        try:
            from . import _verbs as v
        except ImportError as exc:
            raise SkipCase(f"{PYVERBS_HINT} ({exc})") from None
        deadline = time.monotonic() + max(ctx.remaining() - 5.0, 1.0)
        clock = v.Clock(deadline, ctx.cancelled, self.verb.upper())
        meter = CpuMeter()
        try:
            if ctx.peer:
                result = self._run_remote(v, params, ctx, clock)
            else:
                result = self._run_loopback(v, params, clock)
        except v.PyverbsError as exc:        # e.g. a post to a QP the peer's death broke
            raise v.VerbsError(f"verbs call failed: {exc}") from None
        values, samples, side = result
        cpu = meter.stop()
        values["cpu_client"] = cpu["process_pct"]
        note = EMULATED_NOTE.format(side.device) if side.emulated else ""
        return Measurement(values, samples, device=f"{side.device}:{side.port}",
                           note=note)

    def _run_loopback(self, v: Any, params: Mapping[str, Any], clock: Any) -> Any:
        raise NotImplementedError

    def _run_remote(self, v: Any, params: Mapping[str, Any], ctx: Context, clock: Any) -> Any:
        raise NotImplementedError


class Inbox:
    """Control messages from the peer, read without blocking while a spin loop runs."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.got: dict[str, dict[str, Any]] = {}

    def poll(self) -> None:
        while select.select([self.channel.sock], [], [], 0)[0]:
            message = self.channel.recv(SETUP_TIMEOUT)
            if message.get("error"):
                raise PeerError(f"{self.channel.peer_name}: {message['error']}")
            self.got[str(message.get("kind"))] = message

    def take(self, kind: str, timeout: float) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while kind not in self.got:
            left = deadline - time.monotonic()
            if left <= 0:
                raise PeerError(f"{self.channel.peer_name} sent no {kind!r} within "
                                f"{timeout:g} s")
            if select.select([self.channel.sock], [], [], min(left, 0.5))[0]:
                self.poll()
        return self.got.pop(kind)


def _serve_setup(v: Any, bench: _Rdma, params: Mapping[str, Any], session: ServerSession,
                 depth: int) -> tuple[Any, Any]:
    side = v.side_from(params, depth, os.environ.get("NETBENCH_RDMA_DEV", ""))
    try:
        session.channel.send({"ok": True, "endpoint": side.endpoint().to_json()})
        msg = session.channel.recv(SETUP_TIMEOUT)
        remote = v.Endpoint.from_json(msg.get("endpoint"), session.client_name)
        side.connect(remote)
    except BaseException:
        side.close()
        raise
    return side, remote


# --- bandwidth ---------------------------------------------------------------------------------

class _RdmaBw(_Rdma):
    headline = "bw_avg"
    metrics = (
        Metric("bw_avg", "Gbit/s", "higher", "first post to last completion (perftest)"),
        Metric("bw_peak", "Gbit/s", "higher", "fastest interval between signalled completions"),
        Metric("msg_rate", "Mpps", "higher", "messages per second, millions"),
        _CPU,
    )
    params = _common_params(5000, 0, 65536)

    def _opcode(self, v: Any) -> int:
        return {"write": v.e.IBV_WR_RDMA_WRITE, "read": v.e.IBV_WR_RDMA_READ,
                "send": v.e.IBV_WR_SEND}[self.verb]

    def _depth(self, params: Mapping[str, Any]) -> int:
        return params["tx_depth"]

    def _stop_at(self, params: Mapping[str, Any]) -> float:
        return time.perf_counter() + params["duration"] if params["duration"] else 0.0

    @staticmethod
    def _count(params: Mapping[str, Any]) -> int:
        """Messages per QP to post: iterations, or unbounded when a duration decides."""
        return 1 << 40 if params["duration"] else params["iterations"] + params["warmup"]

    def _fill(self, v: Any, side: Any, seed: int, size: int) -> None:
        side.fill(v.pattern(size, seed))

    def _warm(self, v: Any, side: Any, remote: Any, peer_side: Any, params: Mapping[str, Any],
              clock: Any) -> None:
        if not params["warmup"]:
            return
        sender = v.Sender(side, remote, self._opcode(v), params["warmup"], self._depth(params),
                          params["cq_mod"])
        receiver = (v.Receiver(peer_side, self._depth(params), source=sender)
                    if self.verb == "send" and peer_side is not None else None)
        owners = [(side.cq, sender, None)]
        if receiver is not None:
            owners.append((peer_side.cq, None, receiver))
        v.drive(owners, clock, self.verb.upper())

    def _run_loopback(self, v: Any, params: Mapping[str, Any], clock: Any) -> Any:
        size, depth = params["msg_size"], self._depth(params)
        with v.loopback_pair(params, depth) as (a, b):
            a_ep, b_ep = a.endpoint(), b.endpoint()
            self._fill(v, a, 1, size)
            self._fill(v, b, 2, size)
            self._warm(v, a, b_ep, b, params, clock)
            op, stop_at = self._opcode(v), self._stop_at(params)
            count = 1 << 40 if params["duration"] else params["iterations"]
            send_a = v.Sender(a, b_ep, op, count, depth, params["cq_mod"], stop_at)
            send_b = (v.Sender(b, a_ep, op, count, depth, params["cq_mod"], stop_at)
                      if params["bidirectional"] else None)
            recv_b = v.Receiver(b, depth, source=send_a) if self.verb == "send" else None
            recv_a = (v.Receiver(a, depth, source=send_b)
                      if self.verb == "send" and send_b else None)
            v.drive([(a.cq, send_a, recv_a), (b.cq, send_b, recv_b)], clock,
                    self.verb.upper())
            values, rates = v.bandwidth(send_a, size)
            if send_b is not None:
                values = self._combine(v, values, send_b, size)
            if params["validate"]:
                self._validate_loopback(v, a, b, params)
            return self._values(values), {"bw_avg": rates}, a

    @staticmethod
    def _combine(v: Any, values: dict[str, float], other: Any, size: int) -> dict[str, float]:
        theirs, _ = v.bandwidth(other, size)
        return {"bw_avg": values["bw_avg"] + theirs["bw_avg"],
                "bw_peak": values["bw_peak"] + theirs["bw_peak"],
                "msg_rate": values["msg_rate"] + theirs["msg_rate"]}

    @staticmethod
    def _values(values: Mapping[str, float]) -> dict[str, float]:
        return {k: float(values[k]) for k in ("bw_avg", "bw_peak", "msg_rate")}

    def _expected_crc(self, v: Any, size: int, writer_seed: int) -> int:
        return zlib.crc32(v.pattern(size, writer_seed))

    def _validate_loopback(self, v: Any, a: Any, b: Any, params: Mapping[str, Any]) -> None:
        size = params["msg_size"]
        # write/send: A's pattern lands in B; read: A fetched B's pattern into A.
        target, seed = (a, 2) if self.verb == "read" else (b, 1)
        if target.crc() != self._expected_crc(v, size, seed):
            raise v.VerbsError(f"data validation failed: {self.verb} delivered bytes that "
                               "differ from the source")

    def _exchange(self, v: Any, side: Any, sender: Any, receiver: Any, inbox: Inbox,
                  clock: Any) -> None:
        """Both ends alike: send (receiving on the way), say how many, then receive what the
        peer says it sent. The peer's count arrives through the inbox while we spin."""
        def interrupt() -> bool:
            inbox.poll()
            if receiver is not None and "sent" in inbox.got:
                receiver.expected = int(inbox.got["sent"]["count"])
            return False

        clock.interrupt = interrupt
        v.drive([(side.cq, sender, receiver)], clock, self.verb.upper(), wait_receivers=False)
        inbox.channel.send({"kind": "sent", "count": sender.total_done() if sender else 0})
        if receiver is not None:
            v.drive([(side.cq, None, receiver)], clock, self.verb.upper())
        sent = inbox.take("sent", max(clock.deadline - time.monotonic(), 1.0))
        if receiver is not None and receiver.got != int(sent["count"]):
            raise v.VerbsError(f"received {receiver.got} messages, peer sent {sent['count']}")

    def _run_remote(self, v: Any, params: Mapping[str, Any], ctx: Context, clock: Any) -> Any:
        size, depth = params["msg_size"], self._depth(params)
        session = ctx.connect()
        side = None
        try:
            reply = session.run_remote(self.name, params, SETUP_TIMEOUT)
            side = v.side_from(params, depth)
            self._fill(v, side, 1, size)
            remote = v.Endpoint.from_json(reply.get("endpoint"), session.peer_name)
            side.connect(remote)
            bidir_send = self.verb == "send" and params["bidirectional"]
            receiver = v.Receiver(side, depth) if bidir_send else None
            session.channel.send({"endpoint": side.endpoint().to_json()})
            session.channel.expect(SETUP_TIMEOUT)                       # far end is ready
            sender = v.Sender(side, remote, self._opcode(v),
                              self._count(params), depth, params["cq_mod"],
                              self._stop_at(params))
            inbox = Inbox(session.channel)
            self._exchange(v, side, sender, receiver, inbox, clock)
            far = inbox.take("report", SETUP_TIMEOUT)
            values, rates = v.bandwidth(sender, size)
            if params["bidirectional"]:
                for key in ("bw_avg", "bw_peak", "msg_rate"):
                    values[key] += float(far[key])
            if params["validate"]:
                expected = self._expected_crc(v, size, 2 if self.verb == "read" else 1)
                got = side.crc() if self.verb == "read" else int(far["crc"])
                if got != expected:
                    raise v.VerbsError(f"data validation failed: the bytes {self.verb} "
                                       "delivered differ from the source")
            return self._values(values), {"bw_avg": rates}, side
        finally:
            if side is not None:
                side.close()
            session.close()

    def serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        from . import _verbs as v

        size, depth = params["msg_size"], self._depth(params)
        side, remote = _serve_setup(v, self, params, session, depth)
        try:
            self._fill(v, side, 2, size)
            receiver = v.Receiver(side, depth) if self.verb == "send" else None
            sender = (v.Sender(side, remote, self._opcode(v),
                               self._count(params), depth, params["cq_mod"],
                               self._stop_at(params)) if params["bidirectional"] else None)
            session.channel.send({"ready": True})
            clock = v.Clock(time.monotonic() + 3600, None, self.verb.upper())
            self._exchange(v, side, sender, receiver, Inbox(session.channel), clock)
            report: dict[str, Any] = {"kind": "report", "crc": side.crc()}
            if sender is not None:
                report.update(self._values(v.bandwidth(sender, size)[0]))
            session.channel.send(report)
        finally:
            side.close()


class RdmaWriteBw(_RdmaBw):
    name = "rdma.write_bw"
    verb = "write"
    description = "RDMA WRITE bandwidth and message rate (ib_write_bw)"


class RdmaReadBw(_RdmaBw):
    name = "rdma.read_bw"
    verb = "read"
    description = "RDMA READ bandwidth and message rate (ib_read_bw)"


class RdmaSendBw(_RdmaBw):
    name = "rdma.send_bw"
    verb = "send"
    description = "SEND/RECV bandwidth and message rate (ib_send_bw)"


# --- latency -----------------------------------------------------------------------------------

class _RdmaLat(_Rdma):
    headline = "lat_p50"
    params = _common_params(1000, 100, 2)
    half_rtt: ClassVar[bool] = True

    def _summary(self, rtts_ns: list[int]) -> tuple[dict[str, float], dict[str, list[float]]]:
        div = 2000.0 if self.half_rtt else 1000.0
        lat_us = [ns / div for ns in rtts_ns]
        values = {f"lat_{k}": val for k, val in stats.latency_summary(lat_us).items()}
        return values, {"lat_p50": lat_us}

    def _run_loopback(self, v: Any, params: Mapping[str, Any], clock: Any) -> Any:
        with v.loopback_pair(params, 16) as (a, b):
            a_ep, b_ep = a.endpoint(), b.endpoint()
            if self.verb == "read":
                rtts = v.read_latency(a, b_ep, params["warmup"], params["iterations"], clock,
                                      params["duration"])
            else:
                me, peer = v.PingPong(a, b_ep, self.verb), v.PingPong(b, a_ep, self.verb)
                rtts = v.pingpong_client(me, peer, params["warmup"], params["iterations"],
                                         clock, params["duration"])
            values, samples = self._summary(rtts)
            return values, samples, a

    def _run_remote(self, v: Any, params: Mapping[str, Any], ctx: Context, clock: Any) -> Any:
        session = ctx.connect()
        side = None
        try:
            reply = session.run_remote(self.name, params, SETUP_TIMEOUT)
            side = v.side_from(params, 16)
            remote = v.Endpoint.from_json(reply.get("endpoint"), session.peer_name)
            side.connect(remote)
            me = v.PingPong(side, remote, self.verb) if self.verb != "read" else None
            session.channel.send({"endpoint": side.endpoint().to_json()})
            session.channel.expect(SETUP_TIMEOUT)
            if self.verb == "read":
                rtts = v.read_latency(side, remote, params["warmup"], params["iterations"],
                                      clock, params["duration"])
            else:
                rtts = v.pingpong_client(me, None, params["warmup"], params["iterations"],
                                         clock, params["duration"])
            session.channel.send({"kind": "done"})
            session.channel.expect(SETUP_TIMEOUT)
            values, samples = self._summary(rtts)
            return values, samples, side
        finally:
            if side is not None:
                side.close()
            session.close()

    def serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        from . import _verbs as v

        side, remote = _serve_setup(v, self, params, session, 16)
        try:
            me = v.PingPong(side, remote, self.verb) if self.verb != "read" else None
            session.channel.send({"ready": True})
            inbox = Inbox(session.channel)

            def client_done() -> bool:
                inbox.poll()
                return "done" in inbox.got

            clock = v.Clock(time.monotonic() + 3600, None, self.verb.upper(), client_done)
            try:
                if me is not None:
                    v.pingpong_server(me, 1 << 62, clock)
                while not client_done():
                    time.sleep(0.01)
            except v.Stop:
                pass
            session.channel.send({"ok": True})
        finally:
            side.close()


class RdmaWriteLat(_RdmaLat):
    name = "rdma.write_lat"
    verb = "write"
    description = "RDMA WRITE ping-pong latency, half the round trip (ib_write_lat)"
    metrics = _lat_metrics("us (half RTT)", "half the round trip")


class RdmaReadLat(_RdmaLat):
    name = "rdma.read_lat"
    verb = "read"
    half_rtt = False
    description = "RDMA READ latency, the full round trip (ib_read_lat)"
    metrics = _lat_metrics("us (full RTT)", "the full round trip")


class RdmaSendLat(_RdmaLat):
    name = "rdma.send_lat"
    verb = "send"
    description = "SEND/RECV ping-pong latency, half the round trip (ib_send_lat)"
    metrics = _lat_metrics("us (half RTT)", "half the round trip")
