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


BINS = 512         # log-spaced over where a resample's quantile can fall (see below)


def block_bootstrap(groups: Sequence[Sequence[float]], statistic: str, rounds: int = 200,
                    blocks: int = 16, seed: int = 1, most: int = 40_000) -> list[float]:
    """Resampled values of ``statistic`` (a name in ``netbench.api.STATISTICS``) of samples
    that come in ``groups`` (one per run or repeat, in time order).

    Two stages, so neither kind of noise is left out: the groups are drawn with replacement
    (run-to-run spread), then within each its contiguous blocks (drift inside a run stays
    inside a block, so autocorrelated samples do not pass for independent ones). Quantiles
    come from per-block histograms on shared log-spaced bins (``BINS``), so a
    round costs a matrix product, not a sort of every sample."""
    import numpy as np

    arrays = [np.asarray(g, dtype=float) for g in groups if len(g)]
    if not arrays:
        raise ValueError("no samples to resample")
    # Beyond ``most`` samples in all, groups are thinned evenly (time order kept), and many
    # groups get fewer blocks each: the statistic's spread grows a little, never shrinks,
    # and the cost stays bounded.
    most = max(most // len(arrays), 500)             # a side's budget, shared by its groups
    arrays = [a[:: -(-len(a) // most)] if len(a) > most else a for a in arrays]
    k = max(1, min(blocks, 256 // len(arrays), min(len(a) for a in arrays) // 8))
    r = len(arrays)
    values = np.concatenate(arrays)
    # Block of each sample: k contiguous blocks per group, numbered group by group.
    block = np.concatenate([(np.arange(len(a)) * k) // len(a) + i * k
                            for i, a in enumerate(arrays)])
    nblocks = r * k
    n = np.bincount(block, minlength=nblocks).astype(float)
    rng = np.random.default_rng(seed)
    chosen = rng.integers(r, size=(rounds, r)) if r > 1 else np.zeros((rounds, 1), int)
    ids = (chosen[:, :, None] * k + rng.integers(k, size=(rounds, r, k))).reshape(rounds, -1)
    flat = (np.arange(rounds)[:, None] * nblocks + ids).ravel()
    counts = np.bincount(flat, minlength=rounds * nblocks).reshape(rounds, nblocks).astype(float)
    total = counts @ n
    if statistic in ("avg", "stdev"):
        mean_ = (counts @ np.bincount(block, weights=values, minlength=nblocks)) / total
        if statistic == "avg":
            return mean_.tolist()
        squares = counts @ np.bincount(block, weights=values * values, minlength=nblocks)
        return np.sqrt(np.maximum(squares / total - mean_ ** 2, 0.0)).tolist()
    starts = np.flatnonzero(np.r_[True, block[1:] != block[:-1]])     # blocks are contiguous
    if statistic in ("min", "max"):
        extreme = (np.maximum if statistic == "max" else np.minimum).reduceat(values, starts)
        fill = -np.inf if statistic == "max" else np.inf
        picked = np.where(counts > 0, extreme[None, :], fill)
        return (picked.max(axis=1) if statistic == "max" else picked.min(axis=1)).tolist()
    q = {"p50": 0.5, "p99": 0.99, "p99.9": 0.999}[statistic]
    # A union of blocks has its q-quantile between the lowest and highest of the blocks' own
    # q-quantiles (its CDF is a mix of theirs): bins are needed only there, plus one column
    # counting each block's samples below that range.
    ordered = values[np.lexsort((values, block))]            # sorted within each block
    sizes = np.diff(np.r_[starts, len(values)])
    per_block = ordered[starts + np.floor(q * (sizes - 1)).astype(int)]
    low, high = float(per_block.min()), float(per_block.max())
    if high <= low:
        return [low] * rounds
    edges = (np.geomspace(low, high, BINS + 1) if low > 0
             else np.linspace(low, high, BINS + 1))
    inside = (values >= low) & (values <= high)
    below = np.bincount(block[values < low], minlength=nblocks).astype(float)
    where = np.clip(np.searchsorted(edges, values[inside], side="right") - 1, 0, BINS - 1)
    hist = np.bincount(block[inside] * BINS + where,
                       minlength=nblocks * BINS).reshape(nblocks, BINS)
    cdf = np.cumsum(counts @ np.column_stack([below, hist]), axis=1)
    at = np.argmax(cdf >= (q * total)[:, None], axis=1)      # column 0: still below range
    return edges[np.maximum(at, 1)].tolist()


def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny, qab, qap, qam = 1e-300, a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)),
                   -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-12:
            break
    return h


def t_sf2(t: float, df: float) -> float:
    """Two-sided tail probability of Student's t with ``df`` degrees of freedom: P(|T| > t).
    (I_x(df/2, 1/2) at x = df / (df + t^2); no scipy at run time.)"""
    if not math.isfinite(t):
        return 0.0
    if t == 0:
        return 1.0
    x = df / (df + t * t)
    a, b = df / 2.0, 0.5
    if x <= 0:
        return 0.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        value = front * _betacf(a, b, x) / a
    else:
        value = 1.0 - front * _betacf(b, a, 1.0 - x) / b
    return min(max(value, 0.0), 1.0)


def bootstrap_p(base: Sequence[float], cand: Sequence[float], base_df: float = math.inf,
                cand_df: float = math.inf) -> float:
    """Two-sided p-value that two statistics differ, from their resampled values: the
    difference of their centres over the bootstrap standard error of that difference, read
    against Student's t with the Welch-Satterthwaite degrees of freedom of the two sides
    (a side of R repeats has R - 1: three runs say little about run-to-run spread, and the
    test must not pretend otherwise). Counting draws beyond zero instead would floor p at
    1/rounds, which no adjustment for many metrics at once could call significant."""
    import numpy as np

    a, b = np.asarray(base, dtype=float), np.asarray(cand, dtype=float)
    if len(a) < 2 or len(b) < 2:
        return 1.0
    va, vb = float(a.var(ddof=1)), float(b.var(ddof=1))
    se = math.sqrt(va + vb)
    delta = abs(float(b.mean() - a.mean()))
    if se <= 0:
        return 1.0 if delta == 0 else 0.0
    terms = (va * va / base_df if base_df < math.inf else 0.0) + (
        vb * vb / cand_df if cand_df < math.inf else 0.0)
    df = (va + vb) ** 2 / terms if terms > 0 else math.inf
    if df == math.inf or df > 1e6:
        return math.erfc(delta / se / math.sqrt(2))
    return t_sf2(delta / se, max(df, 1.0))


def bootstrap_df(groups: Sequence[Sequence[float]], blocks: int = 16) -> float:
    """Degrees of freedom behind ``block_bootstrap``'s spread: R - 1 for R repeats, else
    the blocks of the one run less one."""
    sizes = [len(g) for g in groups if len(g)]
    if len(sizes) > 1:
        return float(len(sizes) - 1)
    return float(max(min(blocks, (sizes[0] if sizes else 0) // 8), 2) - 1)
