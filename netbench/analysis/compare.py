"""Regression verdicts: baseline vs candidate, metric by metric, direction-aware.

Cases match on (benchmark, params, metric). Each metric's stored direction (``better``) decides
whether a change is a regression or an improvement. The decision is
``netbench.analysis.verdict.judge``'s, shared with history, the dashboard and the pytest
plugin: only invocations (repeats, a label's runs, the case's history on its host) are
evidence, never the samples inside one run. Alongside, what changed in the environment
(driver, firmware, kernel, NCCL, link): the first question after an update.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netbench.analysis.error_metrics import inside_the_kernel, is_error_metric, with_error_metrics
from netbench.analysis.segments import latest_segment
from netbench.analysis.verdict import (
    HISTORY_RUNS,
    LOST,
    Judgement,
    Past,
    Side,
    extreme,
    invocation_test,
    judge,
)
from netbench.errors import NetbenchError, UsageError
from netbench.fingerprint import Fingerprint
from netbench.stats import median_sorted
from netbench.store import keyed
from netbench.store.protocol import ReadableStore
from netbench.textfile import load_toml
from netbench.units import parse_threshold

DEFAULT_THRESHOLD = 0.05
KEY = ["benchmark", "params", "metric"]
LOAD = ("load_other_cores", "load_steal_cores")
CLOCK = ("load_cpu_mhz", "load_throttle_events")
SEGMENT_RUNS = 6 * HISTORY_RUNS   # earlier runs a case's history is segmented over


@dataclass
class MetricVerdict(Judgement):
    """One case metric compared: judge's decision (verdict, p_value, p_adjusted, evidence,
    needs, disturbed: see netbench.analysis.verdict.Judgement) and what it was judged on."""
    benchmark: str
    params: str
    msg_size: int | None
    metric: str
    unit: str
    better: str
    baseline: float
    candidate: float
    change: float              # relative, (candidate - baseline) / |baseline|
    threshold: float
    invocations: tuple[int, int] = (0, 0)   # baseline, candidate
    history_runs: int = 0      # earlier runs of the case on its host used as noise model
    busy: tuple[float | None, float | None] = (0.0, 0.0)   # cores busy outside netbench,
    # each side's mean (None: not recorded)
    steal: tuple[float | None, float | None] = (0.0, 0.0)   # of busy, stolen by the hypervisor
    per: str = ""              # judged per unit of the case's work, which changed (say so)
    reason: str = ""           # lost: why the candidate did not measure it (skip, failure)


# --- thresholds ----------------------------------------------------------------------------------

def load_thresholds(flags: Sequence[str], path: str | None,
                    known: Mapping[str, Sequence[str]] | None = None) -> dict[str, float]:
    """``metric=5%`` or ``benchmark:metric=0.1`` flags, and a TOML ``[thresholds]`` table;
    with ``known`` (benchmark -> its metric names: the CLI passes ``registry.catalog()``), a
    key naming neither is an error."""
    out: dict[str, float] = {}
    if path:
        data, _ = load_toml(path, "thresholds")
        table = data.get("thresholds")
        if not isinstance(table, dict):
            raise UsageError(f"{path}: needs a [thresholds] table (metric = 0.05, ...)")
        for key, value in table.items():
            out[key] = parse_threshold(value)
    for flag in flags:
        key, sep, value = flag.partition("=")
        if not sep:
            raise UsageError(f"--threshold {flag!r}: expected METRIC=VALUE, e.g. bw_avg=3%")
        out[key.strip()] = parse_threshold(value)
    if known is not None:
        _check_threshold_keys(out, known)
    return out


def thresholds_of_runs(flags: Sequence[str], path: str | None,
                       known: Mapping[str, Sequence[str]] | None, store: ReadableStore,
                       run_ids: Sequence[str] | None,
                       labels: Sequence[str] | None = None) -> tuple[dict[str, float], str]:
    """The thresholds a judgement of these runs uses, and where they came from: ``path``
    (--thresholds FILE) where given, else the suite's own ``[thresholds]`` stored with the
    newest of ``run_ids`` (None: of the runs with ``labels``, or of all) that has them (a
    driver-regression run is judged by its 3% without being told), then ``flags``
    (--threshold M=V) over either. "" where none apply: the default 5% everywhere."""
    if path:
        return load_thresholds(flags, path, known), f"{path} [thresholds]"
    stored, source = {}, ""
    index = store.runs()
    if "thresholds" in index and len(index):
        mine = (index["run_id"].isin(list(run_ids)) if run_ids is not None
                else index["label"].isin(list(labels)) if labels else index["run_id"].notna())
        chosen = index[mine & (index["thresholds"].fillna("") != "")]
        if len(chosen):
            row = chosen.iloc[-1]
            try:
                table = json.loads(row["thresholds"])
                stored = {str(k): parse_threshold(v) for k, v in table.items()}
            except (ValueError, AttributeError, UsageError):
                stored = {}     # a footer hand-edited: the defaults, never a traceback
            else:
                source = (f"suite {row['suite'] or '?'}'s [thresholds], stored with run "
                          f"{row['run_id']}")
    out = {**stored, **load_thresholds(flags, None, None)}
    if known is not None:
        try:
            _check_threshold_keys(out, known)
        except UsageError as exc:
            raise UsageError(f"{exc} ({source or '--threshold'})") from None
    if flags:
        source = f"{source} and --threshold" if source else "--threshold"
    return out, source


def _check_threshold_keys(thresholds: Mapping[str, float],
                          known: Mapping[str, Sequence[str]]) -> None:
    """A threshold for a metric or benchmark that does not exist would silently never apply:
    name it, with what is accepted."""
    metrics = {m for names in known.values() for m in names}
    for key in thresholds:
        bench, sep, metric = key.rpartition(":")
        if key == "default" or (not sep and key in metrics | set(known)):
            continue
        if is_error_metric(metric) and (not sep or bench in known):
            continue        # err.<counter>: any benchmark's (analysis.error_metrics)
        if sep and bench in known and metric in known[bench]:
            continue
        raise UsageError(f"threshold {key!r}: no such metric, benchmark or benchmark:metric; "
                         "accepted: a metric name (bw_avg, lat_p99, err.rx_dropped: an error "
                         "counter's growth, ...), a benchmark name, "
                         "benchmark:metric, or default")


def threshold_for(thresholds: Mapping[str, float], benchmark: str, metric: str) -> float:
    for key in (f"{benchmark}:{metric}", metric, benchmark, "default"):
        if key in thresholds:
            return thresholds[key]
    return DEFAULT_THRESHOLD


# --- pooling each side --------------------------------------------------------------------------

def _is_missing(value: Any) -> bool:
    """None, NaN, or infinite: nothing to count on (an inf value would make any spread NaN)."""
    if value is None or type(value).__name__ == "NAType":   # pandas' nullable columns
        return True
    return isinstance(value, float) and not math.isfinite(value)


def with_pairs(rows: Any) -> Any:
    """Rows whose run measured one case between several pairs of hosts (a fabric sweep) keep
    their pairs apart: the pair ("client->server") joins the case's params, so a case is
    matched pair by pair, never pooled over the fabric."""
    if rows.empty or "host" not in rows or "peer" not in rows:
        return rows
    case = (rows["run_id"].astype(str) + "\0" + rows["benchmark"].astype(str) + "\0"
            + rows["params"].astype(str))
    pair = rows["host"].fillna("").astype(str) + "->" + rows["peer"].fillna("").astype(str)
    several = pair.groupby(case).transform("nunique") > 1
    if not several.any():
        return rows
    rows = rows.copy()
    rows.loc[several, "params"] = [
        json.dumps({**json.loads(p or "{}"), "pair": q}, sort_keys=True, separators=(",", ":"))
        for p, q in zip(rows.loc[several, "params"], pair[several])]
    return rows


def _cpus(rows: Any) -> list[int | None]:
    """Each row's host CPU count, from its run's probe (read once per distinct env)."""
    if "env_json" not in rows:
        return [None] * len(rows)
    seen: dict[Any, int | None] = {}
    out = []
    for text in rows["env_json"].tolist():
        key = text if isinstance(text, str) else None
        if key not in seen:
            seen[key] = Fingerprint(key).cpu_cores
        out.append(seen[key])
    return out


def pool(rows: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (benchmark, params, metric): the median value over invocations, each invocation's
    value (a row is one: a repeat of the case in a run, or a run) and which invocation it was,
    the hosts, and how busy the host was outside netbench (and netbench itself), on average
    over them. One pass over plain columns: a store of thousands of rows a run pools in
    milliseconds, not per-group pandas lookups."""
    ok = with_pairs(rows[rows["status"] == "ok"])
    names = ("benchmark", "params", "metric", "value", "unit", "better", "msg_size", "host",
             "run_id")
    columns = [ok[c].tolist() for c in names]

    def column(name: str) -> list[Any]:
        return ok[name].tolist() if name in ok else [None] * len(ok)

    load = [column(c) for c in (*LOAD, *CLOCK)]
    # What the value summarises and of how many samples: an extreme is judged by runs; what
    # work it is a cost of; netbench's own demand on the host's CPUs (was it short of CPU?).
    # Over the kernel's loopback, no link: what its error counters count happened in the host.
    shape = [column(c) for c in ("statistic", "n_samples", "per_metric", "cost",
                                 "load_own_cores", "case_index", "placement", "device",
                                 "peer")]
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for (bench, params, metric, value, unit, better, size, host, run_id), *busy, mhz, \
            throttled, statistic, counted, per, cost, own, index, placed, device, peer, \
            cpus in zip(zip(*columns), *load, *shape, _cpus(ok)):
        entry = entries.get((bench, params, metric))
        if entry is None:
            entry = entries[(bench, params, metric)] = {
                "values": [], "units": set(), "unit": unit, "better": better, "busy": [],
                "steal": [], "own": [], "cpus": [], "ids": [], "placement": [],
                "hosts": set(), "runs": set(), "mhz": [], "throttled": 0,
                "msg_size": None if _is_missing(size) else int(size),
                "statistic": None if _is_missing(statistic) else str(statistic),
                "per": None if _is_missing(per) else str(per),
                "cost": not _is_missing(cost) and bool(cost),
                "n_samples": None, "in_kernel": True}
        if not _is_missing(counted):            # the fewest an invocation of it rests on
            entry["n_samples"] = int(counted) if entry["n_samples"] is None else min(
                int(counted), entry["n_samples"])
        entry["in_kernel"] = entry["in_kernel"] and inside_the_kernel(device, peer)
        entry["units"].add(str(unit))
        entry["hosts"].add(str(host))
        entry["runs"].add(run_id)
        if not _is_missing(value):
            entry["values"].append(float(value))
            entry["ids"].append((run_id, host, None if _is_missing(index) else int(index)))
        # Unrecorded load (files from before netbench recorded it) is unknown, not quiet.
        entry["busy"].append(None if _is_missing(busy[0]) else sum(
            0.0 if _is_missing(b) else float(b) for b in busy))
        entry["steal"].append(None if _is_missing(busy[1]) else float(busy[1]))
        entry["own"].append(None if _is_missing(own) else float(own))
        entry["cpus"].append(cpus)
        entry["placement"].append(None if _is_missing(placed) or not placed else str(placed))
        if not _is_missing(mhz):
            entry["mhz"].append(float(mhz))
        if not _is_missing(throttled):
            entry["throttled"] += int(throttled)
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for key, entry in entries.items():
        values, busy, steal = entry.pop("values"), entry.pop("busy"), entry.pop("steal")
        own, cpus, placed = entry.pop("own"), entry.pop("cpus"), entry.pop("placement")
        if not values:
            continue
        mhz = entry.pop("mhz")
        out[key] = {**entry, "busy": mean_known(busy), "steal": mean_known(steal),
                    # Own demand only where every invocation recorded it: a mean over some
                    # would understate how short of CPU the rest were.
                    "own": None if None in own else mean_known(own),
                    # Where the ends ran, only where every invocation said (None: unknown).
                    "placement": None if None in placed else sorted(set(placed)),
                    "cpus": min((c for c in cpus if c), default=None),
                    "mhz": sum(mhz) / len(mhz) if mhz else None,
                    "n_runs": len(entry["runs"]),
                    "value": median_sorted(sorted(values)), "values": values,
                    "units": sorted(entry["units"]), "hosts": sorted(entry["hosts"])}
    return out


def sample_precision(rows: Any) -> dict[tuple[str, str], float]:
    """Per case (benchmark, params): how precisely its invocations' figures are known from
    their own samples, as a relative variance (the log scale's): the mean over invocations of
    (sd / mean)^2 / n of the samples of each metric that is their mean (a Metric declared
    ``statistic="avg"`` alone: separately timed pieces of the same work), the case's largest.

    An invocation's figure is an estimate: ten windows of a 2-rank broadcast on a 2-core VM
    read 120 to 5,000 us, so their mean moves by a third between invocations whatever the
    code. Three invocations that agree more closely than that are luck (an A/A here: 195, 213
    and 206 us against 1137, 680 and 679, p 0.001), and the verdict's spread is never taken
    below it (``verdict.invocation_test``), for every metric of the case (its bandwidths are
    its time's)."""
    if rows.empty or "samples" not in rows or "statistic" not in rows:
        return {}
    ok = with_pairs(rows[(rows["status"] == "ok") & (rows["statistic"] == "avg")])
    per_case: dict[tuple[str, str], dict[str, list[float]]] = {}
    for bench, params, metric, samples, counted in zip(
            *(ok[c].tolist() for c in ("benchmark", "params", "metric", "samples",
                                       "n_samples"))):
        if samples is None or _is_missing(counted):
            continue
        xs = [float(x) for x in samples]
        n = len(xs)
        # Thinned samples (n below the count) still give the spread; the count divides it.
        if n < 2 or not all(math.isfinite(x) for x in xs):
            continue
        mean = math.fsum(xs) / n
        if mean <= 0:
            continue
        var = math.fsum((x - mean) ** 2 for x in xs) / (n - 1)
        per_case.setdefault((bench, params), {}).setdefault(metric, []).append(
            var / (mean * mean) / max(int(counted), n))
    return {case: max(sum(v) / len(v) for v in metrics.values())
            for case, metrics in per_case.items()}


def mean_known(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def noise_history(rows: Any) -> dict[tuple[str, str, str], Past]:
    """The case's history as a noise model: per case metric, one value per earlier run (the
    median of its repeats) and how busy the host was in it, oldest first, the newest
    HISTORY_RUNS of its latest segment (``analysis.segments``: after its last change point),
    from rows of runs on the baseline's host. Runs in another unit than the newest are not
    this series (a changed definition), so they are left out."""
    if rows is None or rows.empty:
        return {}
    per_run: dict[tuple[str, str, str],
                  list[tuple[float, float | None, float | None, str]]] = {}
    for run_id in dict.fromkeys(rows["run_id"]):
        for key, entry in pool(rows[rows["run_id"] == run_id]).items():
            per_run.setdefault(key, []).append((entry["value"], entry["busy"],
                                                entry.get("steal"), entry["units"][-1]))
    out = {}
    for key, runs in per_run.items():
        unit = runs[-1][3]
        kept = [(v, b, st) for v, b, st, u in runs if u == unit][-SEGMENT_RUNS:]
        # The noise model is the latest stable stretch: runs before the case's last step (a
        # link that was slower for a while, a driver since rolled back) are another level,
        # and their distance from this one is no run-to-run noise.
        kept = kept[latest_segment([v for v, _, _ in kept]):][-HISTORY_RUNS:]
        out[key] = Past([v for v, _, _ in kept], [b for _, b, _ in kept],
                        [st for _, _, st in kept])
    return out


def side(entry: Mapping[str, Any]) -> Side:
    return Side(entry["values"], entry.get("busy", 0.0), entry.get("n_runs", 0),
                entry.get("mhz"), entry.get("throttled", 0), entry.get("steal", 0.0),
                entry.get("own"), entry.get("cpus"), entry.get("placement"),
                entry.get("precision"))


def extreme_of(metric: str, *sides: Mapping[str, Any]) -> str:
    """Why a case metric is an extreme on either side (``verdict.extreme``), or ""."""
    for entry in sides:
        found = extreme(entry.get("statistic"), entry.get("n_samples"), metric)
        if found:
            return found
    return ""


def change_of(x: Mapping[str, Any], y: Mapping[str, Any]) -> float:
    return (y["value"] - x["value"]) / abs(x["value"]) if x["value"] else (
        0.0 if y["value"] == x["value"] else math.inf)


def adjust(p_values: Sequence[float | None]) -> list[float | None]:
    """Benjamini-Hochberg: p-values adjusted for testing many metrics at once. A comparison
    tests hundreds; at 0.05 each, unchanged code would "regress" somewhere nearly every time.
    Adjusted, the chance of any false verdict when nothing changed is at most alpha."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if p is not None)
    out: list[float | None] = [None] * len(p_values)
    m, running = len(tested), 1.0
    for rank in range(m, 0, -1):
        p, i = tested[rank - 1]
        running = min(running, p * m / rank)
        out[i] = running
    return out


def check_units(key: tuple[str, str, str], *sides: Mapping[str, Any]) -> None:
    """Values in different units are not one series: refuse to judge them together."""
    units = sorted({u for side in sides for u in side["units"]})
    if len(units) > 1:
        bench, params, metric = key
        raise NetbenchError(f"{bench} {metric} ({params}) is stored in different units "
                            f"({' vs '.join(units)}) across the runs chosen; compare runs "
                            "of one netbench version, or pick runs by id")


def compare(base: Any, cand: Any, thresholds: Mapping[str, float], alpha: float = 0.05,
            history: Any = None) -> list[MetricVerdict]:
    """Every case metric the sides share, judged, after the cases the candidate lost (see
    ``lost_cases``). ``history``: rows of earlier runs of the baseline's host
    (``history_rows``), whose run-to-run spread is each case's noise model where the sides'
    own repeats say less."""
    base, cand, history = keyed(base, cand, history)     # the planned params match
    lost = lost_verdicts(base, cand)
    # Each error counter that grew on a case's own device, as a metric (lower is better).
    base, cand, history = with_error_metrics(base, cand, history)
    a, b = pool(base), pool(cand)
    # A cost whose case's work changed is judged per unit of that work.
    per_work = work_changed(a, b, thresholds)
    if per_work:
        base, cand, history = (per_unit_of_work(f, per_work) for f in (base, cand, history))
        a, b = pool(base), pool(cand)
    for side_rows, pooled in ((base, a), (cand, b)):
        precision = sample_precision(side_rows)
        for key, entry in pooled.items():
            entry["precision"] = precision.get(key[:2])
    common = [k for k in a if k in b]
    if not common and not lost:
        raise NetbenchError("the two sides have no case in common (same benchmark, params and "
                            "metric); nothing to compare")
    for key in common:
        check_units(key, a[key], b[key])
    past = noise_history(history)
    questions = [Question(k, a[k], b[k], past.get(k, Past())) for k in common]
    verdicts = []
    for q, j in zip(questions, judge_family(questions, thresholds, alpha)):
        (bench, params, metric), x, y = q.key, q.base, q.cand
        verdicts.append(MetricVerdict(
            bench, params, x["msg_size"], metric, x["unit"], x["better"], x["value"],
            y["value"], change_of(x, y), threshold_for(thresholds, bench, metric),
            (len(x["values"]), len(y["values"])),
            len(q.past.values) if j.evidence == "history" else 0, (x["busy"], y["busy"]),
            (x.get("steal"), y.get("steal")), per_work.get(q.key, ("", ""))[1],
            **j.decision()))
    return [*lost, *verdicts]


@dataclass
class Question:
    """One case metric to judge: its two sides as ``pool`` made them, the case's earlier runs
    (its run-level noise model), and how many runs the baseline side pooled (history's
    window; a comparison's sides are its own runs: 0)."""
    key: tuple[str, str, str]
    base: Mapping[str, Any]
    cand: Mapping[str, Any]
    past: Past
    against: int = 0


def judge_family(questions: Sequence[Question], thresholds: Mapping[str, float] | None,
                 alpha: float = 0.05) -> list[Judgement]:
    """One family of tests judged, the one way netbench judges: each metric's invocation test,
    the p-values adjusted together (Benjamini-Hochberg), each decided by ``verdict.judge``
    against its threshold. A comparison is one family; so is each run's steps in a history.
    compare and history call this, and the pytest plugin and the dashboard call them."""
    tested = [invocation_test(side(q.base), side(q.cand), q.past,
                              counts=is_error_metric(q.key[2])) for q in questions]
    out = []
    for q, (p, evidence, sd), adjusted in zip(questions, tested, adjust([t[0] for t in tested])):
        bench, _, metric = q.key
        out.append(judge(side(q.base), side(q.cand), change_of(q.base, q.cand),
                         q.base["better"], threshold_for(thresholds or {}, bench, metric),
                         adjusted, evidence, alpha,
                         history_runs=q.against + len(q.past.values), what=bench, sd=sd,
                         past=q.past, p_value=p, extreme=extreme_of(metric, q.base, q.cand),
                         counts=is_error_metric(metric), cost=bool(q.base.get("cost")),
                         hosted=bool(q.base.get("in_kernel") and q.cand.get("in_kernel"))))
    return out


# --- a cost per unit of work ----------------------------------------------------------------------

def work_changed(a: Mapping[tuple[str, str, str], Mapping[str, Any]],
                 b: Mapping[tuple[str, str, str], Mapping[str, Any]],
                 thresholds: Mapping[str, float]) -> dict[tuple[str, str, str],
                                                          tuple[str, str]]:
    """The cost metrics (a metric declared ``per`` another) whose case's work moved beyond its
    threshold: key -> (the work metric, a sentence saying so)."""
    out = {}
    for key, entry in a.items():
        work = entry.get("per")
        wkey = (key[0], key[1], work)
        if not work or key not in b or wkey not in a or wkey not in b:
            continue
        moved = change_of(a[wkey], b[wkey])
        if math.isfinite(moved) and abs(moved) > threshold_for(thresholds, key[0], work):
            out[key] = (work, f"judged per {a[wkey]['unit']} of {work}, which moved "
                              f"{moved:+.1%}: a cost of the work, not a change of its own")
    return out


def per_unit_of_work(rows: Any, per_work: Mapping[tuple[str, str, str], tuple[str, str]]) -> Any:
    """``rows`` with each cost metric of ``per_work`` divided by its invocation's work (the
    same run, host and case invocation), in unit "<unit> per <work's unit>"; an invocation
    whose work is missing or 0 has no such value."""
    if rows is None or rows.empty:
        return rows
    invocation = ["run_id", "host", "case_index", "benchmark", "params", "metric"]
    ids = list(zip(*(rows[c].tolist() for c in invocation)))
    values, units = rows["value"].tolist(), rows["unit"].astype(object).tolist()
    works = {(k[0], k[1], work) for k, (work, _) in per_work.items()}
    work_of = {i: (v, u) for i, v, u in zip(ids, values, units)
               if (i[3], i[4], i[5]) in works}
    rows = rows.copy()
    for n, i in enumerate(ids):
        key = (i[3], i[4], i[5])
        if key not in per_work:
            continue
        work, unit = work_of.get(i[:5] + (per_work[key][0],), (None, None))
        usable = not _is_missing(work) and work and not _is_missing(values[n])
        values[n] = float(values[n]) / float(work) if usable else None
        units[n] = f"{units[n]} per {unit}"
    rows["value"], rows["unit"] = values, units
    return rows


# --- cases the candidate lost --------------------------------------------------------------------

def lost_verdicts(base: Any, cand: Any) -> list[MetricVerdict]:
    """A case the baseline measured and the candidate did not: skipped or failed in the
    newest candidate run that holds it, or absent from a candidate run of the suite the
    baseline measured it in. One ``lost`` verdict a case (on its headline metric) with the
    candidate's reason: "the device vanished after the driver update" fails the gate."""
    if base.empty or cand.empty:
        return []
    measured = base[base["status"] == "ok"]
    if measured.empty:
        return []
    out = []
    cand_cases = cand.groupby(["benchmark", "params"], sort=False)
    held = {k: g for k, g in cand_cases}
    order = {r: t for r, t in zip(cand["run_id"], cand["started_at"])}
    suites = set(cand["suite"].dropna().astype(str)) if "suite" in cand else set()
    for (bench, params), group in measured.groupby(["benchmark", "params"], sort=False):
        mine = held.get((bench, params))
        if mine is None:
            ran = set(group["suite"].dropna().astype(str)) if "suite" in group else set()
            asked = sorted(ran & suites - {""})
            if not asked:
                continue                # not asked of the candidate: named, never failed
            status, reason = "absent", (f"absent from the candidate's run of suite "
                                        f"{asked[0]!r}, which measured it on the baseline "
                                        "(a run that stopped early, or a case that vanished)")
        else:
            newest = max(mine["run_id"].unique(), key=lambda r: order[r])
            latest = mine[mine["run_id"] == newest]
            if (latest["status"] == "ok").any():
                continue
            status = str(latest["status"].iloc[0])
            reason = str(latest["reason"].dropna().iloc[0]) if latest["reason"].notna().any() \
                else status
        head = _headline_row(group)
        values = group.loc[group["metric"] == head["metric"], "value"].dropna().astype(float)
        out.append(MetricVerdict(
            str(bench), str(params), None if _is_missing(head.get("msg_size")) else int(
                head["msg_size"]), str(head["metric"]), str(head["unit"]),
            str(head["better"]), median_sorted(sorted(values)) if len(values) else math.nan,
            math.nan, math.nan, 0.0, (len(values), 0), verdict=LOST, evidence="none",
            reason=f"{status}: {reason}"))
    return out


def _headline_row(group: Any) -> Mapping[str, Any]:
    """The case's headline metric's first row (its stored trait), else its first row."""
    if "headline" in group:
        named = group["headline"].dropna()
        if len(named):
            rows = group[group["metric"] == named.iloc[0]]
            if len(rows):
                return rows.iloc[0].to_dict()
    return group.iloc[0].to_dict()


def new_cases(base: Any, cand: Any) -> list[tuple[str, str]]:
    """Cases the candidate measured that the baseline never had: named, never failed."""
    if base.empty or cand.empty:
        return []
    had = set(zip(base["benchmark"], base["params"]))
    ok = cand[cand["status"] == "ok"]
    return [k for k in dict.fromkeys(zip(ok["benchmark"], ok["params"])) if k not in had]


def not_asked(base: Any, cand: Any) -> list[tuple[str, str]]:
    """Cases the baseline measured that no candidate run holds or was asked to run (another
    suite or target): named, never failed; one a candidate run of the same suite lacks is
    ``lost`` (``lost_verdicts``)."""
    if base.empty or cand.empty:
        return []
    held = set(zip(cand["benchmark"], cand["params"]))
    suites = set(cand["suite"].dropna().astype(str)) - {""} if "suite" in cand else set()
    ok = base[base["status"] == "ok"]
    out = []
    for key, group in ok.groupby(["benchmark", "params"], sort=False):
        ran = set(group["suite"].dropna().astype(str)) if "suite" in group else set()
        if key not in held and not ran & suites:
            out.append((str(key[0]), str(key[1])))
    return out


def check_hosts(name: str, rows: Any, pool_hosts: bool) -> None:
    """A side pools invocations of one host: another host's drift is not this one's noise.
    (A fabric run's pairs name many hosts in one run: one run is always one side.)"""
    if pool_hosts or rows.empty or rows["run_id"].nunique() < 2:
        return
    per_run = rows.dropna(subset=["host"]).groupby("run_id")["host"].agg(
        lambda h: sorted(set(map(str, h))))
    if any(len(h) > 1 for h in per_run):        # fabric sweeps: their pairs are matched
        return
    hosts = per_run.map(lambda h: h[0])
    if hosts.nunique() > 1:
        listed = ", ".join(f"{h} ({', '.join(sorted(hosts.index[hosts == h]))})"
                           for h in sorted(set(hosts)))
        raise UsageError(f"the {name} pools runs from different hosts: {listed}; pick one "
                         "host's runs (a run id, or --host), or pass --pool-hosts to pool them")


def history_rows(store: ReadableStore, base_ids: Sequence[str], cand_ids: Sequence[str],
                 base: Any, cand: Any) -> Any:
    """Rows of earlier runs on the baseline's host (same kernel, CPU and netbench), of the
    benchmarks both sides ran, started before the candidate, neither side's own, oldest
    first: ``noise_history`` keeps each case's newest HISTORY_RUNS. None when there are none."""
    index = store.runs()
    if index.empty or base.empty or cand.empty:
        return None
    host = base["host"].dropna()
    if host.nunique() != 1:
        return None
    index = index[(index["host"] == host.iloc[0]) & ~index["run_id"].isin([*base_ids,
                                                                            *cand_ids])]
    index = index[index["started_at"] < cand["started_at"].min()].sort_values("started_at")
    benches = set(base["benchmark"]) & set(cand["benchmark"])
    index = index[[bool(benches & set(b)) for b in index["ok_benchmarks"]]]
    if index.empty:
        return None
    # Enough runs that each case can have its newest HISTORY_RUNS, bounded for a large store.
    rows = store.read(list(index["run_id"].tail(8 * HISTORY_RUNS)),
                      where={"benchmark": sorted(benches)})
    if rows.empty:
        return None
    for column in ("env_kernel", "env_cpu", "env_netbench"):    # the host as it was
        if column in rows and column in base:
            want = base[column].iloc[0]
            want = "" if _is_missing(want) else str(want)
            rows = rows[rows[column].fillna("").astype(str) == want]
    return rows.sort_values(["started_at", "run_id"], kind="stable")


@dataclass
class Comparison:
    """`netbench compare`'s answer, made once here and handed to report/ (text or JSON): the
    sides chosen, each metric's verdict, and what else the reader must know."""
    baseline: Any                     # analysis.selection.Selection
    candidate: Any
    verdicts: list[MetricVerdict]
    changes: list[tuple[str, str | None, str | None]]    # env_changes
    failed: list[tuple[str, str, str, str]]              # failed_cases
    news: list[Any]                                      # analysis.counter_news
    new: list[tuple[str, str]]                           # new_cases
    unasked: list[tuple[str, str]]                       # not_asked
    thresholds: Mapping[str, float]
    source: str                                          # where the thresholds came from
    # The candidate's cases against what their hardware reaches (analysis.expectations), and
    # why they could not be where the table would not load.
    reached: list[Any] = field(default_factory=list)
    reached_error: str = ""

    def fails_gate(self, allow_lost: bool = False) -> bool:
        """A regressed or lost metric, or an error counter grown on a case's own device."""
        return any(v.verdict.fails_gate(allow_lost=allow_lost)
                   for v in [*self.verdicts, *self.news])


def comparison(store: ReadableStore, base: Any, cand: Any, thresholds: Mapping[str, float],
               source: str = "", alpha: float = 0.05, pool_hosts: bool = False,
               use_history: bool = True) -> Comparison:
    """Two chosen sides judged (``judge_selections``), with the cases they could not judge,
    the error counters that grew, and what changed in the environment between them."""
    from netbench.analysis.counter_news import counter_news

    verdicts = judge_selections(store, base, cand, thresholds, alpha, pool_hosts, use_history)
    from netbench.analysis.expectations import reached_safely

    a, b = base.rows, cand.rows
    return Comparison(base, cand, verdicts, env_changes(a, b), failed_cases(a, b),
                      counter_news(a, b), new_cases(a, b), not_asked(a, b), thresholds, source,
                      *reached_safely(b, [], None))


def judge_selections(store: ReadableStore, base: Any, cand: Any, thresholds: Mapping[str, float],
                     alpha: float = 0.05, pool_hosts: bool = False,
                     use_history: bool = True) -> list[MetricVerdict]:
    """Two chosen sides (``netbench.analysis.selection.Selection``) judged: what compare, the
    dashboard and the pytest plugin each call, so the same runs get the same verdicts."""
    check_hosts("baseline", base.rows, pool_hosts)
    check_hosts("candidate", cand.rows, pool_hosts)
    history = history_rows(store, base.run_ids, cand.run_ids, base.rows,
                           cand.rows) if use_history else None
    return compare(base.rows, cand.rows, thresholds, alpha, history)


def failed_cases(base: Any, cand: Any) -> list[tuple[str, str, str, str]]:
    """Cases one side measured and the other could not: every invocation there failed.
    (side, benchmark, params, the first reason), so a lost case is named, never just absent."""
    out = []
    for name, mine, other in (("baseline", base, cand), ("candidate", cand, base)):
        if mine.empty or other.empty:
            continue
        measured = set(zip(other.loc[other["status"] == "ok", "benchmark"],
                           other.loc[other["status"] == "ok", "params"]))
        ok = set(zip(mine.loc[mine["status"] == "ok", "benchmark"],
                     mine.loc[mine["status"] == "ok", "params"]))
        failed = mine[mine["status"] == "failed"]
        for (bench, params), group in failed.groupby(["benchmark", "params"], sort=False):
            if (bench, params) in measured and (bench, params) not in ok:
                out.append((name, str(bench), str(params), str(group["reason"].iloc[0])))
    return out


def undecided(verdicts: Sequence[MetricVerdict]) -> list[MetricVerdict]:
    return [v for v in verdicts if v.verdict and v.verdict.undecided]


# --- what changed in the environment -------------------------------------------------------------

def _env(rows: Any) -> Fingerprint:
    envs = [e for e in map(Fingerprint, rows["env_json"]) if e]
    return envs[-1] if envs else Fingerprint()


def devices_used(*sides: Any) -> set[str] | None:
    """The interfaces and RDMA devices the sides' cases ran on (their rows' device and
    peer_device: "mlx5_0:1" is mlx5_0), or None where no row names one (files from before
    netbench recorded it)."""
    used: set[str] = set()
    for rows in sides:
        for column in ("device", "peer_device"):
            if column in rows:
                used |= {str(d).partition(":")[0] for d in rows[column].dropna() if str(d)}
    return used or None


def env_changes(base: Any, cand: Any) -> list[tuple[str, str | None, str | None]]:
    """What changed in the environment between the sides: the host's kernel, versions and
    collective settings, and only the interfaces the cases ran on (another program's
    temporary veth coming and going is no change of the case's)."""
    used = devices_used(base, cand)
    a, b = _env(base).facts(used), _env(cand).facts(used)
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
