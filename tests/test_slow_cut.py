"""The cut a fabric pair reads slow at comes from the pairs' noise (issue 35): known spreads in,
known cuts out; too few pairs and bad fractions say so."""

import random

import numpy as np
import pytest
from conftest import assert_clean_error, netbench

from netbench.analysis.localize import MIN_NOISE_PAIRS, noise, slow_cut


def _pairs(n, spread, seed=1, level=100.0):
    rng = random.Random(seed)
    return [level * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


@pytest.mark.parametrize("spread", [0.01, 0.05, 0.10])
def test_the_cut_follows_the_noise_and_a_15_percent_deficit_reads_slow_at_5_percent(spread):
    """Uniform +-spread noise: the robust spread is about spread / 2 x 1.4826 (the MAD of a
    uniform is half its half-width); the cut is three of them, at least 5%, at most the
    threshold. At +-5% a pair of an element at 0.85 (0.81-0.89) always reads slow and no
    healthy one (0.95-1.05) does; at +-10% the cut (about 20%) is wider than such a deficit."""
    values = _pairs(1000, spread) + [85.0 * (1 + d) for d in (-0.05, 0.0, 0.05)]
    cut, sigma, why = slow_cut(values, 100.0, threshold=0.4)
    assert sigma == pytest.approx(1.4826 * spread / 2, rel=0.15), sigma
    assert cut == pytest.approx(max(0.05, 1 - np.exp(-3 * sigma)), rel=1e-9)
    assert "x the noise" in why and "healthy pairs" in why, why
    if spread == 0.01:
        assert cut == 0.05                     # never under --min-deficit
    if spread == 0.05:
        assert 85.0 * 1.05 < (1 - cut) * 100.0 < 95.0      # every 0.85 pair slow, no healthy
    if spread == 0.10:
        assert (1 - cut) * 100.0 < 85.0                    # +-10%: a single read cannot tell
    # A broken element's pairs, however many, widen nothing: only pairs within the
    # threshold of healthy make the spread.
    broken = values + [20.0] * 400
    assert noise(broken, 100.0, 0.4)[0] == pytest.approx(sigma, rel=0.05)


def test_too_few_pairs_for_a_spread_fall_back_to_the_fixed_cut_and_say_how_many_it_needs():
    cut, sigma, why = slow_cut(_pairs(MIN_NOISE_PAIRS - 1, 0.05), 100.0, threshold=0.4)
    assert (cut, sigma) == (0.4, None)
    assert f"needs {MIN_NOISE_PAIRS} healthy pairs, {MIN_NOISE_PAIRS - 1} measured" in why
    # min_deficit at the threshold or above (or None): the fixed cut, said so.
    assert slow_cut(_pairs(100, 0.05), 100.0, 0.1, 0.1)[0] == 0.1
    assert slow_cut(_pairs(100, 0.05), 100.0, 0.1, None)[2].startswith("a fixed cut")


def test_the_spread_is_each_readings_where_a_pair_was_read_again_and_pairs_are_counted():
    """A pair read three times is one pair (its median) for the count the spread needs, but
    each of its readings is judged against the spread: the medians of three spread about
    a quarter less than one reading does, and a spread that narrow read a healthy fabric's
    normal tails as a slow element (an untraced ECMP sweep named all 16 spines)."""
    rng = random.Random(3)
    readings = [[100 * (1 + rng.gauss(0, 0.03)) for _ in range(3)] for _ in range(400)]
    medians = [float(np.median(r)) for r in readings]
    flat = [v for r in readings for v in r]
    narrow = slow_cut(medians, 100.0, 0.4, 0.05)
    wide = slow_cut(medians, 100.0, 0.4, 0.05, flat)
    assert narrow[1] < 0.026 and 0.027 < wide[1] < 0.033, (narrow, wide)
    assert wide[1] == pytest.approx(noise(flat, 100.0, 0.4)[0])
    assert "the spread of 400 healthy pairs" in wide[2]
    few = slow_cut(medians[:MIN_NOISE_PAIRS - 1], 100.0, 0.4, 0.05, flat)
    assert few[1] is None and f"needs {MIN_NOISE_PAIRS} healthy pairs" in few[2]


@pytest.mark.parametrize("threshold, min_deficit, named", [
    (1.5, 0.05, "threshold 1.5"), (0.0, 0.05, "threshold 0"), (0.4, 0.0, "min_deficit 0"),
    (0.4, 1.0, "min_deficit 1")])
def test_a_fraction_outside_0_1_is_refused_by_name(threshold, min_deficit, named):
    with pytest.raises(ValueError, match=f"{named}: a fraction between 0 and 1"):
        slow_cut(_pairs(100, 0.05), 100.0, threshold, min_deficit)


def test_the_fabric_command_refuses_a_bad_min_deficit_before_it_sweeps():
    assert_clean_error(netbench("fabric", "tcp.stream", "--min-deficit", "1.5"),
                       "--min-deficit 1.5", "each a fraction between 0 and 1")
