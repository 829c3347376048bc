"""Regression verdicts: baseline vs candidate, metric by metric, direction-aware.

Cases match on (benchmark, params, metric). Each metric's stored direction (``better``) decides
whether a change is a regression or an improvement. A change counts only when it exceeds the
metric's threshold and a test on the evidence says it is unlikely to be noise: Mann-Whitney on
raw samples (counted by their effective number), a block bootstrap for summaries of samples
(percentiles, peaks), or Mann-Whitney on the values of repeats. Beyond the threshold but
within the noise is ``noisy``; without any evidence, ``inconclusive``; neither is a
regression. Alongside, what changed in the environment (driver, firmware, kernel, NCCL,
link): the first question after an update.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from netbench.api import finite, json_safe
from netbench.errors import NetbenchError, UsageError
from netbench.stats import block_bootstrap, bootstrap_df, bootstrap_p, median_sorted
from netbench.store import env_of
from netbench.textfile import load_toml

DEFAULT_THRESHOLD = 0.05
KEY = ["benchmark", "params", "metric"]


@dataclass
class Verdict:
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
    p_value: float | None      # Mann-Whitney U, two-sided; None without evidence
    verdict: str               # regressed | improved | unchanged | noisy | inconclusive
    evidence: str = "none"     # samples, bootstrap (of the samples summarised), repeats, none
    repeats_needed: int | None = None   # noisy/inconclusive: about how many would decide it
    p_adjusted: float | None = None     # Benjamini-Hochberg over the comparison: decides


# --- statistics ----------------------------------------------------------------------------------

def mann_whitney_p(a: Sequence[float], b: Sequence[float], scale: float = 1.0) -> float:
    """Two-sided p-value of the Mann-Whitney U test (normal approximation, tie-corrected).
    ``scale`` < 1 shrinks the statistic for samples that are not independent (see
    ``effective_fraction``)."""
    import numpy as np

    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    n1, n2 = len(x), len(y)
    _, inverse, counts = np.unique(np.concatenate([x, y]), return_inverse=True,
                                   return_counts=True)
    mid_ranks = np.cumsum(counts) - (counts - 1) / 2.0        # ties share their mean rank
    r1 = float(mid_ranks[inverse[:n1]].sum())
    ties = float((counts.astype(float) ** 3 - counts).sum())
    u = r1 - n1 * (n1 + 1) / 2
    n = n1 + n2
    if n < 2:
        return 1.0
    sigma2 = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if sigma2 <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(sigma2) * scale
    return max(min(math.erfc(max(z, 0) / math.sqrt(2)), 1.0), 0.0)


def effective_fraction(samples: Sequence[float]) -> float:
    """The share of ``samples`` that counts as independent: per-interval samples of one run
    drift together (a loopback stream's intervals are strongly autocorrelated), so n of them
    carry the evidence of about n (1 - r) / (1 + r), r the lag-1 autocorrelation. Without
    this, two runs of the same code differ "significantly" by their run-to-run drift."""
    import numpy as np

    x = np.asarray(samples, dtype=float)
    n = len(x)
    if n < 4:
        return 1.0
    d = x - x.mean()
    var = float(d @ d)
    if var <= 0:
        return 1.0
    r = float(d[:-1] @ d[1:]) / var
    if r <= 0:
        return 1.0
    return max((1 - r) / (1 + r), 1.0 / n)


# --- thresholds ----------------------------------------------------------------------------------

def parse_threshold(text: str) -> float:
    text = str(text).strip()
    try:
        value = finite(float(text[:-1]) / 100 if text.endswith("%") else float(text))
    except ValueError:
        value = -1.0
    if value < 0:
        raise UsageError(f"threshold {text!r}: use a finite, non-negative fraction (0.05) or "
                         "percentage (5%)")
    return value


def load_thresholds(flags: Sequence[str], path: str | None) -> dict[str, float]:
    """``metric=5%`` or ``benchmark:metric=0.1`` flags, and a TOML ``[thresholds]`` table."""
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
    _check_threshold_keys(out)
    return out


def _check_threshold_keys(thresholds: Mapping[str, float]) -> None:
    """A threshold for a metric or benchmark that does not exist would silently never apply:
    name it, with what is accepted."""
    from netbench import registry

    benches = registry.all_benchmarks()
    metrics = {m.name for b in benches.values() for m in b.metrics}
    for key in thresholds:
        bench, sep, metric = key.rpartition(":")
        if key == "default" or (not sep and key in metrics | set(benches)):
            continue
        if sep and bench in benches and metric in {m.name for m in benches[bench].metrics}:
            continue
        raise UsageError(f"threshold {key!r}: no such metric, benchmark or benchmark:metric; "
                         "accepted: a metric name (bw_avg, lat_p99, ...), a benchmark name, "
                         "benchmark:metric, or default")


def threshold_for(thresholds: Mapping[str, float], benchmark: str, metric: str) -> float:
    for key in (f"{benchmark}:{metric}", metric, benchmark, "default"):
        if key in thresholds:
            return thresholds[key]
    return DEFAULT_THRESHOLD


# --- pooling each side --------------------------------------------------------------------------

def _is_missing(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _derived_metrics() -> dict[tuple[str, str], tuple[str, str]]:
    """(benchmark, metric) -> (metric whose samples it summarises, statistic), as declared."""
    from netbench import registry

    return {(name, m.name): (m.of_samples, m.statistic)
            for name, bench in registry.all_benchmarks().items() for m in bench.metrics
            if m.of_samples}


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


def pool(rows: Any) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Per (benchmark, params, metric): the median value over runs and repeats, the values,
    and the raw samples grouped by repeat (run, case) as arrays; a summary metric (lat_p99)
    gets the grouped samples it summarises. One pass over plain columns: a store of
    thousands of rows a run pools in milliseconds, not per-group pandas lookups."""
    import numpy as np

    ok = with_pairs(rows[rows["status"] == "ok"])
    derived = _derived_metrics()
    columns = [ok[c].tolist() for c in ("benchmark", "params", "metric", "run_id",
                                        "case_index", "value", "samples", "unit", "better",
                                        "msg_size")]
    by_case: dict[tuple[Any, Any, str], Any] = {}
    entries: dict[tuple[str, str, str], dict[str, Any]] = {}
    for bench, params, metric, run_id, case, value, samples, unit, better, size in zip(
            *columns):
        if samples is not None and len(samples):
            by_case[(run_id, case, metric)] = np.asarray(samples, dtype=float)
        entry = entries.get((bench, params, metric))
        if entry is None:
            entry = entries[(bench, params, metric)] = {
                "cases": [], "values": [], "units": set(), "unit": unit, "better": better,
                "msg_size": None if _is_missing(size) else int(size)}
        entry["cases"].append((run_id, case))
        entry["units"].add(str(unit))
        if not _is_missing(value):
            entry["values"].append(float(value))
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for key, entry in entries.items():
        values = sorted(entry.pop("values"))
        if not values:
            continue
        bench, _, metric = key
        source = derived.get((bench, metric))
        cases = entry.pop("cases")
        own = [by_case[(r, c, metric)] for r, c in cases if (r, c, metric) in by_case]
        summarised = [by_case[(r, c, source[0])] for r, c in cases
                      if source and (r, c, source[0]) in by_case]
        out[key] = {**entry, "value": median_sorted(values), "values": values,
                    "runs": len(values), "groups": own,
                    "samples": np.concatenate(own) if own else np.empty(0),
                    "summarised": summarised, "statistic": source[1] if source else "",
                    "units": sorted(entry["units"])}
    return out


def measure(x: Mapping[str, Any], y: Mapping[str, Any]) -> tuple[float, str, float | None]:
    """A metric of one case, baseline ``x`` vs candidate ``y`` (entries of ``pool``): the
    relative change, the evidence and its p-value (None without evidence)."""
    change = (y["value"] - x["value"]) / abs(x["value"]) if x["value"] else (
        0.0 if y["value"] == x["value"] else math.inf)
    evidence, p = _test(x, y)
    return change, evidence, p


def decide(x: Mapping[str, Any], y: Mapping[str, Any], change: float, evidence: str,
           p: float | None, threshold: float, alpha: float) -> tuple[str, int | None]:
    """The verdict, from a change, its evidence and its (adjusted) p-value; and about how many
    repeats would decide a noisy or inconclusive one."""
    if abs(change) <= threshold:
        return "unchanged", None
    if evidence == "none":
        # One value a side: no spread to judge the change against. Not a regression
        # until repeats show it is more than noise (pyperf: "not significant").
        return "inconclusive", MIN_REPEATS
    if p is not None and p < alpha:
        worse = change < 0 if x["better"] == "higher" else change > 0
        return ("regressed" if worse else "improved"), None
    return "noisy", _repeats_needed(x, y, evidence, alpha)


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


def compare(base: Any, cand: Any, thresholds: Mapping[str, float],
            alpha: float = 0.05) -> list[Verdict]:
    a, b = pool(base), pool(cand)
    common = [k for k in a if k in b]
    if not common:
        raise NetbenchError("the two sides have no case in common (same benchmark, params and "
                            "metric); nothing to compare", ) from None
    for key in common:
        check_units(key, a[key], b[key])
    measured = [measure(a[k], b[k]) for k in common]
    adjusted = adjust([p for _, _, p in measured])
    verdicts = []
    for key, (change, evidence, p), q in zip(common, measured, adjusted):
        x, y = a[key], b[key]
        bench, params, metric = key
        threshold = threshold_for(thresholds, bench, metric)
        verdict, needed = decide(x, y, change, evidence, q, threshold, alpha)
        verdicts.append(Verdict(bench, params, x["msg_size"], metric, x["unit"], x["better"],
                                x["value"], y["value"], change, threshold, p, verdict,
                                evidence, needed, q))
    return verdicts


MIN_REPEATS = 4     # per side, the fewest values a Mann-Whitney test can separate at 0.05


def _test(x: Mapping[str, Any], y: Mapping[str, Any]) -> tuple[str, float | None]:
    """What the change is tested on, and its p-value:

    - ``repeats``: both sides have >= 2 repeats (runs of a label, repeats in a run): their
      values, Mann-Whitney (3 a side can never reach 0.05: noisy, with how many would do);
    - ``samples``: else both kept >= 3 raw samples of this metric: Mann-Whitney, the samples
      counted by their effective number (a side's repeats' spread, lag-1 autocorrelation);
    - ``bootstrap``: else, for a summary of another metric's samples (p99, max), the
      two-stage block bootstrap of that statistic on each side;
    - ``none``: nothing to judge the spread by."""
    if len(x["values"]) >= 2 and len(y["values"]) >= 2:
        # Repeats on both sides: the repeat is the unit. Samples of one process sit closer
        # together than those of two invocations do, so pooling them would call drift
        # between invocations significant (an A/A here did, at p ~ 0).
        return "repeats", mann_whitney_p(x["values"], y["values"])
    if len(x["samples"]) >= 3 and len(y["samples"]) >= 3:
        scale = math.sqrt(min(_effective(x["groups"]), _effective(y["groups"])))
        return "samples", mann_whitney_p(_thinned(x["samples"]), _thinned(y["samples"]),
                                         scale)
    if x["statistic"] and x["summarised"] and y["summarised"] and min(
            len(g) for g in x["summarised"] + y["summarised"]) >= 16:
        a, b = _draws(x, seed=1), _draws(y, seed=2)
        return "bootstrap", bootstrap_p(_corrected(a, x["summarised"]),
                                        _corrected(b, y["summarised"]),
                                        bootstrap_df(x["summarised"]),
                                        bootstrap_df(y["summarised"]))
    return "none", None


def _draws(side: dict[str, Any], seed: int) -> list[float]:
    """The side's resampled statistic, computed once per side and seed (the test and the
    repeats-needed estimate both read it)."""
    key = f"draws-{seed}"
    if key not in side:
        side[key] = block_bootstrap(side["summarised"], side["statistic"], seed=seed)
    return side[key]


def _corrected(draws: Sequence[float], groups: Sequence[Any]) -> Any:
    """Resampling R repeats spreads the statistic by (R - 1) / R of its variance: widen the
    draws about their mean by the square root of R / (R - 1) to undo it."""
    import numpy as np

    values = np.asarray(draws, dtype=float)
    r = len([g for g in groups if len(g)])
    if r < 2:
        return values
    return values.mean() + (values - values.mean()) * math.sqrt(r / (r - 1))


MOST_SAMPLES = 40_000    # a side's samples beyond this are thinned evenly before testing


def _thinned(samples: Any) -> Any:
    """Every n-th sample, so at most MOST_SAMPLES: p only grows (fewer samples), and the
    test's cost stays bounded for stores of 100k-sample latency runs."""
    step = -(-len(samples) // MOST_SAMPLES)
    return samples[::step] if step > 1 else samples


def _effective(groups: Sequence[Any]) -> float:
    """The share of a side's pooled samples that counts as independent: within one run, from
    their autocorrelation; across repeats, also from how far the repeats' means spread beyond
    what their samples' own spread explains (the design effect 1 + (m - 1) ICC)."""
    import numpy as np

    arrays = [_thinned(np.asarray(g, dtype=float)) for g in groups if len(g)]
    within = min((effective_fraction(g) for g in arrays), default=1.0)
    if len(arrays) < 2:
        return within
    sizes = np.array([len(g) for g in arrays], dtype=float)
    means = np.array([g.mean() for g in arrays])
    total = sizes.sum()
    grand = float((sizes * means).sum() / total)
    between = float((sizes * (means - grand) ** 2).sum()) / (len(arrays) - 1)
    inside = sum(float(((g - m) ** 2).sum()) for g, m in zip(arrays, means)) / max(
        total - len(arrays), 1)
    m0 = float((total - (sizes ** 2).sum() / total) / (len(arrays) - 1))
    denominator = between + (m0 - 1) * inside
    icc = min(max((between - inside) / denominator, 0.0), 1.0) if denominator > 0 else 0.0
    return max(min(within, 1.0 / (1 + (m0 - 1) * icc)), 1.0 / total)


def _repeats_needed(x: Mapping[str, Any], y: Mapping[str, Any], evidence: str,
                    alpha: float) -> int:
    """About how many repeats per side would tell this change from the noise (a two-sample
    power estimate at 80%: n = 2 ((z_a/2 + z_0.8) sd / delta)^2, in samples, then in runs)."""
    import numpy as np

    def sd(v: Sequence[float]) -> float:
        return float(np.std(np.asarray(v, dtype=float), ddof=1)) if len(v) > 1 else 0.0

    if evidence == "bootstrap":
        # The resampled statistic's spread is that of one run's worth: runs needed follow it.
        a, b = _draws(x, seed=1), _draws(y, seed=2)
        spread = math.sqrt((sd(a) ** 2 * len(x["summarised"])
                            + sd(b) ** 2 * len(y["summarised"])) / 2)
        delta = abs(y["value"] - x["value"])
        z = _z(1 - alpha / 2) + 0.8416
        return max(math.ceil(2 * (z * spread / delta) ** 2), 2) if delta > 0 else 0
    a, b = (x["samples"], y["samples"]) if evidence == "samples" else (x["values"],
                                                                         y["values"])
    delta = abs(float(np.mean(b)) - float(np.mean(a)))
    spread = math.sqrt((sd(a) ** 2 + sd(b) ** 2) / 2)
    if delta <= 0:
        return 0
    z = _z(1 - alpha / 2) + 0.8416
    samples = math.ceil(2 * (z * spread / delta) ** 2)
    if evidence == "repeats":
        return max(samples, MIN_REPEATS)
    per_run = max(len(a) // max(x["runs"], 1), len(b) // max(y["runs"], 1), 1)
    return max(math.ceil(samples / per_run), 2)


def _z(q: float) -> float:
    """The standard normal quantile (bisection on erf: no scipy at run time)."""
    lo, hi = -10.0, 10.0
    for _ in range(80):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# --- what changed in the environment -------------------------------------------------------------

def _env(rows: Any) -> dict[str, Any]:
    envs = [e for e in map(env_of, rows["env_json"]) if e]
    return envs[-1] if envs else {}


def _flatten(env: Mapping[str, Any]) -> dict[str, str]:
    flat: dict[str, str] = {}
    for key in ("kernel", "os", "cpu_model"):
        if env.get(key):
            flat[key] = str(env[key])
    for name, version in (env.get("versions") or {}).items():
        if version:
            flat[f"{name} version"] = str(version)
    for nic in env.get("nics") or []:
        for field in ("driver", "driver_version", "firmware", "speed_mbps", "mtu", "model"):
            if nic.get(field) is not None:
                flat[f"{nic['name']} {field}"] = str(nic[field])
    for dev in env.get("rdma_devices") or []:
        if dev.get("fw_ver"):
            flat[f"{dev['name']} firmware"] = str(dev["fw_ver"])
        for port in dev.get("ports") or []:
            for field in ("rate", "state", "link_layer"):
                if port.get(field):
                    flat[f"{dev['name']}:{port['port']} {field}"] = str(port[field])
    for key, value in (env.get("collective_env") or {}).items():
        flat[f"env {key}"] = str(value)
    return flat


def env_changes(base: Any, cand: Any) -> list[tuple[str, str | None, str | None]]:
    a, b = _flatten(_env(base)), _flatten(_env(cand))
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


def to_json(verdicts: Sequence[Verdict], changes: Sequence[tuple[str, Any, Any]],
            sides: Mapping[str, Any] | None = None) -> str:
    """Verdicts, environment changes, and (``sides``: name -> Selection) the runs chosen."""
    chosen = {name: {"what": sel.what, "run_ids": sel.run_ids,
                     "left_out": [{"run_id": r, "why": w} for r, w in sel.left_out]}
              for name, sel in (sides or {}).items()}
    return json.dumps(json_safe({"selection": chosen,
                                 "verdicts": [asdict(v) for v in verdicts],
                                 "environment_changes": [{"what": k, "baseline": a,
                                                          "candidate": b}
                                                         for k, a, b in changes]}),
                      indent=2, allow_nan=False)
