"""Which elements of the fabric explain its slow pairs: the link, switch or host that is
broken, never the healthy hosts beside it.

Each measured pair crosses elements of the topology (``netbench.topology``: its hosts' NICs,
their access links, switches and the links between them; under ECMP a share of them). A pair
is slow when it reads below ``1 - threshold`` of the fabric's healthy rate (the probed line
rate, or the median of the fast pairs: never the median of all pairs, which a fault that
slows most of them drags down). The verdict is the fewest elements that explain the slow
pairs (maximum likelihood, greedy: each element added must explain at least two slow pairs
better than chance does), each with its evidence (k of m pairs through it slow, their median
against the pairs that avoid it). Elements that carry exactly the same measured pairs cannot
be told apart, and are named together as one suspect; a suspect over ECMP path sets says so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from netbench.topology import Topology, infer

EPS = 0.02                 # chance a healthy pair reads slow (noise), or a broken one fast
MAX_SUSPECTS = 16          # elements a verdict may name before it says "widespread"
MIN_FAST = 3               # fast pairs a reference from the data needs
TOP = 0.95                 # the quantile the fast pairs are found near


@dataclass
class Pair:
    client: str
    server: str
    value: float | None          # None: the pair failed (no traffic crossed its path)


@dataclass
class Suspect:
    elements: list[str]          # one element, or several that carry the same pairs
    slow: int                    # pairs through it that read slow
    pairs: int                   # pairs measured through it
    median_through: float | None
    median_avoiding: float | None
    pinned: bool                 # False: some of its pairs may have taken another path (ECMP)

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

    def text(self, unit: str = "", inferred: bool = False) -> str:
        names = [_shown(e) for e in self.elements]
        if self.host is not None:
            host, way = self.host
            what = (f"HOST {host}{' ' + WAYS[way] if way else ''}: its NIC, PCIe path or "
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
                + ("" if self.pinned else "; ECMP: over the path sets its pairs may take"))


WAYS = {"send": "sending", "recv": "receiving"}


def _shown(element: str) -> str:
    """An element as an engineer reads it: ``leaf1--spine2``, ``leaf1->spine2 (one way)``."""
    name = element.split(":", 1)[1]
    if element.startswith("host:") and name.count(":"):
        host, _, way = name.rpartition(":")
        return f"{host} {WAYS.get(way, way)}"
    return f"{name} (one way)" if "->" in name else name


@dataclass
class Localization:
    reference: float | None      # the healthy rate, higher-is-better oriented
    reference_from: str
    suspects: list[Suspect] = field(default_factory=list)
    unexplained: list[Pair] = field(default_factory=list)   # slow, and no suspect's
    slow: int = 0
    measured: int = 0
    topology: str = ""
    inferred: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def blamed_hosts(self) -> list[str]:
        return sorted({s.host[0] for s in self.suspects if s.host is not None})


def reference(values: Sequence[float], threshold: float,
              line_rate: float | None = None) -> tuple[float | None, str]:
    """The healthy rate a pair is judged against, and where it came from."""
    if line_rate:
        return line_rate, "the probed line rate"
    finite = sorted(v for v in values if v is not None and math.isfinite(v) and v > 0)
    if not finite:
        return None, "no pair measured"
    top = finite[min(len(finite) - 1, int(TOP * len(finite)))]
    fast = [v for v in finite if v >= (1 - threshold) * top]
    ref = fast[len(fast) // 2]
    how = f"the median of the {len(fast)} fast pairs (near the {TOP:.0%} quantile)"
    if len(fast) < MIN_FAST:
        how += f"; only {len(fast)} fast pair(s): give --min-line-rate or more pairs"
    return ref, how


def localize(pairs: Sequence[Pair], topology: Topology | None = None, threshold: float = 0.4,
             better: str = "higher", line_rate: float | None = None,
             directed: bool = True) -> Localization:
    """The fewest elements of ``topology`` (inferred from the pairs when None) that explain
    the slow pairs. ``value`` in the metric's own direction ``better``; a pair's data flows
    client -> server when ``directed`` (a fault may slow one direction only), both ways
    when not (latency, bidirectional runs)."""
    oriented = [None if p.value is None or not p.value > 0 else
                (p.value if better == "higher" else 1.0 / p.value) for p in pairs]
    ref, how = reference([v for v in oriented if v is not None], threshold, line_rate)
    slow = [v is None or (ref is not None and v < (1 - threshold) * ref) for v in oriented]
    if topology is None:
        topology = infer([(p.client, p.server, not s) for p, s in zip(pairs, slow)])
    out = Localization(ref, how, slow=sum(slow), measured=len(pairs),
                       topology=topology.source, inferred=topology.inferred)
    # element -> [(pair index, share of the pair's paths through it)]
    through: dict[str, list[tuple[int, float]]] = {}
    unplaced = 0
    for i, p in enumerate(pairs):
        elements = topology.elements(p.client, p.server, directed)
        if not elements:
            unplaced += 1
            continue
        for element, share in elements.items():
            through.setdefault(element, []).append((i, share))
    if unplaced:
        out.warnings.append(f"{unplaced} pair(s) have no path in the topology "
                            f"({topology.source}): judged by nothing")
    p_slow = [EPS] * len(pairs)          # the model so far: no element broken
    penalty = 1.5 * math.log((1 - EPS) / EPS)

    def gain(element: str) -> float:
        total = 0.0
        for i, share in through[element]:
            now = p_slow[i]
            new = 1 - (1 - now) * (1 - share * (1 - EPS))
            total += math.log(new / now) if slow[i] else math.log((1 - new) / (1 - now))
        return total

    candidates = {e for e, ps in through.items() if any(slow[i] for i, _ in ps)}
    signature = {e: tuple(through[e]) for e in candidates}
    chosen: list[str] = []
    while candidates and len(chosen) < MAX_SUSPECTS:
        scored = sorted(((gain(e), e) for e in candidates), key=lambda t: (-t[0], t[1]))
        best_gain, best = scored[0]
        if best_gain <= penalty:
            break
        chosen.append(best)
        group = [e for e in candidates if signature[e] == signature[best]]
        candidates -= set(group)
        for i, share in through[best]:
            p_slow[i] = 1 - (1 - p_slow[i]) * (1 - share * (1 - EPS))
        out.suspects.append(_suspect(sorted(group, key=_order), through[best], slow,
                                     oriented, len(pairs)))
    explained = {i for e in chosen for i, _ in through[e]}
    out.unexplained = [p for i, (p, s) in enumerate(zip(pairs, slow))
                       if s and i not in explained]
    if len(chosen) >= MAX_SUSPECTS:
        out.warnings.append(f"more than {MAX_SUSPECTS} elements would be needed: the fault "
                            "is widespread (a threshold too tight, or a fabric-wide setting)")
    return out


def _order(element: str) -> tuple[int, int, str]:
    """Within a group that cannot be told apart, hosts first, then links, then switches;
    the element itself before one direction of it."""
    kind = {"host": 0, "link": 1, "switch": 2}.get(element.split(":", 1)[0], 3)
    one_way = element.count(":") > 1 or "->" in element
    return kind, one_way, element


def _suspect(group: list[str], incidence: list[tuple[int, float]], slow: list[bool],
             oriented: list[float | None], n: int) -> Suspect:
    inside = {i for i, _ in incidence}
    values_in = sorted(v for i, v in enumerate(oriented) if i in inside and v is not None)
    values_out = sorted(v for i, v in enumerate(oriented) if i not in inside and v is not None)
    return Suspect(group, sum(slow[i] for i in inside), len(inside),
                   values_in[len(values_in) // 2] if values_in else None,
                   values_out[len(values_out) // 2] if values_out else None,
                   pinned=all(share >= 1.0 for _, share in incidence))
