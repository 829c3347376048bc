"""The plugin contract: what a benchmark declares and what the harness hands it.

A benchmark module imports only this module (plus its own third-party library). It fills one
class: ``name``, ``transport``, ``metrics``, ``params``, ``available(env)`` and ``run(case, ctx)``,
and, when it needs the far end, ``serve(params, session)`` which ``netbench serve`` calls.
The harness (runner, store, CLI) does everything else.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from netbench import stats
from netbench.env import softroce
from netbench.env.launch import launch_info
from netbench.errors import NetbenchError, PeerError, SkipCase, UsageError
from netbench.fingerprint import Fingerprint, Record
from netbench.host import BEYOND_CACHE, CpuMeter, host_memory_available, last_level_cache, pcie_path
from netbench.run.wire import Channel
from netbench.units import MAX_SWEEP, finite, format_size, parse_size, size_range  # noqa: F401

__all__ = [
    "Benchmark", "Case", "Channel", "Context", "CpuMeter", "Flow", "Measurement",
    "Metric", "NetbenchError", "Param", "PeerError", "RunSetup", "ServerSession", "SkipCase",
    "Traits", "UsageError", "softroce", "Fingerprint", "Record",
    "BEYOND_CACHE", "format_size", "host_memory_available", "last_level_cache",
    "launch_info", "parse_size", "pcie_path", "stats",
]

Better = Literal["higher", "lower"]


@dataclass(frozen=True)
class Metric:
    """One reported quantity. ``better`` travels into the store so nobody has to guess."""

    name: str
    unit: str
    better: Better
    description: str = ""
    # A summary of another metric's samples (lat_p99 is the "p99" of lat_p50's samples),
    # declared so readers of the store know what the value is; compare judges it, as every
    # metric, by how far it moves between invocations.
    of_samples: str = ""
    statistic: str = ""          # one of STATISTICS, with of_samples; alone only "avg":
    # the mean of this metric's own samples, each a separately timed piece of the same work
    # (a collective's timing windows), so their spread over their count is the figure's own
    # precision, which compare never lets its invocations' agreement beat. Not for slices of
    # one flow (a stream's intervals): bytes late in one arrive in the next.
    # A cost of the work another metric of the case counts (cpu_client "per" goodput): where
    # that work changed, compare judges this figure per unit of it, never as a change of its
    # own (a link made faster costs more CPU a second, not more a Gbit).
    per: str = ""
    # A resource the case spent (CPU): a busy neighbour's contention (caches, a sibling
    # hyperthread) raises it even where the case was never short of CPU. ``per`` implies it.
    cost: bool = False

    def __post_init__(self) -> None:
        if self.better not in ("higher", "lower"):
            raise ValueError(f"metric {self.name}: better must be 'higher' or 'lower'")
        if (self.of_samples and not self.statistic) or (
                self.statistic and self.statistic not in STATISTICS) or (
                self.statistic and not self.of_samples and self.statistic != "avg"):
            raise ValueError(f"metric {self.name}: of_samples and statistic go together "
                             "(alone, statistic is only 'avg': the mean of its own samples); "
                             f"statistic is one of {', '.join(STATISTICS)}")


# What a metric can summarise of another's samples: perftest's latency summary plus the mean
# and the fastest of per-interval rates.
STATISTICS = ("min", "p50", "avg", "stdev", "p99", "p99.9", "max")


# --- sizes -----------------------------------------------------------------------------------

def json_safe(value: Any) -> Any:
    """``value`` with every NaN or infinity made None, for strict JSON (bare NaN is not JSON,
    and a consumer reading it may take it for a number)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


# --- params ----------------------------------------------------------------------------------

ParamKind = Literal["int", "float", "bool", "str", "size", "choice"]


def _cut(value: Any, limit: int = 60) -> str:
    """A value as an error shows it: its repr, at most ``limit`` characters."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


@dataclass(frozen=True)
class Param:
    """A typed, validated benchmark parameter.

    ``sweep=True`` lets the param take a list (``1K,64K`` or ``[..]`` in a suite, or a size range
    ``1K..1M``); the runner makes one case per value, like perftest ``-a`` or nccl-tests ``-b/-e``.
    """

    name: str
    kind: ParamKind
    default: Any
    help: str = ""
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    sweep: bool = False
    pattern: str | None = None     # kind "str": the value must match this regex in full
    pattern_help: str = ""         # how to describe what ``pattern`` accepts
    all_range: tuple[int, int] | None = None   # kind "size": what the value "all" sweeps

    def accepted(self) -> str:
        """Human description of accepted values, for error messages and `netbench list`."""
        if self.kind == "choice":
            text = "one of " + ", ".join(self.choices)
        elif self.kind == "size":
            text = "a size in bytes (512, 64K, 1M)"
        elif self.kind == "bool":
            text = "true or false"
        else:
            text = {"int": "an integer", "float": "a number",
                    "str": self.pattern_help or "text"}[self.kind]
        bounds = []
        if self.minimum is not None:
            bounds.append(f">= {_fmt_bound(self, self.minimum)}")
        if self.maximum is not None:
            bounds.append(f"<= {_fmt_bound(self, self.maximum)}")
        if bounds:
            text += " " + " and ".join(bounds)
        if self.sweep:
            text += "; a list sweeps" + (" (or a range 1K..1M, 1K..1G:x4, 1M..8M:+1M)"
                                         if self.kind == "size" else "")
            if self.all_range:
                lo, hi = (format_size(v) for v in self.all_range)
                text += f"; all = {lo}..{hi}"
        return text

    def parse(self, raw: Any) -> Any:
        """Validate one raw value (CLI text or TOML value); a sweep param returns a list."""
        if self.sweep:
            items = _split_list(raw)
            if self.all_range and isinstance(raw, str) and raw.strip() == "all":
                raw = f"{self.all_range[0]}..{self.all_range[1]}"
            if self.kind == "size" and isinstance(raw, str) and ".." in raw:
                try:
                    items = size_range(raw)
                except ValueError as exc:
                    raise UsageError(f"param {self.name}: {exc}") from None
            values = [self._parse_one(item) for item in items]
            if not values:
                raise UsageError(f"param {self.name}: empty list; accepted: {self.accepted()}")
            return values
        if isinstance(raw, list):
            raise UsageError(f"param {self.name} takes one value, not a list; accepted: "
                             f"{self.accepted()}")
        return self._parse_one(raw)

    def _parse_one(self, raw: Any) -> Any:
        try:
            value = self._convert(raw)
        except (TypeError, ValueError, OverflowError) as exc:
            # Cut: a 900 KB value was echoed back whole (a far end's reply, a log line).
            raise UsageError(f"param {self.name}: bad value {_cut(raw)} ({_cut(str(exc))}); "
                             f"accepted: {self.accepted()}") from None
        if self.kind in ("int", "float", "size"):
            if (self.minimum is not None and value < self.minimum) or (
                    self.maximum is not None and value > self.maximum):
                raise UsageError(f"param {self.name}: {_cut(raw)} is out of range; accepted: "
                                 f"{self.accepted()}")
        return value

    def _convert(self, raw: Any) -> Any:
        if self.kind == "size":
            return parse_size(raw)
        if self.kind == "int":
            if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
                raise ValueError("not an integer")
            return int(raw)
        if self.kind == "float":
            if isinstance(raw, bool):
                raise ValueError("not a number")
            return finite(float(raw))
        if self.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError("not a boolean")
        if self.kind == "choice":
            text = str(raw).strip()
            if text not in self.choices:
                raise ValueError("not a valid choice")
            return text
        if not isinstance(raw, (str, int, float)) or isinstance(raw, bool):
            raise ValueError("not text")
        text = str(raw).strip()
        if self.pattern is not None and not re.fullmatch(self.pattern, text):
            raise ValueError("wrong format")
        return text


def _fmt_bound(param: Param, value: float) -> str:
    """A bound as people write it: sizes as 1M, numbers plainly (1000000, 0.001), never in
    exponent notation (1e+06, 1.04858e+06)."""
    if param.kind == "size":
        return format_size(int(value))
    if float(value).is_integer():
        return str(int(value))
    return f"{value:.12f}".rstrip("0")


def _split_list(raw: Any) -> list[Any]:
    if isinstance(raw, (list, tuple)):
        return list(raw)
    if isinstance(raw, str):
        return [part.strip() for part in raw.split(",") if part.strip()]
    return [raw]


# --- cases and measurements ------------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """One concrete run of one benchmark: every sweep param resolved to a single value."""

    benchmark: str
    params: Mapping[str, Any]

    @property
    def msg_size(self) -> int | None:
        value = self.params.get("msg_size")
        return int(value) if value is not None else None

    def describe(self) -> str:
        shown = []
        for key, value in sorted(self.params.items()):
            if key == "msg_size" and isinstance(value, int):
                value = format_size(value)
            shown.append(f"{key}={value}")
        return f"{self.benchmark} " + " ".join(shown)


@dataclass
class Measurement:
    """What ``run`` returns: derived metric values plus the raw samples behind them.

    ``samples`` maps a metric name to its raw per-iteration (or per-interval) values, stored in
    the row of that metric. ``device``, ``transport`` and ``peer`` override the benchmark's
    defaults for this case (e.g. the NIC a stream actually used). ``note`` lands in the row's
    ``reason`` column, e.g. to mark an emulated device. ``pci_address`` names the PCI function
    a GPU case ran on, so the row's environment carries that GPU and its link path.
    ``resolved`` records what an ``auto`` param became; ``fallback`` is a run-level line.
    """

    values: dict[str, float]
    samples: dict[str, Sequence[float]] = field(default_factory=dict)
    device: str | None = None
    transport: str | None = None
    peer: str | None = None
    note: str = ""
    pci_address: str | None = None   # the PCI function measured (a GPU): names it in env_gpu
    # What the benchmark chose where a param left it the choice (data_plane=auto -> compiled):
    # stored in the row's params, so a row says what measured it.
    resolved: dict[str, Any] = field(default_factory=dict)
    fallback: str = ""               # said once per run (with a count), e.g. a slower data plane
    # Bytes one operation moved where the run decided it (a collective's size rounded to a
    # multiple of its element size): the case's ``Traits.op_bytes``.
    op_bytes: int | None = None
    # The routers the case's data crossed, as traces of its own connections saw them
    # (``ClientSession.routes``, one list a connection): stored in the row's ``route``.
    routes: list[list[str | None]] | None = None
    # Where the case's ends ran, where that decides its figures ("ends on one CPU"): stored
    # in the row's ``placement``; compare names a change between placements, never judges it.
    placement: str = ""


# Which way the data goes between a case's two ends: "forward" from the end that starts the
# operation (the client, the host) to the far one (the server, the peer, the GPU), "reverse"
# back (an RDMA READ, tcp.stream direction=reverse, a device-to-host copy), "both" at once.
Flow = Literal["forward", "reverse", "both"]
FLOWS: tuple[str, ...] = ("forward", "reverse", "both")


@dataclass(frozen=True)
class Traits:
    """What a case is, for whoever reads its rows later: declared by its benchmark
    (``Benchmark.traits``) and stored in every row of the case, so analysis and reports read a
    stored run without asking today's plugin code (a run stays readable after its plugin
    changed or was uninstalled, and nothing downstream tests a benchmark's name)."""

    headline: str                      # the metric a case is summed up by (trend, fabric)
    flow: Flow | None = None           # see Flow; None: no data path between two ends
    op_bytes: int | None = None        # bytes one operation moves: a message, a batch, a buffer
    bus_factor: float | None = None    # nccl-tests' busbw = algbw x this; None: no collective
    size_means: str = ""               # what the case's msg_size counts, in words
    # The columns the reference tool prints before its figures, as (name, value): nccl-tests'
    # count, type, redop and root; perftest's #iterations. Shown as they are.
    lead: tuple[tuple[str, str], ...] = ()
    trail: tuple[tuple[str, str], ...] = ()    # and after them: nccl-tests' #wrong

    def as_row(self) -> dict[str, Any]:
        """The row columns that store it (the column pairs as JSON text)."""
        return {"headline": self.headline or None, "flow": self.flow,
                "op_bytes": self.op_bytes, "bus_factor": self.bus_factor,
                "size_means": self.size_means or None,
                **{name: json.dumps([list(p) for p in pairs]) if pairs else None
                   for name, pairs in (("lead", self.lead), ("trail", self.trail))}}

    def __post_init__(self) -> None:
        if self.flow is not None and self.flow not in FLOWS:
            raise ValueError(f"flow must be one of {', '.join(FLOWS)} or None, "
                             f"not {self.flow!r}")


# --- what the harness hands a benchmark ------------------------------------------------------

class ClientSession(Protocol):
    """A control connection to ``netbench serve`` (a remote peer or the loopback fallback)."""

    channel: Channel
    peer_name: str
    host: str

    def run_remote(self, benchmark: str, params: Mapping[str, Any],
                   timeout: float) -> dict[str, Any]: ...

    def open_data(self, count: int, timeout: float, traced: bool = False) -> list[Any]:
        """``count`` data connections to the far end; ``traced``: each from a source port
        whose path was traced first (``routes``), so the path is the connection's own."""
        ...

    # With ``open_data(traced=True)``: each connection's routers, as a trace from its own
    # 5-tuple saw them (addresses in order; None where one did not answer).
    routes: list[list[str | None]]

    def close(self) -> None: ...


class ServerSession(Protocol):
    """The far end's view of one client, handed to ``Benchmark.serve``."""

    channel: Channel
    client_name: str
    device: str               # the far end's own NIC where its host runs one per NIC, else ""

    def accept_data(self, count: int, timeout: float) -> list[Any]: ...


class Context(Protocol):
    """The runner's services for one case."""

    env: Mapping[str, Any]
    peer: str | None          # HOST:PORT the user gave, or None for the loopback fallback
    cancelled: threading.Event
    shared: dict[str, Any]    # lives for the whole run; values with close() are closed at its end
    # The run traces each data connection's routers (netbench fabric --trace): a benchmark
    # that opens data connections passes it to ``open_data(traced=...)``.
    trace: bool
    # The case's invocations are one soak's windows, back to back (``netbench soak``): what
    # a benchmark starts for a case (ranks, a far end) may serve the next window, where a
    # repeat's must be new (a repeat is an invocation of everything that drifts).
    soak: bool

    def connect(self) -> ClientSession: ...

    def remaining(self) -> float: ...

    def on_cancel(self, callback: Callable[[], None]) -> None: ...

    def progress(self, fraction: float) -> None: ...

    # Seconds between the interval lines the user asked for (``netbench run --interval``, as
    # iperf3 prints one a second); 0: none. A benchmark that can read its rate while it runs
    # reports each interval with ``interval``; one that cannot ignores both.
    every: float

    def interval(self, start: float, end: float,
                 values: Mapping[str, tuple[float, str]]) -> None:
        """One interval's readings, ``start``-``end`` seconds into the case: metric ->
        (value, unit), shown as they come (never stored: the samples are)."""
        ...


@dataclass
class RunSetup:
    """What a family's ``prepare_run`` did: facts for the fingerprint, whether the environment
    must be probed again (a device appeared), a fallback line for the run, and its undo."""

    env: dict[str, Any] = field(default_factory=dict)
    reprobe: bool = False
    fallback: str = ""
    close: Callable[[], None] | None = None


class Benchmark:
    """Base class of every benchmark; subclasses fill the class attributes."""

    name: ClassVar[str]                    # family.op, e.g. tcp.stream
    transport: ClassVar[str]               # tcp | rdma | nccl | gloo | pcie | memory ...
    description: ClassVar[str] = ""
    metrics: ClassVar[tuple[Metric, ...]] = ()
    params: ClassVar[tuple[Param, ...]] = ()
    needs_peer: ClassVar[bool] = False     # run() calls ctx.connect()
    traces: ClassVar[bool] = False         # run() honours ctx.trace (its routes are kept)
    headline: ClassVar[str | None] = None  # the metric a case is summed up by (default: first)
    size_means: ClassVar[str] = "message"  # what msg_size counts, where the params have one
    flow: ClassVar[Flow | None] = None     # which way its data goes; None: forward where it
    # has a far end, else no data path between two ends (traits() decides per case)

    @property
    def family(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def op(self) -> str:
        return self.name.split(".", 1)[1] if "." in self.name else self.name

    def traits(self, case: Case, measured: Measurement | None = None) -> Traits:
        """What this case is, for readers of its rows (``Traits``); ``measured`` is None for a
        case that was skipped or failed. The default: the declared headline, data going
        forward where there is a far end, one msg_size per operation. A benchmark overrides
        it where a param or the run decides (a direction param, a collective's world)."""
        size = case.msg_size
        if measured is not None:
            resolved = measured.resolved.get("msg_size")
            size = measured.op_bytes or (resolved if isinstance(resolved, int) else size)
        return Traits(
            headline=self.headline or (self.metrics[0].name if self.metrics else ""),
            flow=self.flow or ("forward" if self.needs_peer or self.has_far_end else None),
            op_bytes=size, size_means=self.size_means if size is not None else "")

    def available(self, env: Mapping[str, Any]) -> str | None:
        """None when this benchmark (with its defaults) can run here, else the reason it
        cannot: what `netbench list` shows."""
        return None

    def available_for(self, case: Case, env: Mapping[str, Any]) -> str | None:
        """None when this case can run here, else why not: what `run --dry-run` shows and
        the skip a run records. Override where a param decides it (a device choice)."""
        return self.available(env)

    def window_params(self, seconds: float) -> dict[str, Any] | None:
        """The params that make one invocation measure for ``seconds`` (a soak's window:
        `netbench soak` runs the case window after window), or None where this benchmark
        cannot run for a given time. Raise UsageError for a window shorter than it can
        measure, naming the least it can."""
        return None

    def run(self, case: Case, ctx: Context) -> Measurement:
        raise NotImplementedError

    def serve(self, params: Mapping[str, Any], session: ServerSession) -> None:
        raise NetbenchError(f"{self.name} has no server side")

    @property
    def has_far_end(self) -> bool:
        """Does it measure against a peer when given one (its class brings ``serve``)?"""
        return type(self).serve is not Benchmark.serve

    def prepare_run(self, options: Mapping[str, Any],
                    env: Mapping[str, Any]) -> RunSetup | None:
        """Once per family per run, before its first case: set up what the suite's options
        ask of this transport (the RDMA family makes a soft-RoCE device). The runner knows no
        transport; it applies what comes back and calls ``close`` at the end of the run."""
        return None

    def server_memory(self, params: Mapping[str, Any]) -> int:
        """Bytes ``serve`` allocates for these params, so `netbench serve` can bound what one
        client makes it hold (a far end that allocates by params must say so)."""
        return 0

    # --- helpers the harness uses; benchmarks rarely override these ---

    def metric(self, name: str) -> Metric:
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(name)

    def param_spec(self, name: str) -> Param:
        for param in self.params:
            if param.name == name:
                return param
        known = ", ".join(p.name for p in self.params) or "none"
        raise UsageError(f"{self.name} has no param {name!r}; its params: {known}")

    def describe(self, case: Case) -> str:
        """The case in one line: its size and the params that differ from the defaults."""
        shown = []
        for param in self.params:
            value = case.params.get(param.name, param.default)
            if param.name != "msg_size" and value == param.default:
                continue
            shown.append(f"{param.name}="
                         f"{format_size(value) if param.kind == 'size' else value}")
        return " ".join([self.name, *shown])

    def resolve_params(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Defaults overlaid with validated user values (sweep params stay lists)."""
        resolved: dict[str, Any] = {}
        for param in self.params:
            resolved[param.name] = [param.default] if param.sweep else param.default
        for key, value in raw.items():
            resolved[key] = self.param_spec(key).parse(value)
        return resolved

    def expand(self, raw: Mapping[str, Any]) -> list[Case]:
        """One case per combination of sweep values, in declaration order."""
        resolved = self.resolve_params(raw)
        sweeps = [p.name for p in self.params if p.sweep]
        fixed = {k: v for k, v in resolved.items() if k not in sweeps}
        cases = []
        for combo in itertools.product(*(resolved[name] for name in sweeps)):
            params = dict(fixed)
            params.update(zip(sweeps, combo))
            cases.append(Case(self.name, params))
        return cases

    def validate_remote(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Server side: a request's params must be single, in-range values of known params."""
        if not isinstance(raw, Mapping):
            raise UsageError("params must be an object")
        out = {}
        for param in self.params:
            value = raw.get(param.name, param.default)
            out[param.name] = param._parse_one(value)
        unknown = set(raw) - set(out)
        if unknown:
            raise UsageError(f"unknown params for {self.name}: {', '.join(sorted(unknown))}")
        return out
