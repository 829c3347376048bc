"""The fabric's picture: an N x N heatmap of each pair against the fabric's median (client rows,
server columns), slow and failed pairs marked, and per host its median in each role beside it.

Past ``MAX_SIDE`` endpoints the matrix is drawn in tiles (each the worst pair of a block of
hosts), so a 1,024-host fabric stays a page that opens; the marked outliers are never tiled
away: they are drawn one by one, by name.
"""

from __future__ import annotations

import math
from typing import Any

MAX_SIDE = 256          # endpoints drawn one per row and column; beyond, tiles of hosts
MAX_MARKS = 2000        # slow or failed pairs marked individually


def fabric_chart(matrix: Any) -> dict[str, Any] | None:
    """A plotly figure (dict) of one analysis.fabric.Matrix, or None without pairs."""
    import numpy as np

    cells = matrix.cells
    if cells is None or not len(cells):
        return None
    names = list(matrix.endpoints)
    index = {n: i for i, n in enumerate(names)}
    n = len(names)
    step = max(1, math.ceil(n / MAX_SIDE))
    side = math.ceil(n / step)
    z = np.full((side, side), np.nan)
    rows = np.array([index[c] // step for c in cells["client"]], dtype=int)
    cols = np.array([index[s] // step for s in cells["server"]], dtype=int)
    ratio = cells["ratio"].to_numpy(dtype=float)
    finite = ~np.isnan(ratio)
    # The worst pair of each tile: a tile of good pairs cannot hide a bad one.
    np.fmin.at(z, (rows[finite], cols[finite]), ratio[finite])
    labels = names if step == 1 else [f"{names[i * step]}..{names[min((i + 1) * step, n) - 1]}"
                                      for i in range(side)]
    z_list = [[None if math.isnan(v) else round(float(v), 4) for v in row] for row in z]
    data: list[dict[str, Any]] = [{
        "type": "heatmap", "x": labels, "y": labels, "z": z_list, "zmin": 0, "zmax": 1.2,
        "colorscale": [[0, "#b2182b"], [0.75, "#fddbc7"], [0.83, "#f7f7f7"], [1, "#2166ac"]],
        "colorbar": {"title": {"text": "x healthy"}, "x": 0.72},
        "hovertemplate": "%{y} -> %{x}<br>%{z:.2f} x the fabric's healthy rate<extra></extra>",
        "name": "pairs"}]
    marks = cells[cells["slow"] | cells["value"].isna()].head(MAX_MARKS)
    if len(marks):
        data.append({
            "type": "scatter", "mode": "markers", "name": "slow or failed pair",
            "x": [labels[index[s] // step] for s in marks["server"]],
            "y": [labels[index[c] // step] for c in marks["client"]],
            "text": [f"{c} -> {s}: " + (f"{r:.2f} x healthy ({cause})" if r == r else
                                         f"failed: {why}")
                     for c, s, r, cause, why in zip(marks["client"], marks["server"],
                                                    marks["ratio"], marks["cause"],
                                                    marks["reason"])],
            "hovertemplate": "%{text}<extra></extra>",
            "marker": {"symbol": "x", "size": 9 if side <= 64 else 5, "color": "black"}})
    at_fault = {(h.name, h.role) for h in matrix.faulty_hosts}      # what localize named
    for role, colour in zip(matrix.roles, ("#4d4d4d", "#999999")):
        hosts = {h.name: h for h in matrix.hosts if h.role == role}
        shown = [h for h in hosts.values() if step == 1 or (h.name, role) in at_fault]
        data.append({
            "type": "bar", "orientation": "h", "xaxis": "x2", "yaxis": "y",
            "name": f"host median, {role}",
            "y": [labels[index[h.name] // step] for h in shown],
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
        title += f" (tiles of {step} hosts, each its worst pair)"
    size = min(900, 200 + 12 * side)
    return {"data": data, "layout": {
        "title": {"text": title}, "height": size + 150,
        "xaxis": {"domain": [0, 0.7], "title": {"text": "server (receives)"}, "type": "category",
                  "showticklabels": side <= 64},
        "yaxis": {"title": {"text": "client (sends)"}, "type": "category",
                  "autorange": "reversed", "showticklabels": side <= 64},
        "xaxis2": {"domain": [0.8, 1], "title": {"text": "host median / healthy rate"},
                   "range": [0, 1.2]},
        "barmode": "group", "legend": {"orientation": "h", "y": -0.3}}}


def _short(elements: list[str]) -> str:
    names = [e.split(":", 1)[1] for e in elements]
    return " / ".join(names[:2]) + (" ..." if len(names) > 2 else "")
