"""Each element of the fabric with its evidence: the pairs that cross it, how many of them
read slow, and their median against the pairs that avoid it.

``localize`` names the fewest elements that explain the slow pairs; this table is the
evidence for every element of the topology, named or not: what the picture colours each
link and switch by, what ``accept``'s ``min_link_median`` and ``min_switch_median`` judge,
and what the console's worst elements quote. A ratio is a pair's value against the
fabric's healthy rate (``Matrix.cells["ratio"]``, higher is better). Under ECMP a pair may
take any of its equal-cost paths: it counts toward every element of its path set, and the
pairs that surely cross an element (every path does) are counted apart (``pinned``) from
those that may (``maybe``); with routes known (``routing = "dest"``) every pair is pinned.
An element no measured pair crosses has no median (None), never a borrowed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from netbench.analysis.localize import path_blocks
from netbench.env.topology import Topology, element_nodes, link_name


@dataclass
class ElementStat:
    element: str                 # "link:leafA--spine1", "link:leafA->spine1", "switch:s1"
    kind: str                    # "host", "link" or "switch"
    trunk: bool                  # a link between two switches (an access link: False)
    pairs: int                   # measured pairs that cross it (or may: ECMP)
    pinned: int                  # of them, pairs every one of whose paths crosses it
    slow: int                    # of them, slow pairs
    failed: int                  # failed pairs that would have crossed it
    median: float | None         # the median ratio of its pairs; None: no pair crossed it
    median_avoiding: float | None

    @property
    def maybe(self) -> int:
        """Pairs that only may cross it (ECMP: some of their paths avoid it)."""
        return self.pairs - self.pinned

    @property
    def directed(self) -> bool:
        """One direction of an element (``link:a->b``, ``host:h:send``)."""
        return "->" in self.element or self.element.count(":") > 1

    @property
    def base(self) -> str:
        """The element both ways (``link:a--b`` of ``link:a->b``, ``host:h`` of
        ``host:h:send``)."""
        name = self.element.split(":", 1)[1]
        if "->" in name:
            return f"link:{link_name(*name.split('->', 1))}"
        if self.kind == "host" and ":" in name:
            return f"host:{name.rpartition(':')[0]}"
        return self.element

    @property
    def name(self) -> str:
        return self.element.split(":", 1)[1]

    def text(self) -> str:
        """``link:leafA--spine1: 12 of 12 pairs slow, median 0.01 x healthy vs 0.98
        avoiding it`` (the evidence, in one line)."""
        if not self.pairs:
            return f"{self.element}: no measured pair crosses it" + (
                f" ({self.failed} failed)" if self.failed else "")
        avoid = "-" if self.median_avoiding is None else f"{self.median_avoiding:.2f}"
        mid = "-" if self.median is None else f"{self.median:.2f}"
        ecmp = f" ({self.maybe} of them only may: ECMP)" if self.maybe else ""
        return (f"{self.element}: {self.slow} of {self.pairs} pairs slow{ecmp}, median {mid} "
                f"x healthy vs {avoid} avoiding it"
                + (f"; {self.failed} failed" if self.failed else ""))


def element_table(matrix: Any, topology: Topology) -> list[ElementStat]:
    """Every element of ``topology`` (its switches, the links between them, each host's
    NIC and access link; each both ways and each direction) with the evidence of
    ``matrix``'s pairs (an ``analysis.fabric.Matrix``). Pairs are grouped by their switch
    pair first (the core a pair crosses depends on its two switches only, and on its
    destination where routes are known), so a million pairs cost numpy work per group,
    not Python work per pair. Sorted by element name."""
    import numpy as np

    cells = matrix.cells
    n = 0 if cells is None else len(cells)
    ratio = np.empty(0) if not n else cells["ratio"].to_numpy(dtype=float)
    value = np.empty(0) if not n else cells["value"].to_numpy(dtype=float)
    slow = np.zeros(0, dtype=bool) if not n else cells["slow"].to_numpy(dtype=bool)
    measured, failed = ~np.isnan(value), np.isnan(value)
    # Every median comes from ranks in one sort of all ratios: an element's pairs are a
    # sorted rank array, and the median of the pairs avoiding it is found in that array
    # too (no second median over a million pairs per element).
    finite = np.isfinite(ratio)
    order = np.argsort(np.where(finite, ratio, np.inf), kind="stable")
    ranked = ratio[order]
    rank = np.empty(n, dtype=np.int32)      # int32: the merges below sort half the bytes
    rank[order] = np.arange(n, dtype=np.int32)
    total = int(finite.sum())

    # Blocks: pairs that cross the same elements, counted once: (their finite ratios'
    # sorted ranks, measured, slow, failed).
    blocks: list[tuple[Any, int, int, int]] = []
    through: dict[str, list[tuple[int, float]]] = {}  # element -> (block, share)

    def block(idx: Any) -> int:
        r = rank[idx]
        blocks.append((np.sort(r[r < total]), int(measured[idx].sum()),
                       int((slow[idx] & measured[idx]).sum()), int(failed[idx].sum())))
        return len(blocks) - 1

    if n:
        traced = [tuple(p.split(">")) if p else None for p in cells["path"]] \
            if "path" in cells else None
        for elements, rows in path_blocks(cells["client"].astype(object).tolist(),
                                          cells["server"].astype(object).tolist(),
                                          topology, True, traced)[0]:
            b = block(rows)
            for element, share in elements.items():
                through.setdefault(element, []).append((b, share))

    def median_of(sorted_ranks: Any) -> tuple[float | None, float | None]:
        m = len(sorted_ranks)
        inside = float(ranked[sorted_ranks[m // 2]]) if m else None
        rest = total - m
        if not rest:
            return inside, None
        # The k-th pair (0-based) avoiding it, in the sorted order: k + the element's own
        # pairs before it (its i-th pair has ranks[i] - i avoiding pairs before it).
        k = rest // 2
        before = np.searchsorted(sorted_ranks - np.arange(m), k, side="right") if m else 0
        return inside, float(ranked[k + int(before)])

    out = []
    for element in sorted(set(through) | set(_all_elements(topology))):
        parts = through.get(element, [])
        counts = np.array([blocks[b][1:] for b, _ in parts], dtype=np.int64).reshape(-1, 3)
        sure = sum(blocks[b][1] for b, share in parts if share >= 1.0)
        ranks = np.sort(np.concatenate([blocks[b][0] for b, _ in parts])) \
            if parts else np.empty(0, dtype=np.int32)
        mid, avoid = median_of(ranks) if int(counts[:, 0].sum()) else (None, None)
        kind = element.split(":", 1)[0]
        out.append(ElementStat(element, kind, kind == "link" and _is_trunk(element, topology),
                               int(counts[:, 0].sum()), int(sure), int(counts[:, 1].sum()),
                               int(counts[:, 2].sum()), mid, avoid))
    return out


def _is_trunk(element: str, topology: Topology) -> bool:
    ends = element_nodes(element)
    return element.startswith("link:") and all(e in topology.switches for e in ends) and \
        not any(e in topology.hosts for e in ends)


def _all_elements(topology: Topology) -> list[str]:
    """Every element the topology holds, crossed or not: a link no pair loaded is listed
    with no median, so a check over every link cannot pass it unseen."""
    out = [f"switch:{s}" for s in topology.switches]
    for a, b in topology.trunks:
        out += [f"link:{link_name(a, b)}", f"link:{a}->{b}", f"link:{b}->{a}"]
    for host in topology.hosts:
        out += topology.end_elements(host, "send", True) + \
            topology.end_elements(host, "recv", True)[2:]
    return out


ONE_WAY = 0.05      # a direction is quoted instead of its element when this much lower


def worst(table: list[ElementStat], count: int = 3, hosts: bool = True) -> list[ElementStat]:
    """The elements with the lowest median, each once: the element both ways, or one of
    its directions where that reads clearly lower (a one-way fault: the other direction's
    pairs lift the element's median); a host's access link, which carries exactly its
    NIC's pairs, left out. Lowest first."""
    both = {e.element: e for e in table if not e.directed}
    best: dict[str, ElementStat] = {}
    for e in table:
        if e.median is None or (e.kind == "link" and not e.trunk) or \
                (e.kind == "host" and not hosts):
            continue
        whole = both.get(e.base)
        if e.directed and whole is not None and whole.median is not None and \
                e.median > whole.median - ONE_WAY:
            continue
        kept = best.get(e.base)
        if kept is None or (e.median, e.directed) < (kept.median, kept.directed):
            best[e.base] = e
    return sorted(best.values(), key=lambda e: (e.median, -e.slow, e.element))[:count]
