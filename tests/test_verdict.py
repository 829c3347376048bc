"""The decision function itself (netbench.analysis.verdict), on numbers whose answer is known."""

import math
import random

from netbench.analysis.verdict import (
    DISTURBED,
    IMPROVED,
    REGRESSED,
    UNCHANGED,
    UNVERIFIED,
    Past,
    Side,
    extreme,
    invocation_test,
    judge,
)


def _verdict(base, cand, better="higher", threshold=0.05, past=None, extreme=""):
    p, evidence, sd = invocation_test(base, cand, past or Past())
    change = (sorted(cand.values)[len(cand.values) // 2] - sorted(base.values)[len(base.values)
              // 2]) / sorted(base.values)[len(base.values) // 2]
    return judge(base, cand, change, better, threshold, p, evidence, sd=sd, past=past,
                 extreme=extreme)


def test_a_run_level_drift_is_not_divided_by_the_repeats():
    """Five tight repeats a side inside one run each, runs that move 5% apart (eight earlier
    runs say so): +8% is within what whole runs move. Dividing the runs' spread by the
    repeats' count called such changes regressed ~32% of the time (a review's simulation)."""
    rng = random.Random(1)
    past = Past([100 * (1 + rng.gauss(0, 0.05)) for _ in range(8)], [0.0] * 8)
    base = Side([100 + 0.1 * i for i in range(5)], 0.0, runs=1)
    cand = Side([108 + 0.1 * i for i in range(5)], 0.0, runs=1)
    p, evidence, _ = invocation_test(base, cand, past)
    assert evidence == "history" and p > 0.1


def test_a_false_alarm_rate_near_alpha_when_whole_runs_drift():
    rng = random.Random(2)
    alarms = 0
    for _ in range(300):
        level = [1 + rng.gauss(0, 0.05) for _ in range(10)]
        past = Past([100 * lv for lv in level[:8]], [0.0] * 8)
        base = Side([100 * level[8] * (1 + rng.gauss(0, 0.01)) for _ in range(5)], 0.0, 1)
        cand = Side([100 * level[9] * (1 + rng.gauss(0, 0.01)) for _ in range(5)], 0.0, 1)
        alarms += _verdict(base, cand, past=past).verdict == REGRESSED
    assert alarms / 300 < 0.05, alarms


def test_identical_values_never_make_p_zero():
    p, evidence, _ = invocation_test(Side([30.0] * 3), Side([30.3] * 3))
    assert evidence == "repeats" and p > 0.01            # a 1% step on a 0.5% floor
    p, _, _ = invocation_test(Side([30.0] * 3), Side([36.0] * 3))
    assert p < 0.001                                     # 20% is beyond any floor


def test_infinite_values_are_no_evidence():
    j = _verdict(Side([1.0, 1.1, math.inf]), Side([2.0, 2.1, 2.2]))
    assert j.verdict == UNVERIFIED and "not all finite" in j.needs


def test_unrecorded_load_is_unknown_not_quiet():
    base = Side([100.0, 100.2, 99.9], None)               # a file from before load was kept
    cand = Side([80.0, 80.1, 79.9], 0.9)
    assert _verdict(base, cand).verdict == REGRESSED


def test_a_history_that_covers_both_load_states_decides_a_disturbed_case():
    base = Side([100.0, 100.3, 99.8], 0.0, 1)
    cand = Side([80.0, 80.2, 79.9], 1.0, 1)
    j = _verdict(base, cand, past=Past([100.0, 99.0], [0.0, 1.0]))     # too short: repeats
    assert j.verdict == DISTURBED and "quiet on both it would read regressed" in j.disturbed
    both = Past([100.0, 99.0, 101.0, 98.5, 100.5, 99.5], [0.0, 1.0, 0.0, 1.0, 0.0, 1.1])
    assert _verdict(base, cand, past=both).verdict == REGRESSED
    quiet_only = Past([100.0, 99.0, 101.0, 98.5, 100.5, 99.5], [0.0] * 6)
    assert _verdict(base, cand, past=quiet_only).verdict == DISTURBED


def test_a_hog_beside_one_side_and_steal_beside_the_other_are_two_states():
    # About the same cores in all, of two kinds: the hog keeps the vCPUs awake (a ping-pong
    # gets faster), the hypervisor's steal makes every wakeup wait (it gets slower).
    stolen = Side([140.0, 141.0, 139.5], 0.9, 1, steal=0.85)
    hogged = Side([8.0, 8.1, 7.9], 1.05, 1, steal=0.0)
    j = _verdict(stolen, hogged)
    assert j.verdict == DISTURBED, j
    assert "stolen by the hypervisor: baseline 0.85, candidate 0" in j.disturbed
    # Both stolen alike: one state, but a stolen one (see the next test).
    j = _verdict(Side([140.0, 141.0, 139.5], 0.9, 1, steal=0.9),
                 Side([100.0, 100.5, 99.5], 1.0, 1, steal=0.95))
    assert j.verdict == DISTURBED and "hypervisor stole" in j.disturbed, j
    # A history decides only where it holds runs in both states of each kind.
    sums_only = Past([140.0, 139.0, 141.0, 138.5, 140.5, 139.5], [0.9, 1.0] * 3)
    assert _verdict(stolen, hogged, past=sums_only).verdict == DISTURBED


def test_a_throttled_or_slower_clocked_side_is_disturbed():
    base = Side([100.0, 100.3, 99.8], 0.0, 1, mhz=3000.0)
    slow = Side([80.0, 80.2, 79.9], 0.0, 1, mhz=2000.0)
    j = _verdict(base, slow)
    assert j.verdict == DISTURBED and "3000 MHz (baseline) vs 2000 MHz" in j.disturbed
    hot = Side([80.0, 80.2, 79.9], 0.0, 1, mhz=2950.0, throttled=3)
    j = _verdict(base, hot)
    assert j.verdict == DISTURBED and "candidate: the CPU was thermally throttled 3" in j.disturbed
    even = Side([80.0, 80.2, 79.9], 0.0, 1, mhz=2950.0)
    assert _verdict(base, even).verdict == REGRESSED


def test_repeats_under_a_hypervisors_heavy_steal_decide_nothing_a_history_at_it_does():
    """Captured on this CI machine (an A/A trial, unchanged code, run against run): tcp.rr's
    minimum round trip, 64 B, its three interleaved repeats a side, both sides' vCPUs stolen
    0.55 and 0.73 cores. The repeats agree within 1% and the runs +10.7% apart: the repeats
    called it regressed. Other guests' demand moves between runs, not within one."""
    base = Side([6.8, 6.72, 6.7], 0.556, 1, steal=0.549)
    cand = Side([7.441, 7.436, 7.551], 0.748, 1, steal=0.734)
    j = _verdict(base, cand, better="lower")
    assert j.verdict == DISTURBED, j
    assert "baseline 0.55, candidate 0.73" in j.disturbed and "would read regressed" in \
        j.disturbed
    # Stolen alike, and heavily: still no verdict from the repeats.
    alike = Side([7.441, 7.436, 7.551], 0.56, 1, steal=0.56)
    j = _verdict(base, alike, better="lower")
    assert j.verdict == DISTURBED, j
    assert "the hypervisor stole cores from this guest (baseline 0.55, candidate 0.56)" in \
        j.disturbed and "it would read regressed" in j.disturbed
    assert "3 or more earlier runs of this case on this host in the store, 2 or more of " \
        "them at each side's load and steal" in j.needs
    # The same store's runs of the case at that steal (medians of aa0, aa1, aa3, aa0's
    # 4 KiB twin excluded): their spread allows for it, and the step is within it.
    at_steal = Past([6.72, 7.44, 6.76, 7.0, 7.3, 6.9], [0.6, 0.7, 0.75, 0.6, 0.65, 0.7],
                    [0.55, 0.7, 0.75, 0.6, 0.65, 0.7])
    j = _verdict(base, cand, better="lower", past=at_steal)
    assert j.evidence == "history" and j.verdict != REGRESSED, j
    # A real step under the same steal is still caught by that history.
    slow = Side([9.4, 9.5, 9.45], 0.748, 1, steal=0.734)
    assert _verdict(base, slow, better="lower", past=at_steal).verdict == REGRESSED
    # ...but not by a history of quiet runs only: it never saw what the steal does.
    quiet = Past([6.7, 6.75, 6.72, 6.71, 6.74, 6.73], [0.0] * 6, [0.0] * 6)
    assert _verdict(base, slow, better="lower", past=quiet).verdict == DISTURBED
    # Light steal (below BUSY_CORES) on both sides is a quiet host: the repeats decide.
    light = _verdict(Side([6.8, 6.72, 6.7], 0.05, 1, steal=0.04),
                     Side([9.4, 9.5, 9.45], 0.06, 1, steal=0.05), better="lower")
    assert light.verdict == REGRESSED


def test_a_tight_history_at_the_steal_decides_even_where_the_repeats_are_wider():
    """A review's probe: six earlier runs, all at steal 0.7 and within 1%, both sides at 0.7
    with repeats that scatter more than that: the repeats are the wider spread, so the test
    takes them, and the history still says what this steal does: +37% is the code's."""
    past = Past([7.0, 7.05, 6.98, 7.02, 7.01, 6.99], [0.7] * 6, [0.7] * 6)
    base = Side([7.0, 7.4, 6.7], 0.7, 1, steal=0.7)
    cand = Side([9.6, 10.1, 9.2], 0.7, 1, steal=0.7)
    j = _verdict(base, cand, better="lower", past=past)
    assert j.evidence == "repeats" and j.verdict == REGRESSED, j
    # Two earlier runs are not a history to judge by, however well they match the steal.
    short = Past([7.0, 7.05], [0.7] * 2, [0.7] * 2)
    assert _verdict(base, cand, better="lower", past=short).verdict == DISTURBED


def test_a_tenth_of_a_core_stolen_apart_is_two_states():
    """Captured in a fresh CI clone (test_compare's A/A, tcp.rr pinned, 4 KiB): p99 202, 188,
    178 us with 0.28, 0.11, 0.20 cores stolen; the next run 82, 83, 105 us with 0.0, 0.0,
    0.07. The repeats called it improved (-56%, p 0.001): every stolen slice lands on a round
    trip, so steal sets a tail long before it reaches BUSY_CORES."""
    stolen = Side([202.5, 188.0, 178.1], 0.197, 1, steal=0.197)
    quiet = Side([81.9, 82.7, 105.0], 0.03, 1, steal=0.023)
    j = _verdict(stolen, quiet, better="lower")
    assert j.verdict == DISTURBED and "stolen by the hypervisor: baseline 0.2" in j.disturbed
    # Within a tenth of a core: one state, judged.
    near = Side([81.9, 82.7, 105.0], 0.15, 1, steal=0.15)
    assert _verdict(Side([202.5, 188.0, 178.1], 0.2, 1, steal=0.2), near,
                    better="lower").verdict == IMPROVED


def test_an_extreme_is_what_rests_on_fewer_than_ten_samples():
    """A max or min is one sample; a p99.9 of 3,000 rests on 3, of 100,000 on 100; a p99 of
    3,000 on 30; a stdev on the few samples farthest out, however many there are; a figure
    of its own (no statistic) is no extreme."""
    assert "one sample" in extreme("max", 3000, "lat_max")
    assert "one sample" in extreme("min", None)
    assert "farthest out" in extreme("stdev", 100_000, "lat_stdev")
    assert "3 of each invocation's 3,000 samples" in extreme("p99.9", 3000, "lat_p99.9")
    assert extreme("p99.9", 100_000) == extreme("p99", 3000) == extreme("p50", 10) == ""
    assert extreme(None, 5) == extreme("p99.9", None) == extreme("p99.9", math.nan) == ""


def test_an_extreme_judged_by_one_runs_repeats_is_unverified_by_runs_it_decides():
    """Captured in a stored A/A (tcp.rr 4 KiB, unchanged code, the same load: steal 0.0 and
    0.01): max 305, 292, 276 us in one run's three repeats, 110, 103, 104 in the next run's.
    The repeats alike, the test called it improved (-64%, p < 0.001): a run's rare events (a
    preempted vCPU, a timer storm) come with the run and all its repeats share them. Judged by
    repeats alone an extreme is unverified, saying what decides it: a history."""
    why = extreme("max", 3000, "lat_max")
    before = Side([305.03, 291.93, 275.79], 0.007, 1, steal=0.0)
    after = Side([110.46, 102.57, 104.44], 0.003, 1, steal=0.01)
    assert _verdict(before, after, better="lower").verdict == IMPROVED      # what it was
    j = _verdict(before, after, better="lower", extreme=why)
    assert j.verdict == UNVERIFIED and "lat_max is one sample" in j.needs
    assert "history" in j.needs and "it would read improved" in j.needs
    # Run-level evidence decides: a history of runs at these values' spread...
    past = Past([290.0, 300.0, 285.0, 310.0], [0.0] * 4, [0.0] * 4)
    assert _verdict(before, after, better="lower", past=past, extreme=why).verdict == IMPROVED
    # ...and a real step in a tail is still caught by it.
    slower = Side([600.0, 640.0, 610.0], 0.003, 1, steal=0.0)
    assert _verdict(before, slower, better="lower", past=past,
                    extreme=why).verdict == REGRESSED
    # A history wider than the repeats or narrower: either way it is there, and it decides
    # (the test took the wider spread; a review's probe: 5 tight runs, repeats wider).
    tight = Past([100.0, 101.0, 99.0, 100.5, 99.5], [0.0] * 5, [0.0] * 5)
    assert _verdict(Side([100.0, 130.0, 80.0], 0.0, 1, steal=0.0),
                    Side([300.0, 390.0, 240.0], 0.0, 1, steal=0.0), better="lower",
                    past=tight, extreme=why).verdict == REGRESSED
    # Sides pooled from two runs each are still repeats, tested as if each were a run: three
    # alike in each of two runs read p 0.003 where one value a run reads 0.23 (the review's
    # probe). Not run-level evidence: unverified.
    two = Side([100.0, 101.0, 99.0, 140.0, 141.0, 139.0], 0.0, 2, steal=0.0)
    more = Side([150.0, 151.0, 149.0, 190.0, 191.0, 189.0], 0.0, 2, steal=0.0)
    assert _verdict(two, more, better="lower").verdict == REGRESSED         # as the test reads
    assert _verdict(two, more, better="lower", extreme=why).verdict == UNVERIFIED
    # Not an extreme (a p99 of 3,000 samples): the repeats decide as before.
    assert _verdict(before, after, better="lower",
                    extreme=extreme("p99", 3000)).verdict == IMPROVED


def _loaded(values, busy, own, cpus=2):
    return Side(values, busy, 1, own=own, cpus=cpus)


def test_a_change_beside_a_hog_is_judged_where_neither_side_was_short_of_cpu():
    """A shaped stream beside a hog: the link set its rate, the case wanted a sliver of the
    free cores, so the load cannot explain -10%: regressed, with the load named."""
    base = _loaded([200.0, 200.2, 199.9], 0.0, 0.05)
    cand = _loaded([180.0, 180.1, 179.9], 1.0, 0.05)
    j = _verdict(base, cand)
    assert j.verdict == REGRESSED and "not short of CPU on either side" in j.disturbed, j
    assert "candidate wanted 0.05 of the 1 cores it could have had" in j.disturbed
    # The same figures where the candidate's case wanted most of the core the hog left it:
    # short of CPU, and the load may be the cause.
    j = _verdict(base, _loaded(cand.values, 1.0, 0.8))
    assert j.verdict == DISTURBED, j
    # Unknown own demand (a file from before it was kept) is no evidence either way.
    j = _verdict(base, _loaded(cand.values, 1.0, None))
    assert j.verdict == DISTURBED, j
    # Every core busy outside netbench: the scheduler still shares each core, so a case gets
    # about cpus / (busy + cpus) of one (0.5 here). A shaped stream wanting a hundredth of a
    # core was not short of it (a 20-trial tbf ladder read -3/-5/-10% disturbed on a host
    # saturated by a hog and a simulator before this rule); one wanting 0.6 was.
    j = _verdict(base, _loaded(cand.values, 2.0, 0.01))
    assert j.verdict == REGRESSED and "of the 0.5 cores it could have had" in j.disturbed, j
    j = _verdict(base, _loaded(cand.values, 2.0, 0.6))
    assert j.verdict == DISTURBED, j


def test_a_case_other_work_left_without_a_core_is_disturbed_on_both_sides_alike():
    """Both sides beside the same other work filling both cores (busy 2.0 on 2 CPUs), the
    case short of CPU: where it gets its slices moves between runs more than within one (an
    A/A here: tcp.rr's p50 +53.5%, each run's repeats alike): disturbed, saying what decides.
    A shaped stream there (not short of CPU) is judged; so is a case with a core of its own
    (4 CPUs); and a history holding runs at that load decides."""
    base = _loaded([20.0, 20.1, 19.9], 2.0, 1.5)
    cand = _loaded([30.7, 30.8, 30.6], 2.0, 1.5)
    j = _verdict(base, cand, better="lower")
    assert j.verdict == DISTURBED, j
    assert "beside 2 cores of other work on 2 CPUs" in j.disturbed, j
    assert "at each side's load and steal" in j.needs, j
    shaped = _verdict(_loaded(base.values, 2.0, 0.01), _loaded(cand.values, 2.0, 0.01),
                      better="lower")
    assert shaped.verdict == REGRESSED, shaped
    roomy = _verdict(_loaded(base.values, 2.0, 1.5, cpus=4),
                     _loaded(cand.values, 2.0, 1.5, cpus=4), better="lower")
    assert roomy.verdict == REGRESSED, roomy
    past = Past([20.0, 20.3, 19.8, 20.1, 19.9], [2.0] * 5)
    j = _verdict(base, cand, better="lower", past=past)
    assert j.verdict == REGRESSED, j
    # A 1-CPU host with a hundredth of a core of other work leaves a case 0.98 of a core:
    # no crowd to speak of, judged.
    tiny = _verdict(_loaded(base.values, 0.01, 0.9, cpus=1),
                    _loaded(cand.values, 0.01, 0.9, cpus=1), better="lower")
    assert tiny.verdict == REGRESSED, tiny


def test_a_cost_beside_a_hog_is_disturbed_unless_beyond_its_loaded_history():
    """A CPU figure is a resource the case spent, which a neighbour's contention raises
    whether or not the case was short of CPU: the starvation rule never clears it; a history
    with loaded runs that moved less does."""
    base = _loaded([0.10, 0.101, 0.099], 0.0, 0.05)
    cand = _loaded([0.13, 0.131, 0.129], 1.0, 0.05)
    p, evidence, sd = invocation_test(base, cand, Past())
    j = judge(base, cand, 0.3, "lower", 0.05, p, evidence, sd=sd, cost=True)
    assert j.verdict == DISTURBED, j
    # One quiet run and two beside a hog that moved 2%: +30% is beyond what the load moved.
    past = Past([0.10, 0.101, 0.102], [0.0, 1.0, 1.0])
    j = judge(base, cand, 0.3, "lower", 0.05, p, evidence, sd=sd, cost=True, past=past)
    assert j.verdict == REGRESSED, j
    assert "(2 runs under it moved +1.0% to +2.0%)" in j.disturbed, j
    # Two loaded runs that moved +5% and +12%: the farthest of two is an anecdote, and a
    # prediction for the next loaded run reaches past +30% (the old rule, the farthest seen
    # plus the threshold, called this a regression).
    past = Past([0.10, 0.105, 0.112], [0.0, 1.0, 1.0])
    j = judge(base, cand, 0.3, "lower", 0.05, p, evidence, sd=sd, cost=True, past=past)
    assert j.verdict == DISTURBED, j
    # Five loaded runs that agree on +2%: the prediction is tight, +30% is beyond it.
    past = Past([0.10, 0.1, 0.102, 0.1021, 0.1019, 0.102, 0.1022], [0.0, 0.0] + [1.0] * 5)
    j = judge(base, cand, 0.3, "lower", 0.05, p, evidence, sd=sd, cost=True, past=past)
    assert j.verdict == REGRESSED, j
    # The same history where the loaded runs moved 35%: the load may explain it.
    past = Past([0.10, 0.135, 0.134], [0.0, 1.0, 1.0])
    j = judge(base, cand, 0.3, "lower", 0.05, p, evidence, sd=sd, cost=True, past=past)
    assert j.verdict == DISTURBED, j


def test_error_counts_are_never_disturbed_unless_counted_inside_the_host():
    base = Side([0.0, 0.0, 0.0], 0.0, 1)
    cand = Side([2472.0, 2390.0, 2501.0], 1.0, 1)
    p, evidence, sd = invocation_test(base, cand, Past(), counts=True)
    j = judge(base, cand, math.inf, "lower", 0.05, p, evidence, sd=sd, counts=True)
    assert j.verdict == REGRESSED, j
    # Unless they happened inside the host (a loopback case: no link between the ends), where
    # the host's load explains them as it does a rate's.
    j = judge(base, cand, math.inf, "lower", 0.05, p, evidence, sd=sd, counts=True,
              hosted=True)
    assert j.verdict == DISTURBED, j
    quiet = Side(cand.values, 0.0, 1)
    j = judge(base, quiet, math.inf, "lower", 0.05, p, evidence, sd=sd, counts=True,
              hosted=True)
    assert j.verdict == REGRESSED, j


def test_a_step_at_the_threshold_is_the_step_not_a_coin_toss():
    """-5% measured -4.99% with tight repeats on a 5% threshold: significant, and its own
    standard error reaches past the threshold: regressed. -3% with the same spread: within
    the threshold by more than its error: unchanged. The smallest change the evidence could
    detect (80% power) is reported."""
    base = Side([200.0, 200.1, 199.9, 200.05, 199.95], 0.0, 1)
    at = Side([v * 0.9501 for v in base.values], 0.0, 1)
    j = _verdict(base, at)
    assert j.verdict == REGRESSED and j.detectable is not None and 0 < j.detectable < 0.01, j
    assert _verdict(base, Side([v * 0.97 for v in base.values], 0.0, 1)).verdict == UNCHANGED


def test_noisy_asks_for_more_invocations_than_it_had_and_a_near_threshold_change_is_no_pass():
    """Three wide repeats a side, -7% on 5%: noisy, asking for more than the three it had
    (never "about 3 repeats a side" beside three). A -4.9% step on 5% whose standard error
    reaches past the threshold and whose test cannot call it is noisy too, never unchanged;
    -1% with the same spread stays unchanged."""
    base = Side([100.0, 108.0, 92.0], 0.0, runs=1)
    cand = Side([93.0, 101.0, 85.0], 0.0, runs=1)
    v = _verdict(base, cand)
    assert v.verdict == "noisy" and v.needs.endswith("repeats a side (it had 3)"), v
    assert int(v.needs.split()[1]) >= 4
    near = _verdict(Side([100.0, 103.0, 97.0], 0.0, runs=1), Side([95.1, 98.1, 92.1], 0.0,
                                                                   runs=1), threshold=0.05)
    assert near.verdict == "noisy" and near.p_adjusted > 0.05, near
    far = _verdict(Side([100.0, 101.0, 99.0], 0.0, runs=1), Side([99.0, 100.0, 98.0], 0.0,
                                                                  runs=1))
    assert far.verdict == UNCHANGED, far


def test_demand_beyond_the_hosts_cpus_is_said_to_be_queued_work():
    """hostload counts running plus waiting: 6.4 "cores busy" on a 2-CPU host is a queue,
    said so beside the figure."""
    from netbench.analysis.verdict import load_differs

    text = load_differs(Side([1.0], 0.0, cpus=2), Side([1.0], 6.4, cpus=2))
    assert text.startswith("candidate: 6.4 cores busy outside netbench (the other side 0)")
    assert "more than the host's 2 CPUs: other work queued for them" in text
    assert "queued" not in load_differs(Side([1.0], 0.0, cpus=2), Side([1.0], 1.5, cpus=2))


def test_ends_placed_otherwise_on_each_side_are_disturbed_and_mixed_sides_are_judged():
    """A loopback ping-pong on an idle VM: its ends on one CPU answer in 2.5 us, on two in
    40 us (measured here: tcp.rr affinity=0,0 against 0,1). A candidate whose every repeat
    happened to land apart is that placement, not a regression; sides that each ran both
    ways are judged by their repeats, which hold the difference."""
    one, two = ("ends on one CPU",), ("ends on separate CPUs",)
    base = Side([2.50, 2.52, 2.51], 0.0, placement=one)
    cand = Side([41.0, 42.4, 43.3], 0.0, placement=two)
    j = _verdict(base, cand, better="lower")
    assert j.verdict == DISTURBED and "ends on one CPU (baseline)" in j.disturbed
    assert "would read regressed" in j.disturbed
    mixed = Side([2.50, 41.0, 2.52], 0.0, placement=one + two)
    assert _verdict(mixed, cand, better="lower").verdict != DISTURBED
    unknown = Side([2.50, 2.52, 2.51], 0.0)          # files from before it was recorded
    assert _verdict(unknown, cand, better="lower").verdict == REGRESSED


def test_invocations_agreeing_closer_than_their_own_samples_allow_decide_nothing():
    """The CI A/A that called coll.broadcast regressed: 195, 213, 206 us against 1137, 680,
    679, each the mean of ten timing windows that spread from 120 to 5,000 us. The windows
    say each mean is known to about a third: the repeats' tight agreement was luck."""
    base, cand = [195.0, 213.0, 206.0], [1137.0, 680.0, 679.0]
    assert _verdict(Side(base), Side(cand), better="lower").verdict == REGRESSED
    # (sd / mean)^2 / n of the windows: a third's relative spread a mean, both sides.
    p, _, sd = invocation_test(Side(base, precision=0.12), Side(cand, precision=0.12))
    assert sd >= math.sqrt(0.12) and p > 0.005
    # Windows that agree (a 1% spread) leave the repeats to decide: the floor is no veto.
    tight = invocation_test(Side(base, precision=1e-4), Side(cand, precision=1e-4))
    assert tight[0] < 0.005


def test_a_cost_is_judged_by_runs_never_by_one_runs_repeats():
    """Two quiet runs whose CPU differs by 32% on a 30% threshold, each run's repeats tight
    (a CI A/A read cpu_server +29.3% so, regressed): where the host ran each run moves what the work
    costs, and the repeats share it, so it is unverified, saying what decides; three earlier
    runs that agree make the same change a regression; a rate is still judged by repeats."""
    base = Side([37.0, 37.4, 36.8], 0.0, 1)
    cand = Side([48.8, 49.4, 48.6], 0.0, 1)
    p, evidence, sd = invocation_test(base, cand, Past())
    assert evidence == "repeats" and p < 1e-4
    j = judge(base, cand, 0.32, "lower", 0.30, p, evidence, sd=sd, cost=True)
    assert j.verdict == UNVERIFIED and "earlier runs of this case" in j.needs, j
    assert "it would read regressed" in j.needs, j
    assert judge(base, cand, 0.32, "lower", 0.30, p, evidence, sd=sd).verdict == REGRESSED
    past = Past([37.1, 36.9, 37.3], [0.0, 0.0, 0.0])
    p, evidence, sd = invocation_test(base, cand, past)
    j = judge(base, cand, 0.32, "lower", 0.30, p, evidence, sd=sd, cost=True, past=past)
    assert j.verdict == REGRESSED, j
    # Twice the threshold and more (log scale) is beyond any run-to-run drift: judged.
    doubled = Side([74.0, 74.8, 73.6], 0.0, 1)
    p, evidence, sd = invocation_test(base, doubled, Past())
    j = judge(base, doubled, 1.0, "lower", 0.30, p, evidence, sd=sd, cost=True)
    assert j.verdict == REGRESSED, j
    # On the default 5% threshold (twice over: 10%) a CI A/A's +23.7% cpu_server, each run's
    # repeats tight, is still unverified; a doubling is judged.
    drifted = Side([45.8, 46.2, 45.5], 0.0, 1)
    p, evidence, sd = invocation_test(base, drifted, Past())
    assert judge(base, drifted, 0.237, "lower", 0.05, p, evidence, sd=sd,
                 cost=True).verdict == UNVERIFIED
    p, evidence, sd = invocation_test(base, doubled, Past())
    assert judge(base, doubled, 1.0, "lower", 0.05, p, evidence, sd=sd,
                 cost=True).verdict == REGRESSED
    # Error counts are events, never a cost: still decided by the counts.
    j = judge(base, cand, 0.32, "lower", 0.30, p, evidence, sd=sd, cost=True, counts=True)
    assert j.verdict != UNVERIFIED, j
