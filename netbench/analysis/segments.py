"""Change points in a case's history: where its runs stepped, so the noise model is the
latest stable stretch and one earlier step never widens it.

E-divisive means (Matteson and James, 2014), as MongoDB and Apache Otava use it, with Otava's
deterministic significance test (the Hunter paper, Fleming et al. 2023): the split that
maximises the energy divergence between a stretch and the one after it is found over every
start and end (so a single odd run is isolated, not smeared), then kept only where Student's
t says the two sides differ. Two passes, as Hunter's weak and strong change points: a relaxed
recursive pass proposes splits (``WEAK_P``), then each is re-tested against its neighbouring
segments with the noise pooled over every segment of the series (``STEP_P``), the weakest
dropped until all hold. Pooling is what lets one run at 950 between runs at 1000 count as two
steps (down, then back) where a t test on its own one run beside three has 2 degrees of
freedom.

Values are judged on a log scale (a step is relative), with the verdicts' floor on the spread
(``verdict.SD_FLOOR``): runs that agree exactly never make every difference a step. Pure
Python over at most a few hundred runs: O(T^2) a split, from 2-D prefix sums of |x_i - x_j|.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from netbench.analysis.verdict import SD_FLOOR
from netbench.stats import t_sf2

WEAK_P = 0.05      # a split proposed by the recursive pass
STEP_P = 0.01      # a change point kept: its p, times the runs searched, below this: the split
# is the most divergent of every start and end, so its own p is optimistic (Bonferroni)
MIN_RUNS = 4       # a history shorter than this is not segmented (a step needs runs both sides)


@dataclass(frozen=True)
class Step:
    """A change point: the index of the first run after it, the relative change of the
    segment mean across it, and its p-value against the pooled noise."""
    index: int
    change: float
    p_value: float


def change_points(values: Sequence[float]) -> list[Step]:
    """The steps in ``values`` (oldest first), by index of the first value after each."""
    if len(values) < MIN_RUNS or not all(v > 0 and math.isfinite(v) for v in values):
        return []
    xs = [math.log(v) for v in values]
    prefix = _prefix(xs)
    cuts: list[int] = []
    _propose(xs, prefix, 0, len(xs), cuts)
    return _confirm(xs, sorted(cuts))


def latest_segment(values: Sequence[float]) -> int:
    """The index where the latest stable segment of ``values`` starts (0: no step)."""
    steps = change_points(values)
    return steps[-1].index if steps else 0


def _prefix(xs: Sequence[float]) -> list[list[float]]:
    """P[i][j] = sum of |x_a - x_b| over a < i, b < j."""
    n = len(xs)
    p = [[0.0] * (n + 1) for _ in range(n + 1)]
    for i in range(n):
        row, above, xi = p[i + 1], p[i], xs[i]
        running = 0.0
        for j in range(n):
            running += abs(xi - xs[j])
            row[j + 1] = above[j + 1] + running
    return p


def _block(p: list[list[float]], a0: int, a1: int, b0: int, b1: int) -> float:
    return p[a1][b1] - p[a0][b1] - p[a1][b0] + p[a0][b0]


def _divergence(p: list[list[float]], s: int, tau: int, kappa: int) -> float:
    """Matteson and James' Q-hat (alpha = 1) of x[s:tau] against x[tau:kappa]."""
    n, m = tau - s, kappa - tau
    cross = _block(p, s, tau, tau, kappa)
    within_x = _block(p, s, tau, s, tau) / 2
    within_y = _block(p, tau, kappa, tau, kappa) / 2
    e = 2 * cross / (n * m)
    if n > 1:
        e -= within_x / (n * (n - 1) / 2)
    if m > 1:
        e -= within_y / (m * (m - 1) / 2)
    return n * m / (n + m) * e


def _t_p(left: Sequence[float], right: Sequence[float], var: float | None = None,
         df: int | None = None) -> float:
    """Student's t two-sided p that two stretches' means differ; ``var``/``df``: the noise
    pooled elsewhere (else the two stretches' own, pooled)."""
    n, m = len(left), len(right)
    ml, mr = math.fsum(left) / n, math.fsum(right) / m
    if var is None:
        df = n + m - 2
        if df < 1:
            return 1.0
        ss = math.fsum((x - ml) ** 2 for x in left) + math.fsum((x - mr) ** 2 for x in right)
        var = ss / df
    var = max(var, SD_FLOOR ** 2)
    t = abs(mr - ml) / math.sqrt(var * (1 / n + 1 / m))
    return t_sf2(t, df or 1)


def _propose(xs: Sequence[float], p: list[list[float]], s: int, e: int,
             cuts: list[int]) -> None:
    """The recursive pass: the most divergent split in [s, e), kept where WEAK_P holds."""
    if e - s < 3:
        return
    best, where = 0.0, None
    for tau in range(s + 1, e):
        for kappa in range(tau + 1, e + 1):
            if kappa - s < 3:
                continue
            q = _divergence(p, s, tau, kappa)
            if q > best:
                best, where = q, (tau, kappa)
    if where is None:
        return
    tau, kappa = where
    if _t_p(xs[s:tau], xs[tau:kappa]) >= WEAK_P:
        return
    cuts.append(tau)
    _propose(xs, p, s, tau, cuts)
    _propose(xs, p, tau, e, cuts)


def _confirm(xs: Sequence[float], cuts: list[int]) -> list[Step]:
    """The strict pass: each step tested between its neighbouring segments against the noise
    pooled over all segments; the weakest that fails STEP_P dropped, until all hold."""
    while cuts:
        bounds = [0, *cuts, len(xs)]
        segments = [xs[a:b] for a, b in zip(bounds, bounds[1:])]
        ss = 0.0
        for seg in segments:
            mean = math.fsum(seg) / len(seg)
            ss += math.fsum((x - mean) ** 2 for x in seg)
        df = len(xs) - len(segments)
        var = ss / df if df > 0 else 0.0
        tested = [(_t_p(segments[i], segments[i + 1], var, max(df, 1)), i)
                  for i in range(len(cuts))]
        worst, at = max(tested)
        if worst * len(xs) < STEP_P and df > 0:
            return [Step(cut, math.expm1(math.fsum(segments[i + 1]) / len(segments[i + 1])
                                         - math.fsum(segments[i]) / len(segments[i])), p)
                    for (p, i), cut in zip(tested, cuts)]
        del cuts[at]
    return []
