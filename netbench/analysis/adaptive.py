"""An adaptive fabric sweep: cover every host and every link first, then re-probe only the
suspects, so a fault among thousands of hosts is named in a few rounds instead of N-1.

The planner proposes one round at a time (disjoint pairs of endpoint indices, each with why it
was chosen) and learns from what the round read:

1. **Cover.** Two rounds pair every host with a neighbour behind its own switch, one way and
   then the other: every NIC sends and receives, every access link carries traffic both ways,
   no inter-switch link is loaded. Then rounds of pairs across switches until every
   inter-switch link (each direction) has carried a pair: where the routes are known (the
   topology's ``routing = "dest"``: a destination-routed fabric, as InfiniBand's subnet
   manager routes) each pair crosses exactly one path and a round packs pairs whose links
   are disjoint; under ECMP a pair may take any of its equal-cost paths, so a round holds
   pairs whose path sets are disjoint (no two flows can collide on a link and read half
   speed for that reason alone).
2. **Re-probe.** Each slow pair's path is split: its sending end, its receiving end and its
   core are each measured again with known-good partners, and a core is split again until
   a suspect is one element (or elements that no pair can tell apart: a NIC and its own
   link). Rounds stop when nothing is left to split or the round budget is spent
   (``2 log2 N + 4`` by default).

Every round's pairs and the reason they were chosen are kept (``log``). The verdict itself is
``netbench.analysis.localize``'s over every pair measured, as for any sweep; the planner only
chooses which pairs to measure. The same planner drives the real ranks (``sweep.fabric``) and
the flow-level simulator (``sweep.simulate``).
"""

from __future__ import annotations

import bisect
import gc
import math
import random
import statistics
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from netbench.env.topology import Topology, element_nodes, link_name

THRESHOLD = 0.4           # a pair below (1 - this) of the healthy rate is slow (as localize)
MAX_COVER_ROUNDS = 8      # cross-switch cover rounds at most (the rest are for suspects)
CONFIRM = 3               # slow pairs that convict a thing on their own
NOISE_MARGIN = 4          # healthy pairs past the noise's minimum a sweep measures (the
#                           stored matrix judges each pair by its median, and may set aside
#                           one the planner counted)
REPEATS = 3               # times a pair through a leaning element is measured again
PARTNERS = 8              # switches a cover pair's far end is looked for among
ECMP_MISS = 0.05          # chance a path of an ECMP set is left unloaded by the cover
# Untraced ECMP: flows a cover round sends across each directed link's path set, as a share of
# its width (16 spines: 4 flows out of and into each leaf). Their collisions are expected
# (``Measured.crowd``) and read as such; one flow a path set would load a given link of a
# 16-wide set once in 16 rounds, too seldom to name one running 15% slow. Half (8 of 16) was
# tried: more collisions than a Poisson count of them reads (recall 0.675, precision 0.375).
CROWD = 0.25
COLLIDED = 3              # a flow that may have met others is slow below a three-way share
COMPANY_Z = 4             # spreads of two readings' noisy ratio a flow's company may read above it


def default_budget(n: int) -> int:
    """Rounds an adaptive sweep may use: 2 log2 N + 4, and fewer than all-pairs' 2 (N - 1)
    (a handful of hosts is cheaper measured whole)."""
    return max(2, min(2 * math.ceil(math.log2(max(n, 2))) + 4, 2 * (n - 1) - 1))


@dataclass
class Round:
    pairs: list[tuple[int, int]]
    why: str
    # Traced sweeps steer: each pair's switches its flow should cross (empty: any). A
    # client traces source ports until one's path crosses them all (a few tries: an ECMP
    # hash sends 1/P of the ports each way), so a re-probe loads the link it is meant to.
    via: list[tuple[str, ...]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.via = [tuple(v) for v in self.via] or [()] * len(self.pairs)


@dataclass
class Measured:
    client: int
    server: int
    value: float | None          # None: the pair failed
    round: int
    path: tuple[str, ...] | None = None     # the switches a tracer saw its flow cross
    # Its fair share of the round's links, from the traced paths (1: alone; NaN: unknown, a
    # trace that failed beside other flows).
    share: float = 1.0
    # Untraced ECMP: how many of the round's other flows it may expect on its links (each
    # link of its path set weighted by its share of both): a collision halves a healthy
    # reading, with a chance that grows with this.
    crowd: float = 0.0


@dataclass
class AdaptivePlanner:
    """Chooses each round from what the earlier ones read. ``topology``: the fabric's shape
    with every endpoint in it (None: the endpoints alone; each pair's core is then a
    single unknown path). ``better``: the figure's direction."""

    endpoints: list[str]
    topology: Topology | None = None
    threshold: float = THRESHOLD
    # A pair short of healthy by more than the noise explains, and at least this, is slow
    # too (``localize.slow_cut``): a link running 15% slow is re-probed like a broken one.
    min_deficit: float | None = 0.05
    budget: int | None = None
    better: str = "higher"
    seed: int = 0
    # The sweep traces each flow's path (``record(paths=...)``): under ECMP a flow's links
    # are then known after the fact, so a cover round may load many flows a switch (their
    # collisions are expected from the traced paths, not guessed).
    traced: bool = False
    log: list[Round] = field(default_factory=list)
    measured: list[Measured] = field(default_factory=list)
    _cleared: set[str] = field(default_factory=set, repr=False)
    _probed: set[tuple[int, int]] = field(default_factory=set, repr=False)
    _covered: set[str] = field(default_factory=set, repr=False)
    _split: dict[tuple[int, int], int] = field(default_factory=dict, repr=False)
    _gone: set[int] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self.n = len(self.endpoints)
        if self.n < 2:
            raise ValueError("an adaptive sweep needs at least two endpoints")
        if self.budget is None:
            self.budget = default_budget(self.n)
        self.rng = random.Random(self.seed)
        topo = self.topology
        self.key = [topo.host_key(e) if topo else None for e in self.endpoints]
        self.switch = [topo.hosts[k] if topo and k else None for k in self.key]
        self.pinned = topo is not None and topo.routing == "dest"
        self.traced = bool(self.traced and topo is not None and not self.pinned)
        self.by_switch: dict[str | None, list[int]] = {}
        for i, s in enumerate(self.switch):
            self.by_switch.setdefault(s, []).append(i)
        # The directed trunks a full cover must load (each way of every inter-switch link).
        self.trunks = ({f"link:{a}->{b}" for a, b in topo.trunks} | {f"link:{b}->{a}" for
                                                                      a, b in topo.trunks}
                       if topo else set())
        self._cover_intra = 0
        self._cover_cross = 0
        self._per_link = 1                     # cover flows a path set's links may carry
        self._ecmp_rounds = self._rounds_to_load_every_path() if topo and not self.pinned else 1
        self._paths: dict[tuple[int, int], dict[str, float]] = {}
        self._hop_index: dict[tuple[str, str], dict[tuple[str, str], list[int]]] = {}
        self._routes: dict[tuple[str, int], dict[int, list[int]]] = {}
        self._ring = sorted(s for s in self.by_switch if s is not None)     # host switches
        self._place = {s: i for i, s in enumerate(self._ring)}
        self._star: Topology | None = None
        self._core_trunks: dict[tuple[str, str, int], frozenset[str]] = {}
        self._spread: dict[tuple[str, str], dict[str, float]] = {}
        self._via: dict[tuple[int, int, tuple[str, ...]], dict[str, float]] = {}
        self._via_now: dict[tuple[int, int], tuple[str, ...]] = {}    # this round's steering
        self._slow_paths: dict[tuple[int, int], tuple[str, ...]] = {}  # a pair's, traced
        self._leaning: list[str] = []          # the verdict's: elements to read again
        self._repeats: dict[tuple[int, int], int] = {}
        # The latest judgement's healthy rate and slow cut (``_judge``); none before the first.
        self.healthy: float | None = None
        self.cut: tuple[float, float | None, str] | None = None

    # --- what a pair crosses -----------------------------------------------------------------

    def elements(self, client: int, server: int) -> dict[str, float]:
        """The elements a client -> server pair crosses, each with the share of its paths
        through it (1.0 where the route is known); without a topology its ends and one
        pseudo-element for the path between them."""
        key = (client, server)
        if key not in self._paths:
            a, b = self.endpoints[client], self.endpoints[server]
            topo = self.topology
            if topo is None or self.key[client] is None or self.key[server] is None:
                found = {f"host:{a}": 1.0, f"host:{a}:send": 1.0, f"host:{b}": 1.0,
                         f"host:{b}:recv": 1.0, f"path:{a}>{b}": 1.0}
            elif self.pinned:
                found = topo.elements_pinned(a, b)
            else:
                found = topo.elements(a, b, directed=True)
            self._paths[key] = found
        return self._paths[key]

    def _elements_of(self, m: Measured) -> dict[str, float]:
        """What one measurement crossed: its traced path where the tracer saw one that the
        topology has, else its pair's (path set, under ECMP)."""
        return self._along(m.client, m.server, m.path)

    def _along(self, c: int, s: int, path: tuple[str, ...] | None) -> dict[str, float]:
        """The elements of the pair along ``path`` (switches a tracer saw) where the topology
        has that path, else its pair's."""
        if path is not None and self.topology is not None:
            key = (c, s, path)
            found = self._via.get(key)
            if found is None:          # worked out once: every round judges them all again
                found = self._via[key] = self.topology.elements_via(
                    self.endpoints[c], self.endpoints[s], path)
            if found:
                return found
        return self.elements(c, s)

    def _trunks_of(self, client: int, server: int) -> frozenset[str]:
        """The directed inter-switch links the pair may load (every one of its path set),
        worked out once a switch pair (and route, where routes are known): a cover round
        tries a hundred thousand pairs at 16,384 hosts."""
        sa, sb = self.switch[client], self.switch[server]
        if sa is None or sb is None:
            return frozenset()
        route = (self.topology.route_index(sa, sb, self.endpoints[server])
                 if self.pinned and self.topology is not None else 0)
        key = (sa, sb, route)
        found = self._core_trunks.get(key)
        if found is None:
            found = frozenset(e for e in self.elements(client, server)
                              if "->" in e and e in self.trunks)
            self._core_trunks[key] = found
        return found

    def _spread_over(self, client: int, server: int) -> dict[str, float]:
        """The inter-switch links only some of the pair's paths cross, with the share that
        does: where its ECMP flow may meet others. Worked out once a switch pair, as
        ``_trunks_of``."""
        def worked_out() -> dict[str, float]:
            return {e: share for e, share in self.elements(client, server).items()
                    if e in self.trunks and share < 1.0}

        sa, sb = self.switch[client], self.switch[server]
        if sa is None or sb is None:
            return worked_out()
        found = self._spread.get((sa, sb))
        if found is None:
            found = self._spread[(sa, sb)] = worked_out()
        return found

    # --- learning ----------------------------------------------------------------------------

    def record(self, pairs: Sequence[tuple[int, int]], values: Sequence[float | None],
               better: str | None = None, gone: Sequence[int] = (),
               paths: Sequence[Sequence[str] | None] | None = None) -> None:
        """What a round read, pair by pair (None: the pair failed); ``better``: the figure's
        direction, where the rows say it; ``gone``: endpoints that stopped answering (their
        failed pairs stay evidence, and no later round asks them for anything); ``paths``:
        the switches a tracer saw each pair's flow cross (None where it saw none)."""
        if better in ("higher", "lower"):
            self.better = better
        self._gone.update(int(i) for i in gone)
        number = len(self.log)
        traced = [tuple(p) if p else None for p in paths] if paths is not None else \
            [None] * len(pairs)
        with _collector_paused():
            start = len(self.measured)
            for (c, s), v, path in zip(pairs, values, traced):
                self.measured.append(Measured(int(c), int(s), v, number, path))
                self._probed.add((int(c), int(s)))
            fresh = self.measured[start:]
            if self.traced:
                self._expect_shares(fresh)
            elif self._per_link > 1:
                self._expect_crowds(fresh)
            for m in fresh:                 # the links each flow loaded, for the cover
                if self.pinned or m.path is not None:
                    self._covered |= {e for e in self._elements_of(m) if e in self.trunks}
            self._judge()

    def _expect_shares(self, round_: Sequence[Measured]) -> None:
        """Each traced flow's fair share of the links it crossed beside the round's other
        flows (max-min, at the topology's capacities where it has them, else equal): two
        flows an ECMP hash put on one link each expect half, and read slow only below
        that. A flow whose trace failed beside others has no known share (NaN): it is judged
        neither slow nor fast, and clears nothing."""
        from netbench.env.sharing import max_min_fair

        if self.better != "higher" or self.topology is None:
            return
        topo = self.topology
        flows, loads = [], []
        for m in round_:
            a, b = self.key[m.client], self.key[m.server]
            path = m.path if m.path and a and b and topo.joins(
                m.path, topo.hosts[a], topo.hosts[b]) else None
            nodes = [f"host:{a}", *path, f"host:{b}"] if path else []
            flows.append(list(zip(nodes, nodes[1:])))
            # A flow whose trace failed still ran: counted as loading every link of its
            # path set (it took one of them), so its neighbours' shares are not overstated.
            loads.append(flows[-1] if path else [
                tuple(t[5:].split("->", 1)) for t in self._trunks_of(m.client, m.server)]
                + ([(f"host:{a}", topo.hosts[a]), (topo.hosts[b], f"host:{b}")]
                   if a and b else []))

        known: dict[tuple[str, str], float] = {}

        def capacity(hop: tuple[str, str]) -> float:
            if hop not in known:
                x, y = (h.removeprefix("host:") for h in hop)
                known[hop] = topo.capacity.get(f"link:{link_name(x, y)}", 1.0)
            return known[hop]

        alone = [min(capacity(h) for h in f) if f else 1.0 for f in flows]   # its own rate
        fair = max_min_fair(loads, capacity)
        for m, f, solo, got in zip(round_, flows, alone, fair):
            if not f:
                m.share = 1.0 if len(round_) == 1 else math.nan
            else:               # progressive filling sums its steps: 1 - 1e-16 is alone
                m.share = 1.0 if got >= solo * (1 - 1e-9) else got / solo

    def _expect_crowds(self, round_: Sequence[Measured]) -> None:
        """Untraced ECMP: each flow's expected company on its links, the sum over its path
        set's links of its share of the link times the other flows' shares of it (four flows
        out of a leaf with 16 uplinks: 3/16 on the way up).

        Counted from what the company read: a flow slowed by sharing a link read at most
        what it did (max-min: on its bottleneck it is the fastest), so a flow that read
        well above it, past the noise, is none of its company. A flow read at half, whose
        possible company all read healthy, met nobody: a fault's, not a collision's, and
        judged as a flow alone (a link at half is otherwise a collision's double). Where
        TCP shares unevenly, a flow that read above it still counts while the two together
        fit one link (the healthy rate)."""
        margin = self._company_margin()
        readings = [self._oriented(m.value) or 0.0 for m in round_]   # failed: any company
        on: dict[str, list[tuple[float, float]]] = {}
        sets = []
        for m, reading in zip(round_, readings):
            mine = self._spread_over(m.client, m.server)
            sets.append(mine)
            for e, share in mine.items():
                on.setdefault(e, []).append((reading, share))
        # Per link: its flows' readings in order, and their shares summed.
        ordered = {}
        for e, flows in on.items():
            flows.sort()
            ordered[e] = ([r for r, _ in flows], math.fsum(share for _, share in flows))
        healthy = self.healthy
        for m, mine, reading in zip(round_, sets, readings):
            # Real TCP splits a shared link unevenly (60/40): a partner may read above it,
            # but the two together no more than the link, a lone flow's healthy rate.
            reach = math.inf if margin is None or not reading else max(
                reading * margin, (healthy or 0.0) * margin - reading)
            expected = sum(share * (ordered[e][1] - share) for e, share in mine.items())
            # Any flow that may have met it keeps the whole expected company: two that read
            # half together most likely did meet, more likely than their shares of a link say.
            met = any(bisect.bisect_right(ordered[e][0], reach) > 1 for e in mine)
            m.crowd = expected if met else 0.0

    def _company_margin(self) -> float | None:
        """How far above a flow's reading another may read and still have shared its
        bottleneck: the noise of the two readings' ratio, COMPANY_Z spreads of it; None
        (any reading may) until the spread is known, or for a figure where lower is better."""
        sigma = self.cut[1] if self.cut else None
        if not sigma or self.better != "higher":      # 0: readings capped or rounded alike
            return None
        return math.exp(COMPANY_Z * math.sqrt(2) * sigma)

    def _oriented(self, value: float | None) -> float | None:
        if value is None or not value > 0:
            return None
        return value if self.better == "higher" else 1.0 / value

    def _judge(self) -> None:
        """Which measurements are slow (against the fast pairs' median, as localize judges),
        and which elements a fast pair has cleared (every element on its one path: a
        capacity fault slows every pair through it, in its direction)."""
        from netbench.analysis.localize import low_readings, noise, reference, slow_cut

        values = [None if v is None else v / m.share
                  for m, v in ((m, self._oriented(m.value)) for m in self.measured)]
        # The healthy rate from flows that had their links alone: a collided flow over its
        # share overstates itself wherever the shared link was not the bottleneck after all
        # (a 100G uplink under two 25G hosts).
        alone = [v if m.share >= 1.0 and not m.crowd else math.nan
                 for m, v in zip(self.measured, values)]
        # One figure a pair and path (its readings' median), as the stored sweep's matrix
        # judges: a pair measured again is one more reading of it, never one more healthy
        # pair for the spread of the noise (ten readings of six pairs are six).
        readings: dict[tuple[int, int, Any], list[float]] = {}
        for m, v in zip(self.measured, alone):
            if v is not None and v == v:
                readings.setdefault((m.client, m.server, m.path), []).append(v)
        cells = [statistics.median(r) for r in readings.values()]
        self.healthy, self.healthy_from = reference(cells, self.threshold)
        self.cut = slow_cut(cells, self.healthy, self.threshold, self.min_deficit,
                            [v for r in readings.values() for v in r])
        self._noise_n = noise(cells, self.healthy, self.threshold)[1]
        # A flow that may have met another on its links (untraced ECMP) is slow only below
        # what a three-way collision leaves it: its reading's weight is the verdict's, which
        # expects the collisions.
        self.slow_flags = [v is None or (self.healthy is not None and
                                         v < (1 - self.cut[0]) * self.healthy
                                         / (COLLIDED if m.crowd else 1))
                           for m, v in zip(self.measured, values)]
        # Short of healthy by at least min_deficit, not by the cut: where the noise is
        # known, the verdict weighs such pairs' elements too (their readings, not flags).
        self._low = (low_readings(values, self.healthy, self.min_deficit).tolist()
                     if self.cut[1] else list(self.slow_flags))
        cleared: set[str] = set()
        slow_paths: dict[tuple[int, int], tuple[str, ...]] = {}
        for m, slow in zip(self.measured, self.slow_flags):
            if not slow and m.share >= 1.0:
                cleared |= {e for e, share in self._elements_of(m).items() if share >= 1.0}
            elif slow and m.path is not None:          # the latest wins
                slow_paths[(m.client, m.server)] = m.path
        self._cleared = cleared
        self._slow_paths = slow_paths

    # --- planning ----------------------------------------------------------------------------

    def next_round(self) -> Round | None:
        """The next round's pairs and why, or None when the sweep is done."""
        if len(self.log) >= (self.budget or 0):
            return None
        with _collector_paused():
            chosen = self._plan()
        if chosen is None:
            return None
        self.log.append(chosen)
        return chosen

    def _plan(self) -> Round | None:
        if self._cover_intra < 2:
            self._cover_intra += 1
            return self._intra_round(reverse=self._cover_intra == 2)
        targets = self._targets()
        busy: set[int] = set(self._gone)        # a gone endpoint is in no later round
        loaded: set[str] = set()
        pairs: list[tuple[int, int]] = []
        self._via_now: dict[tuple[int, int], tuple[str, ...]] = {}
        notes: list[str] = []
        split = []
        for c, s in targets:
            took = False
            for probe in self._probes(c, s):
                if self._fits(probe, busy, loaded):
                    self._take(probe, pairs, busy, loaded)
                    took = True
            if took:                   # a pair whose probes did not fit waits its turn
                self._split[(c, s)] = self._split.get((c, s), 0) + 1
                split.append((c, s))
        repeated = self._repeat_leaning(pairs, busy, loaded)
        if pairs and len(pairs) > len(repeated):
            notes.append(f"re-probe: {len(pairs) - len(repeated)} pair(s) splitting the paths of "
                         f"{len(split)} slow pair(s) "
                         f"({', '.join(self._name(c, s) for c, s in split[:3])}"
                         f"{' ...' if len(split) > 3 else ''})")
        if repeated:
            notes.append(f"again: {len(repeated)} pair(s) through "
                         f"{', '.join(self._leaning[:3])}{' ...' if len(self._leaning) > 3 else ''}"
                         " (their readings lean slow; more of them decide)")
        crowded = self._per_link > 1 and not self.traced
        if self._needs_cover() and (self._cover_cross < MAX_COVER_ROUNDS or crowded):
            self._cover_cross += 1
            before = len(pairs)
            self._cross_cover(pairs, busy, loaded)
            if len(pairs) > before:
                left = len(self.trunks - self._covered - loaded)
                notes.append(f"cover: {len(pairs) - before} pair(s) across switches"
                             + (f" ({left} directed inter-switch link(s) left to load)"
                                if self.pinned else f" (traced: every endpoint once, flows "
                                f"judged against their fair share; {left} directed "
                                "inter-switch link(s) not yet seen loaded)" if self.traced
                                else f" ({self._per_link} flows per path set, their "
                                "collisions expected)" if crowded
                                else " (one flow per path set: no two can share a link)"))
        elif crowded and pairs:
            # Untraced ECMP, a round run for its re-probes anyway: the rest of the fabric
            # carries cover flows, those of the switches the verdict leans on first (a
            # leaning uplink is loaded by 1 flow in 16 out of its leaf: it needs many).
            before = len(pairs)
            self._cross_cover(pairs, busy, loaded, first=self._leaning)
            if len(pairs) > before:
                notes.append(f"cover: {len(pairs) - before} more pair(s) across switches "
                             f"({self._per_link} flows per path set), the leaning "
                             "switches' first")
        from netbench.analysis.localize import MIN_NOISE_PAIRS

        more = self._noise_pairs(pairs, busy, loaded)
        if more:
            notes.append(f"noise: {more} more pair(s) (a spread of the noise needs "
                         f"{MIN_NOISE_PAIRS} healthy pairs, {self._noise_n} so far)")
        if not pairs:
            return None
        return Round(pairs, "; ".join(notes), [self._via_now.get(p, ()) for p in pairs])

    def _noise_pairs(self, pairs: list[tuple[int, int]], busy: set[int],
                     loaded: set[str]) -> int:
        """Where the noise's spread rests on too few healthy pairs to be known (a small
        fabric: six hosts' sweep measures 13), pairs not yet measured fill the rounds until
        it could be: without it a pair is slow only past the fixed cut, and a
        link at 85% reads healthy."""
        from netbench.analysis.localize import MIN_NOISE_PAIRS

        if (self.min_deficit is None or self.cut[1] is not None or not self.healthy
                or self._noise_n >= MIN_NOISE_PAIRS + NOISE_MARGIN or len(self.log) < 2):
            return 0
        before = len(pairs)
        tries = [(self.rng.randrange(self.n), self.rng.randrange(self.n))
                 for _ in range(8 * self.n)]
        # Each alone on its links, even where flows may share (traced): a flow that shared
        # one reads its share, no evidence of the noise.
        trunks = set().union(*(self._trunks_of(*p) for p in pairs))
        for pair in tries:
            if (pair in self._probed or not self._fits(pair, busy, loaded)
                    or self._trunks_of(*pair) & trunks):
                continue
            self._take(pair, pairs, busy, loaded)
            self._probed.add(pair)
            trunks |= self._trunks_of(*pair)
        return len(pairs) - before

    def _repeat_leaning(self, pairs: list[tuple[int, int]], busy: set[int],
                        loaded: set[str]) -> list[tuple[int, int]]:
        """The pairs measured alone through each element the verdict leans on, measured
        again (each at most REPEATS times): an element at 0.9 of its capacity whose pairs
        scatter about a 10% cut is named after a few more readings, where splitting its
        paths could not help."""
        leaning = set(self._leaning)
        if not leaning:
            return []
        taken = []
        for m in self.measured:
            pair = (m.client, m.server)
            if (m.value is None or m.share < 1.0 or self._repeats.get(pair, 0) >= REPEATS
                    or leaning.isdisjoint(self._elements_of(m))
                    or not self._fits(pair, busy, loaded)):
                continue
            self._take(pair, pairs, busy, loaded)
            self._repeats[pair] = self._repeats.get(pair, 0) + 1
            taken.append(pair)
        return taken

    def verdict(self) -> Any:
        """``netbench.analysis.localize`` over every pair measured so far, judged as the
        planner judged them. With a topology, only the pairs that matter to it: the slow
        ones and the fast ones through an element of theirs (a fast pair elsewhere changes
        no suspect's likelihood); at 16,384 hosts that is seconds saved every round."""
        from netbench.analysis.localize import Pair, localize

        names = self.endpoints
        # A flow that shared a link and read its share is no evidence of health: a fault
        # that left at least that share (a NIC at a quarter, behind a 4-way collision)
        # would read the same. Read slow, it is evidence all the same.
        chosen = [(m, slow) for m, slow in zip(self.measured, self.slow_flags)
                  if slow or m.share >= 1.0]
        if self.topology is not None:
            suspect: set[str] = set()
            for m, slow, low in zip(self.measured, self.slow_flags, self._low):
                if slow or (low and m.share >= 1.0):
                    suspect.update(self._elements_of(m))
            chosen = [(m, slow) for m, slow in chosen
                      if slow or not suspect.isdisjoint(self._elements_of(m))]
        # A traced flow's reading against its fair share of the round (1 where it had its
        # links alone): what it would have read alone.
        return localize([Pair(names[m.client], names[m.server],
                              None if m.value is None else m.value / m.share, m.path,
                              m.crowd)
                         for m, _ in chosen],
                        self.topology or self._alone(), self.threshold, self.better,
                        slow=[slow for _, slow in chosen],
                        healthy=(self.healthy, self.healthy_from), cut=self.cut)

    def _alone(self) -> Topology:
        """Without the fabric's shape: each endpoint behind a switch of its own under one
        core. Shape inferred from a few pairs would be fragments (only measured fast pairs
        join hosts), so the verdict names hosts, and a link only as the path it is on."""
        if self._star is None:
            self._star = Topology(source="none given: each endpoint on its own (names hosts; "
                                         "give --topology to name links and switches)",
                                  inferred=True)
            for name in self.endpoints:
                self._star.add_host(name, f"group({name})")
                self._star.add_trunk(f"group({name})", "core(unknown)")
        return self._star

    def _targets(self) -> list[tuple[int, int]]:
        """The slow pairs worth splitting next: those the verdict so far leaves unexplained,
        and one through each suspect that still names more than one thing (a host's end
        beside a link it cannot yet be told from; a core link beside its switch), while
        such a pair's path holds more than one thing no fast pair has cleared."""
        slow = list(dict.fromkeys((m.client, m.server) for m, is_slow in
                                  zip(self.measured, self.slow_flags) if is_slow))
        self._leaning = []
        if not slow and not any(self._low):
            return []
        index = {name: i for i, name in enumerate(self.endpoints)}
        loc = self.verdict()
        self._leaning = list(loc.leaning)
        wanted = [(index[p.client], index[p.server]) for p in loc.unexplained]
        for suspect in loc.suspects:
            named = set(suspect.elements + suspect.or_else)
            things = {_thing(e, self.topology) for e in named}
            if len(things) < 2:
                continue
            through = [p for p in slow if named & set(self.elements(*p))]
            wanted += through[:2]
        # A thing that alone explains a slow pair is confirmed by CONFIRM slow pairs (a
        # verdict resting on one or two could be a moment's noise).
        units = {p: self._units(*p) for p in slow}
        sole = Counter(next(iter(u)) for u in units.values() if len(u) == 1)
        wanted += [p for p in slow if len(units[p]) == 1 and sole[next(iter(units[p]))]
                   < CONFIRM]
        out = []
        for p in dict.fromkeys(wanted):
            if self._split.get(p, 0) < 3 and (units[p] if p in units else self._units(*p)):
                out.append(p)
        return out

    def _needs_cover(self) -> bool:
        if self.topology is None or len(self.by_switch) < 2:
            return self._cover_cross < 1 and self.topology is None
        if self.pinned or self.traced:
            return bool(self.trunks - self._covered)
        # ECMP: a round sends one flow per path set, and each flow loads one of its paths
        # (its hash's): enough rounds that every path of the widest set is likely loaded.
        return self._cover_cross < self._ecmp_rounds

    def _rounds_to_load_every_path(self) -> int:
        """Cover rounds under ECMP: with P equal-cost paths a flow loads a given one with
        chance 1/P, so P ln(P / MISS) flows leave it unloaded with chance MISS (coupon
        collecting); P is the widest path set among a few switch pairs. At most
        MAX_COVER_ROUNDS, and half the budget: the rest is for the suspects."""
        topo = self.topology
        hosted = sorted(s for s in self.by_switch if s is not None)
        if topo is None or len(hosted) < 2:
            return 1
        widest = max(len(topo.switch_paths(hosted[0], other)) for other in hosted[1:9])
        if widest < 2:
            return 1                           # a tree: one path, one round loads it
        if not self.traced:
            self._per_link = max(1, int(CROWD * widest))
        need = math.ceil(widest * math.log(widest / ECMP_MISS) / self._per_link)
        if self._per_link > 1:      # a link 15% slow needs its few flows: all but 4 rounds
            return max(1, min(need, (self.budget or 2) - 4))
        return max(1, min(need, MAX_COVER_ROUNDS, (self.budget or 2) // 2))

    def _intra_round(self, reverse: bool) -> Round:
        """Every endpoint paired with a neighbour behind its own switch (a switch with one
        endpoint pairs across, with a neighbour switch's spare endpoint if any)."""
        pairs: list[tuple[int, int]] = []
        spare: list[int] = []
        for members in self.by_switch.values():
            members = [i for i in members if i not in self._gone]
            for i in range(0, len(members) - 1, 2):
                pairs.append((members[i], members[i + 1]))
            if len(members) % 2:
                spare.append(members[-1])
        # Lone endpoints pair across switches; an odd one out waits for the cross cover.
        for i in range(0, len(spare) - 1, 2):
            pairs.append((spare[i], spare[i + 1]))
        if reverse:
            pairs = [(s, c) for c, s in pairs]
        where = "behind its own switch" if self.topology else "(no topology: neighbours " \
                "in the endpoint order)"
        return Round(pairs, f"cover: every endpoint {'receiving' if reverse else 'sending'} "
                            f"from a neighbour {where}"
                     if reverse else f"cover: every endpoint sending to a neighbour {where}")

    def _cross_cover(self, pairs: list[tuple[int, int]], busy: set[int],
                     loaded: set[str], first: Sequence[str] = ()) -> None:
        """Pairs across switches whose links are disjoint: where routes are known, a pair
        for each directed inter-switch link not yet loaded; under ECMP one flow per path
        set; without a topology a shifted matching."""
        order = [i for i in range(self.n) if i not in busy]
        self.rng.shuffle(order)
        if self.topology is None:
            half = len(order) // 2
            for c, s in zip(order[:half], order[half:]):
                self._take((c, s), pairs, busy, loaded)
            return
        if self.pinned:
            todo = sorted(self.trunks - self._covered)
            self.rng.shuffle(todo)
            for trunk in todo:
                if trunk not in loaded:
                    pair = self._pair_through(trunk, busy, loaded)
                    if pair is not None:
                        self._take(pair, pairs, busy, loaded)
            return
        switches = [s for s in self.by_switch if s is not None]
        # The host switches of the elements named ``first``: their endpoints send first, and
        # the others send to them first.
        ends = {node for e in first for node in element_nodes(e)}
        wanted = [s for s in switches if s in ends]
        if wanted:
            order.sort(key=lambda i: self.switch[i] not in ends)
        # A switch pair whose path set met a loaded link stays blocked this round (the
        # round only loads more): at 16,384 hosts most tries end here, a set lookup each.
        # A switch that met 2 x PARTNERS blocked ones sends no more this round: each try is
        # a switch pair's path set worked out, and a fabric has N^2 / radix^2 of them.
        blocked: set[tuple[str | None, str]] = set()
        failed: Counter[str | None] = Counter()
        crowd: Counter[str] = Counter()       # cover flows on each directed link's path sets
        for c in order:
            if c in busy or failed[self.switch[c]] >= 2 * PARTNERS:
                continue
            others = self.rng.sample(switches, min(len(switches), PARTNERS))
            if wanted and self.switch[c] not in ends:
                others = self.rng.sample(wanted, len(wanted)) + others
            for other in others:
                if other == self.switch[c] or (self.switch[c], other) in blocked:
                    continue
                free = next((s for s in self.by_switch[other] if s not in busy), None)
                if free is None:
                    continue
                if self._fits_crowded((c, free), busy, loaded, crowd):
                    self._take((c, free), pairs, busy, loaded, crowd)
                    break
                blocked.add((self.switch[c], other))
                failed[self.switch[c]] += 1
        loaded |= set(crowd)

    def _fits_crowded(self, pair: tuple[int, int], busy: set[int], loaded: set[str],
                      crowd: Counter[str]) -> bool:
        """A cover flow under ECMP: its ends free, its path set clear of what this round's
        other pairs load, and each link of it carrying fewer than ``_per_link`` cover flows
        (one, traced or not, where the widest path set is narrow)."""
        c, s = pair
        if self.traced or c == s or c in busy or s in busy:
            return self._fits(pair, busy, loaded)
        trunks = self._trunks_of(c, s)
        return not (trunks & loaded) and all(crowd[t] < self._per_link for t in trunks)

    def _pair_through(self, trunk: str, busy: set[int],
                      loaded: set[str]) -> tuple[int, int] | None:
        """A free pair whose one (destination-routed) path loads ``trunk`` (``link:x->y``)
        and nothing already loaded this round."""
        x, _, y = trunk[5:].partition("->")
        # A link out of a host switch is reached from it, one into a host switch toward it;
        # the far side from a few partner switches, so their path sets are worked out once.
        sources = [x] if x in self.by_switch else self._partners(y)
        targets = [y] if y in self.by_switch else self._partners(x)
        for sa in sources:
            senders = [i for i in self.by_switch.get(sa, []) if i not in busy]
            if not senders:
                continue
            for sb in targets:
                if sb == sa:
                    continue
                for k in self._hops(sa, sb).get((x, y), ()):
                    for s in self._by_route(sa, sb).get(k, ()):
                        if s not in busy:
                            pair = (senders[0], s)
                            if self._fits(pair, busy, loaded):
                                return pair
                            break
        return None

    def _partners(self, switch: str) -> list[str]:
        """A few host switches to pair with around ``switch`` (the next ones in a fixed
        ring), the same every round."""
        ring, at = self._ring, self._place.get(switch, self.rng.randrange(len(self._ring)))
        return [ring[(at + j) % len(ring)] for j in range(1, min(PARTNERS, len(ring)) + 1)]

    def _hops(self, sa: str, sb: str) -> dict[tuple[str, str], list[int]]:
        """Which of the equal-cost paths from ``sa`` to ``sb`` cross each hop (cached)."""
        key = (sa, sb)
        if key not in self._hop_index:
            index: dict[tuple[str, str], list[int]] = {}
            assert self.topology is not None
            for k, path in enumerate(self.topology.switch_paths(sa, sb)):
                for hop in zip(path, path[1:]):
                    index.setdefault(hop, []).append(k)
            self._hop_index[key] = index
        return self._hop_index[key]

    def _by_route(self, sa: str, sb: str) -> dict[int, list[int]]:
        """The endpoints behind ``sb`` by the path from ``sa`` their route picks (its index
        among ``switch_paths(sa, sb)``)."""
        key = (sa, sb)
        if key not in self._routes:
            grouped: dict[int, list[int]] = {}
            for i in self.by_switch.get(sb, []):
                grouped.setdefault(self._route(sa, i), []).append(i)
            self._routes[key] = grouped
        return self._routes[key]

    def _fits(self, pair: tuple[int, int], busy: set[int], loaded: set[str]) -> bool:
        c, s = pair
        if self.traced:            # flows may share links: their shares are expected
            return c != s and c not in busy and s not in busy
        return c != s and c not in busy and s not in busy and not (
            self._trunks_of(c, s) & loaded)

    def _take(self, pair: tuple[int, int], pairs: list[tuple[int, int]], busy: set[int],
              loaded: set[str], crowd: Counter[str] | None = None) -> None:
        """``pair`` into the round: its ends busy, its links loaded for the round's later
        pairs (traced flows may share links: nothing to keep apart); with ``crowd``, the
        crowded cover's count of flows on each link instead (its flows may share a link up
        to ``_per_link``; the caller marks them loaded when the cover is done)."""
        pairs.append(pair)
        busy.update(pair)
        if crowd is not None:
            crowd.update(self._trunks_of(*pair))
        elif not self.traced:
            loaded |= self._trunks_of(*pair)

    def _units(self, c: int, s: int) -> set[str]:
        """The things on a pair's path no fast pair has cleared: one end of the pair (NIC
        and cable, one way), an inter-switch link one way, a switch; under ECMP the core's
        whole path set, which no pair can split; traced, the links its slow flow took
        (every slow flow through one link then counts toward the same thing, and a steered
        re-probe confirms it instead of opening a path set of its own to split)."""
        shares = self._along(c, s, self._slow_path(c, s) if self.traced else None)
        left = {e for e in shares if e not in self._cleared}
        out = set()
        if left & self._end(c, "send"):
            out.add(f"end:{self.endpoints[c]}:send")
        if left & self._end(s, "recv"):
            out.add(f"end:{self.endpoints[s]}:recv")
        for e in left - self._end(c, "send") - self._end(s, "recv"):
            if shares[e] < 1.0:
                out.add(f"core:{self.switch[c]}>{self.switch[s]}")   # a path set: one thing
            elif e.startswith("link:") and "->" not in e:
                continue                         # a link is judged by its two directions
            else:
                out.add(e)
        return out

    def _uncleared(self, c: int, s: int) -> set[str]:
        return {e for e in self.elements(c, s) if e not in self._cleared}

    def _end(self, i: int, way: str) -> set[str]:
        """An endpoint's own elements one way: its NIC and its access link."""
        name, key = self.endpoints[i], self.key[i]
        if self.topology is None or key is None:
            return {f"host:{name}", f"host:{name}:{way}"}
        return set(self.topology.end_elements(key, way, True))

    def _good(self, i: int, way: str) -> bool:
        """Has endpoint ``i`` been seen fast this way (its NIC and link cleared)?"""
        return f"host:{self.key[i] or self.endpoints[i]}:{way}" in self._cleared

    def _probes(self, c: int, s: int) -> list[tuple[int, int]]:
        """Pairs that split a slow pair's path: its sending end with a good receiver behind
        the same switch, its receiving end with a good sender behind its switch, its core
        between two other good endpoints on the same two switches (the same route where
        routes are known), and halves of the core through a third switch."""
        left = self._uncleared(c, s)
        out: list[tuple[int, int]] = []
        send_end = left & self._end(c, "send")
        recv_end = left & self._end(s, "recv")
        core = left - send_end - recv_end
        if send_end:
            partner = self._pick(self.switch[c], "recv", exclude={c, s})
            if partner is not None:
                out.append((c, partner))
        if recv_end:
            partner = self._pick(self.switch[s], "send", exclude={c, s})
            if partner is not None:
                out.append((partner, s))
        out = [p for p in out if p not in self._probed]
        if core and self.topology is not None:
            # Under ECMP a pair measured again is a new flow on a new hash: worth repeating.
            out += [p for p in self._core_probes(c, s, core)
                    if not self.pinned or p not in self._probed]
        return out

    def _pick(self, switch: str | None, way: str, exclude: set[int],
              route_like: tuple[str | None, int] | None = None) -> int | None:
        """A good endpoint behind ``switch`` (any switch where it has none); ``route_like``:
        (a source switch, an endpoint): one routed from there as that endpoint is, first."""
        pool = [i for i in self.by_switch.get(switch, []) if i not in exclude]
        good = [i for i in pool if self._good(i, way)]
        if route_like is not None and route_like[0] is not None and self.pinned:
            source, like = route_like
            same = [i for i in good if self._route(source, i) == self._route(source, like)]
            good = same or good
        if good:
            return self.rng.choice(good)
        anywhere = [i for i in range(self.n) if i not in exclude and self._good(i, way)]
        return self.rng.choice(anywhere) if anywhere else (self.rng.choice(pool) if pool
                                                           else None)

    def _route(self, source: str, i: int) -> int:
        """Which of the paths from switch ``source`` to endpoint ``i``'s its route takes."""
        assert self.topology is not None and self.switch[i] is not None
        return self.topology.route_index(source, self.switch[i], self.endpoints[i])

    def _core_probes(self, c: int, s: int, core: set[str]) -> list[tuple[int, int]]:
        """The core again between other good endpoints on the same switches (and, where
        routes are known, the same route), and, with a third switch, pairs that share only
        the first or only the last part of the core."""
        out = []
        sender = self._pick(self.switch[c], "send", exclude={c, s})
        receiver = self._pick(self.switch[s], "recv", exclude={c, s},
                              route_like=(self.switch[c], s))
        if (self.pinned and receiver is not None and self.switch[c] is not None
                and self._route(self.switch[c], receiver) != self._route(self.switch[c], s)):
            # No other endpoint there is routed as s is (a subnet manager spreads 5 hosts
            # over 3 spines unevenly): s again, from another sender, keeps the core.
            receiver = s
        if sender is not None and receiver is not None and sender != receiver:
            out.append((sender, receiver))
        slow_path = self._slow_path(c, s) if self.traced else None
        if slow_path is not None:
            return self._steered_probes(c, s, slow_path, out)
        if not self.pinned or len(core) < 2:
            return out       # untraced ECMP: a third switch's flows hash anywhere, unseen
        # Halves: from c's switch to a third one over the same first hop, and from a
        # third switch into s's over the same last hop.
        best: list[tuple[int, tuple[int, int]]] = []
        for other in self.rng.sample(list(self.by_switch), min(len(self.by_switch), 16)):
            if other in (self.switch[c], self.switch[s], None):
                continue
            for pair in ((sender, self._pick(other, "recv", exclude={c, s})),
                         (self._pick(other, "send", exclude={c, s}), receiver)):
                if None in pair or pair[0] == pair[1]:
                    continue
                shared = len(core & set(self.elements(*pair)))
                if 0 < shared < len(core):
                    best.append((abs(2 * shared - len(core)), pair))   # nearest to half
        best.sort(key=lambda t: t[0])
        return out + [p for _, p in best[:2]]

    def _slow_path(self, c: int, s: int) -> tuple[str, ...] | None:
        """The switches the pair's latest slow traced flow crossed, where it crossed a core
        (a switch between its two ends' switches)."""
        path = self._slow_paths.get((c, s))
        return path if path is not None and len(path) >= 3 else None

    def _steered_probes(self, c: int, s: int, path: tuple[str, ...],
                        again: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """A slow traced flow's core split by steering: from its sending switch to a third
        one through its first core switch (loading its first hop), from a third switch into
        its receiving one through its last (loading its last hop), and the same path again
        between other endpoints (a thing convicted by several flows). Halves first, each only
        while the hop it loads is uncleared."""
        assert self.topology is not None
        topo, first, last = self.topology, path[1], path[-2]
        out: list[tuple[int, int]] = []
        others = [o for o in self.rng.sample(self._ring, len(self._ring))
                  if o not in (path[0], path[-1])]

        def behind(switch: str, way: str, fallback: int) -> int:
            found = self._pick(switch, way, exclude={c, s})
            return found if found is not None and self.switch[found] == switch else fallback

        # (the hop the half loads, the switch it is steered through, its pair's two switches
        # given a third one, the ends it keeps from the slow pair)
        halves = ((f"link:{path[0]}->{first}", first, lambda o: (path[0], o), (c, -1)),
                  (f"link:{last}->{path[-1]}", last, lambda o: (o, path[-1]), (-1, s)))
        for hop, through, switches, kept in halves:
            if hop in self._cleared:
                continue
            for other in others:
                sa, sb = switches(other)
                if any(through in p for p in topo.switch_paths(sa, sb)):
                    pair = (behind(sa, "send", kept[0]), behind(sb, "recv", kept[1]))
                    if min(pair) >= 0:
                        out.append(pair)
                        self._via_now.setdefault(pair, (through,))
                        break
        for pair in again:           # steered only where its ends sit where the slow flow's did
            if (self.switch[pair[0]], self.switch[pair[1]]) == (path[0], path[-1]):
                self._via_now.setdefault(pair, path[1:-1])
        return out + again

    def _name(self, c: int, s: int) -> str:
        return f"{self.endpoints[c]}->{self.endpoints[s]}"


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a round is planned: the planner
    keeps hundreds of thousands of cached paths alive, and each full collection walks them
    all (half of a 16,384-host round's planning). Planning makes no cycles to collect."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _thing(element: str, topology: Topology | None) -> str:
    """The one physical thing an element is part of, as far as pairs can tell: a host's end
    (its NIC and its own cable) one way, an inter-switch link one way, a switch."""
    kind, name = element.split(":", 1)
    if kind == "host":
        host, _, way = name.partition(":")
        return f"end:{host}:{way}" if way else f"end:{host}"
    if kind == "link" and topology is not None:
        for end, way in zip(element_nodes(element), ("send", "recv")):
            if end in topology.hosts:
                return f"end:{end}:{way}" if "->" in name else f"end:{end}"
    return element


def drive(planner: AdaptivePlanner, measure: Any) -> list[Round]:
    """Run the planner against ``measure(pairs) -> values`` (the simulator, or a sweep's
    ranks) until it is done; the rounds it chose."""
    while True:
        chosen = planner.next_round()
        if chosen is None:
            return planner.log
        planner.record(chosen.pairs, measure(chosen.pairs, len(planner.log)))
