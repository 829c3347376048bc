"""The fabric's switch graph: switches in tiers (the hosts' switches at the bottom, each tier
above one hop further from them), every link between switches coloured by the median of the
pairs that cross it against the fabric's healthy rate, and what the verdict names at fault in
red, each with its evidence in the hover (k of m pairs slow, median against the pairs that
avoid it: ``netbench.analysis.elements``). Hosts are drawn one by one up to ``MAX_HOSTS``,
beyond that one summary per switch (how many, how many blamed). A plotly figure as a dict,
as the heatmap's: no plotly import here.
"""

from __future__ import annotations

import html
import math
import re
from collections import deque
from typing import Any

from netbench.env.topology import link_name
from netbench.textfile import printable

MAX_HOSTS = 64          # hosts drawn one by one; beyond, one summary per switch
MAX_LABELS = 40         # switches a tier names on the picture (all are named in the hover)
FAULT = "#d7191c"
# (lowest median of the bin, colour, legend): the heatmap's scale, in steps a legend can name.
BINS = ((0.9, "#4575b4", ">= 0.9 x healthy"), (0.75, "#fdae61", "0.75-0.9 x healthy"),
        (0.5, "#f46d43", "0.5-0.75 x healthy"), (-math.inf, "#a50026", "< 0.5 x healthy"))
SCALE = [[0, "#a50026"], [0.42, "#f46d43"], [0.625, "#fdae61"], [0.75, "#e0f3f8"],
         [1, "#4575b4"]]          # over 0..1.2 x healthy, as the bins above
HOVER = ("<b>%{customdata[0]}</b><br>%{customdata[1]}<br>%{customdata[2]}<br>"
         "%{customdata[3]}<extra></extra>")


def tiers(topology: Any) -> dict[str, int]:
    """Each switch's tier: 0 for a switch with hosts, else its hops to the nearest such
    switch (breadth first from all of them at once); a switch no path reaches sits one
    above the highest."""
    adjacency = topology.neighbours()
    leaves = sorted(set(topology.hosts.values()))
    tier = {s: 0 for s in leaves}
    queue = deque(leaves)
    while queue:
        node = queue.popleft()
        for other in adjacency.get(node, ()):
            if other not in tier:
                tier[other] = tier[node] + 1
                queue.append(other)
    top = max(tier.values(), default=-1) + 1
    return {s: tier.get(s, top) for s in topology.switches}


def switch_graph(matrix: Any) -> dict[str, Any] | None:
    """A plotly figure (dict) of ``matrix``'s topology (analysis.fabric.Matrix: given, or
    inferred from the pairs) with its element table; None without a topology or switches."""
    topology = getattr(matrix, "topology", None)
    if topology is None or not topology.switches:
        return None
    stats = {e.element: e for e in matrix.elements}
    tier = tiers(topology)
    place, spot, yrange = _layout(topology, tier)
    ways = getattr(matrix, "roles", ("sending", "receiving"))
    inferred = bool(topology.inferred)
    loc = matrix.localization
    # What the verdict names, element by element, with the suspect's own words.
    named: dict[str, str] = {}
    for suspect in matrix.suspects:
        said = suspect.text(matrix.unit, inferred, ways)
        for element in suspect.elements + suspect.or_else:
            named[_undirected(element)] = said
    blamed = {}
    for h in matrix.faulty_hosts:
        key = topology.host_key(h.name)
        if key is not None:
            blamed.setdefault(key, []).append(f"HOST {h.name}: slow {h.role} with {h.slow} of "
                                              f"{h.pairs} peers")
    data: list[dict[str, Any]] = []
    data += _links(topology, stats, place, named)
    data += _hosts(topology, stats, place, spot, blamed, named)
    data += _switches(topology, stats, place, named, tier)
    faulty = sorted(n.split(":", 1)[1] for n in named if not n.startswith("host:")) + \
        sorted(blamed)
    top = max(0.0, yrange[1] - 0.7)
    # Plotly reads markup in a title: the names go in as text.
    shown = html.escape(printable(", ".join(faulty[:6])), quote=False)
    title = (f"switch graph: {len(topology.switches)} switches, {len(topology.trunks)} links "
             "between them, each by the median of the pairs through it (x healthy"
             + (f" {loc.reference:.4g} {matrix.unit}" if loc and loc.reference else "")
             + f"); at fault: {shown or 'none'}" + (" ..." if len(faulty) > 6 else ""))
    if inferred:
        title += "<br>topology inferred from the pairs (give --topology to name switches)"
    return {"data": data, "layout": {
        "title": {"text": title}, "height": int(320 + 130 * (top + 1)),
        "xaxis": {"visible": False, "range": [-0.04, 1.04]},
        "yaxis": {"visible": False, "range": list(yrange)},
        "showlegend": True, "legend": {"orientation": "h", "y": -0.05},
        "hovermode": "closest", "margin": {"l": 20, "r": 20, "t": 90, "b": 40}}}


def _natural(text: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _layout(topology: Any, tier: dict[str, int]) -> tuple[dict[str, tuple[float, float]],
                                                         Any, tuple[float, float]]:
    """(switch -> (x, y), where a switch's i-th of k hosts sits, the y range): a row per
    tier, the hosts' switches in name order and their hosts in the row below, each tier
    above ordered by where its neighbours below sit (fewer crossings); one tier with links
    among its own switches (a dragonfly's routers) on a ring, its hosts outside it."""
    rows: dict[int, list[str]] = {}
    for switch, t in tier.items():
        rows.setdefault(t, []).append(switch)
    adjacency = topology.neighbours()
    if len(rows) == 1 and topology.trunks:
        ring = sorted(next(iter(rows.values())), key=_natural)
        angle = {s: 2 * math.pi * i / len(ring) for i, s in enumerate(ring)}
        slot = 2 * math.pi / len(ring)

        def ring_spot(switch: str, i: int, k: int) -> tuple[float, float]:
            a = angle[switch] + 0.8 * slot * ((i + 0.5) / k - 0.5)
            return 0.5 + 0.48 * math.cos(a), 1.0 * math.sin(a)

        return ({s: (0.5 + 0.34 * math.cos(angle[s]), 0.7 * math.sin(angle[s])) for s in ring},
                ring_spot, (-1.3, 1.3))
    place: dict[str, tuple[float, float]] = {}
    for t in sorted(rows):
        def below(s: str, t: int = t) -> float:
            xs = [place[o][0] for o in adjacency.get(s, ()) if tier.get(o) == t - 1]
            return sum(xs) / len(xs) if xs else 2.0
        members = sorted(rows[t], key=lambda s: (below(s) if t else 0, _natural(s)))
        for i, switch in enumerate(members):
            place[switch] = ((i + 0.5) / len(members), float(t))
    width = 0.8 / max(len(rows.get(0, [])), 1)

    def row_spot(switch: str, i: int, k: int) -> tuple[float, float]:
        x0, y0 = place[switch]
        return x0 + width * ((i + 0.5) / k - 0.5), y0 - 1

    return place, row_spot, (-1.7, max(rows, default=0) + 0.7)


def _undirected(element: str) -> str:
    kind, _, name = element.partition(":")
    if "->" in name:
        return f"link:{link_name(*name.split('->', 1))}"
    if kind == "host" and ":" in name:
        return f"host:{name.rpartition(':')[0]}"
    return element


def _evidence(stats: dict[str, Any], element: str, extra: list[str]) -> list[str]:
    """[title, evidence, two more lines] for the hover: the element both ways, then its
    directions (or the verdict's words)."""
    e = stats.get(element)
    lines = [element, e.text().split(": ", 1)[1] if e is not None else
             "no measured pair crosses it"]
    lines += extra
    return (lines + ["", ""])[:4]


def _colour(median: float | None) -> tuple[str, str]:
    if median is None:
        return "#bbbbbb", "no measured pair"
    return next((c, label) for low, c, label in BINS if median >= low)


def _links(topology: Any, stats: dict[str, Any], place: dict[str, tuple[float, float]],
           named: dict[str, str]) -> list[dict[str, Any]]:
    """One line trace per colour bin (segments apart by None), the links at fault in red on
    top, and a marker at each link's middle carrying its colour scale and hover."""
    bins: dict[str, dict[str, Any]] = {}
    fault = {"x": [], "y": [], "names": []}
    mids: dict[str, list[Any]] = {"x": [], "y": [], "c": [], "text": [], "custom": []}
    for a, b in sorted(topology.trunks):
        element = f"link:{link_name(a, b)}"
        e = stats.get(element)
        median = None if e is None else e.median
        (xa, ya), (xb, yb) = place[a], place[b]
        if element in named:
            target = fault
            fault["names"].append(element.split(":", 1)[1])
        else:
            colour, label = _colour(median)
            target = bins.setdefault(label, {"x": [], "y": [], "colour": colour})
        target["x"] += [xa, xb, None]
        target["y"] += [ya, yb, None]
        directions = []
        for way in (f"link:{a}->{b}", f"link:{b}->{a}"):
            d = stats.get(way)
            if d is not None and d.pairs:
                directions.append(f"{way[5:]}: {d.slow} of {d.pairs} slow, median "
                                  f"{d.median:.2f}")
        extra = [", ".join(directions) or "no pair measured either way",
                 ("AT FAULT: " + named[element]) if element in named else ""]
        mids["x"].append((xa + xb) / 2)
        mids["y"].append((ya + yb) / 2)
        mids["c"].append(None if median is None else round(median, 4))
        mids["text"].append(element.split(":", 1)[1])
        mids["custom"].append(_evidence(stats, element, extra))
    out = []
    for label, trace in sorted(bins.items(), key=lambda kv: [b[2] for b in BINS]
                               .index(kv[0]) if kv[0] in [b[2] for b in BINS] else 9):
        dotted = label == "no measured pair"
        out.append({"type": "scatter", "mode": "lines", "name": f"link: {label}",
                    "x": trace["x"], "y": trace["y"], "hoverinfo": "skip",
                    "line": {"color": trace["colour"], "width": 1.5 if dotted else 3,
                             "dash": "dot" if dotted else "solid"}})
    if fault["names"]:
        out.append({"type": "scatter", "mode": "lines", "name": "link at fault",
                    "x": fault["x"], "y": fault["y"], "hoverinfo": "skip",
                    "text": fault["names"], "line": {"color": FAULT, "width": 6}})
    if mids["x"]:
        out.append({"type": "scatter", "mode": "markers", "name": "link medians",
                    "x": mids["x"], "y": mids["y"], "text": mids["text"],
                    "customdata": mids["custom"], "hovertemplate": HOVER,
                    "showlegend": False,
                    "marker": {"size": 9, "color": mids["c"], "cmin": 0, "cmax": 1.2,
                               "colorscale": SCALE, "line": {"width": 1, "color": "#444"},
                               "colorbar": {"title": {"text": "x healthy"}, "len": 0.6}}})
    return out


def _switches(topology: Any, stats: dict[str, Any], place: dict[str, tuple[float, float]],
              named: dict[str, str], tier: dict[str, int]) -> list[dict[str, Any]]:
    crowded = {t for t in set(tier.values())
               if sum(1 for v in tier.values() if v == t) > MAX_LABELS}
    behind: dict[str, int] = {}
    for switch in topology.hosts.values():
        behind[switch] = behind.get(switch, 0) + 1
    out = []
    for at_fault in (False, True):
        chosen = sorted((s for s in topology.switches
                         if (f"switch:{s}" in named) == at_fault), key=_natural)
        if not chosen:
            continue
        custom, colours, labels = [], [], []
        for s in chosen:
            e = stats.get(f"switch:{s}")
            hosts = behind.get(s, 0)
            custom.append(_evidence(stats, f"switch:{s}", [
                f"tier {tier[s]}" + (f", {hosts} host(s)" if hosts else ""),
                ("AT FAULT: " + named[f"switch:{s}"]) if at_fault else ""]))
            colours.append(None if e is None or e.median is None else round(e.median, 4))
            labels.append("" if tier[s] in crowded and not at_fault else s)
        out.append({
            "type": "scatter", "mode": "markers+text",
            "name": "switch at fault" if at_fault else "switch",
            "x": [place[s][0] for s in chosen], "y": [place[s][1] for s in chosen],
            "text": labels, "textposition": "top center", "customdata": custom,
            "hovertemplate": HOVER,
            "marker": {"symbol": "square", "size": 20 if at_fault else 14,
                       "color": FAULT if at_fault else colours, "cmin": 0, "cmax": 1.2,
                       "colorscale": SCALE, "line": {"width": 2, "color": "#222"}}})
    return out


def _hosts(topology: Any, stats: dict[str, Any], place: dict[str, tuple[float, float]],
           spot: Any, blamed: dict[str, list[str]],
           named: dict[str, str]) -> list[dict[str, Any]]:
    """Hosts one by one below their switch (few), else a summary per switch (many)."""
    per_switch: dict[str, list[str]] = {}
    for host, switch in topology.hosts.items():
        per_switch.setdefault(switch, []).append(host)
    groups = sorted(per_switch.items(), key=lambda kv: _natural(kv[0]))
    xs, ys, text, custom, red, lines_x, lines_y = [], [], [], [], [], [], []
    if len(topology.hosts) <= MAX_HOSTS:
        for switch, members in groups:
            members.sort(key=_natural)
            x0, y0 = place[switch]
            for i, host in enumerate(members):
                x, y = spot(switch, i, len(members))
                xs.append(x)
                ys.append(y)
                lines_x += [x0, x, None]
                lines_y += [y0, y, None]
                text.append(host)
                fault = host in blamed or f"host:{host}" in named
                red.append(fault)
                said = "; ".join(blamed.get(host, [])) or named.get(f"host:{host}", "")
                custom.append(_evidence(stats, f"host:{host}", [
                    f"behind {switch}", ("AT FAULT: " + said) if fault else ""]))
        kind = "host"
    else:
        for switch, members in groups:
            x0, y0 = place[switch]
            x, y = spot(switch, 0, 1)
            bad = sorted(h for h in members if h in blamed or f"host:{h}" in named)
            xs.append(x)
            ys.append(y)
            lines_x += [x0, x, None]
            lines_y += [y0, y, None]
            text.append(f"{len(members)}" + (f" ({len(bad)} blamed)" if bad else ""))
            red.append(bool(bad))
            measured = [stats[f"host:{h}"] for h in members
                        if f"host:{h}" in stats and stats[f"host:{h}"].median is not None]
            low = min(measured, key=lambda e: e.median) if measured else None
            custom.append([f"{len(members)} hosts behind {switch}",
                           f"{len(bad)} blamed: {', '.join(bad[:5])}"
                           + (" ..." if len(bad) > 5 else "") if bad else "none blamed",
                           f"lowest host median: {low.name} {low.median:.2f} x healthy"
                           if low else "no host measured", ""])
        kind = "hosts"
    if not xs:
        return []
    out = [{"type": "scatter", "mode": "lines", "name": "access links", "x": lines_x,
            "y": lines_y, "hoverinfo": "skip", "showlegend": False,
            "line": {"color": "#cccccc", "width": 1}}]
    for fault in (False, True):
        keep = [i for i, r in enumerate(red) if r == fault]
        if not keep:
            continue
        out.append({"type": "scatter", "mode": "markers+text" if kind == "hosts" or
                    len(xs) <= 24 else "markers",
                    "name": f"{kind} blamed" if fault else kind,
                    "x": [xs[i] for i in keep], "y": [ys[i] for i in keep],
                    "text": [text[i] for i in keep], "textposition": "bottom center",
                    "customdata": [custom[i] for i in keep], "hovertemplate": HOVER,
                    "marker": {"symbol": "circle", "size": 12 if fault else 8,
                               "color": FAULT if fault else "#777777"}})
    return out
