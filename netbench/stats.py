"""Summary statistics, kept apart from presentation (as pytest-benchmark does).

``latency_summary`` follows perftest's conventions exactly, so netbench's figures line up with
ib_*_lat: sort the samples, drop the two largest (perftest's LAT_MEASURE_TAIL), take the median
of the rest as "typical", average and population stdev over the rest, p99 and p99.9 at index
ceil(n * q) of the sorted samples, and max as the sample just past the kept ones.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from typing import Any

PERFTEST_TAIL = 2
# From this many samples a summary sorts (and a series scales) with numpy where it is
# installed (a host's run loads it anyway, to store: pandas): a Python sort of float objects
# costs ~3,000 instructions a sample (bench/instructions_per_op.py), more than the compiled
# loop's round trip itself. Without numpy (the emulated VM's system Python) the same figures
# come from the stdlib.
VECTOR_FROM = 1024
_NO_NUMPY = False


def _numpy() -> Any:
    """numpy, imported on first need (after a timed loop, never in it); None without it."""
    global _NO_NUMPY
    np = sys.modules.get("numpy")
    if np is None and not _NO_NUMPY:
        try:
            import numpy as np
        except ImportError:
            _NO_NUMPY = True        # asked once a process, not once a case
    return np

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


def t95(df: int) -> float:
    """The two-sided 95% Student t quantile at df degrees of freedom (df >= 1)."""
    return _T95[df - 1] if df <= len(_T95) else 1.96


def ci95_halfwidth(values: Sequence[float]) -> float:
    """Half-width of the 95% confidence interval of the mean (Student t)."""
    n = len(values)
    if n < 2:
        return math.nan
    return t95(n - 1) * stdev(values) / math.sqrt(n)


def scaled(values: Sequence[float], divisor: float) -> Sequence[float]:
    """Each value / divisor (raw nanoseconds to microseconds): in numpy where it is installed
    and the series is long, a Python loop of about 250 instructions a sample otherwise (what
    a 20,000-sample case spent after its timed loop); a list where numpy is absent."""
    np = _numpy() if len(values) >= VECTOR_FROM else None
    if np is not None:
        return np.asarray(values, dtype=np.float64) / divisor    # type: ignore[attr-defined]
    return [v / divisor for v in values]


def latency_summary(samples: Sequence[float]) -> dict[str, float]:
    """min, p50 (typical), avg, stdev, p99, p99.9, max as perftest computes them."""
    np = _numpy() if len(samples) >= VECTOR_FROM else None
    if np is not None:
        return _latency_summary_np(np, samples)
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


def _latency_summary_np(np: object, samples: Sequence[float]) -> dict[str, float]:
    """latency_summary's figures, sorted and summed by numpy: the order statistics are the
    same samples; avg and stdev agree with the stdlib's to float rounding (pairwise sums)."""
    ordered = np.sort(np.asarray(samples, dtype=np.float64))     # type: ignore[attr-defined]
    n = len(ordered)
    kept = n - PERFTEST_TAIL if n > PERFTEST_TAIL + 1 else n
    body = ordered[:kept]
    last = n - 1
    avg = float(body.sum()) / kept
    dev = body - avg
    mid = kept // 2
    return {
        "min": float(ordered[0]),
        "p50": float(body[mid] if kept % 2 else (body[mid - 1] + body[mid]) / 2.0),
        "avg": avg,
        # dev @ dev, not (dev ** 2).sum(): numpy's ** calls pow() a sample.
        "stdev": math.sqrt(float(dev @ dev) / kept) if kept > 1 else 0.0,
        "p99": float(ordered[min(math.ceil(kept * 0.99), last)]),
        "p99.9": float(ordered[min(math.ceil(kept * 0.999), last)]),
        "max": float(ordered[min(kept, last)]),
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
    if x >= 1:                  # a t too small to move df: no evidence at all
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        value = front * _betacf(a, b, x) / a
    else:
        value = 1.0 - front * _betacf(b, a, 1.0 - x) / b
    return min(max(value, 0.0), 1.0)
