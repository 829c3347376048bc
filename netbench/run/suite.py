"""Plan: a suite file (TOML) or one benchmark with -p params -> the list of cases to run.

Suite format::

    [suite]
    name = "ci"
    description = "what this suite is for"
    softroce = "auto"            # optional: no RDMA device? make an rxe one (root), remove after

    [[case]]
    benchmark = "tcp.stream"     # required
    timeout = 60                 # optional, seconds for each case it expands to
    msg_size = ["64K", "1M"]     # every other key is a param of that benchmark
    streams = [1, 2]

Every error names the file, the line and the key, and nothing runs until the whole suite is
valid.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netbench import registry
from netbench.api import Benchmark, Case
from netbench.errors import NetbenchError, UsageError
from netbench.store.schema import MAX_FILE_ROWS
from netbench.textfile import load_toml
from netbench.units import parse_threshold

DEFAULT_TIMEOUT = 300.0
# Cases one plan may hold: a 2,000-case run is the largest measured (bench/store_append.py);
# a suite that expands to millions (a few long sweeps multiplied) is a mistake that would
# cost seconds and gigabytes before the first case, so it is refused before it is built.
MAX_CASES = 50_000
_CASE_KEYS = ("benchmark", "timeout")
_SUITE_KEYS = ("name", "description", "softroce", "repeat")


@dataclass(frozen=True)
class PlannedCase:
    case: Case
    bench: Benchmark
    timeout: float


@dataclass(frozen=True)
class Plan:
    suite: str            # suite name, or the benchmark name for a single run
    cases: Sequence[PlannedCase]   # a list; a soak's Windows
    # The [suite] table's options for the families' run set-up (Benchmark.prepare_run), e.g.
    # softroce = "auto": the RDMA family makes an rxe device when there is none.
    options: dict[str, Any] = field(default_factory=dict)
    # The suite's [thresholds] (metric or benchmark:metric -> a fraction): stored with the
    # run, so compare, history and report judge its runs by them unless told otherwise.
    thresholds: dict[str, float] = field(default_factory=dict)
    soak: Soak | None = None      # a burn-in: its cases are windows (Windows), made as run


# A soak of 1 s windows for a week is 604,800 windows: the plan is never a list of them.
MAX_WINDOWS = 10_000_000
SOAK_BENCHMARKS_HINT = "tcp.stream, tcp.rr, the rdma.* and the coll.* benchmarks"


@dataclass(frozen=True)
class Soak:
    """A burn-in: ``rounds`` passes over the plan's cases, each case one ``window`` of
    seconds a pass, ``duration`` seconds in all."""
    duration: float
    window: float
    rounds: int


class Windows(Sequence[PlannedCase]):
    """A soak's cases, window after window (every case of the plan once a round), made as
    they are asked for: memory stays flat however long the soak (a list of 86,400 windows is
    not). Each window is its own PlannedCase, so the runner never takes one for a repeat."""

    def __init__(self, cases: Sequence[PlannedCase], rounds: int) -> None:
        self.cases, self.rounds = list(cases), rounds

    def __len__(self) -> int:
        return len(self.cases) * self.rounds

    def __getitem__(self, index: Any) -> Any:
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        one = self.cases[index % len(self.cases)]
        return PlannedCase(one.case, one.bench, one.timeout)

    def __iter__(self) -> Iterator[PlannedCase]:
        for _ in range(self.rounds):
            for one in self.cases:
                yield PlannedCase(one.case, one.bench, one.timeout)


def soaked(plan: Plan, duration: float, window: float) -> Plan:
    """``plan`` as a burn-in: each case measured window after window (its benchmark's
    ``window_params``) for ``duration`` seconds in all. A UsageError names a benchmark that
    cannot run for a given time, a window it cannot measure, and a soak of under two windows."""
    cases = []
    for planned in plan.cases:
        params = planned.bench.window_params(window)
        if params is None:
            raise UsageError(f"{planned.case.benchmark} cannot run for a given time, so it "
                             f"cannot soak; {SOAK_BENCHMARKS_HINT} can")
        (case,) = planned.bench.expand({**planned.case.params, **params})
        cases.append(PlannedCase(case, planned.bench, max(planned.timeout, 3 * window + 30)))
    distinct = list({(c.case.benchmark, repr(sorted(c.case.params.items()))): c
                     for c in cases}.values())      # --repeat has no meaning in a soak
    rounds = math.floor(duration / (window * len(distinct)) + 1e-9)
    if rounds < 2:
        raise UsageError(f"--duration {duration:g} s holds fewer than two windows of "
                         f"{window:g} s for each of {len(distinct)} case(s): a soak is judged "
                         "window against window")
    if rounds * len(distinct) > MAX_WINDOWS:
        raise UsageError(f"{rounds * len(distinct):,} windows: at most {MAX_WINDOWS:,}; "
                         "take longer windows")
    # A finished soak is one file, and a reader takes none beyond MAX_FILE_ROWS rows: a
    # soak that would store more is refused before it runs for a week, not after.
    rows = rounds * sum(len(c.bench.metrics) for c in distinct)
    if rows > MAX_FILE_ROWS:
        raise UsageError(f"{rounds * len(distinct):,} windows store about {rows:,} rows, more "
                         f"than the {MAX_FILE_ROWS:,} one run's file may hold for a reader; "
                         f"take longer windows (--window) or a shorter --duration")
    return Plan(plan.suite, Windows(distinct, rounds), plan.options, plan.thresholds,
                Soak(duration, window, rounds))


def plan_single(name: str, raw_params: Mapping[str, Any],
                timeout: float | None = None) -> Plan:
    bench = registry.get(name)
    _check_size(case_count(bench, raw_params), f"{name}: its -p sweeps")
    cases = bench.expand(raw_params)
    return Plan(name, [PlannedCase(c, bench, timeout or DEFAULT_TIMEOUT) for c in cases])


def case_count(bench: Benchmark, raw: Mapping[str, Any]) -> int:
    """How many cases ``bench.expand(raw)`` gives, found without building them."""
    resolved = bench.resolve_params(raw)
    return math.prod(len(resolved[p.name]) for p in bench.params if p.sweep)


def _check_size(count: int, what: str) -> None:
    if count > MAX_CASES:
        raise UsageError(f"{what} expand to {count:,} cases; a plan may have at most "
                         f"{MAX_CASES:,}: sweep fewer values, or split it into runs")


def parse_cli_params(items: list[str]) -> dict[str, str]:
    params: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"-p {item!r}: expected key=value")
        params[key.strip()] = value.strip()
    return params


def _line_of(lines: list[str], case_index: int | None, key: str | None) -> int | None:
    """1-based line of ``key`` inside the n-th [[case]] (or of that header), best effort."""
    start = 0
    if case_index is not None:
        headers = [i for i, line in enumerate(lines) if re.match(r"\s*\[\[\s*case\s*\]\]", line)]
        if case_index >= len(headers):
            return None
        start = headers[case_index]
        if key is None:
            return start + 1
    for i in range(start + (1 if case_index is not None else 0), len(lines)):
        line = lines[i]
        if case_index is not None and re.match(r"\s*\[", line):
            break
        if re.match(rf"\s*\"?{re.escape(key or '')}\"?\s*=", line):
            return i + 1
    return None


def load_suite(path: str | Path, timeout: float | None = None,
               repeat: int | None = None) -> Plan:
    """The suite's cases as a plan. ``repeat`` (the CLI's --repeat) replaces the suite's own
    ``repeat``: one rule, the command line wins, never the two multiplied."""
    path = Path(path)
    data, text = load_toml(path, "suite")
    lines = text.splitlines()

    def fail(message: str, case_index: int | None = None, key: str | None = None) -> None:
        line = _line_of(lines, case_index, key)
        where = f"{path}:{line}" if line else str(path)
        raise UsageError(f"{where}: {message}")

    for key in data:
        # acceptance checks, compare thresholds and a node check's expectations may ride
        # along in the suite file
        if key not in ("suite", "case", "accept", "check", "thresholds", "healthcheck"):
            fail(f"unknown table or key {key!r}; a suite has [suite] and [[case]] entries "
                 "(and [accept]/[[check]] for `netbench accept`, [thresholds] for "
                 "`netbench compare`)", None, key)
    meta = data.get("suite", {})
    if not isinstance(meta, dict):
        fail("'suite' must be a table", None, "suite")
    for key in meta:
        if key not in _SUITE_KEYS:
            fail(f"unknown key {key!r} in [suite]; accepted: {', '.join(_SUITE_KEYS)}", None,
                 key)
    softroce = meta.get("softroce")
    if softroce is not None and not (isinstance(softroce, str) and softroce):
        fail("softroce must be a netdev name or \"auto\"", None, "softroce")
    name = str(meta.get("name", path.stem))
    entries = data.get("case", [])
    if not isinstance(entries, list) or not entries:
        fail("no [[case]] entries: nothing to run")
    planned: list[PlannedCase] = []
    total = 0
    for index, entry in enumerate(entries):
        if not isinstance(entry, dict):
            fail(f"each case must be a [[case]] table, not {entry!r}", None, "case")
        bench_name = entry.get("benchmark")
        if not isinstance(bench_name, str):
            fail("case has no 'benchmark' key", index)
        try:
            bench = registry.get(bench_name)
        except NetbenchError as exc:
            fail(str(exc), index, "benchmark")
        case_timeout = entry.get("timeout", DEFAULT_TIMEOUT)
        if isinstance(case_timeout, bool) or not isinstance(case_timeout, (int, float)) or (
                not math.isfinite(case_timeout) or case_timeout <= 0):
            fail(f"timeout must be a positive number of seconds, not {case_timeout!r}", index,
                 "timeout")
        raw = {k: v for k, v in entry.items() if k not in _CASE_KEYS}
        for key, value in raw.items():
            try:
                bench.param_spec(key).parse(value)
            except UsageError as exc:
                fail(f"key {key!r}: {exc}", index, key)
        total += case_count(bench, raw)
        if total > MAX_CASES:
            fail(f"the cases up to this one expand to {total:,} cases; a plan may have at most "
                 f"{MAX_CASES:,}: sweep fewer values, or split the suite", index)
        planned.extend(PlannedCase(c, bench, float(timeout or case_timeout))  # CLI wins
                       for c in bench.expand(raw))
    override, repeat = repeat, meta.get("repeat", 1)
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= 1000:
        fail(f"repeat must be a whole number 1..1000, not {repeat!r}", None, "repeat")
    table = data.get("thresholds", {})
    if not isinstance(table, dict):
        fail("'thresholds' must be a table (goodput = \"3%\", \"tcp.rr:lat_p99\" = 0.1)", None,
             "thresholds")
    thresholds = {}
    for key, value in table.items():
        try:
            thresholds[str(key)] = parse_threshold(value)
        except UsageError as exc:
            fail(f"[thresholds] {key}: {exc}", None, key)
    plan = Plan(name, planned, {"softroce": softroce} if softroce else {}, thresholds)
    return repeated(plan, repeat if override is None else override)


def repeated(plan: Plan, times: int) -> Plan:
    """Every case ``times`` times, interleaved: the whole list, then again (A B A B), so a
    drift in the machine hits every case alike and compare gets repeats to judge noise by."""
    if times <= 1:
        return plan
    _check_size(len(plan.cases) * times, f"{plan.suite}: {len(plan.cases):,} cases x {times} "
                "repeats")
    return Plan(plan.suite, [c for _ in range(times) for c in plan.cases], plan.options,
                plan.thresholds)
