import math
import random
import statistics

import pytest

from netbench import stats
from netbench.store.schema import thin


def test_latency_summary_follows_perftest_conventions():
    # 12 samples, sorted 1..12: perftest drops the 2 largest (kept = 10 -> 1..10).
    samples = [12, 3, 1, 10, 5, 4, 2, 9, 8, 7, 6, 11]
    s = stats.latency_summary(samples)
    assert s["min"] == 1
    assert s["p50"] == 5.5                    # even count: mean of the middle two of 1..10
    assert s["avg"] == 5.5
    assert s["stdev"] == pytest.approx(math.sqrt(8.25))   # population stdev of 1..10
    assert s["p99"] == 11                     # sorted[ceil(10 * 0.99)] = sorted[10]
    assert s["p99.9"] == 11
    assert s["max"] == 11                     # sorted[kept]: perftest's reported max


def test_latency_summary_large_sample_percentiles():
    rng = random.Random(7)
    samples = [rng.expovariate(1.0) for _ in range(100_000)]
    s = stats.latency_summary(samples)
    ordered = sorted(samples)
    kept = ordered[:-2]
    assert s["p50"] == pytest.approx(statistics.median(kept))
    assert s["p99"] == ordered[math.ceil(len(kept) * 0.99)]
    assert s["min"] <= s["p50"] <= s["avg"] <= s["p99"] <= s["p99.9"] <= s["max"]


def test_latency_summary_tiny_inputs():
    assert stats.latency_summary([4.0])["p50"] == 4.0
    with pytest.raises(ValueError):
        stats.latency_summary([])


def test_ci95_uses_student_t_for_small_samples():
    values = [10.0, 12.0, 11.0, 13.0, 9.0]
    expected = 2.776 * statistics.stdev(values) / math.sqrt(5)
    assert stats.ci95_halfwidth(values) == pytest.approx(expected)
    many = [float(i % 7) for i in range(1000)]
    assert stats.ci95_halfwidth(many) == pytest.approx(
        1.96 * statistics.stdev(many) / math.sqrt(1000))
    assert math.isnan(stats.ci95_halfwidth([1.0]))


def test_student_t_tail_matches_scipy():
    from scipy import stats as scipy_stats

    from netbench.stats import t_sf2

    for t, df in ((0.5, 2), (2.0, 4), (3.0, 2), (10.0, 3), (1.96, 1e5), (0.01, 30), (4.2, 1.5)):
        assert t_sf2(t, df) == pytest.approx(2 * scipy_stats.t.sf(t, df), rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("n", [1024, 1025, 20001])
def test_a_long_latency_summary_sorted_by_numpy_gives_the_stdlibs_figures(n, monkeypatch):
    """From VECTOR_FROM samples a host's run sorts and scales with numpy; the emulated VM's
    system Python has none. Both must give the same figures."""
    import numpy
    rng = random.Random(n)
    raw = [rng.randrange(1_000, 900_000) for _ in range(n)]         # nanoseconds, as loops give
    scaled = stats.scaled(raw, 2000.0)
    assert isinstance(scaled, numpy.ndarray)
    fast = stats.latency_summary(scaled)
    monkeypatch.setattr(stats, "_numpy", lambda: None)
    plain_scaled = stats.scaled(raw, 2000.0)
    assert isinstance(plain_scaled, list) and plain_scaled == scaled.tolist()
    plain = stats.latency_summary(plain_scaled)
    assert fast.keys() == plain.keys()
    for key in fast:
        assert fast[key] == pytest.approx(plain[key], rel=1e-12), key
    assert fast == stats._latency_summary_np(numpy, plain_scaled)
    # What a row stores of numpy's series is plain floats, the same as the list's.
    assert thin(scaled) == thin(plain_scaled) == plain_scaled
    assert all(type(v) is float for v in thin(scaled))


def test_a_t_too_small_to_move_its_degrees_of_freedom_is_no_evidence():
    """t = 1e-17 (two means that differ in their last bit) made x = df / (df + t^2) exactly 1
    and log1p(-1) a math domain error in history; it is p = 1."""
    from netbench.stats import t_sf2

    assert t_sf2(1e-17, 4) == 1.0 and t_sf2(0.0, 4) == 1.0
