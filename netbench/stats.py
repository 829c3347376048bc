"""Summary statistics, kept apart from presentation (as pytest-benchmark does).

``latency_summary`` follows perftest's conventions exactly, so netbench's figures line up with
ib_*_lat: sort the samples, drop the two largest (perftest's LAT_MEASURE_TAIL), take the median
of the rest as "typical", average and population stdev over the rest, p99 and p99.9 at index
ceil(n * q) of the sorted samples, and max as the sample just past the kept ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

PERFTEST_TAIL = 2

# Two-sided 95% Student t quantiles for 1..30 degrees of freedom; beyond that, the normal 1.96.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179,
        2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
        2.060, 2.056, 2.052, 2.048, 2.045, 2.042)


def median_sorted(values: Sequence[float]) -> float:
    n = len(values)
    if n == 0:
        raise ValueError("median of no values")
    mid = n // 2
    return values[mid] if n % 2 else (values[mid - 1] + values[mid]) / 2.0


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return math.fsum(values) / len(values)


def stdev(values: Sequence[float], sample: bool = True) -> float:
    """Standard deviation; ``sample=False`` divides by n as perftest does."""
    n = len(values)
    if n < 2:
        return 0.0
    avg = mean(values)
    return math.sqrt(math.fsum((v - avg) ** 2 for v in values) / (n - 1 if sample else n))


def ci95_halfwidth(values: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean (Student t)."""
    n = len(values)
    if n < 2:
        return math.nan
    t = _T95[n - 2] if n - 1 <= len(_T95) else 1.96
    return t * stdev(values) / math.sqrt(n)


def latency_summary(samples: Sequence[float]) -> dict[str, float]:
    """min, p50 (typical), avg, stdev, p99, p99.9, max as perftest computes them."""
    ordered = sorted(samples)
    if not ordered:
        raise ValueError("no latency samples")
    kept = len(ordered) - PERFTEST_TAIL if len(ordered) > PERFTEST_TAIL + 1 else len(ordered)
    body = ordered[:kept]
    last = len(ordered) - 1

    def at_quantile(q: float) -> float:
        return ordered[min(math.ceil(kept * q), last)]

    return {
        "min": ordered[0],
        "p50": median_sorted(body),
        "avg": mean(body),
        "stdev": stdev(body, sample=False),
        "p99": at_quantile(0.99),
        "p99.9": at_quantile(0.999),
        "max": ordered[min(kept, last)],
    }


def interval_summary(values: Sequence[float]) -> dict[str, float]:
    """mean, stdev and 95% CI half-width of per-interval rates (bandwidth samples)."""
    return {"mean": mean(values), "stdev": stdev(values), "ci95": ci95_halfwidth(values)}


def median_interval(values: Sequence[float], rounds: int = 2000,
                    level: float = 0.90) -> tuple[float, float]:
    """Bootstrap interval of the median (seeded: the same data gives the same interval)."""
    import random
    import statistics

    rng = random.Random(1)
    meds = sorted(statistics.median(rng.choices(values, k=len(values)))
                  for _ in range(rounds))
    tail = (1 - level) / 2
    return meds[int(tail * rounds)], meds[int((1 - tail) * rounds) - 1]


def block_bootstrap(groups: Sequence[Sequence[float]], statistic: str, rounds: int = 400,
                    blocks: int = 16, seed: int = 1) -> list[float]:
    """Resampled values of ``statistic`` (a name in ``netbench.api.STATISTICS``) of samples
    that come in ``groups`` (one per run or repeat, in time order).

    Two stages, so neither kind of noise is left out: the groups are drawn with replacement
    (run-to-run spread), then within each its contiguous blocks (drift inside a run stays
    inside a block, so autocorrelated samples do not pass for independent ones). Quantiles
    come from per-block histograms on shared log-spaced bins (0.1-0.2% wide), so a
    round costs a matrix product, not a sort of every sample."""
    import numpy as np

    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays:
        raise ValueError("no samples to resample")
    k = max(1, min(blocks, min(len(a) for a in arrays) // 8))
    chunks = [c for a in arrays for c in np.array_split(a, k)]
    n = np.array([len(c) for c in chunks], dtype=float)
    rng = np.random.default_rng(seed)
    r = len(arrays)
    chosen = rng.integers(r, size=(rounds, r)) if r > 1 else np.zeros((rounds, 1), int)
    ids = (chosen[:, :, None] * k + rng.integers(k, size=(rounds, r, k))).reshape(rounds, -1)
    counts = np.zeros((rounds, len(chunks)))
    np.add.at(counts, (np.arange(rounds)[:, None], ids), 1.0)
    total = counts @ n
    if statistic in ("avg", "stdev"):
        sums = counts @ np.array([c.sum() for c in chunks])
        mean_ = sums / total
        if statistic == "avg":
            return mean_.tolist()
        squares = counts @ np.array([(c * c).sum() for c in chunks])
        return np.sqrt(np.maximum(squares / total - mean_ ** 2, 0.0)).tolist()
    if statistic in ("min", "max"):
        extreme = np.array([c.max() if statistic == "max" else c.min() for c in chunks])
        fill = -np.inf if statistic == "max" else np.inf
        picked = np.where(counts > 0, extreme[None, :], fill)
        return (picked.max(axis=1) if statistic == "max" else picked.min(axis=1)).tolist()
    q = {"p50": 0.5, "p99": 0.99, "p99.9": 0.999}[statistic]
    low = min(float(a.min()) for a in arrays)
    high = max(float(a.max()) for a in arrays)
    if low > 0:
        edges = np.geomspace(low, high * (1 + 1e-12), 4097) if high > low else np.array(
            [low, low * (1 + 1e-9)])
    else:
        edges = np.linspace(low, high + 1e-12 * max(abs(high), 1), 4097)
    hist = np.array([np.histogram(c, bins=edges)[0] for c in chunks], dtype=float)
    cdf = np.cumsum(counts @ hist, axis=1)
    at = np.argmax(cdf >= (q * total)[:, None], axis=1)
    return edges[at + 1].tolist()


def bootstrap_p(base: Sequence[float], cand: Sequence[float]) -> float:
    """Two-sided p-value that two resampled statistics differ: twice the share of paired
    draws on the far side of zero (at least one draw's worth, never 0)."""
    diffs = [b - a for a, b in zip(base, cand)]
    if not diffs:
        return 1.0
    below = sum(d <= 0 for d in diffs) / len(diffs)
    above = sum(d >= 0 for d in diffs) / len(diffs)
    return min(1.0, max(2 * min(below, above), 1 / len(diffs)))
