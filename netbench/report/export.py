"""A run's metrics for the cluster's monitoring, as OpenMetrics text.

node_exporter's textfile collector reads ``*.prom`` files from a directory; Prometheus-format
parsers take the same text (``# EOF`` is a comment to them). One gauge family per metric
(``netbench_goodput``, ``netbench_lat_p99_9``) in one unit (rates in Gbit/s, times in us:
``netbench.units.canonical``), one series per case, labelled by benchmark,
case (the params that name it), host, peer, device, unit, direction and label (not the run id:
a series stays one series from run to run); repeats of a case are their median, so a series
is never duplicated. No sample timestamps (the textfile collector
refuses them): the run's start is its own gauge, ``netbench_run_started_seconds``, and the
case counts by status are ``netbench_run_cases``, both per label, host and suite (the newest
run's), never per run id.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from netbench.analysis.cases import case_names
from netbench.stats import median_sorted
from netbench.units import canonical

PREFIX = "netbench_"


def metric_name(metric: str) -> str:
    """A netbench metric as an OpenMetrics name: [a-zA-Z_:][a-zA-Z0-9_:]*, prefixed."""
    name = re.sub(r"[^a-zA-Z0-9_]", "_", metric)
    return PREFIX + (name if re.match(r"[a-zA-Z_]", name) else "_" + name)


def _label_value(value: Any) -> str:
    text = "" if value is None or (isinstance(value, float) and math.isnan(value)) else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _labels(pairs: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{_label_value(v)}"' for k, v in pairs.items()) + "}"


def _number(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else ("NaN" if value != value else
                                                             ("+Inf" if value > 0 else "-Inf"))


def _stamp(started: Any) -> float:
    """A run's start as Unix time (NaN where unknown)."""
    return started.timestamp() if hasattr(started, "timestamp") else float("nan")


def _case_texts(keys: list[tuple[Any, Any]]) -> dict[tuple[Any, Any], str]:
    """Each (benchmark, params) case's ``case`` label: the params that name it among these
    (``analysis.cases.case_names`` without the benchmark, which is a label of its own)."""
    return {key: name[len(str(key[0])) + 1:] for key, name in zip(keys, case_names(keys))}


def openmetrics(rows: Iterable[Mapping[str, Any]], soaks: Iterable[Any] = ()) -> str:
    """The rows of one or more runs as OpenMetrics text, ending with ``# EOF``; ``soaks``:
    their burn-ins judged (``analysis.views.soaks_of``), as verdict series."""
    rows = [dict(r) for r in rows]
    ok = [r for r in rows if r.get("status") == "ok" and r.get("value") is not None
          and not (isinstance(r["value"], float) and math.isnan(r["value"]))]
    names = _case_texts([(r["benchmark"], r["params"]) for r in ok])
    series: dict[str, dict[tuple[tuple[str, str], ...], list[float]]] = {}
    helps: dict[str, set[str]] = {}
    for r in ok:
        family = metric_name(str(r["metric"]))
        case = names[(r["benchmark"], r["params"])]
        # One unit per family: mem.copy's bw_peak in GB/s and a stream's in Gbit/s would
        # otherwise share a gauge that sum() and max() add up as if alike.
        value, unit = canonical(float(r["value"]), str(r.get("unit") or ""))
        labels = (("benchmark", r["benchmark"]), ("case", case), ("host", r.get("host")),
                  ("peer", r.get("peer")), ("device", r.get("device")),
                  ("unit", unit or None), ("better", r.get("better")),
                  ("label", r.get("label")))     # no run id: one series per case over runs
        key = tuple((k, _label_value(v)) for k, v in labels)
        series.setdefault(family, {}).setdefault(key, []).append(value)
        helps.setdefault(family, set()).add(str(r["metric"]))
    out: list[str] = []
    for family in sorted(series):
        out.append(f"# TYPE {family} gauge")
        out.append(f"# HELP {family} netbench metric {', '.join(sorted(helps[family]))} "
                   "(median over a case's repeats; unit and direction in the labels)")
        for key, values in series[family].items():
            labels = "{" + ",".join(f'{k}="{v}"' for k, v in key) + "}"
            out.append(f"{family}{labels} {_number(median_sorted(sorted(values)))}")
    # The run-level gauges carry no run id either: per (label, host, suite) the newest run's
    # start and its case counts, so a run replaces the last one's values, never adds series.
    newest: dict[tuple[str, ...], Mapping[str, Any]] = {}
    cases: dict[tuple[str, str], set[Any]] = {}
    for r in rows:
        key = tuple(_label_value(r.get(k)) for k in ("label", "host", "suite"))
        held = newest.get(key)
        if held is None or (_stamp(r.get("started_at")), str(r.get("run_id"))) > (
                _stamp(held.get("started_at")), str(held.get("run_id"))):
            newest[key] = r
        cases.setdefault((str(r.get("run_id")), str(r.get("status"))), set()).add(
            r.get("case_index"))
    out.append(f"# TYPE {PREFIX}run_started_seconds gauge")
    out.append(f"# HELP {PREFIX}run_started_seconds when the newest run of this label, host "
               "and suite started (Unix time)")
    for r in newest.values():
        labels = _labels({"label": r.get("label"), "host": r.get("host"),
                          "suite": r.get("suite")})
        out.append(f"{PREFIX}run_started_seconds{labels} {_number(_stamp(r.get('started_at')))}")
    out.append(f"# TYPE {PREFIX}run_cases gauge")
    out.append(f"# HELP {PREFIX}run_cases cases of the newest run of this label, host and "
               "suite, by status")
    for r in newest.values():
        run_id = str(r.get("run_id"))
        for status in ("ok", "skipped", "failed"):
            labels = _labels({"label": r.get("label"), "host": r.get("host"),
                              "suite": r.get("suite"), "status": status})
            out.append(f"{PREFIX}run_cases{labels} {len(cases.get((run_id, status), ()))}")
    first = rows[0] if rows else {}
    out += _soak_series(list(soaks), {"host": first.get("host"), "label": first.get("label")})
    out.append("# EOF")
    return "\n".join(out) + "\n"


def _soak_series(soaks: list[Any], where: Mapping[str, Any]) -> list[str]:
    """A burn-in's verdict: each case's dips (windows under 0.9 of its reference, consecutive
    ones one dip), its worst window's share of the reference and its link events."""
    if not soaks:
        return []
    # Over several runs, each case's newest burn-in (its last window the latest): one series
    # a case, as every other series here.
    newest: dict[tuple[str, str, str], Any] = {}
    for c in soaks:
        key, held = (c.benchmark, c.params, c.metric), newest.get((c.benchmark, c.params, c.metric))
        if held is None or (c.timeline and held.timeline
                            and c.timeline[-1][0] > held.timeline[-1][0]):
            newest[key] = c
    soaks = list(newest.values())
    names = _case_texts([(c.benchmark, c.params) for c in soaks])

    def labels(c: Any) -> dict[str, Any]:
        return {**where, "benchmark": c.benchmark, "case": names[(c.benchmark, c.params)],
                "metric": c.metric}
    out = _gauge("soak_dips", "dips of a burn-in: runs of windows under 0.9 of its "
                 "reference", [(labels(c), float(len(c.dips))) for c in soaks])
    out += _gauge("soak_lowest_share", "a burn-in's worst window as a share of its reference",
                  [(labels(c), float("nan") if c.lowest is None else c.lowest) for c in soaks])
    out += _gauge("soak_link_events", "carrier changes and link downs in the whole burn-in",
                  [(labels(c), float(c.link_events)) for c in soaks])
    return out


def _gauge(name: str, help_text: str, samples: Iterable[tuple[Mapping[str, Any], float]]
           ) -> list[str]:
    out = [f"# TYPE {PREFIX}{name} gauge", f"# HELP {PREFIX}{name} {help_text}"]
    return out + [f"{PREFIX}{name}{_labels(labels)} {_number(value)}"
                  for labels, value in samples]


def health_metrics(findings: Iterable[Any], host: str, at: float) -> str:
    """A node check's verdict as OpenMetrics (``analysis.health.Finding``): the node healthy
    or not, each check's outcome, and when it ran, so an alert fires on a failing node and on
    one whose check stopped running (docs/healthcheck.md's rules)."""
    findings = list(findings)
    healthy = all(f.ok for f in findings)
    out = _gauge("healthcheck_healthy", "1: every check of the node's last health check "
                 "passed; 0: one failed", [({"host": host}, 1.0 if healthy else 0.0)])
    out += _gauge("healthcheck_check_ok", "1: this check passed (or does not apply here: "
                  "applies=\"false\"); 0: it failed",
                  [({"host": host, "check": f.check, "applies": str(f.applies).lower()},
                    1.0 if f.ok else 0.0) for f in findings])
    out += _gauge("healthcheck_timestamp_seconds", "when the node's last health check ran "
                  "(Unix time)", [({"host": host}, at)])
    return "\n".join(out + ["# EOF"]) + "\n"


def compare_metrics(done: Any, allow_lost: bool = False) -> str:
    """`netbench compare`'s verdicts as OpenMetrics (``analysis.compare.Comparison``): one
    series a case metric with its verdict as a label (1), and whether the gate failed, per
    baseline and candidate as they were named, so an alert names the case that regressed
    or was lost."""
    sides = {"baseline": done.baseline.what, "candidate": done.candidate.what}
    names = _case_texts([(v.benchmark, v.params) for v in done.verdicts])
    out = _gauge("compare_verdict", "1 for each case metric's verdict (lost and regressed "
                 "fail the gate)",
                 [({**sides, "benchmark": v.benchmark, "case": names[(v.benchmark, v.params)],
                    "metric": v.metric, "verdict": str(v.verdict.value)}, 1.0)
                  for v in done.verdicts])
    out += _gauge("compare_gate_failed", "1: a case metric regressed or was lost (exit 1; "
                  "--allow-lost: regressed only)",
                  [(sides, 1.0 if done.fails_gate(allow_lost) else 0.0)])
    return "\n".join(out + ["# EOF"]) + "\n"
