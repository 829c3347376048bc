"""Acceptance checks: does this NIC / fabric / host meet its spec?

A spec is TOML, and may be the suite file itself (``[[check]]`` entries beside ``[[case]]``)::

    [accept]
    line_rate = "probe"        # Gbit/s, or "probe": the link rate the run's fingerprint recorded

    [[check]]
    name = "write bandwidth at 1 MiB and above"
    benchmark = "rdma.write_bw"
    metric = "bw_avg"
    msg_size_min = "1M"        # optional filters: msg_size_min/max, params = { qps = 1 }
    min_line_rate = 0.90       # bounds: min, max, min_line_rate (a fraction of line_rate)

    [[check]]                  # a fabric run (netbench fabric): every pair, and every host
    benchmark = "tcp.stream"
    metric = "goodput"
    min_line_rate = 0.90       # each pair
    min_host_median = 0.95     # each host's median, sending and receiving, vs the fabric's
    min_link_median = 0.90     # each link between switches: the median of its pairs against
    min_switch_median = 0.90   # the fabric's healthy rate (both ways, and each direction)
    max_element_deficit = 0.05 # no element the sweep names (link, switch, host) short of the
                               # healthy rate by more: fail-slow, with its evidence

    [[check]]                  # what the NIC and the kernel counted while each case ran
    benchmark = "tcp.stream"
    metric = "goodput"
    max_delta = { RetransSegs = 100, carrier_changes = 0, symbol_error = 0 }

    [[check]]                  # a burn-in (netbench soak): its windows, one after another
    benchmark = "rdma.write_bw"
    metric = "bw_avg"
    min_window_line_rate = 0.9 # every window at 90% of the line rate or more
    max_dips = 0               # windows under 0.9 of the reference, consecutive ones one dip
    max_link_downs = 0         # carrier changes, link_downed in the whole soak
    max_errors_per_hour = 10   # the device's own error counters' growth an hour

A ``max_delta`` bound is on each case's counter deltas (netbench.env.counters), each name
summed over the objects that have it (every interface's carrier_changes, every port's
symbol_error) or given whole (``"net/eth0/rx_dropped"``). A case whose counters were not read
fails it, and so does a name no case of the run could read (a typo, or a driver without it).

The per-element bounds need the fabric's shape, kept with a run swept with ``netbench fabric
--topology FILE``; a run without one fails them, saying so. Under ECMP a pair counts toward
every link it may take, so a bad link among several paths lowers its median less than its
share of slow pairs shows: routes known (``routing = "dest"``) judge it exactly.
``max_element_deficit`` judges what the sweep's localization names (``netbench.analysis.
localize``: pairs read slow where they fall below healthy by more than their noise explains),
each with the share of the healthy rate its pairs read and its p-value; without a kept shape
it names hosts and paths between groups of them.

Every matching row of the chosen run must pass; a check with no measured row fails, saying
whether the benchmark was skipped (and why) or never ran.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from netbench.analysis.cases import flow_of, probed_line_rate, roles
from netbench.analysis.verdict import Verdict
from netbench.api import finite, parse_size
from netbench.env import counters
from netbench.errors import UsageError
from netbench.store import counters_of, measured_params
from netbench.store.protocol import ReadableStore
from netbench.textfile import load_toml, printable
from netbench.units import from_gbit, is_rate

# Bounds on a burn-in (`netbench soak`): its windows judged as analysis.soak judges them.
SOAK_BOUNDS = ("min_window_line_rate", "max_dips", "max_link_downs", "max_errors_per_hour")
_CHECK_KEYS = ("name", "benchmark", "metric", "msg_size_min", "msg_size_max", "params", "min",
               "max", "min_line_rate", "min_host_median", "min_link_median", "min_switch_median",
               "max_element_deficit", "max_delta", "expect", *SOAK_BOUNDS)
BOUNDS = ("min", "max", "min_line_rate", "expect", "min_host_median", "min_link_median",
          "min_switch_median", "max_element_deficit", *SOAK_BOUNDS, "max_delta")
ELEMENT_BOUNDS = {"min_link_median": "link", "min_switch_median": "switch"}


@dataclass
class Check:
    name: str
    benchmark: str
    metric: str
    min: float | None = None
    max: float | None = None
    min_line_rate: float | None = None
    min_host_median: float | None = None
    min_link_median: float | None = None      # each inter-switch link, x the healthy rate
    min_switch_median: float | None = None    # each switch, likewise
    max_element_deficit: float | None = None  # what the sweep names, short of healthy by
    msg_size_min: int | None = None
    msg_size_max: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    unit: str = ""                         # the metric's, as the rows judged store it
    max_delta: dict[str, int] = field(default_factory=dict)   # counter -> most it may grow
    min_window_line_rate: float | None = None   # a soak's every window, x the line rate
    max_dips: int | None = None                 # a soak's dips (windows under 0.9 of it)
    max_link_downs: int | None = None           # carrier changes and link downs in a soak
    max_errors_per_hour: float | None = None    # its own device's error counters' growth
    # A share of what the same hardware reaches elsewhere (analysis.expectations: the
    # published figure matched to each row's fingerprint): 0.9 = at least 90% of it.
    expect: float | None = None


@dataclass
class Outcome:
    check: Check
    passed: bool
    measured: list[tuple[str, float]]      # (case, value): cases named as the console does
    expected: str
    message: str
    # Why nothing was judged where the check's only bound is ``expect`` and no published
    # figure holds for this hardware (an eGPU, an emulated device): said, never a pass.
    unjudged: str = ""

    @property
    def verdict(self) -> Verdict:
        """The check's outcome in the one spelling compare and history use: a check with
        nothing measured is lost (a device gone), one below what it expects regressed."""
        if self.passed:
            return Verdict.UNCHANGED
        return Verdict.LOST if not self.measured else Verdict.REGRESSED

    def measured_text(self, most: int = 8) -> str:
        """Each case's value with its unit, as every output of accept shows them; beyond
        ``most`` (a fabric's hundreds of pairs) their count, lowest, median and highest."""
        unit = _unit(self.check)
        if len(self.measured) > most:
            ordered = sorted(self.measured, key=lambda cv: cv[1])
            (low_case, low), (high_case, high) = ordered[0], ordered[-1]
            return (f"{len(ordered)} cases: lowest {low_case}: {low:.4g}{unit}, median "
                    f"{ordered[len(ordered) // 2][1]:.4g}{unit}, highest {high_case}: "
                    f"{high:.4g}{unit}")
        return ", ".join(f"{case}: {value:.4g}{unit}"
                         for case, value in self.measured) or "nothing measured"


@dataclass
class Spec:
    name: str
    suite: str | None
    line_rate: float | str | None
    checks: list[Check]
    # Published figures (analysis.expectations) a check's ``expect`` is judged against: the
    # shipped table and the site's, loaded by the caller.
    expectations: list[Any] = field(default_factory=list)


def _line(lines: list[str], index: int, key: str | None = None) -> str:
    headers = [i for i, ln in enumerate(lines) if re.match(r"\s*\[\[\s*check\s*\]\]", ln)]
    if index >= len(headers):
        return ""
    start = headers[index]
    if key:
        for i in range(start + 1, len(lines)):
            if re.match(r"\s*\[", lines[i]):
                break
            if re.match(rf"\s*{re.escape(key)}\s*=", lines[i]):
                return f":{i + 1}"
    return f":{start + 1}"


def load_spec(path: str | Path, known: Mapping[str, Sequence[str]] | None = None,
              units: Mapping[str, Mapping[str, str]] | None = None,
              tables: Sequence[str | Path] = ()) -> Spec:
    """An acceptance spec; ``known`` (benchmark -> its metric names, the installed ones: the
    CLI passes ``registry.catalog()``) makes a check naming any other an error. Where a check
    says ``expect``, the published figures are loaded with it: the shipped table, a site's
    ``expectations.toml`` beside the spec, then ``tables`` (``units``: each benchmark's
    metrics' units, registry.metric_units(), that the tables are checked against)."""
    path = Path(path)
    data, text = load_toml(path, "acceptance spec")
    lines = text.splitlines()
    entries = data.get("check")
    if not isinstance(entries, list) or not entries:
        raise UsageError(f"{path}: no [[check]] entries")
    accept = data.get("accept", {})
    if not isinstance(accept, dict):
        raise UsageError(f"{path}: 'accept' must be a table ([accept] name = ..., line_rate = "
                         f"...), not {accept!r}")
    if data.get("case") is not None and not isinstance(data.get("suite", {}), dict):
        raise UsageError(f"{path}: 'suite' must be a table ([suite] name = ...)")
    checks = []
    for i, entry in enumerate(entries):
        def fail(msg: str, key: str | None = None, i: int = i) -> None:
            raise UsageError(f"{path}{_line(lines, i, key)}: {msg}")

        if not isinstance(entry, dict):
            raise UsageError(f"{path}: each check must be a [[check]] table, not {entry!r}")
        for key in entry:
            if key not in _CHECK_KEYS:
                fail(f"unknown key {key!r}; accepted: {', '.join(_CHECK_KEYS)}", key)
        name = entry.get("benchmark")
        if not isinstance(name, str) or (known is not None and name not in known):
            fail(f"unknown benchmark {name!r}; known: {', '.join(known or ())}", "benchmark")
        metric = entry.get("metric")
        if not isinstance(metric, str) or (known is not None and metric not in known[name]):
            fail(f"{name} has no metric {metric!r}; its metrics: "
                 f"{', '.join((known or {}).get(name, ()))}", "metric")
        if not any(k in entry for k in BOUNDS):
            fail(f"a check needs a bound: {', '.join(BOUNDS[:-1])} or {BOUNDS[-1]}")
        for key in ELEMENT_BOUNDS:
            bound = entry.get(key)
            if bound is not None and (isinstance(bound, bool) or not isinstance(
                    bound, (int, float)) or not 0 < bound <= 10):
                fail(f"{key} = {bound!r}: a share of the fabric's healthy rate, above 0 "
                     "(0.9 = every one at 90% of it or more)", key)
        deficit = entry.get("max_element_deficit")
        if deficit is not None and (isinstance(deficit, bool) or not isinstance(
                deficit, (int, float)) or not 0 < deficit < 1):
            fail(f"max_element_deficit = {deficit!r}: a fraction between 0 and 1 (0.05 = no "
                 "element the sweep names may read more than 5% below the healthy rate)",
                 "max_element_deficit")
        share = entry.get("expect")
        if share is not None and (isinstance(share, bool) or not isinstance(
                share, (int, float)) or not 0 < share <= 2):
            fail(f"expect = {share!r}: a share of the figure this hardware reaches elsewhere, "
                 "above 0 (0.9 = at least 90% of it)", "expect")
        deltas = entry.get("max_delta", {})
        if "max_delta" in entry and not _counts(deltas):
            fail(f"max_delta = {deltas!r}: a table of counter names and the most each may "
                 "grow in a case, whole numbers >= 0 ({ RetransSegs = 100, "
                 "carrier_changes = 0 })", "max_delta")
        try:
            check = Check(
                name=str(entry.get("name") or f"{name} {metric}"), benchmark=name, metric=metric,
                min=_num(entry.get("min")), max=_num(entry.get("max")),
                min_line_rate=_num(entry.get("min_line_rate")),
                min_host_median=_num(entry.get("min_host_median")),
                min_link_median=_num(entry.get("min_link_median")),
                min_switch_median=_num(entry.get("min_switch_median")),
                max_element_deficit=_num(deficit), expect=_num(share),
                msg_size_min=parse_size(entry["msg_size_min"]) if "msg_size_min" in entry
                else None,
                msg_size_max=parse_size(entry["msg_size_max"]) if "msg_size_max" in entry
                else None,
                params=dict(entry.get("params") or {}), max_delta=dict(deltas),
                **{k: _soak_bound(entry, k, fail) for k in SOAK_BOUNDS})
        except (TypeError, ValueError) as exc:
            fail(str(exc))
        checks.append(check)
    line_rate = accept.get("line_rate")
    if line_rate is not None and line_rate != "probe":
        try:
            line_rate = _num(line_rate)
        except ValueError:
            raise UsageError(f"{path}: line_rate must be a positive, finite number (Gbit/s) or "
                             f"\"probe\", not {line_rate!r}") from None
        if line_rate is None or line_rate <= 0:
            raise UsageError(f"{path}: line_rate must be a positive, finite number (Gbit/s) or "
                             f"\"probe\", not {line_rate!r}")
    suite = (data.get("suite") or {}).get("name") if data.get("case") else None
    spec = Spec(str(accept.get("name") or path.stem), suite, line_rate, checks)
    if any(c.expect is not None for c in checks) or tables:
        from netbench.analysis import expectations

        beside = path.parent / expectations.SITE_FILE
        spec.expectations = expectations.load(
            [*([beside] if beside.is_file() else []), *tables], units)
    return spec


def _soak_bound(entry: Mapping[str, Any], key: str, fail: Any) -> Any:
    """A soak bound as written: a share of the line rate above 0, or a count (or rate) of
    at least 0."""
    value = entry.get(key)
    if value is None:
        return None
    number = isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value)
    if key == "min_window_line_rate" and not (number and 0 < value <= 10):
        fail(f"{key} = {value!r}: a share of the line rate above 0 (0.9 = every window of "
             "the soak at 90% of it or more)", key)
    if key in ("max_dips", "max_link_downs") and not (number and value >= 0
                                                       and float(value).is_integer()):
        fail(f"{key} = {value!r}: a whole number >= 0", key)
    if key == "max_errors_per_hour" and not (number and value >= 0):
        fail(f"{key} = {value!r}: a number >= 0 (error counters' growth an hour)", key)
    return int(value) if key in ("max_dips", "max_link_downs") else float(value)


def _counts(table: Any) -> bool:
    """Is ``table`` a max_delta: counter names to whole numbers >= 0, at least one?"""
    return isinstance(table, dict) and bool(table) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in table.values())


def _num(value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{value!r} is not a number")
    return finite(float(value))


def choose_run(store: ReadableStore, spec: Spec, run: str | None, label: str | None) -> Any:
    """The runs to judge, by the one selection rule (netbench.analysis.selection): a run id,
    a label (all its runs that measured the spec's benchmarks), else the latest run that
    measured them (of the spec's suite, where the store has runs of it)."""
    from netbench.analysis.selection import resolve

    wanted = sorted({c.benchmark for c in spec.checks})
    if run and label:
        raise UsageError("--run and --label name the same thing: give one")
    return resolve(store, run or label, wanted, suite=spec.suite or None)


def kept_passes(store: ReadableStore, spec: Spec, run_ids: Sequence[str]) -> dict[str, Any]:
    """The fabric burn-ins' passes among the chosen runs, where a check of ``spec`` judges
    links, switches or what the sweep names (else {}, unread)."""
    from netbench.analysis.selection import kept_passes as kept

    if not any(getattr(c, key) is not None for c in spec.checks
               for key in (*ELEMENT_BOUNDS, "max_element_deficit")):
        return {}
    return kept(store.runs(), run_ids)


def kept_topology(store: ReadableStore, spec: Spec, run_ids: Sequence[str]) -> Any:
    """The fabric's shape kept with the chosen runs, where a check of ``spec`` judges
    links or switches (else None, unread): a Topology, or None where no run kept one."""
    from netbench.analysis.selection import kept_topology as kept

    if not any(getattr(c, key) is not None for c in spec.checks
               for key in (*ELEMENT_BOUNDS, "max_element_deficit")):
        return None
    return kept(store.runs(), run_ids)


def read_counters(store: ReadableStore, run_ids: Sequence[str]) -> set[str]:
    """The counter names the chosen runs read around their cases (their footers)."""
    import json

    index = store.runs()
    if "counters" not in index:
        return set()
    names: set[str] = set()
    for text in index.loc[index["run_id"].isin(list(run_ids)), "counters"]:
        try:
            read = json.loads(text).get("names", []) if isinstance(text, str) and text else []
        except (ValueError, AttributeError, RecursionError):
            continue
        names |= {str(n) for n in read} if isinstance(read, list) else set()
    return names


def evaluate(spec: Spec, rows: Any, topology: Any = None,
             counters_read: set[str] | None = None,
             passes: Mapping[str, Any] | None = None) -> list[Outcome]:
    """Each check against the chosen rows; ``topology`` (``kept_topology``): the fabric's
    shape, for the per-link and per-switch bounds; ``counters_read`` (``read_counters``):
    the counter names the runs read, so a ``max_delta`` name none of them has fails;
    ``passes`` (``kept_passes``): a fabric burn-in's passes, each judged on its own."""
    outcomes = []
    for check in spec.checks:
        mine = rows[rows["benchmark"] == check.benchmark]
        skipped = mine[mine["status"] != "ok"]
        ok = mine[(mine["status"] == "ok") & (mine["metric"] == check.metric)]
        selected, seen = [], []
        for _, row in ok.iterrows():
            size = row["msg_size"]
            size = None if size is None or (isinstance(size, float) and math.isnan(size)) \
                else int(size)
            if check.msg_size_min is not None and (size is None or size < check.msg_size_min):
                continue
            if check.msg_size_max is not None and (size is None or size > check.msg_size_max):
                continue
            # What the case ran with: a check on data_plane = "compiled" matches auto rows
            # that became compiled.
            params = measured_params(row)
            seen.append(params)
            if not all(_param_matches(params.get(k), v) for k, v in check.params.items()):
                continue
            selected.append(row)
        units = ok["unit"].dropna() if "unit" in ok else ()
        if len(units):                  # the unit the measured rows were stored in
            check = replace(check, unit=str(units.iloc[0]))
        outcomes.append(_judge(check, spec, selected, skipped, topology,
                               counters_read or set(), _unmatched(check, seen), passes))
    return outcomes


def _param_matches(measured: Any, wanted: Any) -> bool:
    """A params filter's value against what the case ran with: equal, or a size written as
    the suite writes sizes (``msg_size = "1M"`` is 1048576, as ``msg_size_min`` reads it)."""
    if measured == wanted:
        return True
    if isinstance(wanted, str) and isinstance(measured, int) and not isinstance(measured, bool):
        try:
            return parse_size(wanted) == measured
        except ValueError:
            return False
    return False


def _unmatched(check: Check, seen: list[Mapping[str, Any]]) -> str:
    """Why a check's params filter chose no row of those the size bounds left: each key's
    values the run has, so a typo or another spelling is plain."""
    if not check.params or not seen:
        return ""
    parts = []
    for key, wanted in check.params.items():
        have = sorted({str(p.get(key)) for p in seen if key in p})
        if not any(_param_matches(p.get(key), wanted) for p in seen):
            parts.append(f"params {key} = {wanted!r}: the run has "
                         + (", ".join(have[:8]) + (" ..." if len(have) > 8 else "")
                            if have else f"no case with {key}"))
    return "; ".join(parts)


def _unit(check: Check) -> str:
    return f" {check.unit}" if check.unit else ""


def _size(row: Any) -> int | None:
    size = row.get("msg_size")
    return None if size is None or size != size else int(size)


def _case_names(check: Check, rows: list[Any]) -> list[str]:
    """Each row's case as the console names cases: sizes as 64K, and the params that tell
    the cases here apart (streams=1, streams=2); then the pair and the run where those vary,
    and the case number where two are still alike (repeats of one case)."""
    from netbench.analysis.cases import case_names, param_text

    short = case_names([(check.benchmark, str(row.get("params") or "{}")) for row in rows])
    several = len({row["run_id"] for row in rows}) > 1
    pairs = len({(row.get("host"), row.get("peer")) for row in rows}) > 1
    names = []
    for row, name in zip(rows, short):
        name = name[len(check.benchmark) + 1:]
        size = _size(row)
        if "msg_size=" not in name and size is not None:     # a row whose params lack it
            name = f"msg_size={param_text('msg_size', size)} {name}".rstrip()
        name = name or "case"
        if pairs:
            name += f" {row.get('host')} -> {row.get('peer')}"
        if several:
            name += f" (run {row['run_id']})"
        names.append(name)
    alike = Counter(names)
    names = [f"{n} (case {int(row['case_index']) + 1})" if alike[n] > 1
             and row.get("case_index") == row.get("case_index") else n
             for n, row in zip(names, rows)]
    return [printable(n) for n in names]     # a stored host or param may hold an escape


def _judge(check: Check, spec: Spec, rows: list[Any], skipped: Any,
           topology: Any = None, counters_read: set[str] | None = None,
           unmatched: str = "", passes: Mapping[str, Any] | None = None) -> Outcome:
    unit = _unit(check)
    if not rows:
        why = (f"{check.benchmark} was {skipped['status'].iloc[0]}: "
               f"{printable(skipped['reason'].iloc[0])}" if not skipped.empty
               else f"no {check.benchmark} {check.metric} row in this run matches the check"
               + (f" ({printable(unmatched)})" if unmatched else ""))
        return Outcome(check, False, [], _bounds(check, None), why)
    measured, failures = [], []
    bound_text = ""
    unknown = 0
    if check.min_line_rate is not None and check.unit and not is_rate(check.unit):
        return Outcome(check, False, [], _bounds(check, None),
                       f"min_line_rate bounds a rate against the link's Gbit/s; "
                       f"{check.benchmark} {check.metric} is in {check.unit} (use min/max)")
    unpublished: Counter[str] = Counter()
    for row, case in zip(rows, _case_names(check, rows)):
        value = float(row["value"])
        measured.append((case, value))
        low, high = check.min, check.max
        if check.expect is not None:
            bound, said = _expected(check, row, spec.expectations)
            if bound is None:
                unpublished[said] += 1
            elif value < bound if _higher(row) else value > bound:
                failures.append(f"{case}: {value:.4g} {'<' if _higher(row) else '>'} "
                                f"{bound:.4g}{unit} ({said})")
        if check.min_line_rate is not None:
            rate = (probed_line_rate(row) if spec.line_rate in (None, "probe")
                    else float(spec.line_rate))
            if rate is None:
                unknown += 1
                continue
            # The line rate is Gbit/s; the metric may count bytes (a bus bandwidth in GB/s):
            # the bound in the metric's own unit.
            bound = check.min_line_rate * (from_gbit(rate, check.unit) if check.unit
                                           else rate)
            low = max(low or -math.inf, bound)
            bound_text = (f" ({check.min_line_rate:.0%} of {rate:g} Gbit/s"
                          + (f" = {bound:.4g}{unit}" if check.unit not in ("", "Gbit/s")
                             else "") + ")")
        if low is not None and value < low:
            failures.append(f"{case}: {value:.4g} < {low:.4g}{unit}{bound_text}")
        if high is not None and value > high:
            failures.append(f"{case}: {value:.4g} > {high:.4g}{unit}")
    notes = [f"{said} for {count} of {len(rows)} case(s) (a site's expectations.toml "
             "can give one)" for said, count in unpublished.items()]
    if unknown:              # one cause for every such case: said once, with the remedy
        failures.append(f"line rate unknown for {unknown} of {len(rows)} case(s) (set "
                        "[accept] line_rate)")
    if check.min_host_median is not None:
        failures += _host_medians(check, rows)
    if check.min_link_median is not None or check.min_switch_median is not None:
        failures += _element_medians(check, rows, topology, passes)
    if check.max_element_deficit is not None:
        failures += _element_deficits(check, rows, topology, passes)
    if check.max_delta:
        failures += _counter_failures(check, rows, counters_read or set())
    if any(getattr(check, k) is not None for k in SOAK_BOUNDS):
        failures += _soak_failures(check, spec, rows)
    only_expect = check.expect is not None and sum(
        getattr(check, k) is not None and k != "max_delta" for k in BOUNDS) == 1
    unjudged = "; ".join(notes) if only_expect and sum(unpublished.values()) == len(rows) \
        and not failures else ""
    return Outcome(check, not failures, measured, _bounds(check, bound_text),
                   "; ".join(failures + notes) or "all measured values within bounds", unjudged)


def _soak_failures(check: Check, spec: Spec, rows: list[Any]) -> list[str]:
    """A burn-in's windows against the soak bounds (analysis.soak): every window at
    ``min_window_line_rate`` of the line rate, at most ``max_dips`` dips, ``max_link_downs``
    link events and ``max_errors_per_hour``."""
    import pandas as pd

    from netbench.analysis.soak import judge, soak_failures

    fixed = None if spec.line_rate in (None, "probe") else float(spec.line_rate)
    bounds = {k: getattr(check, k) for k in SOAK_BOUNDS}
    return [f for c in judge(pd.DataFrame(rows), metric=check.metric, line_rate=fixed)
            for f in soak_failures(c, **bounds)]


def _counter_failures(check: Check, rows: list[Any], read: set[str]) -> list[str]:
    """Each case's counter deltas against ``max_delta``: a name's total over the objects
    that have it (``carrier_changes``: every interface's, both ends), or one counter named
    whole. ``read``: the counter names the runs' footers say were read (empty: unknown, an
    imported or older run), so a name none of them has is a typo or a missing driver."""
    failures, unread, far_unread, seen = [], 0, 0, set()
    for row, case in zip(rows, _case_names(check, rows)):
        grown = counters_of(row.get("counters"))
        if grown is None:
            unread += 1
            continue
        far_unread += counters.FAR_UNREAD in grown
        sums = counters.by_name(grown)
        seen |= set(sums)
        for name, most in check.max_delta.items():
            total = grown.get(name, 0) if "/" in name else sums.get(name, (0, []))[0]
            if total > most:
                failures.append(f"{case}: {name} +{total} > {most}")
    if unread:
        failures.append(f"counters not read for {unread} of {len(rows)} case(s) (run without "
                        "--no-counters, with a netbench that reads them)")
    if far_unread:
        failures.append(f"the far end's counters not read for {far_unread} of {len(rows)} "
                        "case(s) (its netbench serve is older, or did not answer)")
    missing = [n for n in check.max_delta if n.rsplit("/", 1)[-1] not in read | seen]
    if missing and read and len(rows) > unread:
        failures.append(f"no counter named {', '.join(missing)} was read on this host (a "
                        "typo, or a driver without it)")
    return failures


def _host_medians(check: Check, rows: list[Any]) -> list[str]:
    """Each host's median over its pairs, as client and as server, against the median of
    all pairs: a host below ``min_host_median`` of it fails."""
    import statistics

    values = [float(r["value"]) for r in rows]
    fabric = statistics.median(values)
    higher = str(rows[0].get("better") or "higher") == "higher"
    failures = []
    named = roles(flow_of(rows[0]), "higher" if higher else "lower")
    for key, role in zip(("host", "peer"), named):
        by: dict[str, list[float]] = {}
        for r, v in zip(rows, values):
            if r.get(key):
                by.setdefault(str(r[key]), []).append(v)
        for host, vals in sorted(by.items()):
            mid = statistics.median(vals)
            ratio = (mid / fabric if higher else fabric / mid) if fabric and mid else 0.0
            if ratio < check.min_host_median:
                failures.append(f"host {printable(host)} {role}: median {mid:.4g}"
                                f"{_unit(check)} is {ratio:.2f} x the fabric's {fabric:.4g}"
                                f" < {check.min_host_median:g}")
    return failures


def _element_medians(check: Check, rows: list[Any], topology: Any,
                     passes: Mapping[str, Any] | None = None) -> list[str]:
    """Each link between switches (both ways, and each direction: a one-way fault) and each
    switch: the median of the pairs through it against the fabric's healthy rate, below
    the bound fails; so does one no measured pair crosses (it cannot be accepted unseen)."""
    import pandas as pd

    from netbench.analysis.elements import worst
    from netbench.analysis.fabric import analyse, pass_frames

    keys = [k for k in ELEMENT_BOUNDS if getattr(check, k) is not None]
    if topology is None:
        return [f"{', '.join(keys)}: the run has no topology kept with it, so its links and "
                "switches are unknown; sweep with `netbench fabric --topology FILE` (Slurm "
                "topology.conf, ibnetdiscover, LLDP or a netbench TOML)"]
    frame = pd.DataFrame([dict(r) for r in rows])
    if "peer" not in frame or frame["peer"].isna().all():
        return [f"{', '.join(keys)}: these rows are no fabric sweep (no pairs of hosts); "
                "per-element bounds judge `netbench fabric` runs"]
    failures = []
    matrices = [(name, m) for name, part in pass_frames(frame, dict(passes or {}))
                for m in analyse(part, metric=check.metric, topology=topology)]
    for name, m in matrices:
        case = name + (f"{m.params} " if len({m.params for _, m in matrices}) > 1 else "")
        for key in keys:
            kind, bound = ELEMENT_BOUNDS[key], getattr(check, key)
            judged = [e for e in m.elements if e.kind == kind and (kind != "link" or e.trunk)]
            both = {e.element: e for e in judged if not e.directed}
            unseen = sorted(e.name for e in both.values() if e.median is None)
            for element in sorted(both):
                ways = [e for e in judged if e.base == element and e.median is not None]
                # As the summary quotes it: both ways, or a direction where that reads
                # clearly lower; else any direction below the bound.
                quoted = worst(ways, 1)
                low = quoted if quoted and quoted[0].median < bound else \
                    sorted((e for e in ways if e.median < bound), key=lambda e: e.median)[:1]
                if not low:
                    continue
                e = low[0]
                way = " (one way)" if e.directed else ""
                failures.append(f"{case}{kind} {printable(e.name)}{way}: median {e.median:.2f}"
                                f" x the healthy rate ({e.slow} of {e.pairs} pairs through it "
                                f"slow) < {bound:g}")
            if unseen:
                failures.append(f"{case}{len(unseen)} {kind}(s) no measured pair crosses: "
                                f"{printable(', '.join(unseen[:8]))}"
                                f"{' ...' if len(unseen) > 8 else ''} (not accepted unseen: "
                                "sweep every host)")
    return failures


def _element_deficits(check: Check, rows: list[Any], topology: Any,
                      passes: Mapping[str, Any] | None = None) -> list[str]:
    """Each element the sweep's localization names whose pairs read further below the
    healthy rate than ``max_element_deficit`` (a failed pair reads nothing), with its
    evidence; pairs are slow from that deficit on where the noise allows it."""
    import pandas as pd

    from netbench.analysis.fabric import THRESHOLD, analyse, pass_frames

    frame = pd.DataFrame([dict(r) for r in rows])
    if "peer" not in frame or frame["peer"].isna().all():
        return ["max_element_deficit: these rows are no fabric sweep (no pairs of hosts); "
                "it judges `netbench fabric` runs"]
    bound = check.max_element_deficit or 0.0
    matrices = [(name, m) for name, part in pass_frames(frame, dict(passes or {}))
                for m in analyse(part, threshold=max(THRESHOLD, bound * 2), metric=check.metric,
                                 topology=topology, min_deficit=bound)]
    failures = []
    for name, m in matrices:
        case = name + (f"{m.params} " if len({m.params for _, m in matrices}) > 1 else "")
        loc = m.localization
        for s in loc.suspects if loc else []:
            if s.deficit is not None and s.deficit > bound:
                failures.append(f"{case}{printable(s.text(m.unit, loc.inferred, m.roles))}: "
                                f"{s.deficit:.0%} short > {bound:g}")
    return failures


def _higher(row: Any) -> bool:
    return str(row.get("better") or "higher") == "higher"


def _expected(check: Check, row: Any, table: Sequence[Any]) -> tuple[float | None, str]:
    """The bound ``expect`` sets on ``row`` in its own unit (``expect`` of the published
    figure its hardware matches; for a latency, the figure over ``expect``), and the words
    that say where it comes from; (None, why) where no figure matches."""
    from netbench.analysis.expectations import match
    from netbench.units import canonical

    entry, why = match(row, table)
    if entry is None:
        return None, why
    unit = str(row.get("unit") or entry.unit)
    per_figure = canonical(1.0, entry.unit)[0] / canonical(1.0, unit.split(" (")[0])[0]
    figure = entry.figure * per_figure
    bound = figure * check.expect if entry.better == "higher" else figure / check.expect
    return bound, (f"{check.expect:.0%} of {entry.figure:g} {entry.unit}: {entry.name}, "
                   f"{entry.source}")


def _bounds(check: Check, extra: str | None) -> str:
    parts = []
    if check.min is not None:
        parts.append(f">= {check.min:g}{_unit(check)}")
    if check.min_line_rate is not None:
        parts.append(f">= {check.min_line_rate:.0%} of line rate{extra or ''}")
    if check.max is not None:
        parts.append(f"<= {check.max:g}{_unit(check)}")
    if check.expect is not None:
        parts.append(f">= {check.expect:.0%} of what this hardware reaches (published)")
    if check.min_host_median is not None:
        parts.append(f"every host >= {check.min_host_median:g} x the fabric's median")
    if check.max_element_deficit is not None:
        parts.append(f"no element named short of the healthy rate by more than "
                     f"{check.max_element_deficit:.0%}")
    for key, kind in ELEMENT_BOUNDS.items():
        if getattr(check, key) is not None:
            parts.append(f"every {kind} >= {getattr(check, key):g} x the healthy rate (the "
                         "median of its pairs)")
    if check.min_window_line_rate is not None:
        parts.append(f"every soak window >= {check.min_window_line_rate:.0%} of line rate")
    for key, what in (("max_dips", "dips"), ("max_link_downs", "link events"),
                      ("max_errors_per_hour", "errors an hour")):
        if getattr(check, key) is not None:
            parts.append(f"<= {getattr(check, key):g} {what} in the soak")
    if check.max_delta:
        parts.append("counters a case: " + ", ".join(f"{name} +{most} at most" for name, most
                                                      in check.max_delta.items()))
    return " and ".join(parts)
