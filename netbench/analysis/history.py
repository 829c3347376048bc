"""History: chosen metrics of chosen cases across stored runs, each step judged.

A step is one run against the runs just before it (a window, pooled as invocations: the
window is the case's noise model), judged by the one decision function compare uses
(``netbench.analysis.verdict``; a run's steps adjusted together as one comparison's are), so
"regressed" means here what it means there. The window never reaches back past the series'
last change point before the step (``netbench.analysis.segments``): an earlier step is a
level of its own, never noise that hides the next. A case the newest run lost (measured
before, skipped or failed now) is a LOST verdict, as in compare. What
changed in the environment between a run and the one before it (driver, firmware, kernel,
NCCL, torch) is recorded on that run, so a regression points at its run and at what changed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netbench.analysis.cases import is_headline
from netbench.analysis.compare import (
    MetricVerdict,
    Question,
    change_of,
    check_units,
    env_changes,
    extreme_of,
    judge_family,
    lost_verdicts,
    mean_known,
    pool,
)
from netbench.analysis.counter_news import counter_news
from netbench.analysis.error_metrics import is_error_metric, with_error_metrics
from netbench.analysis.segments import change_points
from netbench.analysis.selection import series_runs
from netbench.analysis.verdict import HISTORY_RUNS, Judgement, Past
from netbench.errors import NetbenchError, UsageError
from netbench.store import keyed
from netbench.store.protocol import ReadableStore

DEFAULT_WINDOW = 5


@dataclass
class Step(Judgement):
    """One run of a series, judged as compare judges (the Judgement's fields; the first run's
    verdict is "": nothing before it); p_adjusted is over this run's steps of every series."""
    run_id: str
    started_at: Any
    label: str
    value: float
    change: float | None = None
    against: int = 0            # how many earlier runs this step was judged against


@dataclass
class ChangePoint:
    """Where a series stepped (``analysis.segments``): the first run at the new level, when
    it ran, and how far the level moved (relative, segment against segment)."""
    run_id: str
    started_at: Any
    change: float
    p_value: float


@dataclass
class Series:
    benchmark: str
    params: str
    metric: str
    unit: str
    better: str
    msg_size: int | None
    steps: list[Step] = field(default_factory=list)
    # The steps the runs took (oldest first); each run is judged against the runs since the
    # last change point before it (its latest stable segment), never across one.
    change_points: list[ChangePoint] = field(default_factory=list)

    @property
    def newest(self) -> Step:
        return self.steps[-1]


@dataclass
class History:
    # run_id, started_at, label, changes [(what, a, b)], news: error counters the window
    # before it kept at 0 and it grew (analysis.counter_news)
    runs: list[dict[str, Any]]
    series: list[Series]
    single: list[tuple[str, str, str]]  # cases measured in one run only: (benchmark, metric, run)
    left_out: list[tuple[str, str]]
    # Cases the runs before the newest measured and the newest did not (skipped, failed, or
    # absent from a run of their suite): compare's lost verdicts, which fail the gate.
    lost: list[MetricVerdict] = field(default_factory=list)


def build(store: ReadableStore, labels: Sequence[str] = (), benchmarks: Sequence[str] = (),
          metrics: Sequence[str] = (), last: int | None = None, window: int = DEFAULT_WINDOW,
          thresholds: Mapping[str, float] | None = None, alpha: float = 0.05,
          hosts: Sequence[str] = (),
          headline_only: bool = False) -> History:
    """The history of every (chosen) case over the (chosen) runs, oldest first;
    ``headline_only``: of each case only its headline metric (the dashboard's trend)."""
    if window < 1:
        raise UsageError(f"--window {window}: at least 1 earlier run to judge a step against")
    if last is not None and last < 2:
        raise UsageError(f"--last {last}: a trend needs at least 2 runs")
    index, usable, left_out = series_runs(store, labels, benchmarks, hosts, last)
    wanted = set(benchmarks) or None
    lost = _lost(store, index, usable, wanted, window)
    if lost:        # the newest run is the candidate: its cases are lost, not left out
        left_out = [(r, w) for r, w in left_out if r != index["run_id"].iloc[-1]]
    if usable.empty:
        if wanted:          # the filter named nothing stored: a typo is bad input (exit 2)
            there = sorted({b for bs in index["ok_benchmarks"] for b in bs})
            raise UsageError("no stored run measured " + ", ".join(sorted(wanted))
                             + (f" with label {', '.join(labels)}" if labels else "")
                             + f"; benchmarks there: {', '.join(there) or 'none'}")
        raise NetbenchError("no stored run measured anything"
                            + (f" with label {', '.join(labels)}" if labels else ""))
    # Error counters' metrics are derived from the rows' counters (analysis.error_metrics):
    # asked for one, every metric's rows are read.
    derived = any(is_error_metric(m) for m in metrics)
    where = {k: v for k, v in (("benchmark", benchmarks),
                               ("metric", () if derived else metrics)) if v}
    rows = store.read(list(usable["run_id"]), where=where)     # filters pushed into the scan
    if benchmarks:
        unknown = set(benchmarks) - set(rows["benchmark"])
        if unknown:
            raise UsageError(f"no stored run has {', '.join(sorted(unknown))}; benchmarks "
                             f"there: {', '.join(sorted(set(rows['benchmark'])))}")
        rows = rows[rows["benchmark"].isin(benchmarks)]
    (rows,) = keyed(rows)                                  # the planned params match
    if not headline_only:
        (rows,) = with_error_metrics(rows)
    if metrics:
        unknown = set(metrics) - set(rows["metric"].dropna())
        if unknown:
            there = set(store.read(list(usable["run_id"]), ["metric"])["metric"].dropna())
            there |= {m for m in rows["metric"].dropna() if is_error_metric(m)}
            raise UsageError(f"no chosen case has metric {', '.join(sorted(unknown))}; "
                             f"metrics there: {', '.join(sorted(there))}")
        rows = rows[rows["metric"].isin(metrics)]
    if headline_only:
        rows = rows[is_headline(rows)]
    order = list(usable["run_id"])
    per_run = {run_id: rows[rows["run_id"] == run_id] for run_id in order}
    per_run = {r: g for r, g in per_run.items() if not g.empty}
    order = [r for r in order if r in per_run]
    pooled = {r: pool(g) for r, g in per_run.items()}
    import pandas as pd

    runs, previous = [], None
    for i, run_id in enumerate(order):
        group = per_run[run_id]
        changes = env_changes(per_run[previous], group) if previous else []
        before = [per_run[r] for r in order[max(0, i - window):i]]
        news = counter_news(pd.concat(before), group) if before else []
        runs.append({"run_id": run_id, "started_at": group["started_at"].iloc[0],
                     "label": group["label"].iloc[0] or "", "changes": changes,
                     "news": news})
        previous = run_id
    started = {r["run_id"]: r["started_at"] for r in runs}
    keys = list(dict.fromkeys(k for r in order for k in pooled[r]))
    series, single = [], []
    pending: list[tuple[Step, Question]] = []
    for key in keys:
        present = [r for r in order if key in pooled[r]]
        if len(present) < 2:
            single.append((key[0], key[2], present[0]))
            continue
        check_units(key, *(pooled[r][key] for r in present))
        first = pooled[present[0]][key]
        s = Series(key[0], key[1], key[2], first["unit"], first["better"], first["msg_size"])
        # One segmentation of the whole series: each run is judged against the runs since the
        # last change point before it, so an earlier step (a slower link for a while) never
        # becomes the noise that hides the next one.
        found = change_points([pooled[r][key]["value"] for r in present])
        s.change_points = [ChangePoint(present[c.index], started[present[c.index]], c.change,
                                       c.p_value) for c in found]
        for i, run_id in enumerate(present):
            info = next(r for r in runs if r["run_id"] == run_id)
            step = Step(run_id, info["started_at"], info["label"], pooled[run_id][key]["value"])
            if i:
                stable = present[max([c.index for c in found if c.index < i], default=0):i]
                before = stable[-window:]
                base = _merge([pooled[r][key] for r in before])
                # The segment's runs before the window are this step's history, as compare's
                # are the runs before its sides: the same runs get the same verdict from both.
                earlier = stable[-window - HISTORY_RUNS:-window] if len(stable) > window \
                    else []
                if extreme_of(key[2], base, pooled[run_id][key]):
                    # An extreme is judged by runs alone: the window's runs, one value each,
                    # are run-level evidence too, beside the runs before it.
                    earlier = stable[-window - HISTORY_RUNS:]
                past = Past([pooled[r][key]["value"] for r in earlier],
                            [pooled[r][key]["busy"] for r in earlier],
                            [pooled[r][key].get("steal") for r in earlier])
                step.change = change_of(base, pooled[run_id][key])
                step.against = len(before)
                pending.append((step, Question(key, base, pooled[run_id][key], past,
                                               against=len(before))))
            s.steps.append(step)
        series.append(s)
    # Each run's steps are one family of tests (as a comparison is): adjusted together.
    for run_id in order:
        family = [t for t in pending if t[0].run_id == run_id]
        for (step, _), judged in zip(family, judge_family([q for _, q in family], thresholds,
                                                          alpha)):
            step.adopt(judged)
    if not series and not lost:       # a lost case is news enough without a trend
        what = "; ".join(f"{b} {m} (run {r})" for b, m, r in single[:5])
        raise NetbenchError("a trend needs a case measured in at least two runs; every chosen "
                            f"case is in one run only: {what}")
    return History(runs, series, single, left_out, lost)


def _lost(store: ReadableStore, index: Any, usable: Any, wanted: set[str] | None,
          window: int) -> list[MetricVerdict]:
    """The cases the newest chosen run (measured anything or not) lost against the up to
    ``window`` runs before it on its host that measured: compare's rule (``lost_verdicts``)."""
    if wanted:
        index = index[[bool(wanted & set(b)) for b in index["benchmarks"]]]
    if index.empty:
        return []
    newest = index.iloc[-1]
    earlier = usable[(usable["host"] == newest["host"])
                     & (usable["started_at"] < newest["started_at"])].tail(window)
    if earlier.empty:
        return []
    where = {"benchmark": sorted(wanted)} if wanted else None
    before = store.read(list(earlier["run_id"]), where=where)
    after = store.read([newest["run_id"]], where=where)
    if before.empty or after.empty:
        return []
    before, after = keyed(before, after)
    return lost_verdicts(before, after)


def _merge(entries: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Several runs' pooled entries of one case as one side (their values are invocations)."""
    from netbench.stats import median_sorted

    values = [v for e in entries for v in e["values"]]
    return {**entries[0], "value": median_sorted(sorted(values)), "values": values,
            "busy": mean_known([e.get("busy") for e in entries]),
            "steal": mean_known([e.get("steal") for e in entries]),
            "own": None if any(e.get("own") is None for e in entries)
            else mean_known([e.get("own") for e in entries]),
            "cpus": min((e["cpus"] for e in entries if e.get("cpus")), default=None),
            "n_runs": sum(e.get("n_runs", 1) for e in entries),
            "mhz": mean_known([e.get("mhz") for e in entries]),
            "throttled": sum(e.get("throttled", 0) for e in entries),
            "in_kernel": all(e.get("in_kernel") for e in entries),
            "units": sorted({u for e in entries for u in e["units"]}),
            # An extreme on the fewest samples any run's invocation rested on.
            "statistic": next((e["statistic"] for e in entries if e.get("statistic")), None),
            "n_samples": min((e["n_samples"] for e in entries
                              if e.get("n_samples") is not None), default=None)}


SPARKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float]) -> str:
    # At a scale where no difference overflows (1e308 beside -1e308 made NaN of it).
    scale = max((abs(v) for v in values), default=0.0) or 1.0
    low, high = min(values) / scale, max(values) / scale
    if not high > low:
        return SPARKS[3] * len(values)
    return "".join(SPARKS[min(int((v / scale - low) / (high - low) * len(SPARKS)),
                              len(SPARKS) - 1)] for v in values)
