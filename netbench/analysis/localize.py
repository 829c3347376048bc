"""Which elements of the fabric explain its slow pairs: the link, switch or host that is
broken, never the healthy hosts beside it.

Each measured pair crosses elements of the topology (``netbench.env.topology``: its hosts' NICs,
their access links, switches and the links between them; under ECMP a share of them). A pair
is slow when it reads further below the fabric's healthy rate (the probed line rate, or the
median of the fast pairs: never the median of all pairs, which a fault that slows most of them
drags down) than the measurement's noise explains (``slow_cut``: ``Z_SLOW`` times the healthy
pairs' robust spread, never under ``min_deficit``; and always below ``1 - threshold``), so a
link running 15% slow is seen where pairs scatter by 5%, and nothing where they scatter by
20%. The verdict is the fewest elements that explain the pairs: where that spread is known,
by their readings (``_by_readings``: greedy on the likelihood that an element runs at a
fitted share of its capacity, named while that beats what noise reaches over all the
candidates, so a link at 0.9 is seen in pairs scattered about a 10% cut, and elements that
lean slow are reported for the sweep to read again); else by the slow flags (maximum
likelihood, greedy: each element added must explain at least two slow pairs better than
chance does). Each suspect comes with its evidence (k of m pairs through it slow, their median
against the pairs that avoid it, the share of the healthy rate its pairs read, and how
unlikely noise alone reads them that low). Elements that carry exactly the same measured
pairs cannot be told apart, and are named together as one suspect; a suspect over ECMP path
sets says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from netbench.env.topology import Topology, core_along, infer

EPS = 0.02                 # chance a healthy pair reads slow (noise), or a broken one fast
MAX_SUSPECTS = 16          # elements a verdict may name before it says "widespread"
MIN_FAST = 3               # fast pairs a reference from the data needs
TOP = 0.95                 # the quantile the fast pairs are found near
MIN_DEFICIT = 0.05         # the smallest shortfall a pair is ever called slow for
Z_SLOW = 3.0               # standard deviations of noise below healthy that read slow
MIN_NOISE_PAIRS = 20       # healthy pairs a spread of the noise needs
ALPHA = 0.01               # the chance noise alone names anything, over all the candidates
FAILED = 1e-3              # the share of the healthy rate a failed pair is taken to read
STRAY_RANGE = 8.0          # log ratios a stray reading (EPS of them) may land anywhere in
SLOW_SCATTER = 0.25        # a slowed pair's log spread, as a share of its element's deficit
LEAN = 1 / 3               # the share of the evidence naming needs that earns more readings
CLOSE = math.log(20)       # likelihood (log) within which another element's case is as good
SAME_PAIRS = 0.75          # the overlap (Jaccard) of slow pairs that makes two cases one
MAX_LEANING = 4            # elements a sweep measures again at once


@dataclass
class Pair:
    client: str
    server: str
    value: float | None          # None: the pair failed (no traffic crossed its path)
    path: tuple[str, ...] | None = None   # the switches a tracer saw its flow cross
    # Untraced ECMP: the other flows it may have met on its links (adaptive's
    # ``Measured.crowd``); a collision halves a healthy reading, with chance 1 - exp(-crowd).
    crowd: float = 0.0


@dataclass
class Suspect:
    elements: list[str]          # one element, or several that carry the same pairs
    slow: int                    # pairs through it that read slow
    pairs: int                   # pairs measured through it
    median_through: float | None
    median_avoiding: float | None
    pinned: bool                 # False: some of its pairs may have taken another path (ECMP)
    # The share of the healthy rate its pairs read (their median; a failed pair reads 0),
    # and the chance noise alone reads its pairs that low (None: no spread to judge it by).
    of_healthy: float | None = None
    p: float | None = None
    # Elements the same slow pairs name nearly as well (within CLOSE of its likelihood):
    # no reading yet tells them apart, so the verdict holds them too and a sweep reads on.
    or_else: list[str] = field(default_factory=list)

    @property
    def deficit(self) -> float | None:
        return None if self.of_healthy is None else max(0.0, 1.0 - self.of_healthy)

    @property
    def kind(self) -> str:
        kinds = {e.split(":", 1)[0] for e in self.elements}
        return "host" if "host" in kinds else "link" if kinds == {"link"} else \
            "switch" if kinds == {"switch"} else "path"

    @property
    def host(self) -> tuple[str, str] | None:
        """A host suspect's (endpoint, direction): direction "send", "recv" or ""."""
        for e in self.elements:
            if e.startswith("host:"):
                name, _, way = e[5:].partition(":") if e.count(":") > 1 else (e[5:], "", "")
                return name, way
        return None

    def text(self, unit: str = "", inferred: bool = False,
             ways: tuple[str, str] = ("sending", "receiving")) -> str:
        """``ways``: what a pair's client and server do (a slow RDMA READ client receives)."""
        names = [_shown(e, ways) for e in self.elements]
        if self.host is not None:
            host, way = self.host
            what = (f"HOST {host}{' ' + _way(way, ways) if way else ''}: its NIC, PCIe path or "
                    "config")
            # An inferred shape's own links are no names to send an engineer to.
            others = [] if inferred else [n for e, n in zip(self.elements, names)
                                          if not e.startswith("host:")]
            if others:
                what += f" (or its link {', '.join(others[:3])}: they carry the same pairs)"
        elif inferred:
            groups = sorted({g for e in self.elements for g in re.split(r"--|->", e[5:])
                             if g.startswith("group")})
            way = " (one way)" if any("->" in e for e in self.elements) and not any(
                "--" in e for e in self.elements) else ""
            what = (f"PATH between {' and '.join(groups) or ' / '.join(names)}{way} (the "
                    "link(s) or switch(es) joining them; topology inferred from the pairs: "
                    "give --topology to name them)")
        elif len(names) == 1:
            what = f"{self.kind.upper()} {names[0]}"
        else:
            what = (f"{'LINK' if self.kind == 'link' else 'PATH'} {' / '.join(names[:4])}"
                    f"{' ...' if len(names) > 4 else ''} (carry the same pairs: "
                    "cannot be told apart)")
        through = "-" if self.median_through is None else f"{self.median_through:.4g}"
        avoid = "-" if self.median_avoiding is None else f"{self.median_avoiding:.4g}"
        return (f"{what}: {self.slow} of {self.pairs} pairs through it slow, median {through}"
                f"{' ' + unit if unit else ''} against {avoid} for the pairs that avoid it"
                + ("" if self.of_healthy is None else
                   f"; {self.of_healthy:.2f} of the healthy rate"
                   + ("" if self.p is None else f", p {_p_text(self.p)}"))
                + ("" if self.pinned else "; ECMP: over the path sets its pairs may take")
                + ("" if not self.or_else else
                   f"; or else {' / '.join(_shown(e, ways) for e in self.or_else[:4])}"
                   f"{' ...' if len(self.or_else) > 4 else ''}: the same slow pairs name it "
                   "nearly as well (more readings decide)"))


def _p_text(p: float) -> str:
    return f"< {max(p, 1e-12):.0e}" if p < 1e-3 else f"{p:.3f}"



def _way(way: str, ways: tuple[str, str]) -> str:
    """A host element's direction in the matrix's words: ``send`` is the pair's client."""
    return ways[0] if way == "send" else ways[1] if way == "recv" else way


def _shown(element: str, ways: tuple[str, str] = ("sending", "receiving")) -> str:
    """An element as an engineer reads it: ``leaf1--spine2``, ``leaf1->spine2 (one way)``."""
    name = element.split(":", 1)[1]
    if element.startswith("host:") and name.count(":"):
        host, _, way = name.rpartition(":")
        return f"{host} {_way(way, ways)}"
    return f"{name} (one way)" if "->" in name else name


@dataclass
class Localization:
    reference: float | None      # the healthy rate, higher-is-better oriented
    reference_from: str
    suspects: list[Suspect] = field(default_factory=list)
    unexplained: list[Pair] = field(default_factory=list)   # slow, and no suspect's
    slow: int = 0
    measured: int = 0
    cut: float | None = None     # the shortfall below the healthy rate that read slow
    cut_from: str = ""
    topology: str = ""
    inferred: bool = False
    warnings: list[str] = field(default_factory=list)
    # Elements whose pairs read low but not yet low enough to name, the likeliest first:
    # more readings through them would decide (a sweep measures their pairs again).
    leaning: list[str] = field(default_factory=list)

    @property
    def blamed_hosts(self) -> list[str]:
        return sorted({s.host[0] for s in self.suspects if s.host is not None})


def reference(values: Sequence[float | None] | Any, threshold: float,
              line_rate: float | None = None) -> tuple[float | None, str]:
    """The healthy rate a pair is judged against, and where it came from (``values``: a
    sequence or an array, None or NaN where a pair has none)."""
    if line_rate:
        return line_rate, "the probed line rate"
    array = np.array(values, dtype=float)        # None -> NaN
    finite = np.sort(array[np.isfinite(array) & (array > 0)])
    if not len(finite):
        return None, "no pair measured"
    top = finite[min(len(finite) - 1, int(TOP * len(finite)))]
    fast = finite[finite >= (1 - threshold) * top]
    ref = float(fast[len(fast) // 2])
    how = f"the median of the {len(fast)} fast pairs (near the {TOP:.0%} quantile)"
    if len(fast) < MIN_FAST:
        how += f"; only {len(fast)} fast pair(s): give --min-line-rate or more pairs"
    return ref, how


def noise(values: Sequence[float | None] | Any, healthy: float | None,
          threshold: float) -> tuple[float | None, int]:
    """The measurement noise: the robust spread (1.4826 x the median absolute deviation, on a
    log scale) of the pairs within ``threshold`` of ``healthy`` (a broken element's pairs
    below it, however many, widen nothing), and how many pairs it came from; None with fewer
    than ``MIN_NOISE_PAIRS``."""
    if not healthy:
        return None, 0
    array = np.array(values, dtype=float)
    ratio = array[np.isfinite(array) & (array > 0)] / healthy
    ratio = np.log(ratio[ratio >= 1 - threshold])
    if len(ratio) < MIN_NOISE_PAIRS:
        return None, len(ratio)
    return float(1.4826 * np.median(np.abs(ratio - np.median(ratio)))), len(ratio)


def check_fraction(name: str, value: float | None) -> None:
    """A share of the healthy rate must be one: ValueError naming it otherwise."""
    if value is not None and not 0 < value < 1:
        raise ValueError(f"{name} {value:g}: a fraction between 0 and 1 (0.1 = 10%)")


def low_readings(oriented: Sequence[float | None], healthy: float | None,
                 min_deficit: float | None) -> Any:
    """Which readings (higher-is-better) fell at least ``min_deficit`` short of ``healthy``
    (or failed): not slow by themselves, but worth a look (their elements' other pairs)."""
    values = np.array([np.nan if v is None else v for v in oriented], dtype=float)
    if not healthy or not min_deficit:
        return np.isnan(values)
    return np.isnan(values) | (values < (1 - min_deficit) * healthy)


def slow_cut(values: Sequence[float | None] | Any, healthy: float | None, threshold: float,
             min_deficit: float | None = MIN_DEFICIT,
             readings: Sequence[float | None] | None = None) -> tuple[float, float | None, str]:
    """The shortfall below ``healthy`` at which a pair reads slow, the noise it came from,
    and why: ``Z_SLOW`` spreads of the healthy pairs (``noise``), at least ``min_deficit``
    and at most ``threshold``; ``threshold`` itself where the spread has too few pairs or
    ``min_deficit`` is None (a fixed cut). ``readings``: every reading of the pairs whose
    figures ``values`` are (the median of each pair's): the spread is theirs, since each
    reading is judged against it (a median of three spreads less than one reading), and
    ``values`` count the pairs it needs."""
    check_fraction("threshold", threshold)
    check_fraction("min_deficit", min_deficit)
    if min_deficit is None or min_deficit >= threshold:
        return threshold, None, f"a fixed cut: {threshold:.0%} below healthy"
    sigma, n = noise(values, healthy, threshold)
    if sigma is not None and readings is not None:
        sigma = noise(readings, healthy, threshold)[0] or sigma
    if sigma is None:
        return threshold, None, (f"{threshold:.0%} below healthy: a spread of the noise needs "
                                 f"{MIN_NOISE_PAIRS} healthy pairs, {n} measured")
    cut = min(threshold, max(min_deficit, 1 - math.exp(-Z_SLOW * sigma)))
    return cut, sigma, (f"{cut:.1%} below healthy: {Z_SLOW:g} x the noise ({sigma:.1%}, the "
                        f"spread of {n} healthy pairs), at least {min_deficit:.0%}")


def localize(pairs: Sequence[Pair], topology: Topology | None = None, threshold: float = 0.4,
             better: str = "higher", line_rate: float | None = None,
             directed: bool = True, slow: Sequence[bool] | None = None,
             healthy: tuple[float | None, str] | None = None,
             min_deficit: float | None = MIN_DEFICIT,
             cut: tuple[float, float | None, str] | None = None) -> Localization:
    """The fewest elements of ``topology`` (inferred from the pairs when None) that explain
    the slow pairs. ``value`` in the metric's own direction ``better``; each pair oriented
    client -> server, and with ``directed`` each element's two directions are suspects of
    their own too (a fault may slow one way only). ``slow``: which pairs are slow, where the
    caller judged them (against a line rate too); else against ``reference`` (``healthy``:
    the caller's, where it has worked it out already) and ``slow_cut`` (``cut``: the
    caller's, likewise); a suspect's p-value needs that cut's noise."""
    oriented = [None if p.value is None or not p.value > 0 else
                (p.value if better == "higher" else 1.0 / p.value) for p in pairs]
    ref, how = healthy or reference(oriented, threshold, line_rate)
    deficit, sigma, cut_from = cut or slow_cut(oriented, ref, threshold, min_deficit)
    if slow is None:
        slow = [v is None or (ref is not None and v < (1 - deficit) * ref) for v in oriented]
    slow = list(slow)
    if topology is None:
        topology = infer([(p.client, p.server, not s) for p, s in zip(pairs, slow)])
    out = Localization(ref, how, slow=sum(slow), measured=len(pairs), cut=deficit,
                       cut_from=cut_from, topology=topology.source, inferred=topology.inferred)
    is_slow = np.array(slow, dtype=bool)
    # Judged by their readings (a spread of the noise known), the elements of the pairs that
    # read low (at least min_deficit short) are candidates too: a link at 0.9 whose pairs
    # scatter about a 10% cut may have had none of them flagged yet.
    graded = bool(sigma)
    low = is_slow | (low_readings(oriented, ref, min_deficit) if graded else False)
    through, unplaced, candidates = _incidence(pairs, topology, directed, low)
    if unplaced:
        out.warnings.append(f"{unplaced} pair(s) have no path in the topology "
                            f"({topology.source}): judged by nothing")
    p_slow = np.full(len(pairs), EPS)        # the model so far: no element broken
    penalty = 1.5 * math.log((1 - EPS) / EPS)

    flat = {e: (np.concatenate([idx for idx, _ in blocks]),
                np.concatenate([np.full(len(idx), share) for idx, share in blocks]))
            for e, blocks in through.items() if e in candidates}

    def gain(element: str) -> float:
        idx, share = flat[element]
        now = p_slow[idx]
        new = 1 - (1 - now) * (1 - share * (1 - EPS))
        return float(np.where(is_slow[idx], np.log(new / now),
                              np.log((1 - new) / (1 - now))).sum())

    signature = {e: _signature(*flat[e]) for e in candidates}
    chosen: list[str] = []
    if graded:
        chosen, out.suspects, out.leaning = _by_readings(
            flat, through, signature, candidates, is_slow, oriented, ref, sigma,
            min_deficit or MIN_DEFICIT, [p.crowd for p in pairs])
        candidates = set()
    while candidates and len(chosen) < MAX_SUSPECTS:
        gains = {e: gain(e) for e in candidates}
        best = min(candidates, key=lambda e: (-gains[e], e))
        if gains[best] <= penalty:
            break
        chosen.append(best)
        group = [e for e in candidates if signature[e] == signature[best]]
        candidates -= set(group)
        idx, share = flat[best]
        p_slow[idx] = 1 - (1 - p_slow[idx]) * (1 - share * (1 - EPS))
        suspect = _suspect(sorted(group, key=_order), through[best], is_slow, oriented, ref,
                           sigma)
        mine = idx[is_slow[idx]]
        rivals = [e for e in candidates if gains[e] > penalty
                  and gains[e] >= gains[best] - CLOSE
                  and _jaccard(flat[e][0][is_slow[flat[e][0]]], mine) >= SAME_PAIRS]
        candidates -= _hold_rivals(suspect, candidates, signature, rivals)
        out.suspects.append(suspect)
    explained = np.zeros(len(pairs), dtype=bool)
    for e in chosen:
        for idx, _ in through[e]:
            explained[idx] = True
    out.unexplained = [pairs[i] for i in np.flatnonzero(is_slow & ~explained)]
    if len(chosen) >= MAX_SUSPECTS:
        out.warnings.append(f"more than {MAX_SUSPECTS} elements would be needed: the fault "
                            "is widespread (a threshold too tight, or a fabric-wide setting)")
    return out


Blocks = list[tuple[Any, float]]     # (pair indices, the share of their paths through it)


def _incidence(pairs: Sequence[Pair], topology: Topology, directed: bool,
               is_slow: Any = None) -> tuple[dict[str, Blocks], int, set[str]]:
    """The candidates (the elements some slow pair, ``is_slow``, crosses), for each the
    blocks of pairs that cross it (``path_blocks``), and how many pairs no path joins."""
    through: dict[str, Blocks] = {}
    candidates: set[str] = set()
    slow = np.zeros(len(pairs), dtype=bool) if is_slow is None else np.asarray(is_slow)
    blocks, unplaced = path_blocks([p.client for p in pairs], [p.server for p in pairs],
                                   topology, directed, [p.path for p in pairs])
    for elements, rows in blocks:
        if slow[rows].any():
            candidates.update(elements)
    # Only a candidate's blocks are kept: no other element can be a suspect, and the
    # fabric's other elements (most of a fat-tree's core) would cost a block each.
    for elements, rows in blocks:
        for element, share in elements.items():
            if element in candidates:
                through.setdefault(element, []).append((rows, share))
    return through, len(unplaced), candidates


def path_blocks(clients: Sequence[Any], servers: Sequence[Any], topology: Topology,
                directed: bool = True,
                traced: Sequence[tuple[str, ...] | None] | None = None,
                ) -> tuple[list[tuple[dict[str, float], Any]], Any]:
    """The pairs (client and server endpoint names, position by position) in blocks that
    cross the same elements, each block ``(element -> share of its paths, positions)``:
    the switches and trunks by the pairs of each switch pair (and route, where routes are
    known; and traced path, where a tracer saw one), each end's NIC and access link by the
    pairs it is an end of. A fabric has far fewer switch pairs than host pairs: a million
    pairs in numpy, not one dict per pair. Also the positions of the pairs no path joins
    (an end the topology lacks, switches with no path between them)."""
    import pandas as pd

    names = {e: topology.host_key(str(e)) for e in set(clients) | set(servers)}
    client = [names[c] for c in clients]
    server = [names[s] for s in servers]
    placed = np.array([c is not None and s is not None for c, s in zip(client, server)],
                      dtype=bool)
    frame = pd.DataFrame({"c": client, "s": server}, dtype=object)[placed]
    frame["sc"] = frame["c"].map(topology.hosts).astype(object)   # not arrow: grouped
    frame["ss"] = frame["s"].map(topology.hosts).astype(object)
    routed = np.ones(len(frame), dtype=bool)
    # Routed by destination: each pair's one path is known (its destination picks it among
    # the equal-cost ones), so its elements are pinned; grouped by the path, not the pair.
    pinned = topology.routing == "dest"
    dest = np.array(server, dtype=object)[placed]
    positions = frame.index.to_numpy()
    blocks: list[tuple[dict[str, float], Any]] = []
    # A pair whose flow was traced crosses the path the tracer saw, whatever the routing.
    seen = [t for t, ok in zip(traced or [None] * len(placed), placed) if ok]
    any_traced = any(seen)
    for (sa, sb), idx in _groups(frame["sc"].to_numpy(), frame["ss"].to_numpy()):
        by_path: dict[tuple[str, ...], list[int]] = {}
        for i in idx if any_traced else ():
            if seen[i] and topology.joins(seen[i], sa, sb):
                by_path.setdefault(seen[i], []).append(i)
        cores = [(core_along(path, directed), np.array(members))
                 for path, members in by_path.items()]
        if by_path:
            idx = np.setdiff1d(idx, [i for members in by_path.values() for i in members])
        if len(idx) and pinned:
            ks = np.array([topology.route_index(sa, sb, d) for d in dest[idx]], dtype=int)
            cores += [(topology.core_pinned(sa, sb, dest[idx[ks == k][0]], directed),
                       idx[ks == k]) for k in np.unique(ks)]
        elif len(idx):                        # (none left: every pair of the two traced)
            cores.append((topology.core(sa, sb, directed), idx))
        for core, part in cores:
            if core is None:
                routed[part] = False
            else:
                blocks.append((core, positions[part]))
    unplaced = np.concatenate([np.flatnonzero(~placed), positions[~routed]])
    frame = frame[routed]
    kept = frame.index.to_numpy()
    for column, way in (("c", "send"), ("s", "recv")):
        for (host,), idx in _groups(frame[column].to_numpy()):
            blocks.append((dict.fromkeys(topology.end_elements(host, way, directed), 1.0),
                           kept[idx]))
    return blocks, unplaced


def _groups(*columns: Any) -> list[tuple[tuple[Any, ...], Any]]:
    """The row positions of each distinct key (a value of each column), in numpy: pandas'
    groupby walks its string keys one by one in Python, a second at a million pairs."""
    import pandas as pd

    if not len(columns[0]):
        return []
    combined = np.zeros(len(columns[0]), dtype=np.int64)
    for column in columns:
        codes, uniques = pd.factorize(np.asarray(column, dtype=object))
        combined = combined * max(len(uniques), 1) + codes
    order = np.argsort(combined, kind="stable")
    ranked = combined[order]
    starts = np.flatnonzero(np.r_[True, ranked[1:] != ranked[:-1]])
    ends = np.r_[starts[1:], len(order)]
    return [(tuple(column[order[a]] for column in columns), order[a:b])
            for a, b in zip(starts, ends)]


def _signature(idx: Any, share: Any) -> bytes:
    """The pairs an element carries and its share of each, exactly: equal for elements
    that cannot be told apart."""
    order = np.lexsort((share, idx))
    return idx[order].tobytes() + np.round(share[order], 9).tobytes()


def _order(element: str) -> tuple[int, int, str]:
    """Within a group that cannot be told apart, hosts first, then links, then switches;
    the element itself before one direction of it."""
    kind = {"host": 0, "link": 1, "switch": 2}.get(element.split(":", 1)[0], 3)
    one_way = element.count(":") > 1 or "->" in element
    return kind, one_way, element


def _suspect(group: list[str], blocks: Blocks, slow: Any, oriented: Sequence[float | None],
             healthy: float | None = None, sigma: float | None = None) -> Suspect:
    inside = np.zeros(len(oriented), dtype=bool)
    for idx, _ in blocks:
        inside[idx] = True
    values = np.array([np.nan if v is None else v for v in oriented], dtype=float)

    def median(mask: Any) -> float | None:
        picked = values[mask & ~np.isnan(values)]
        return float(np.sort(picked)[len(picked) // 2]) if len(picked) else None

    # Its deficit from the pairs wholly through it (under ECMP: the share of them that may
    # have crossed it, all the same), a failed pair reading nothing; its p-value how far the
    # mean of their log ratios sits below healthy in standard errors of the noise.
    of_healthy = p = None
    if healthy:
        ratios = np.nan_to_num(values[inside] / healthy, nan=0.0)
        if len(ratios):
            of_healthy = float(np.median(ratios))
            if sigma and (ratios > 0).all():
                z = float(np.mean(np.log(ratios))) * math.sqrt(len(ratios)) / sigma
                p = 0.5 * math.erfc(-z / math.sqrt(2))
            elif sigma:
                p = 0.0                    # a failed pair: no noise reads nothing
    return Suspect(group, int(slow[inside].sum()), int(inside.sum()), median(inside),
                   median(~inside), pinned=all(share >= 1.0 for _, share in blocks),
                   of_healthy=of_healthy, p=p)


def _log_healthy(r: Any, sigma: Any, met: tuple[Any, ...] | None = None) -> Any:
    """The log density of a log ratio ``r`` read by a healthy pair: the noise's normal, save
    EPS of readings that land anywhere (a moment's contention, a stalled host), so that one
    stray pair cannot outweigh the many beside it. ``met``: where flows may have met others
    on their links (untraced ECMP), the log chances of meeting none, one, two, three or more
    (from ``_met``): a flow that met k others reads 1/(k + 1) of its rate."""
    def normal(x: Any) -> Any:
        return -0.5 * (x / sigma) ** 2 - np.log(sigma * math.sqrt(2 * math.pi))

    clean = normal(r)
    if met is not None:
        clean = met[0] + clean
        for k, chance in enumerate(met[1:], start=1):
            clean = np.logaddexp(clean, chance + normal(r + math.log(k + 1)))
    return np.logaddexp(math.log1p(-EPS) + clean, math.log(EPS / STRAY_RANGE))


def _met(crowds: Sequence[float] | None) -> tuple[Any, ...] | None:
    """Each flow's log chances of having met no other flow on its links, one, two, and
    three or more: Poisson in its crowd (the company it could expect); None where no flow
    had any."""
    if crowds is None or not any(crowds):
        return None
    lam = np.asarray(crowds, dtype=float)
    each = [np.exp(-lam) * lam ** k / math.factorial(k) for k in range(3)]
    with np.errstate(divide="ignore"):
        return (*(np.log(p) for p in each),
                np.log(np.maximum(1.0 - sum(each), 0.0)))


def _by_readings(flat: dict[str, tuple[Any, Any]], through: dict[str, Blocks],
                 signature: dict[str, bytes], candidates: set[str], is_slow: Any,
                 oriented: Sequence[float | None], healthy: float | None, sigma: float,
                 min_deficit: float, crowds: Sequence[float] | None = None,
                 ) -> tuple[list[str], list[Suspect], list[str]]:
    """The fewest elements that explain the pairs' readings (not only the slow flags): greedy on
    the likelihood ratio of "this element runs at exp(-d) of its capacity" against "healthy", d
    fitted (at least ``min_deficit``). A pair that crosses an element with share s (ECMP: one of
    its path sets' paths) reads slowed with chance s; a pinned pair always. An element is named
    while its ratio, without its one most telling pair, beats what noise reaches over all the
    candidates (ALPHA, Bonferroni); the pairs it then explains (those more likely slowed by it
    than not) testify for nothing else. Near the cut this sees what flags cannot: a link at 0.9
    whose pairs scatter across a 10% cut reads as one shift of all of them. Also the elements
    left leaning (at least LEAN of the evidence naming needs), the likeliest first."""
    from statistics import NormalDist

    values = np.array([np.nan if v is None else v for v in oriented], dtype=float)
    ratio = np.where(np.isfinite(values) & (values > 0), values / (healthy or 1.0), FAILED)
    r = np.log(np.maximum(ratio, FAILED))
    met = _met(crowds)
    base = _log_healthy(r, sigma, met)
    steps = np.geomspace(-math.log1p(-min_deficit), -math.log(FAILED), 64)
    # A broken element's pairs scatter more than healthy ones (flows sharing what is left of
    # it, a shaper's bursts: a link shaped to a tenth read 0.03-0.10 here): wider with d.
    spread = np.sqrt(sigma ** 2 + (SLOW_SCATTER * steps) ** 2)
    # The most each reading can tell for a slowed element (at its own best d), so that an
    # element whose pairs could not reach LEAN of ``need`` even so is passed over unfitted
    # (thousands are, where collided flows make every element of theirs a candidate).
    def met_of(idx: Any = slice(None)) -> tuple[Any, ...] | None:
        """The collision chances of the readings ``idx``, one column each, as ``steps``."""
        return None if met is None else tuple(part[idx][:, None] for part in met)

    top = _log_healthy(r[:, None] + steps, spread, met_of()).max(1)
    left = np.ones(len(r), dtype=bool)
    # Untraced ECMP: one test a signature, since elements every flow crosses alike (a leaf's
    # 16 uplinks) have one likelihood, and count once against ALPHA, not once each. Elsewhere
    # each element counts: a hard fault's pairs fit its model loosely, and the smaller bound
    # let a traced sweep name a spine's downlink beside the broken uplink feeding it.
    tests = len({signature[e] for e in candidates}) if met is not None else len(candidates)
    need = NormalDist().inv_cdf(1 - ALPHA / max(tests, 1)) ** 2 / 2
    candidates = set(candidates)
    chosen: list[str] = []
    suspects: list[Suspect] = []

    def fit(element: str) -> tuple[float, Any, Any]:
        """Its gain without its most telling pair, the pairs it was fitted to, and how much
        likelier each is slowed by it than not (log)."""
        idx, share = flat[element]
        keep = left[idx]
        idx, share = idx[keep], share[keep]
        if not len(idx):
            return 0.0, idx, None
        bound = np.logaddexp(np.log(share) + top[idx],
                             np.log1p(-np.minimum(share, 1.0)) + base[idx]) - base[idx]
        if bound.sum() - bound.max() < LEAN * need:     # sum less max: as gains below
            return 0.0, idx, None
        slowed = np.log(share)[:, None] + _log_healthy(r[idx][:, None] + steps, spread,
                                                       met_of(idx))
        other = np.log1p(-np.minimum(share, 1.0))[:, None] + base[idx][:, None]
        mixed = np.logaddexp(slowed, other)
        each = mixed - base[idx][:, None]
        # Without its most telling pair: one reading (a collided flow's share misjudged, a
        # moment's stall) never names an element, however far off it reads.
        gains = each.sum(axis=0) - each.max(axis=0)
        k = int(np.argmax(gains))
        return float(gains[k]), idx, slowed[:, k] - mixed[:, k]

    leaning: list[str] = []
    with np.errstate(divide="ignore"):           # log(1 - share) of a pinned pair: -inf
        while candidates and len(chosen) < MAX_SUSPECTS:
            fits = {e: fit(e) for e in candidates}
            best = min(candidates, key=lambda e: (-fits[e][0], e))
            gain, idx, owned = fits[best]
            if gain <= need:
                # Two low pairs at least (one is as often noise: a healthy fabric's sweep
                # would read half its pairs again).
                ranked = sorted(candidates, key=lambda e: (-fits[e][0], e))
                leaning = [e for e in ranked if fits[e][0] >= LEAN * need][:MAX_LEANING]
                break
            chosen.append(best)
            group = [e for e in candidates if signature[e] == signature[best]]
            candidates -= set(group)
            mine = idx[owned > math.log(0.5)]
            left[mine] = False
            suspect = _suspect(sorted(group, key=_order), through[best], is_slow, oriented,
                               healthy, sigma)
            rivals = [e for e in candidates if fits[e][0] > need
                      and fits[e][0] >= gain - CLOSE
                      and _jaccard(fits[e][1][fits[e][2] > math.log(0.5)], mine) >= SAME_PAIRS]
            candidates -= _hold_rivals(suspect, candidates, signature, rivals)
            suspects.append(suspect)
    return chosen, suspects, leaning


def _hold_rivals(suspect: Suspect, candidates: set[str], signature: dict[str, bytes],
                 rivals: list[str]) -> set[str]:
    """Another element whose case rests on the same slow pairs and is nearly as likely
    (pairs from one leaf to another: the first's uplinks, or the second's downlinks) is no
    weaker a suspect: held beside the named one as ``or_else`` (with the elements carrying
    the same pairs as it), never silently dropped. Returns them, out of the running. A host
    holds none: a host's verdict is its own line (analysis.fabric's faulty hosts), and a link
    that rivals it stays in the running, named on its own evidence."""
    if suspect.host is not None:
        return set()
    held = {e for e in candidates if any(signature[e] == signature[r] for r in rivals)}
    suspect.or_else = sorted(held, key=_order)
    return held


def _jaccard(a: Any, b: Any) -> float:
    a, b = set(a.tolist()), set(b.tolist())
    return len(a & b) / len(a | b) if a | b else 0.0
