"""RDMA verbs benchmarks on RC queue pairs, the way perftest measures them.

``rdma.{write,read,send}_bw`` and ``rdma.{write,read,send}_lat``. With ``--peer`` the far end is
``netbench serve`` on another host (QP number, PSN, GID, rkey and address go over the control
connection, as perftest exchanges them); without one, two QPs on one device in this process
(single-host acceptance and CI). Rows measured on soft-RoCE (rxe) or soft-iWARP are marked
emulated. pyverbs is imported only when a case runs.
"""

from __future__ import annotations

import importlib.util
import math
import os
import select
import threading
import time
import zlib
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import replace
from typing import Any, ClassVar

from netbench.api import (
    Benchmark,
    Case,
    Context,
    CpuMeter,
    Fingerprint,
    Measurement,
    Metric,
    NetbenchError,
    Param,
    PeerError,
    Record,
    RunSetup,
    ServerSession,
    SkipCase,
    Traits,
    UsageError,
    softroce,
    stats,
)

from .choice import choose
from .plane import (
    OPCODES,
    Clock,
    DataPlane,
    Endpoint,
    MergedSender,
    Side,
    Stop,
    VerbsError,
    in_threads,
    pattern,
)

SETUP_TIMEOUT = 30.0
EMULATED_NOTE = ("emulated RDMA device ({}): functional figures, not hardware performance")
PYVERBS_HINT = ("pyverbs is not importable: install the distribution's python3-pyverbs "
                "(apt-get install python3-pyverbs rdma-core) and run netbench from a venv made "
                "with --system-site-packages (or /usr/bin/python3)")
NO_DEVICE_HINT = ("no RDMA device on this host (/sys/class/infiniband is empty); create a "
                  "soft-RoCE one with `netbench rxe add NETDEV` where the kernel has rdma_rxe, "
                  "or run `make bench-softroce` (a VM with a stock kernel and an rxe device)")


def _common_params(iterations: int, warmup: int, sizes_default: int,
                   inline_default: int = 0) -> tuple[Param, ...]:
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
        Param("inline_size", "size", inline_default, "inline messages up to this size "
              "(perftest -I; its latency defaults: 220 B write, 236 B send)", minimum=0,
              maximum=4096),
        Param("validate", "bool", False, "check the delivered bytes after the run"),
        Param("mem", "choice", "host", "buffer memory: host, or gpu (GPUDirect via dma-buf)",
              choices=("host", "gpu")),
        Param("cq_mod", "int", 100, "signal one completion every N sends (perftest -Q)",
              minimum=1, maximum=16384),
        Param("data_plane", "choice", "auto", "who times the loop: compiled (C, as perftest), "
              "pyverbs (Python loops, the fallback), auto = compiled where built",
              choices=("auto", "compiled", "pyverbs")),
    )


_CPU = Metric("cpu_client", "%core", "lower", "this process, busy-polling as perftest does",
              cost=True)


def _lat_metrics(unit: str, what: str) -> tuple[Metric, ...]:
    return (*(Metric(f"lat_{q}", unit, "lower", f"{q} of {what}",
                     *(("lat_p50", q) if q != "p50" else ()))
              for q in ("min", "p50", "avg", "stdev", "p99", "p99.9", "max")), _CPU)


class _Rdma(Benchmark):
    transport = "rdma"
    verb: ClassVar[str]

    def window_params(self, seconds: float) -> dict[str, Any] | None:
        if seconds < 0.1:
            raise UsageError(f"{self.name}: a window of {seconds:g} s is shorter than it can "
                             "measure; at least 0.1 s")
        return {"duration": seconds}      # perftest -D: a figure per window

    def available(self, env: Mapping[str, Any]) -> str | None:
        no_pyverbs = importlib.util.find_spec("pyverbs") is None
        if not Fingerprint(env).rdma_devices:
            why = Fingerprint(env).softroce_error
            return (f"no RDMA device, and soft-RoCE failed: {why}" if why else NO_DEVICE_HINT) + (
                "; and " + PYVERBS_HINT if no_pyverbs else "")
        return PYVERBS_HINT if no_pyverbs else None

    def prepare_run(self, options: Mapping[str, Any],
                    env: Mapping[str, Any]) -> RunSetup | None:
        """`[suite] softroce = "auto"|NETDEV`: with no RDMA device, make a soft-RoCE one for
        this run and remove it afterwards; if that cannot be done, every case says why."""
        netdev = options.get("softroce")
        if not netdev or Fingerprint(env).rdma_devices:
            return None
        try:
            used = softroce.add(netdev, "rxe0")
        except NetbenchError as exc:
            return RunSetup(env=Record(softroce_error=str(exc)),
                            fallback=f"no RDMA device, and soft-RoCE could not be set up: {exc}")
        return RunSetup(reprobe=True, close=lambda: softroce.remove("rxe0"),
                        fallback=f"no RDMA device: created soft-RoCE rxe0 on {used} for this "
                        "run (removed afterwards); its figures are emulated")

    def server_memory(self, params: Mapping[str, Any]) -> int:
        return 2 * int(params["msg_size"]) if params["mem"] == "host" else 0   # the MR

    def traits(self, case: Case, measured: Measurement | None = None) -> Traits:
        """A READ brings the far end's memory back; perftest prints #iterations first."""
        traits = super().traits(case, measured)
        return replace(traits, flow="both" if case.params["bidirectional"] else traits.flow,
                       lead=(("#iterations", self._iterations(case, measured)),))

    def _iterations(self, case: Case, measured: Measurement | None) -> str:
        """The messages timed: the iterations asked for (a duration-bound run counts none
        ahead); nothing ran for a skipped or failed case."""
        if measured is None or case.params["duration"]:
            return "-"
        return f"{int(case.params['iterations']):,}"

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
            v, fallback = choose(params)
        except ImportError as exc:
            raise SkipCase(f"{PYVERBS_HINT} ({exc})") from None
        _threads_need_the_compiled_plane(v, params)
        deadline = time.monotonic() + max(ctx.remaining() - 5.0, 1.0)
        clock = Clock(deadline, ctx.cancelled, self.verb.upper())
        ctx.on_cancel(clock.cancel)        # reaches a compiled loop spinning without the GIL
        meter = CpuMeter()
        try:
            if ctx.peer:
                result = self._run_remote(v, params, ctx, clock)
            else:
                result = self._run_loopback(v, params, clock)
        except v.failures as exc:        # e.g. a post to a QP the peer's death broke
            raise VerbsError(f"verbs call failed: {exc}") from None
        values, samples, side = result
        cpu = meter.stop()
        values["cpu_client"] = cpu["process_pct"]
        notes = [EMULATED_NOTE.format(side.device) if side.emulated else "",
                 "timed by the pyverbs fallback data plane" if fallback else ""]
        return Measurement(values, samples, device=f"{side.device}:{side.port}",
                           note="; ".join(n for n in notes if n),
                           resolved={"data_plane": v.name, "timer": v.timer},
                           fallback=fallback)

    def _run_loopback(self, v: DataPlane, params: Mapping[str, Any], clock: Clock) -> Any:
        raise NotImplementedError

    def _run_remote(self, v: DataPlane, params: Mapping[str, Any], ctx: Context,
                    clock: Clock) -> Any:
        raise NotImplementedError


class Inbox:
    """Control messages from the peer, read without blocking while a spin loop runs."""

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self.got: dict[str, dict[str, Any]] = {}
        # A sending thread may speak while the watching one reads: one at a time (a read sets
        # the socket's timeout, which a send in flight would inherit).
        self._lock = threading.Lock()

    def poll(self) -> None:
        with self._lock:
            while select.select([self.channel.sock], [], [], 0)[0]:
                message = self.channel.recv(SETUP_TIMEOUT)
                if message.get("error"):
                    raise PeerError(f"{self.channel.peer_name}: {message['error']}")
                self.got[str(message.get("kind"))] = message

    def send(self, message: dict[str, Any]) -> None:
        with self._lock:
            self.channel.send(message)

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


def _threads_need_the_compiled_plane(v: DataPlane, params: Mapping[str, Any]) -> None:
    if params.get("threads", 1) > 1 and v.name != "compiled":
        raise SkipCase(f"threads={params['threads']} needs the compiled data plane: the "
                       f"{v.name} plane's loops hold Python's lock, so its threads would take "
                       "turns, not run side by side")


def _endpoints_message(sides: Sequence[Side]) -> dict[str, Any]:
    """Our QPs' parameters: ``endpoint`` (the first side's, what a one-thread peer reads)
    and ``endpoints`` (one a thread)."""
    eps = [side.endpoint().to_json() for side in sides]
    return {"endpoint": eps[0], "endpoints": eps}


def _endpoints_from(msg: Mapping[str, Any], count: int, who: str) -> list[Endpoint]:
    """The peer's QP parameters, one a thread: exactly ``count`` of them."""
    raw = msg.get("endpoints") if count > 1 else [msg.get("endpoint")]
    if not isinstance(raw, list) or len(raw) != count:
        got = len(raw) if isinstance(raw, list) else "no"
        raise PeerError(f"{who} sent {got} QP endpoints for threads={count} (an older "
                        "netbench serve has one thread only)")
    return [Endpoint.from_json(one, who) for one in raw]


def _serve_setup(v: DataPlane, params: Mapping[str, Any], session: ServerSession,
                 depth: int, count: int = 1) -> tuple[list[Any], list[Endpoint]]:
    """The far end's sides, one a thread, connected to the client's."""
    # The far end opens its own NIC, never the client's name for one: the rank's (a fabric
    # sweep with a rank per NIC), else this host's default.
    sides: list[Any] = []
    try:
        for _ in range(count):
            sides.append(v.side(params, depth, session.device
                                or os.environ.get("NETBENCH_RDMA_DEV", "")))
        session.channel.send({"ok": True, **_endpoints_message(sides)})
        msg = session.channel.recv(SETUP_TIMEOUT)
        remotes = _endpoints_from(msg, count, session.client_name)
        for side, remote in zip(sides, remotes):
            side.connect(remote)
    except BaseException:
        for side in sides:
            side.close()
        raise
    return sides, remotes


def _merged(senders: Sequence[Any]) -> Any:
    """One thread's sender as it is; several threads' as one (their completions added)."""
    return senders[0] if len(senders) == 1 else MergedSender(senders)


def _counts(msg: Mapping[str, Any], count: int, who: str) -> list[int]:
    """The messages the peer sent on each of its threads' QPs (its "sent" message)."""
    raw = msg.get("counts") if count > 1 else [msg.get("count")]
    if (not isinstance(raw, list) or len(raw) != count
            or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in raw)):
        raise PeerError(f"{who} sent a malformed message count for threads={count}")
    if any(n > MAX_COUNT for n in raw):
        raise PeerError(f"{who} said it sent more than {MAX_COUNT} messages on one thread")
    return raw


MAX_COUNT = 1 << 62        # messages a peer may say one thread sent (the C side's int64)


# --- bandwidth ---------------------------------------------------------------------------------

class _RdmaBw(_Rdma):
    headline = "bw_avg"
    metrics = (
        Metric("bw_avg", "Gbit/s", "higher", "first post to last completion (perftest)"),
        Metric("bw_peak", "Gbit/s", "higher", "fastest interval between signalled completions"),
        Metric("msg_rate", "Mpps", "higher", "messages per second, millions"),
        _CPU,
    )
    params = (*_common_params(5000, 0, 65536),
              Param("post_list", "int", 1, "WRs per doorbell (ibv_post_send call) per QP "
                    "(perftest -l); the compiled data plane chains them", minimum=1,
                    maximum=64),
              Param("threads", "int", 1, "sending threads, each with its own QPs (qps a "
                    "thread), CQ and buffer, at both ends: as many ib_write_bw processes side "
                    "by side, added up (one core drives ~30 M messages/s: docs/instructions.md)",
                    minimum=1, maximum=64))

    def server_memory(self, params: Mapping[str, Any]) -> int:
        return super().server_memory(params) * params.get("threads", 1)

    def _opcode(self) -> int:
        return OPCODES[self.verb]

    def _depth(self, params: Mapping[str, Any]) -> int:
        return params["tx_depth"]

    def _stop_at(self, params: Mapping[str, Any]) -> float:
        return time.perf_counter() + params["duration"] if params["duration"] else 0.0

    @staticmethod
    def _count(params: Mapping[str, Any]) -> int:
        """Timed messages per QP: iterations, or unbounded when a duration decides. Warm-up
        messages are a sender of their own, posted and completed before this one starts."""
        return 1 << 40 if params["duration"] else params["iterations"]

    def _sender(self, v: DataPlane, side: Side, remote: Endpoint | None,
                params: Mapping[str, Any], count: int, stop_at: float = 0.0) -> Any:
        return v.sender(side, remote, self._opcode(), count, self._depth(params),
                        params["cq_mod"], stop_at, params["post_list"])

    def _fill(self, side: Side, seed: int, size: int) -> None:
        side.fill(pattern(size, seed))

    def _warm(self, v: DataPlane, side: Side, remote: Endpoint | None, peer_side: Side | None,
              params: Mapping[str, Any], clock: Clock) -> None:
        if not params["warmup"]:
            return
        sender = self._sender(v, side, remote, params, params["warmup"])
        receiver = (v.receiver(peer_side, self._depth(params), source=sender)
                    if self.verb == "send" and peer_side is not None else None)
        owners = [(side.cq, sender, None)]
        if receiver is not None:
            owners.append((peer_side.cq, None, receiver))
        v.drive(owners, clock, self.verb.upper())

    def _run_loopback(self, v: DataPlane, params: Mapping[str, Any], clock: Clock) -> Any:
        """A pair of sides on the device a thread (``threads``), all warmed up, then all timed
        at once, each pair driven by its own thread."""
        size, depth, what = params["msg_size"], self._depth(params), self.verb.upper()
        with ExitStack() as stack:
            pairs = [stack.enter_context(v.loopback_pair(params, depth))
                     for _ in range(params["threads"])]
            eps = [(a.endpoint(), b.endpoint()) for a, b in pairs]
            for a, b in pairs:
                self._fill(a, 1, size)
                self._fill(b, 2, size)
            in_threads(clock, [lambda c, a=a, b=b, b_ep=b_ep: self._warm(v, a, b_ep, b, params, c)
                               for (a, b), (_, b_ep) in zip(pairs, eps)])
            stop_at = self._stop_at(params)
            count = self._count(params)
            legs = []
            for (a, b), (a_ep, b_ep) in zip(pairs, eps):
                send_a = self._sender(v, a, b_ep, params, count, stop_at)
                send_b = (self._sender(v, b, a_ep, params, count, stop_at)
                          if params["bidirectional"] else None)
                recv_b = v.receiver(b, depth, source=send_a) if self.verb == "send" else None
                recv_a = (v.receiver(a, depth, source=send_b)
                          if self.verb == "send" and send_b else None)
                legs.append([(a.cq, send_a, recv_a), (b.cq, send_b, recv_b)])
            in_threads(clock, [lambda c, owners=owners: v.drive(owners, c, what)
                               for owners in legs])
            values, rates = self._measure(v, _merged([leg[0][1] for leg in legs]), params)
            if params["bidirectional"]:
                theirs, their_rates = self._measure(
                    v, _merged([leg[1][1] for leg in legs]), params)
                values, rates = self._both(values, rates, theirs, their_rates)
            if params["validate"]:
                for a, b in pairs:
                    self._validate_loopback(a, b, params)
            return values, self._samples(rates, size), pairs[0][0]

    def _measure(self, v: DataPlane, sender: Any, params: Mapping[str, Any]
                 ) -> tuple[dict[str, float], list[float]]:
        """One direction's figures, as perftest: bw_avg and msg_rate from the first post to
        the last completion; bw_peak the fastest window of at least a send queue's worth of
        completions (and ~2% of the run), so two completions that land together cannot fake
        an absurd rate, never below the average (the whole run is a window too). And its
        samples: the run cut into equal-time windows (``time_windows``), as many as it has
        queues' worth of completions, at most WINDOWS, whose mean is bw_avg exactly."""
        size, total = params["msg_size"], sender.total_done()
        seconds = sender.t_last - sender.t_first
        if total <= 0 or seconds <= 0:
            raise VerbsError("no completions were recorded")
        queue = max(self._depth(params) * params["qps"] * params.get("threads", 1), 1)
        window = max(queue, total // 50, 1)
        peak, prev_t, prev_n = 0.0, sender.t_first, 0
        for t, n in sender.stamps:
            if n - prev_n >= window and t > prev_t:
                peak = max(peak, (n - prev_n) * size * 8 / (t - prev_t) / 1e9)
                prev_t, prev_n = t, n
        if total - prev_n >= window // 2 and sender.t_last > prev_t:     # the tail counts too
            peak = max(peak, (total - prev_n) * size * 8 / (sender.t_last - prev_t) / 1e9)
        avg = total * size * 8 / seconds / 1e9
        k = max(1, min(WINDOWS, total // queue))
        rates = [c * size * 8 / 1e9 for c in time_windows(completion_curve(sender), k)]
        return {"bw_avg": avg, "bw_peak": max(peak, avg), "msg_rate": total / seconds / 1e6}, \
            rates

    @staticmethod
    def _both(values: Mapping[str, float], rates: list[float], theirs: Mapping[str, Any],
              their_rates: list[float]) -> tuple[dict[str, float], list[float]]:
        """Both directions at once: the figures add up (perftest -b), and so do the windows.
        Each direction's windows are equal shares of its own run's time (the two runs need not
        start, stop or stall together, nor share a clock), so both are cut into as many
        (``rebin``) and the i-th summed: the mean of the sums is the sum of the two bw_avg,
        exactly. Without the far end's windows (an older netbench, or a report whose windows
        do not average to its own figure) the row has no samples rather than samples that
        disagree with its value."""
        both = {k: float(values[k]) + float(theirs[k]) for k in ("bw_avg", "bw_peak", "msg_rate")}
        k = min(len(rates), len(their_rates))
        if not k:
            return both, []
        return both, [a + b for a, b in zip(rebin(rates, k), rebin(their_rates, k))]

    @staticmethod
    def _samples(rates: list[float], size: int) -> dict[str, list[float]]:
        """Per-window samples: bandwidth, and the same windows as message rates."""
        return {"bw_avg": rates, "msg_rate": [r * 1e9 / (size * 8) / 1e6 for r in rates]}

    def _expected_crc(self, size: int, writer_seed: int) -> int:
        return zlib.crc32(pattern(size, writer_seed))

    def _validate_loopback(self, a: Side, b: Side, params: Mapping[str, Any]) -> None:
        size = params["msg_size"]
        # write/send: A's pattern lands in B; read: A fetched B's pattern into A.
        target, seed = (a, 2) if self.verb == "read" else (b, 1)
        if target.crc() != self._expected_crc(size, seed):
            raise VerbsError(f"data validation failed: {self.verb} delivered bytes that "
                             "differ from the source")

    def _exchange(self, v: DataPlane, sides: Sequence[Side], remotes: Sequence[Endpoint],
                  params: Mapping[str, Any], sending: bool,
                  receivers: Sequence[Any | None], inbox: Inbox, clock: Clock) -> list[Any]:
        """Both ends alike, a thread a side: warm up (untimed), send the timed messages
        (receiving on the way), and once every thread's sending is done say how many each
        sent; then each thread keeps receiving until it has what the peer says it sent on its
        QPs. A thread that stopped receiving when its own sending ended would starve a peer's
        thread still sending to it (no receive posted: RNR), while that peer waits for it: so
        receiving lasts until the counts are met, on every thread at once. With several
        threads, their warm-ups all end before any timed run starts, and this thread alone
        reads the control connection while they run (a hang-up or an error seen at once,
        whichever threads are left), telling each thread the peer's count by a bell (a pipe
        its loop watches), so each sets its own receiver's count in its own thread. Returns
        the timed senders (none if not sending)."""
        who, n = inbox.channel.peer_name, len(sides)
        told: list[list[int]] = []              # the peer's counts, once they came

        def heard() -> bool:
            inbox.poll()
            if "sent" in inbox.got and not told:
                told.append(_counts(inbox.got["sent"], n, who))
                return True
            return False

        def expect(i: int) -> None:
            if told and receivers[i] is not None:
                receivers[i].expected = told[0][i]

        bells = [os.pipe() for _ in range(n)] if n > 1 else []

        def ring() -> None:
            if heard():
                for _, bell in bells:
                    os.write(bell, b"!")

        def answer(i: int) -> bool:            # a thread's loop heard its bell
            os.read(bells[i][0], 16)
            expect(i)
            return False

        def interrupt() -> bool:               # one thread: it reads the connection itself
            heard()
            expect(0)
            return False

        clock.interrupt, clock.watch_fd = interrupt, inbox.channel.sock.fileno()
        what = self.verb.upper()
        sent = [0] * n
        timed: list[Any] = [None] * n
        finished = [0]
        lock = threading.Lock()
        warmed = threading.Barrier(n) if n > 1 and sending and params["warmup"] else None

        def one_side(i: int, own: Clock) -> None:
            side, remote, receiver = sides[i], remotes[i], receivers[i]
            if n > 1:
                own.interrupt, own.watch_fd = (lambda: answer(i)), bells[i][0]
            if sending:
                if params["warmup"]:
                    warm = self._sender(v, side, remote, params, params["warmup"])
                    v.drive([(side.cq, warm, receiver)], own, what, wait_receivers=False)
                    sent[i] += warm.total_done()
                if warmed is not None:
                    warmed.wait(max(own.deadline - time.monotonic(), 1.0))
                timed[i] = self._sender(v, side, remote, params, self._count(params),
                                        self._stop_at(params))
                v.drive([(side.cq, timed[i], receiver)], own, what, wait_receivers=False)
                sent[i] += timed[i].total_done()
            with lock:
                finished[0] += 1
                last = finished[0] == n
            if last:
                inbox.send({"kind": "sent", "count": sum(sent), "counts": sent})
            if receiver is not None:
                expect(i)
                v.drive([(side.cq, None, receiver)], own, what)

        def job(i: int, own: Clock) -> None:
            try:
                one_side(i, own)
            except BaseException:
                if warmed is not None:
                    warmed.abort()              # no sibling waits for this one
                raise

        try:
            in_threads(clock, [lambda own, i=i: job(i, own) for i in range(n)],
                       watch=ring if n > 1 else None)
        finally:
            for fds in bells:
                for fd in fds:
                    os.close(fd)
        counts = _counts(inbox.take("sent", max(clock.deadline - time.monotonic(), 1.0)),
                         n, who)
        for receiver, count in zip(receivers, counts):
            if receiver is not None and receiver.got != count:
                raise VerbsError(f"received {receiver.got} messages, peer sent {count}")
        return [t for t in timed if t is not None]

    def _run_remote(self, v: DataPlane, params: Mapping[str, Any], ctx: Context,
                    clock: Clock) -> Any:
        size, depth, n = params["msg_size"], self._depth(params), params["threads"]
        session = ctx.connect()
        sides: list[Any] = []
        try:
            # threads=1 is left out: a netbench serve from before threads refuses the name.
            asked = {k: val for k, val in params.items() if k != "threads" or val != 1}
            reply = session.run_remote(self.name, asked, SETUP_TIMEOUT)
            remotes = _endpoints_from(reply, n, session.peer_name)
            for remote in remotes:
                sides.append(v.side(params, depth))
                self._fill(sides[-1], 1, size)
                sides[-1].connect(remote)
            bidir_send = self.verb == "send" and params["bidirectional"]
            receivers = [v.receiver(side, depth) if bidir_send else None for side in sides]
            session.channel.send(_endpoints_message(sides))
            session.channel.expect(SETUP_TIMEOUT)                       # far end is ready
            inbox = Inbox(session.channel)
            senders = self._exchange(v, sides, remotes, params, True, receivers, inbox, clock)
            far = inbox.take("report", SETUP_TIMEOUT)
            values, rates = self._measure(v, _merged(senders), params)
            if params["bidirectional"]:
                values, rates = self._both(values, rates, far, _far_rates(far))
            if params["validate"]:
                expected = self._expected_crc(size, 2 if self.verb == "read" else 1)
                got = ([side.crc() for side in sides] if self.verb == "read"
                       else far.get("crcs") if n > 1 else [far.get("crc")])
                if not isinstance(got, list) or len(got) != n:
                    raise PeerError(f"{session.peer_name} sent no checksum for each thread")
                if any(crc != expected for crc in got):
                    raise VerbsError(f"data validation failed: the bytes {self.verb} "
                                     "delivered differ from the source")
            return values, self._samples(rates, size), sides[0]
        finally:
            for side in sides:
                side.close()
            session.close()

    def serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        v, _ = choose(params)
        _threads_need_the_compiled_plane(v, params)
        size, depth = params["msg_size"], self._depth(params)
        sides, remotes = _serve_setup(v, params, session, depth, params.get("threads", 1))
        try:
            for side in sides:
                self._fill(side, 2, size)
            receivers = [v.receiver(side, depth) if self.verb == "send" else None
                         for side in sides]
            session.channel.send({"ready": True})
            clock = Clock(time.monotonic() + 3600, None, self.verb.upper())
            senders = self._exchange(v, sides, remotes, params, params["bidirectional"],
                                     receivers, Inbox(session.channel), clock)
            crcs = [side.crc() for side in sides]
            report: dict[str, Any] = {"kind": "report", "crc": crcs[0], "crcs": crcs}
            if senders:
                values, rates = self._measure(v, _merged(senders), params)
                report.update(values, windows=rates)
            session.channel.send(report)
        finally:
            for side in sides:
                side.close()


WINDOWS = 50           # equal-time windows a bandwidth row's samples cut the run into, at most
MAX_WINDOWS = 256      # window rates a far end may report (it makes at most WINDOWS)


def completion_curve(sender: Any) -> list[tuple[float, float]]:
    """A sender's run as its cumulative completions over time: (first post, 0), its stamps,
    (last completion, total); kept within those ends and never decreasing."""
    t0, t1, total = sender.t_first, sender.t_last, sender.total_done()
    curve = [(t0, 0.0)]
    for t, n in sender.stamps:
        curve.append((min(max(float(t), curve[-1][0]), t1), min(max(float(n), curve[-1][1]),
                                                                 total)))
    curve.append((t1, float(total)))
    return curve


def time_windows(curve: list[tuple[float, float]], k: int) -> list[float]:
    """The rate (count per second) in each of ``k`` equal-time windows of a cumulative curve
    [(t, count so far), ...] that starts at count 0 and never decreases; between its points
    the count is interpolated linearly. The windows span equal times and their counts add up
    to the curve's total, so their mean is total / (t_last - t_first) exactly: the headline,
    however uneven the run (a stall is windows of low rate, not one long window among short
    ones, whose plain mean would overstate the run)."""
    t0, t_end = curve[0][0], curve[-1][0]
    span = t_end - t0
    if k < 1 or span <= 0:
        return []
    step, last = span / k, len(curve) - 1
    at = [0.0]                          # the count at each window's end
    i = 0
    for j in range(1, k):
        b = t0 + j * step
        while i < last - 1 and curve[i + 1][0] <= b:
            i += 1
        (ta, na), (tb, nb) = curve[i], curve[i + 1]
        frac = min(max((b - ta) / (tb - ta), 0.0), 1.0) if tb > ta else 1.0
        at.append(max(at[-1], na + (nb - na) * frac))
    at.append(max(at[-1], curve[-1][1]))
    return [(at[j + 1] - at[j]) / step for j in range(k)]


def rebin(rates: list[float], k: int) -> list[float]:
    """Equal-time window rates cut again into ``k`` equal-time windows (each the time-weighted
    mean of the old ones it overlaps): the mean is kept exactly."""
    if len(rates) == k or not rates:
        return list(rates)
    n, cum = len(rates), [0.0]
    for r in rates:
        cum.append(cum[-1] + r / n)
    return time_windows([(i / n, c) for i, c in enumerate(cum)], k)


def _far_rates(far: Mapping[str, Any]) -> list[float]:
    """The far end's window rates, or none: nothing off the wire is trusted. At most
    MAX_WINDOWS, every one a finite number >= 0, and their mean the far end's own bw_avg (as
    this version's equal-time windows are); anything else would put samples beside the row's
    value that do not add up to it."""
    raw, avg = far.get("windows"), far.get("bw_avg")
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_WINDOWS:
        return []

    def number(x: Any) -> bool:
        return (isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                and x >= 0)

    if not number(avg) or not all(number(x) for x in raw):
        return []
    rates = [float(x) for x in raw]
    if not math.isclose(sum(rates) / len(rates), float(avg), rel_tol=1e-6, abs_tol=1e-12):
        return []
    return rates


class RdmaWriteBw(_RdmaBw):
    name = "rdma.write_bw"
    verb = "write"
    description = "RDMA WRITE bandwidth and message rate (ib_write_bw)"


class RdmaReadBw(_RdmaBw):
    name = "rdma.read_bw"
    verb = "read"
    flow = "reverse"                    # the far end's memory comes back
    description = "RDMA READ bandwidth and message rate (ib_read_bw)"


class RdmaSendBw(_RdmaBw):
    name = "rdma.send_bw"
    verb = "send"
    description = "SEND/RECV bandwidth and message rate (ib_send_bw)"


# --- latency -----------------------------------------------------------------------------------

class _RdmaLat(_Rdma):
    headline = "lat_p50"
    flow = "both"                       # a ping-pong; READ's data comes back only
    params = _common_params(1000, 100, 2)
    depth: ClassVar[int] = 16           # send queue of a ping-pong: one in flight, a few reaping
    half_rtt: ClassVar[bool] = True

    def _iterations(self, case: Case, measured: Measurement | None) -> str:
        # A latency case keeps one sample per iteration, duration-bound runs too.
        timed = len(measured.samples.get(self.headline or "", ())) if measured else 0
        return f"{timed:,}" if timed else super()._iterations(case, measured)

    def _summary(self, rtts_ns: Sequence[int]) -> tuple[dict[str, float],
                                                      dict[str, Sequence[float]]]:
        div = 2000.0 if self.half_rtt else 1000.0
        lat_us = stats.scaled(rtts_ns, div)
        values = {f"lat_{k}": val for k, val in stats.latency_summary(lat_us).items()}
        return values, {"lat_p50": lat_us}

    def _run_loopback(self, v: DataPlane, params: Mapping[str, Any], clock: Clock) -> Any:
        with v.loopback_pair(params, self.depth) as (a, b):
            a_ep, b_ep = a.endpoint(), b.endpoint()
            if self.verb == "read":
                rtts = v.read_latency(a, b_ep, params["warmup"], params["iterations"], clock,
                                      params["duration"])
            else:
                me = v.pingpong(a, b_ep, self.verb, two_processes=False)
                peer = v.pingpong(b, a_ep, self.verb, two_processes=False)
                rtts = v.pingpong_client(me, peer, params["warmup"], params["iterations"],
                                         clock, params["duration"])
            values, samples = self._summary(rtts)
            return values, samples, a

    def _run_remote(self, v: DataPlane, params: Mapping[str, Any], ctx: Context,
                    clock: Clock) -> Any:
        session = ctx.connect()
        side = None
        try:
            reply = session.run_remote(self.name, params, SETUP_TIMEOUT)
            side = v.side(params, self.depth)
            remote = Endpoint.from_json(reply.get("endpoint"), session.peer_name)
            side.connect(remote)
            me = v.pingpong(side, remote, self.verb) if self.verb != "read" else None
            session.channel.send({"endpoint": side.endpoint().to_json()})
            session.channel.expect(SETUP_TIMEOUT)
            clock.watch_fd = session.channel.sock.fileno()     # the peer hanging up ends it
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
        v, _ = choose(params)
        (side,), (remote,) = _serve_setup(v, params, session, self.depth)
        try:
            me = v.pingpong(side, remote, self.verb) if self.verb != "read" else None
            session.channel.send({"ready": True})
            inbox = Inbox(session.channel)

            def client_done() -> bool:
                inbox.poll()
                return "done" in inbox.got

            clock = Clock(time.monotonic() + 3600, None, self.verb.upper(), client_done,
                            watch_fd=session.channel.sock.fileno())
            try:
                if me is not None:
                    v.pingpong_server(me, 1 << 62, clock)
                while not client_done():
                    time.sleep(0.01)
            except Stop:
                pass
            session.channel.send({"ok": True})
        finally:
            side.close()


class RdmaWriteLat(_RdmaLat):
    name = "rdma.write_lat"
    verb = "write"
    description = "RDMA WRITE ping-pong latency, half the round trip (ib_write_lat)"
    metrics = _lat_metrics("us (half RTT)", "half the round trip")
    params = _common_params(1000, 100, 2, inline_default=220)       # perftest's default


class RdmaReadLat(_RdmaLat):
    name = "rdma.read_lat"
    verb = "read"
    flow = "reverse"
    half_rtt = False
    description = "RDMA READ latency, the full round trip (ib_read_lat)"
    metrics = _lat_metrics("us (full RTT)", "the full round trip")


class RdmaSendLat(_RdmaLat):
    name = "rdma.send_lat"
    verb = "send"
    description = "SEND/RECV ping-pong latency, half the round trip (ib_send_lat)"
    metrics = _lat_metrics("us (half RTT)", "half the round trip")
    params = _common_params(1000, 100, 2, inline_default=236)       # perftest's default
