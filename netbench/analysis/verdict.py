"""The one decision: is a change between two sides of a case a regression?

compare, history, the dashboard's colours and the pytest plugin all call ``judge``, so the
same two runs get the same verdict everywhere.

The unit of evidence is the invocation: a repeat of the case (``netbench run --repeat``, a
suite's ``repeat``), a run of a label, or an earlier run of the case on the same host in the
store (its history). Samples inside one invocation sit closer together than two invocations
do (tcp.rr here: within 2% inside a run, 7-25% between runs), so they cannot say how far a
whole invocation drifts, and they never make a verdict. The test is Student's t on the
invocations' values (on a log scale where every value is positive: drift is multiplicative),
its spread the larger of the sides' own repeats (pooled) and the case's history; a change
needs that spread to have at least ``MIN_DF`` degrees of freedom.

The verdicts:
- ``lost``: measured on the baseline, skipped or failed (or absent) on the candidate
  (``compare.lost_verdicts``: no test, the reason is the evidence); fails a gate unless allowed;
- ``unchanged``: within the threshold by more than its own standard error (a -5% step
  measured -4.99% on 5% is judged as a change: the step where significant, else ``noisy``);
- ``regressed`` / ``improved``: beyond the threshold, and the invocations say it is not noise;
- ``noisy``: beyond (or within a standard error of) the threshold, within what invocations of
  this case move;
- ``unverified``: beyond the threshold with no invocation-level spread to judge it by (one
  invocation a side, no history), or an extreme (a max, a min, a p99.9 of fewer than 10,000
  samples: fewer than ``EXTREME_SAMPLES`` beyond it) judged by one run's repeats alone: the
  rare events an extreme catches come with a run, and its repeats share them (an A/A here:
  tcp.rr's max -64% between two runs at the same load, each run's three repeats alike), or a
  cost (CPU spent) judged by one run's repeats alone, for the same reason, unless beyond
  twice its threshold and ``COST_DRIFT``. Says what would decide it;
- ``disturbed``: it would be a regression (or an improvement) but the two sides ran with
  different amounts of other work on the host (``netbench.env.hostload``: BUSY_CORES apart, or
  STEAL_CORES of the hypervisor's steal), which moves a figure
  either way: named, and not blamed on the code, unless the case's history holds runs at
  both load levels (then its spread allows for that load, and it decides); or the hypervisor
  stole at least ``BUSY_CORES`` from either side: other guests' demand moves between runs more
  than between the repeats of one, so only a history holding runs at that steal decides; or
  other work left a side's case, short of CPU, less than a core of its own (``crowded``):
  the slices it gets move with that work between runs, and the same history decides.
  Load explains a rate or a latency only where a side's case was short of CPU (``starved``:
  it wanted ``STARVED`` of the cores it could have had, ``room``) or the change is within
  what the case moved under such load in its history; otherwise the verdict stands, the
  load named beside it. A cost (``cost=True``: CPU spent) is cleared only by that history,
  and judged by runs only: one run's repeats share where the host ran it (``unverified``);
  counted events (``counts=True``: retransmits, drops) are never disturbed, except those of
  a case over the kernel's loopback (``hosted``: ``lo`` to the loopback peer): with no link
  between its ends, its host dropped or re-sent them.
Each judgement carries ``detectable``: the smallest change its evidence would catch at 80%
power. Only ``regressed`` and ``lost`` fail a gate by default.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Literal

from netbench import stats
from netbench.env.hostload import BUSY_CORES


class Verdict(StrEnum):
    """The kind of verdict on a change: the one spelling compare, history, the dashboard and
    the plugin share. A ``str`` whose value is the word itself, so JSON, printed and stored text
    stay the plain words and ``v.verdict == "regressed"`` keeps working in users' code. Members
    in the order a summary lists them (the worst news first)."""
    LOST = "lost"
    REGRESSED = "regressed"
    IMPROVED = "improved"
    DISTURBED = "disturbed"
    NOISY = "noisy"
    UNVERIFIED = "unverified"
    UNCHANGED = "unchanged"

    @property
    def undecided(self) -> bool:
        """Beyond the threshold, but not shown to be the code's doing: a gate fails on it only
        when asked (--fail-on-noisy)."""
        return self in (Verdict.NOISY, Verdict.UNVERIFIED, Verdict.DISTURBED)

    def fails_gate(self, fail_on_noisy: bool = False, allow_lost: bool = False) -> bool:
        """Does this verdict fail a regression gate? ``regressed`` and ``lost`` by default (a
        device that vanished after a driver update is the regression users fear most);
        ``allow_lost``: a user who means it lets lost cases pass."""
        return (self is Verdict.REGRESSED or (self is Verdict.LOST and not allow_lost)
                or (fail_on_noisy and self.undecided))

    @property
    def display(self) -> str:
        """As a table prints it: what fails a gate in capitals, so it stands out."""
        return self.value.upper() if self in (Verdict.REGRESSED, Verdict.LOST) else self.value


# The members by their old names, which callers and tests import.
LOST = Verdict.LOST
REGRESSED, IMPROVED, UNCHANGED = Verdict.REGRESSED, Verdict.IMPROVED, Verdict.UNCHANGED
NOISY, UNVERIFIED, DISTURBED = Verdict.NOISY, Verdict.UNVERIFIED, Verdict.DISTURBED
VERDICTS = tuple(Verdict)
UNDECIDED = tuple(v for v in Verdict if v.undecided)

MIN_DF = 2          # degrees of freedom the invocations' spread needs before it can decide
HISTORY_RUNS = 8    # earlier runs of a case on its host that make its noise model


SD_FLOOR = 0.005     # the least spread an invocation is taken to have (relative, log scale):
# values that agree exactly (quantized, or one value repeated) never make p = 0


@dataclass
class Side:
    """One side of a case metric: a value per invocation, the runs they came from, and how
    busy the host was (None: not recorded, as in files written before netbench recorded it)."""
    values: Sequence[float]        # one per invocation (repeat or run)
    busy: float | None = 0.0       # cores busy outside netbench, the invocations' mean
    # (other work plus what the hypervisor stole)
    runs: int = 0                  # distinct runs among the invocations (0: one per value)
    mhz: float | None = None       # the CPUs' mean clock where cpufreq says (None: unknown)
    throttled: int = 0             # thermal throttling events during the invocations
    steal: float | None = 0.0      # of ``busy``, the cores the hypervisor stole
    own: float | None = None       # cores netbench's own processes wanted (ran plus waited)
    cpus: int | None = None        # the host's CPUs (None: unknown)
    placement: Sequence[str] | None = None   # where the case's ends ran, each invocation's
    # (api.Measurement.placement), distinct; None: not recorded on every invocation
    precision: float | None = None   # an invocation's own relative variance, from its samples
    # (compare.sample_precision): the least its invocations' spread can be

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def n_runs(self) -> int:
        return self.runs or len(self.values)


@dataclass
class Past:
    """The case's history on the baseline's host: one value per earlier run (the median of
    its repeats) and how busy the host was in it."""
    values: Sequence[float] = ()
    busy: Sequence[float | None] = ()
    steal: Sequence[float | None] = ()


@dataclass(kw_only=True)
class Judgement:
    """What ``judge`` decides about one change, declared once: compare's per-metric record and
    history's steps are Judgements with their case's identity added. Keyword-only, so a
    subclass's own fields keep their positions in its constructor."""
    verdict: Verdict | Literal[""] = ""    # "": not judged (a history's first run)
    p_value: float | None = None       # the t test's, before adjustment; None without evidence
    p_adjusted: float | None = None    # Benjamini-Hochberg over the comparison: decides
    evidence: str = ""                 # repeats, history (the store's earlier runs), none
    needs: str = ""                    # unverified, noisy, stolen: what would decide it
    disturbed: str = ""                # which side ran busy, how busy, what it would have been;
    # beside a regressed/improved verdict: the load named, and why it does not explain it
    detectable: float | None = None    # the smallest relative change this evidence detects
    # (80% power at alpha), None without evidence

    def __post_init__(self) -> None:
        # A record built from plain text (stored JSON, a user's own) holds the kind too, and a
        # word that is no verdict fails here rather than reading as "not regressed".
        if self.verdict:
            self.verdict = Verdict(self.verdict)

    def decision(self) -> dict[str, Any]:
        """The judgement's fields by name, to build a record from."""
        return {f.name: getattr(self, f.name) for f in fields(Judgement)}

    def adopt(self, judged: Judgement) -> None:
        """Take ``judged``'s decision (history makes a run's steps, then judges them together)."""
        for name, value in judged.decision().items():
            setattr(self, name, value)


def _centre_spread(values: Sequence[float], log: bool) -> tuple[float, float, int]:
    """The mean and the sum of squared deviations, summed at a scale where no term can
    overflow (a stored 1e308 beside -1e308 was an OverflowError); inf where the spread
    itself is beyond a float."""
    xs = [math.log(v) for v in values] if log else [float(v) for v in values]
    n = len(xs)
    # Scaled only where a square could overflow: ordinary figures are summed as they are.
    scale = max((abs(x) for x in xs), default=0.0)
    scale = scale if scale > 1e150 else 1.0
    ys = [x / scale for x in xs]
    mean = math.fsum(ys) / n
    ss = math.fsum((y - mean) * (y - mean) for y in ys)
    return mean * scale, ss * scale * scale, n


def invocation_test(base: Side, cand: Side, history: Past | Sequence[float] = (),
                    counts: bool = False) -> tuple[float | None, str, float]:
    """The two-sided p-value that the sides' invocations differ, the evidence it rests on,
    and the spread of one invocation (sd, on the log scale where values are positive; p is
    None when the spread has fewer than MIN_DF degrees of freedom).

    Two levels of noise: repeats inside a run (the sides' own spread, pooled, over n values a
    side) and whole runs (``history``: how far the case's earlier runs on the baseline's host
    moved, over the runs a side). The standard error is the larger of the two, with its own
    degrees of freedom: a run-level drift is never divided by the number of repeats.

    ``counts``: the values are events counted in an invocation (an error counter's growth),
    judged on their own scale with at least Poisson's spread (a variance of the larger
    side's mean, at least 1): 3 retransmits after eight runs of 0 is not certainty."""
    past = history if isinstance(history, Past) else Past(list(history))
    values = [*base.values, *cand.values, *past.values]
    if not all(math.isfinite(v) for v in values):
        return None, "none", 0.0
    log = bool(values) and all(v > 0 for v in values) and not counts
    mb, ssb, nb = _centre_spread(base.values, log)
    mc, ssc, nc = _centre_spread(cand.values, log)
    scale = 1.0 if log else max(abs(mb), abs(mc), 1e-300)
    floor = max(abs(mb), abs(mc), 1.0) if counts else (SD_FLOOR * scale) * (SD_FLOOR * scale)
    if log:
        # Invocations cannot agree more closely than each one's own samples allow: where
        # they did, that was luck (see compare.sample_precision).
        own = [(s.precision, s.n) for s in (base, cand) if s.precision is not None]
        if own:
            floor = max(floor, sum(p * n for p, n in own) / sum(n for _, n in own))
    df_rep = nb + nc - 2
    var = max((ssb + ssc) / df_rep, floor) if df_rep > 0 else 0.0
    evidence, df = "repeats", df_rep
    se2 = var * (1 / nb + 1 / nc)
    if len(past.values) > MIN_DF:      # a history too short to judge by never overrides
        _, ssh, nh = _centre_spread(past.values, log)
        var_h = max(ssh / (nh - 1), floor)
        se2_h = var_h * (1 / base.n_runs + 1 / cand.n_runs)
        if df_rep < MIN_DF or se2_h > se2:
            evidence, df, var, se2 = "history", nh - 1, var_h, se2_h
    sd = math.sqrt(var)
    if df < MIN_DF:
        return None, "none", sd
    if not (math.isfinite(se2) and math.isfinite(mc - mb)):
        return None, "none", sd          # figures at a float's edge: nothing to test by
    return stats.t_sf2(abs(mc - mb) / math.sqrt(se2), df), evidence, sd


def judge(base: Side, cand: Side, change: float, better: str, threshold: float,
          p_adjusted: float | None, evidence: str, alpha: float = 0.05,
          history_runs: int = 0, what: str = "", sd: float = 0.0,
          past: Past | None = None, p_value: float | None = None,
          extreme: str = "", counts: bool = False, cost: bool = False,
          hosted: bool = False) -> Judgement:
    """The verdict on a relative ``change`` (candidate against baseline, in the metric's
    own direction ``better``), from the test's (adjusted) p-value, evidence and spread.
    ``p_value``: the test's own, before adjustment (default ``p_adjusted``: a test alone).
    ``extreme``: why the figure is an extreme (``extreme()``), judged by run-level evidence
    only: a history to judge by (more than MIN_DF earlier runs; the test took the wider of
    its spread and the repeats'). ``counts``: the values count events (an error counter's
    growth): the host's load never explains those, unless ``hosted``: the events happened
    inside this host, no link or NIC between the ends (the kernel's loopback), so the load
    may explain them as it does a rate. ``cost``: a resource the case spent (CPU), which a
    neighbour's contention raises whether or not the case was short of CPU."""
    raw = p_adjusted if p_value is None else p_value
    se = relative_se(base, cand, evidence, sd, counts)
    detectable = (None if se is None
                  else math.expm1((_z(1 - alpha / 2) + POWER_Z) * se))

    def made(verdict: Verdict, evidence: str = evidence, needs: str = "",
             disturbed: str = "") -> Judgement:
        return Judgement(verdict=verdict, p_value=raw, p_adjusted=p_adjusted,
                         evidence=evidence, needs=needs, disturbed=disturbed,
                         detectable=detectable if evidence != "none" else None)

    # Within the threshold is unchanged only where its own standard error keeps it there: a
    # -5% step measured -4.99% on a threshold of 5% is the step where the evidence says the
    # change is real, and asks for more runs where it cannot tell (a history of three runs,
    # -4.9%, p 0.06 once adjusted), never a coin toss read as "unchanged".
    if abs(change) <= threshold and not (evidence != "none" and se is not None
                                         and abs(change) > threshold - se):
        return made(UNCHANGED)
    if evidence == "none" or p_adjusted is None:
        return made(UNVERIFIED, evidence="none", needs=needs_text(base, cand, history_runs))
    if p_adjusted >= alpha:
        # More than it had: "about 3 repeats a side" beside three a side asks for nothing.
        had = max(base.n, cand.n) if evidence == "repeats" else max(base.n_runs, cand.n_runs)
        more = max(repeats_needed(sd, change, alpha), had + 1)
        return made(NOISY, needs=(f"about {more} repeats a side (it had {had})"
                                  if evidence == "repeats" else
                                  f"about {more} runs a side (it had {had}), or more of this "
                                  "case's earlier runs on this host in the store"))
    worse = change < 0 if better == "higher" else change > 0
    verdict = REGRESSED if worse else IMPROVED
    if counts and not hosted:
        # Events counted (retransmits, drops): a busy neighbour does not make a NIC drop
        # thousands of segments, and a count is no tail statistic: the counts decide. Over
        # loopback there is no NIC: the host's own stack dropped or re-sent them, beside a
        # hypervisor's steal too (a CI A/A: 0 -> 43 retransmits, candidate stolen 0.70 of a
        # core), so they take the load rules below.
        return made(verdict, disturbed=load_differs(base, cand))
    # The sides ran on a host in different states: other work moves a figure either way (a
    # busy neighbour slows a stream; on an idle VM a ping-pong waits for halted vCPUs to wake:
    # tcp.rr here reads 30 us on a quiet host and 7 us beside a CPU hog), so the difference
    # is the host's as much as the code's: named, not judged, unless the case shows that load
    # cannot explain it (see unexplained_by_load) or the change is beyond what its history's
    # runs in both states say the load moves (beyond_load_history).
    clock = clock_differs(base, cand)
    if clock:
        return made(DISTURBED, disturbed=clock + (f" during {what}" if what else "")
                    + f"; on an even clock it would read {verdict}")
    placed = placement_differs(base, cand)
    if placed:
        return made(DISTURBED, disturbed=f"{placed} (placed alike it would read {verdict})")
    # A history holding runs in both sides' load states decides where the sides' states are
    # one: its spread is that state's. Where they differ, it does not on its own: a spread
    # pooled over two states is narrower than the step between them (an A/A beside a hog
    # read cpu_client +28.6% regressed by four such runs). The load is cleared there only
    # where the case shows it (see unexplained_by_load) or the history bounds what it moves.
    decided_by_history = (past is not None and len(past.values) > MIN_DF
                          and covers(past, base, cand))
    apart = load_differs(base, cand)
    named = ""
    if apart:
        why_not = (beyond_load_history(base, cand, change, threshold, past) if cost
                   else unexplained_by_load(base, cand, change, threshold, past))
        if not why_not:
            return made(DISTURBED, disturbed=apart + (f" during {what}" if what else "")
                        + f"; quiet on both it would read {verdict}")
        named = f"{apart}; {why_not}"
    # A hypervisor stealing heavily from either side: other guests' demand, which changes
    # between runs more than between the repeats of one (an A/A trial here: both sides stolen
    # 0.55 and 0.73 cores, tcp.rr's minimum round trip +10.7% with its repeats within 1%), so
    # one run's repeats cannot stand for another run; a history holding runs at that steal can,
    # and so does a change beyond what the case moved at that steal in its history.
    # So is a case that other work left without a core of its own (``crowded``): where it
    # gets its slices moves with the other work's phases from run to run.
    stolen = "; ".join(x for x in (heavy_steal(base, cand), crowded(base, cand)) if x)
    if stolen and not (decided_by_history and not apart):
        moved = beyond_load_history(base, cand, change, threshold, past)
        if not moved:
            return made(DISTURBED, disturbed=stolen + (f" during {what}" if what else "")
                        + f"; on a host nobody else shares it would read {verdict}",
                        needs=f"{MIN_DF + 1} or more earlier runs of this case on this host "
                              "in the store, 2 or more of them at each side's load and steal "
                              "(its history then decides)")
        named = "; ".join(x for x in (named, f"{stolen}; {moved}") if x)
    # Not sides of several runs each either: their values are still repeats, tested as if
    # each were a run (three alike in each of two runs read p 0.003 where the runs say 0.23).
    judged_by_runs = past is not None and len(past.values) > MIN_DF
    if extreme and not judged_by_runs:
        return made(UNVERIFIED, needs=f"{extreme}, and the rare events it catches come with "
                    f"a run, which the run's repeats share: {MIN_DF + 1} or more earlier runs "
                    "of this case on this host in the store (its history) decide (it would "
                    f"read {verdict})")
    # So is a cost: the CPU the same work takes moves with where the host ran the run's
    # processes (a busy sibling hyperthread, the host's clock: neither visible from inside,
    # no steal), which a run's repeats share (a CI A/A of two quiet runs: cpu_server +29.3%
    # on a 30% threshold, each run's three repeats within a few percent of each other).
    # Beyond twice the threshold (log scale) and COST_DRIFT no run-to-run drift seen here
    # reaches: judged, so a CPU cost that doubled still fails a gate on a runner with no history.
    far = change > -1 and abs(math.log1p(change)) > max(2 * math.log1p(threshold),
                                                          math.log1p(COST_DRIFT))
    if cost and not counts and not judged_by_runs and not far:
        return made(UNVERIFIED, needs="the CPU a piece of work takes moves with where the "
                    "host ran each run, which the run's repeats share: "
                    f"{MIN_DF + 1} or more earlier runs of this case on this host in the "
                    f"store (its history) decide (it would read {verdict})")
    return made(verdict, disturbed=named)


# The farthest a run's CPU cost may drift from another's with nothing changed: seen here
# +29.3% (cpu_server, a CI A/A of two quiet runs) and +23.7% (the same, on the default 5%
# threshold, which twice over is 10%); both runs' repeats within a few percent of each other.
COST_DRIFT = 0.5

POWER_Z = 0.841621   # the standard normal quantile of 80% power


def relative_se(base: Side, cand: Side, evidence: str, sd: float,
                counts: bool = False) -> float | None:
    """The standard error of the change on the test's scale, as a relative change (log
    scale where every value is positive), or None without evidence or for counts."""
    if evidence == "none" or counts or not base.n or not cand.n:
        return None
    nb, nc = (base.n, cand.n) if evidence == "repeats" else (base.n_runs, cand.n_runs)
    se = sd * math.sqrt(1 / nb + 1 / nc)
    values = [*base.values, *cand.values]
    if all(v > 0 for v in values):
        return se
    centre = abs(sorted(base.values)[len(base.values) // 2])
    return se / centre if centre else None


STARVED = 0.75   # a case that wanted this share of the cores left to it was short of CPU


def room(one: Side) -> float | None:
    """The cores this side's case could have had: those other work and the hypervisor left
    free, and on a saturated host its fair share still (the scheduler shares each core among
    its runnable threads: beside ``busy`` cores of work spread over ``cpus``, a newcomer gets
    ``cpus / (busy + cpus)`` of a core). None where unknown."""
    if one.busy is None or not one.cpus:
        return None
    return max(one.cpus - one.busy, one.cpus / (max(one.busy, 0.0) + one.cpus))


def starved(one: Side) -> bool | None:
    """Was this side's case short of CPU: did netbench's own processes want (run plus wait)
    at least STARVED of the cores it could have had (``room``)? None where unknown. A stream
    its link shapes wants a hundredth of a core, and is not starved beside two hogs on two
    cores (a fresh run here: -10% through tbf read disturbed while the host was saturated)."""
    free = room(one)
    if one.own is None or free is None:
        return None
    return one.own >= STARVED * free


def _starved_text(name: str, one: Side) -> str:
    free = room(one)
    return (f"{name} wanted {one.own:.2g} of the {free:.2g} cores it could have had"
            if free is not None and one.own is not None else "")


def unexplained_by_load(base: Side, cand: Side, change: float, threshold: float,
                        past: Past | None) -> str:
    """Why the sides' different load cannot explain the change, as a sentence, or "": neither
    side's case was short of CPU (a shaped stream beside a hog: the link, not the host, set
    its rate), or the change is beyond what this case has moved under such load in its
    history."""
    short = (starved(base), starved(cand))
    if short == (False, False):
        return ("not short of CPU on either side (netbench "
                + ", ".join(_starved_text(n, s) for n, s in (("baseline", base),
                                                              ("candidate", cand)))
                + "): the load does not explain it")
    return beyond_load_history(base, cand, change, threshold, past)


def beyond_load_history(base: Side, cand: Side, change: float, threshold: float,
                        past: Past | None) -> str:
    """"" unless the history holds runs at both sides' load states and the change is beyond
    what this case can move between them (by more than the threshold): then says so."""
    moved = load_moved(past, base, cand)
    if moved is None or not change > -1:
        return ""
    bound, seen = moved
    if abs(math.log1p(change)) <= bound + math.log1p(threshold):
        return ""
    return (f"beyond the {math.expm1(bound):.1%} this case may move under such load by its "
            f"history ({seen}): the load does not explain it")


def load_moved(past: Past | None, base: Side, cand: Side) -> tuple[float, str] | None:
    """How far (log scale) a run at the busier side's load state may move from the runs at
    the other side's, by the history's runs at each, with what they showed; None where it
    holds fewer than MIN_DF runs at the busier state or none at the other.

    The bound is a 95% prediction interval for the next loaded run, never less than the
    farthest one seen: the farthest of two loaded runs is an anecdote (a history of two
    loaded runs let an A/A run beside the same hog read cpu_client +28.6% as a regression,
    in one of a few runs of tests/test_known_answers.py)."""
    if past is None or not past.values or not all(v > 0 for v in past.values):
        return None
    a, b = _levels(base.busy, base.steal), _levels(cand.busy, cand.steal)
    if a is None or b is None:
        return None
    busier, quieter = (b, a) if b[0] > a[0] else (a, b)
    if not _states_differ(busier, quieter):
        return None                 # one state: what runs at it move is the history's job
    steal = list(past.steal) or [None] * len(past.busy)
    states = [(_levels(bz, st), v) for bz, st, v in zip(past.busy, steal, past.values)]
    loaded = [v for s, v in states if s is not None and not _states_differ(s, busier)]
    quiet = sorted(v for s, v in states if s is not None and not _states_differ(s, quieter))
    if len(loaded) < MIN_DF or not quiet:       # one loaded run is an anecdote
        return None
    centre = quiet[len(quiet) // 2]
    moves = [math.log(v / centre) for v in loaded]
    # A loaded run against a quiet one: each varies run to run (the quiet side's spread
    # unknown from one run: taken as the loaded side's), and the centres are estimates.
    var_loaded = stats.stdev(moves) ** 2
    var_quiet = (stats.stdev([math.log(v) for v in quiet]) ** 2 if len(quiet) > 1
                 else var_loaded)
    spread = math.sqrt(var_loaded * (1 + 1 / len(moves)) + var_quiet * (1 + 1 / len(quiet)))
    half = stats.t95(len(moves) - 1) * spread
    mid = stats.mean(moves)
    seen = max(abs(m) for m in moves)
    low, high = math.expm1(min(moves)), math.expm1(max(moves))
    return (max(seen, abs(mid - half), abs(mid + half)),
            f"{len(moves)} runs under it moved {low:+.1%} to {high:+.1%}")


EXTREME_SAMPLES = 10   # a statistic resting on fewer samples than this is an extreme
_TAIL = {"p99": 0.01, "p99.9": 0.001}


def extreme(statistic: str | None, n_samples: float | None, metric: str = "") -> str:
    """How few samples a statistic of an invocation rests on, as a sentence, where they are
    fewer than EXTREME_SAMPLES (a max or min: one; a p99.9 of 3,000: 3; a stdev: the few
    farthest out), else ""."""
    what = metric or statistic
    if statistic in ("min", "max"):
        return f"{what} is one sample of each invocation"
    if statistic == "stdev":
        # A stdev squares each distance: one 1 ms stall among 20,000 round trips of 30 us
        # (body spread 2 us) more than triples it, so it rests on the rarest samples as a max
        # does (a CI A/A on a quiet host: tcp.rr lat_stdev +204.5%, each repeat of one run alike).
        return f"{what} is moved by the few samples farthest out of each invocation"
    tail = _TAIL.get(statistic or "")
    if tail is None or n_samples is None or not n_samples == n_samples:
        return ""
    beyond = float(n_samples) * tail
    if beyond >= EXTREME_SAMPLES:
        return ""
    return (f"{what} rests on {beyond:.3g} of each invocation's {int(n_samples):,} samples "
            f"(a tail judged by repeats needs {EXTREME_SAMPLES} or more beyond it)")


def heavy_steal(base: Side, cand: Side) -> str:
    """Did the hypervisor steal at least BUSY_CORES from either side's vCPUs, as a sentence,
    or "" (unrecorded steal is no evidence)?"""
    steals = (base.steal, cand.steal)
    if not any(s is not None and s >= BUSY_CORES for s in steals):
        return ""
    shown = ", ".join(f"{name} {'?' if s is None else f'{s:.2g}'}"
                      for name, s in zip(("baseline", "candidate"), steals))
    return (f"the hypervisor stole cores from this guest ({shown}): other guests' demand, "
            "which moves between runs more than within one")


def crowded(base: Side, cand: Side) -> str:
    """Did other work leave either side's case less than a core of its own (``room``) while
    it was short of CPU (``starved``), as a sentence, or ""? Such a case runs in the slices
    the scheduler gives it among the other work's, which move with that work's phases from
    run to run more than between one run's repeats (an A/A here beside two low-priority
    loops filling both cores: tcp.rr's p50 +53.5%, each run's three repeats alike). A case
    its link shapes is not starved there, and is judged (a -10% through tbf beside two hogs
    on two cores is caught)."""
    short = []
    for name, one in (("baseline", base), ("candidate", cand)):
        free = room(one)
        # Other work of its own (a 1-CPU host with a hundredth of a core busy leaves a case
        # 0.98 of a core: no crowd) that left the case less than a core.
        if (free is not None and free < 1.0 and one.busy is not None
                and one.busy >= BUSY_CORES and starved(one)):
            short.append(f"{_starved_text(name, one)} beside {one.busy:.2g} cores of other "
                         f"work on {one.cpus} CPUs")
    if not short:
        return ""
    return "; ".join(short) + (": where a case short of CPU gets its slices moves between "
                               "runs more than within one")


CLOCK_GAP = 0.10     # CPU clocks this far apart (relative) are two different machines' worth


def clock_differs(base: Side, cand: Side) -> str:
    """Which side ran throttled or at a clearly different CPU clock, or "" (the kernel's
    cpufreq and thermal_throttle counters; unknown on either side is no evidence)."""
    for name, one in (("baseline", base), ("candidate", cand)):
        if one.throttled:
            return f"{name}: the CPU was thermally throttled {one.throttled} time(s)"
    if base.mhz and cand.mhz and abs(cand.mhz - base.mhz) >= CLOCK_GAP * max(base.mhz,
                                                                              cand.mhz):
        return f"CPU clock {base.mhz:.0f} MHz (baseline) vs {cand.mhz:.0f} MHz (candidate)"
    return ""


def placement_differs(base: Side, cand: Side) -> str:
    """Did every invocation of one side run its ends placed otherwise than every invocation of
    the other (two ends of a loopback ping-pong on one CPU, then on two: 2.5 us against
    40 us on an idle VM), as a sentence, or ""? Sides that each ran in both are judged: their
    repeats' spread holds the difference."""
    if not base.placement or not cand.placement or set(base.placement) & set(cand.placement):
        return ""
    return (f"{' / '.join(base.placement)} (baseline) vs {' / '.join(cand.placement)} "
            "(candidate): pin the ends to CPUs to compare like with like")


def _levels(busy: float | None, steal: float | None) -> tuple[float, float, float] | None:
    """A load state: (all of it, other work, stolen), in cores; None where unrecorded."""
    if busy is None:
        return None
    stolen = steal or 0.0
    return busy, max(busy - stolen, 0.0), stolen


STEAL_CORES = 0.10    # steal this far apart is two states (see _states_differ)


def _states_differ(a: tuple[float, float, float], b: tuple[float, float, float]) -> bool:
    # Each kind on its own as well as the sum: a CPU hog beside one side and a hypervisor
    # stealing a loaded host's vCPUs from the other add up to about the same cores, yet they
    # are two states (the hog keeps the vCPUs awake, the steal makes every wakeup wait).
    # Steal counts from a smaller gap: every stolen slice lands on whatever was running, so a
    # tenth of a core stolen (5% of a 2-vCPU guest's time) sets a ping-pong's tail (an A/A
    # in a fresh CI clone: steal 0.20 against 0.02 cores, tcp.rr's p99 -56%, each run's
    # three repeats alike).
    return (differently_busy(a[0], b[0]) or differently_busy(a[1], b[1])
            or differently_busy(a[2], b[2], STEAL_CORES))


def load_differs(base: Side, cand: Side) -> str:
    """Which side ran beside clearly more load of some kind, as a sentence, or "" (unrecorded
    load on either side is no evidence)."""
    a, b = _levels(base.busy, base.steal), _levels(cand.busy, cand.steal)
    if a is None or b is None or not _states_differ(a, b):
        return ""
    name, busier, other = (("candidate", b, a) if b[0] > a[0] else ("baseline", a, b))
    # Demand, not a count of cores: running plus waiting for a CPU, so a 2-CPU host under a
    # queue of work reads 6.4 (said with the host's CPUs, where recorded).
    cpus = (cand if name == "candidate" else base).cpus
    text = (f"{name}: {busier[0]:.2g} cores busy outside netbench "
            f"(the other side {other[0]:.2g})"
            + (f"; more than the host's {cpus} CPUs: other work queued for them"
               if cpus and busier[0] > cpus else ""))
    if a[2] or b[2]:
        text += f"; stolen by the hypervisor: baseline {a[2]:.2g}, candidate {b[2]:.2g}"
    return text


def covers(past: Past | None, *sides: Side) -> bool:
    """Does the history hold at least two runs in each of these sides' load states (none of
    them differently loaded from it)?"""
    if past is None:
        return False
    steal = list(past.steal) or [None] * len(past.busy)
    states = [s for s in (_levels(b, st) for b, st in zip(past.busy, steal)) if s is not None]
    for one in sides:
        level = _levels(one.busy, one.steal)
        if level is None or sum(not _states_differ(s, level) for s in states) < 2:
            return False
    return True


def differently_busy(a: float, b: float, cores: float = BUSY_CORES) -> bool:
    """Did two sides run with clearly different amounts of other work: at least ``cores``
    (BUSY_CORES) apart and a quarter of the busier side's (1.0 vs 1.2 cores, both beside the
    same hog, is one state; 0 vs 1 is two)?"""
    gap = abs(a - b)
    return gap >= cores and gap >= 0.25 * max(a, b)


def needs_text(base: Side, cand: Side, history_runs: int = 0) -> str:
    """What would give a change invocation-level evidence: repeats a side, or earlier runs."""
    have = f"{base.n} vs {cand.n} invocations"
    if not all(math.isfinite(v) for v in [*base.values, *cand.values]):
        return f"{have}, not all finite: nothing to judge by"
    want = 2 if min(base.n, cand.n) >= 2 else 3     # 2 vs 2 has the 2 degrees of freedom
    earlier = max(MIN_DF + 1 - history_runs, 1)
    return (f"{have}: needs {want} repeats a side (--repeat {want}) or "
            f"{earlier} more earlier run(s) of this case on this host in the store")


def repeats_needed(sd: float, change: float, alpha: float) -> int:
    """About how many invocations a side would tell this change from the noise (a two-sample
    power estimate at 80%: n = 2 ((z_a/2 + z_0.8) sd / delta)^2; ``sd`` on the test's scale,
    the log one, which a relative change maps onto)."""
    delta = abs(math.log1p(change)) if change > -1 else abs(change)
    if delta <= 0 or sd <= 0:
        return 3
    z = 1.959964 + 0.841621 if alpha == 0.05 else _z(1 - alpha / 2) + 0.841621
    return max(math.ceil(2 * (z * sd / delta) ** 2), 3)


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
