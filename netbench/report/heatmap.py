"""The fabric's picture: an N x N heatmap of each pair against the fabric's median (client rows,
server columns), slow and failed pairs marked, and per host its median in each role beside it.

With the fabric's shape (given with --topology, or inferred from the pairs) the hosts are
ordered by their switch and each switch's block is outlined and named on both axes: a slow
trunk reads as whole blocks gone red, a slow host as one row or column.

Past ``MAX_SIDE`` endpoints the matrix is drawn in tiles (each the worst pair of a block of
hosts, never across a switch), so a 1,024-host fabric stays a page that opens; the marked
outliers are never tiled away: they are drawn one by one, by name.
"""

from __future__ import annotations

import html
import math
import re
from typing import Any

from netbench.textfile import printable

MAX_SIDE = 256          # endpoints drawn one per row and column; beyond, tiles of hosts
MAX_MARKS = 2000        # slow or failed pairs marked individually
MAX_NAMED = 48          # switches named beside their band; past it, the lines only


def fabric_chart(matrix: Any) -> dict[str, Any] | None:
    """A plotly figure (dict) of one analysis.fabric.Matrix, or None without pairs. With the
    matrix's topology (given, or inferred from the pairs) the endpoints are ordered by their
    switch, then name, and each switch's block is banded and named on both axes. Tiles never
    cross a switch's boundary, unless the switches alone are more than ``MAX_SIDE`` (then
    the tiles run on across them and no bands are drawn; the title says so)."""
    import numpy as np

    cells = matrix.cells
    if cells is None or not len(cells):
        return None
    names, bands = _ordered(matrix)
    n = len(names)
    tiles, crossed = _tiles([end - start for _, start, end in bands] or [n], n)
    if crossed:
        bands = []
    tile_of = np.empty(n, dtype=int)
    for number, (first, last) in enumerate(tiles):
        tile_of[first:last] = number
    side = len(tiles)
    step = max(last - first for first, last in tiles)
    position = {name: i for i, name in enumerate(names)}
    index = {name: int(tile_of[i]) for i, name in enumerate(names)}
    z = np.full((side, side), np.nan)
    rows = np.array([index[c] for c in cells["client"]], dtype=int)
    cols = np.array([index[s] for s in cells["server"]], dtype=int)
    ratio = cells["ratio"].to_numpy(dtype=float)
    finite = ~np.isnan(ratio)
    # The worst pair of each tile: a tile of good pairs cannot hide a bad one.
    np.fmin.at(z, (rows[finite], cols[finite]), ratio[finite])
    labels = [names[first] if last - first == 1 else f"{names[first]}..{names[last - 1]}"
              for first, last in tiles]
    z_list = [[None if math.isnan(v) else round(float(v), 4) for v in row] for row in z]
    data: list[dict[str, Any]] = [{
        "type": "heatmap", "x": labels, "y": labels, "z": z_list, "zmin": 0, "zmax": 1.2,
        "colorscale": [[0, "#b2182b"], [0.75, "#fddbc7"], [0.83, "#f7f7f7"], [1, "#2166ac"]],
        "colorbar": {"title": {"text": "x healthy"}, "x": 0.74 if bands else 0.72},
        "hovertemplate": "%{y} -> %{x}<br>%{z:.2f} x the fabric's healthy rate<extra></extra>",
        "name": "pairs"}]
    marks = cells[cells["slow"] | cells["value"].isna()].head(MAX_MARKS)
    if len(marks):
        data.append({
            "type": "scatter", "mode": "markers", "name": "slow or failed pair",
            "x": [labels[index[s]] for s in marks["server"]],
            "y": [labels[index[c]] for c in marks["client"]],
            "text": [f"{c} -> {s}: " + (f"{r:.2f} x healthy ({cause})" if r == r else
                                         f"failed: {why}")
                     for c, s, r, cause, why in zip(marks["client"], marks["server"],
                                                    marks["ratio"], marks["cause"],
                                                    marks["reason"])],
            "hovertemplate": "%{text}<extra></extra>",
            "marker": {"symbol": "x", "size": 9 if side <= 64 else 5, "color": "black"}})
    at_fault = {(h.name, h.role) for h in matrix.faulty_hosts}      # what localize named
    for role, colour in zip(matrix.roles, ("#4d4d4d", "#999999")):
        hosts = {h.name: h for h in matrix.hosts if h.role == role and h.name in position}
        shown = [h for h in hosts.values() if step == 1 or (h.name, role) in at_fault]
        shown.sort(key=lambda h: position[h.name])
        data.append({
            "type": "bar", "orientation": "h", "xaxis": "x2", "yaxis": "y",
            "name": f"host median, {role}",
            "y": [labels[index[h.name]] for h in shown],
            "x": [h.median_ratio for h in shown],
            "marker": {"color": ["#b2182b" if (h.name, role) in at_fault else colour
                                 for h in shown]},
            "hovertemplate": "%{y} " + role + ": %{x:.2f} x healthy<extra></extra>"})
    faulty = [f"{h.name} ({h.role})" for h in matrix.faulty_hosts] + [
        _short(s.elements) for s in matrix.suspects]
    healthy = matrix.localization.reference if matrix.localization else None
    title = (f"{matrix.benchmark} {matrix.metric}: {n} endpoints, {len(cells)} pairs vs the "
             f"healthy {healthy:.4g} {matrix.unit}; at fault: {', '.join(faulty) or 'none'}"
             if healthy is not None else f"{matrix.benchmark}: no measured pair")
    if step > 1:
        title += (f" (tiles of up to {step} hosts, each its worst pair"
                  + (", across switches: more switches than fit)" if crossed else ")"))
    topology = getattr(matrix, "topology", None)
    if bands:
        title += ("<br>hosts grouped as the pairs imply (topology inferred: give --topology)"
                  if topology is not None and topology.inferred else
                  "<br>hosts grouped by their switch")
    size = min(900, 200 + 12 * side)
    layout: dict[str, Any] = {
        "title": {"text": title}, "height": size + 150,
        "xaxis": {"domain": [0, 0.7], "title": {"text": "server (receives)"}, "type": "category",
                  "showticklabels": side <= 64},
        "yaxis": {"title": {"text": "client (sends)"}, "type": "category",
                  "autorange": "reversed", "showticklabels": side <= 64},
        "xaxis2": {"domain": [0.82 if bands else 0.8, 1],
                   "title": {"text": "host median / healthy rate"}, "range": [0, 1.2]},
        "barmode": "group", "legend": {"orientation": "h", "y": -0.3}}
    if bands:
        layout.update(_bands(bands, tile_of, side))
    return {"data": data, "layout": layout}


def _ordered(matrix: Any) -> tuple[list[str], list[tuple[str, int, int]]]:
    """The endpoints in drawing order, and the bands: (switch, first, end) positions.
    Without a topology, or with one switch, the names as they are and no bands."""
    names = list(matrix.endpoints)
    topology = getattr(matrix, "topology", None)
    if topology is None:
        return names, []
    switch_of = {}
    for name in names:
        key = topology.host_key(name)
        switch_of[name] = topology.hosts[key] if key is not None else None
    # Endpoints the topology lacks last, in a band of their own.
    order = sorted(names, key=lambda e: (switch_of[e] is None, _natural(switch_of[e] or ""),
                                         _natural(e)))
    bands: list[tuple[str, int, int]] = []
    for i, name in enumerate(order):
        switch = switch_of[name]
        label = "(not in the topology)" if switch is None else \
            switch.split("(", 1)[0] if topology.inferred else switch
        if bands and bands[-1][0] == label:
            bands[-1] = (label, bands[-1][1], i + 1)
        else:
            bands.append((label, i, i + 1))
    return order, bands if len(bands) > 1 else []


def _natural(text: str) -> list[Any]:
    """leaf2 before leaf10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _tiles(sizes: list[int], n: int) -> tuple[list[tuple[int, int]], bool]:
    """Tiles as (first, end) positions, at most ``MAX_SIDE`` of them, each inside one band
    of ``sizes`` endpoints; True where that cannot be (more bands than ``MAX_SIDE``) and the
    tiles run across bands instead."""
    step = max(1, math.ceil(n / MAX_SIDE))

    def count(step: int) -> int:
        return sum(math.ceil(k / step) for k in sizes)

    while count(step) > MAX_SIDE and step < max(sizes):
        step += 1
    if count(step) > MAX_SIDE:
        step = math.ceil(n / MAX_SIDE)
        return [(i, min(i + step, n)) for i in range(0, n, step)], True
    tiles, start = [], 0
    for k in sizes:
        tiles += [(start + i, start + min(i + step, k)) for i in range(0, k, step)]
        start += k
    return tiles, False


def _bands(bands: list[tuple[str, int, int]], tile_of: Any, side: int) -> dict[str, Any]:
    """Plotly shapes and annotations: each switch's diagonal block outlined, a line where
    one switch's hosts end on both axes, and the switch named above the columns and right
    of the rows (past ``MAX_NAMED`` switches the lines only: the names would overlap)."""
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    edge = {"color": "#333", "width": 1}
    for number, (label, first, end) in enumerate(bands):
        a, b = int(tile_of[first]) - 0.5, int(tile_of[end - 1]) + 0.5
        shapes.append({"type": "rect", "xref": "x", "yref": "y", "x0": a, "x1": b, "y0": a,
                       "y1": b, "line": {"color": "#000", "width": 2}, "name": label})
        if number:
            shapes += [{"type": "line", "xref": "x", "yref": "y", "x0": a, "x1": a,
                        "y0": -0.5, "y1": side - 0.5, "line": edge},
                       {"type": "line", "xref": "x", "yref": "y", "x0": -0.5,
                        "x1": side - 0.5, "y0": a, "y1": a, "line": edge}]
        if len(bands) <= MAX_NAMED:
            # Plotly reads markup in annotations: a switch name is shown as text.
            mid, text = (a + b) / 2, html.escape(printable(label), quote=False)
            notes += [{"xref": "x", "yref": "paper", "x": mid, "y": 1, "yanchor": "bottom",
                       "text": text, "showarrow": False, "font": {"size": 11},
                       "textangle": -30 if len(bands) > 8 else 0},
                      {"xref": "paper", "yref": "y", "x": 0.7, "y": mid, "xanchor": "left",
                       "text": text, "showarrow": False, "font": {"size": 11},
                       "textangle": 90}]
    return {"shapes": shapes, "annotations": notes, "margin": {"t": 140}}


def _short(elements: list[str]) -> str:
    names = [e.split(":", 1)[1] for e in elements]
    return " / ".join(names[:2]) + (" ..." if len(names) > 2 else "")
