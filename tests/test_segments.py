"""Change points (netbench.analysis.segments) on series whose steps are known."""

import math
import random

import pytest

from netbench.analysis.segments import MIN_RUNS, change_points, latest_segment


def _noisy(rng: random.Random, levels: list[float], sd: float = 0.005) -> list[float]:
    return [lv * math.exp(rng.gauss(0, sd)) for lv in levels]


def test_one_step_is_found_where_it_is_with_its_size():
    xs = _noisy(random.Random(1), [1000.0] * 10 + [950.0] * 10)
    (step,) = change_points(xs)
    assert step.index == 10 and step.change == pytest.approx(-0.05, abs=0.01)
    assert step.p_value < 0.01
    assert latest_segment(xs) == 10


def test_one_odd_run_is_two_steps_down_and_back():
    """Six runs at 1000, one at 950, three at 1000 (the history the issue names): the odd run
    is isolated, so the stretch after it is the latest segment, not widened by the step."""
    xs = _noisy(random.Random(2), [1000.0] * 6 + [950.0] + [1000.0] * 3, sd=0.004)
    steps = change_points(xs)
    assert [s.index for s in steps] == [6, 7], steps
    assert steps[0].change < -0.03 and steps[1].change > 0.03
    assert latest_segment(xs) == 7


def test_no_step_is_found_in_noise_alone_but_rarely():
    """Forty runs of one level, 1% noise, 200 series: a split named in at most a few percent
    of them (the strict pass pools the noise and corrects for the places searched)."""
    rng = random.Random(3)
    split = sum(bool(change_points(_noisy(rng, [100.0] * 40, sd=0.01))) for _ in range(200))
    assert split <= 10, split


def test_a_step_as_small_as_the_noise_is_left_alone_and_one_three_times_it_is_not():
    rng = random.Random(4)
    small = sum(bool(change_points(_noisy(rng, [100.0] * 8 + [99.5] * 8, sd=0.01)))
                for _ in range(100))
    large = sum(bool(change_points(_noisy(rng, [100.0] * 8 + [97.0] * 8, sd=0.01)))
                for _ in range(100))
    assert small <= 15 and large >= 90, (small, large)


def test_too_short_or_unusable_series_are_not_segmented():
    assert change_points([1.0, 2.0, 1.0][:MIN_RUNS - 1]) == []
    assert change_points([1.0, 1.0, 0.0, 2.0, 2.0]) == []       # a zero: no log scale
    assert change_points([1.0, math.nan, 1.0, 2.0, 2.0]) == []
    assert change_points([5.0] * 12) == []                      # identical: the floor holds
