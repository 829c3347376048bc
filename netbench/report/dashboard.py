"""One self-contained HTML dashboard (plotly.js inlined: works offline, no CDN).

Charts, from whatever families the store holds (stays generic over the schema): bandwidth vs
message size per transport with the TCP reference overlaid, latency percentiles vs size, CPU
cost per Gbit/s for RDMA and TCP, collective busbw vs size, host-to-GPU vs the link bound,
baseline vs candidate coloured by verdict, and an environment panel with what was skipped and
why. It draws the latest run (or the one asked for); values only, never raw samples, so the
file stays small for any store, and the page says so. Each view (a label, a run, a comparison)
draws only its own labels' runs, trend and skips included; every label, host and name reaches
the page as text (control characters written out, markup escaped), never as HTML.
"""

from __future__ import annotations

import html
import json
import math
import unicodedata
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import lru_cache
from pathlib import Path
from typing import Any

from netbench import stats
from netbench.analysis.cases import (
    case_names,
    case_text,
    headlines,
    is_headline,
    param_text,
)
from netbench.analysis.verdict import Verdict
from netbench.errors import NetbenchError
from netbench.fingerprint import Fingerprint
from netbench.report.console import counter_growth, headline_first, loopback_errors
from netbench.stats import median_sorted
from netbench.textfile import write_atomic
from netbench.units import readable

# One colour per Verdict (a test holds them together); this order is the legend's.
VERDICT_COLOURS = {Verdict.LOST: "#1a1a1a", Verdict.REGRESSED: "#d62728",
                   Verdict.IMPROVED: "#2ca02c", Verdict.UNCHANGED: "#7f7f7f",
                   Verdict.NOISY: "#ff7f0e",
                   Verdict.UNVERIFIED: "#c7c7c7", Verdict.DISTURBED: "#9467bd"}


# A verdict's colour as text on white: the light greys of the bars darkened to be read.
TEXT_COLOURS = {**VERDICT_COLOURS, Verdict.UNVERIFIED: "#6b6b6b", Verdict.UNCHANGED: "#595959"}


# Series colours: none of them a verdict's, so a trend's verdict marker never reads as a series.
PALETTE = ("#1f77b4", "#17becf", "#8c564b", "#e377c2", "#bcbd22", "#393b79", "#637939",
           "#8c6d31", "#843c39", "#7b4173", "#3182bd", "#e6550d")
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "triangle-down", "pentagon")
_SHOWN = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def visible(text: Any) -> str:
    """Text with every control or format character written out (\\x1b, \\n, \\u202e): a
    label or host name shows what it holds, and never moves the cursor, colours or reorders
    what follows it."""
    return "".join(_SHOWN.get(c) or (f"\\x{ord(c):02x}" if ord(c) < 0x100 else
                                     f"\\u{ord(c):04x}")
                   if unicodedata.category(c) in ("Cc", "Cf", "Zl", "Zp") else c
                   for c in str(text))


def plot_text(text: Any) -> str:
    """Text for plotly, which reads <b>, <br>, <a href> in names, labels and hovers as
    markup: written out, escaped (plotly turns &lt; back into a shown <)."""
    return html.escape(visible(text), quote=False)


_TEXT_KEYS = ("name", "text", "hovertext", "customdata", "x", "y", "labels")


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return plot_text(value)
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value


def _safe(fig: dict[str, Any] | None) -> dict[str, Any] | None:
    """The figure with every data string (names, categories, hover data) shown as text, never
    as markup. Annotations are written escaped where they are made."""
    if fig is None:
        return None
    data = [{**t, **{k: _escaped(t[k]) for k in _TEXT_KEYS if k in t}} for t in fig["data"]]
    layout = dict(fig["layout"])
    for key, axis in fig["layout"].items():
        if key.startswith(("xaxis", "yaxis")) and isinstance(axis, dict):
            layout[key] = {**axis, **{k: _escaped(axis[k]) for k in ("categoryarray",
                                                                     "ticktext") if k in axis}}
    title = layout.get("title") or {}
    if title.get("text"):
        # Left, in lines short enough to end before plotly's toolbar (top right) at 800 px,
        # the top margin grown to hold them: a long title never runs under it or off the page.
        # From the container's top, the plot's top margin below every line of it (and
        # below what the chart keeps there itself: a heatmap's switch names).
        lines = _wrapped(str(title["text"]), TITLE_CHARS)
        layout["title"] = {**title, "text": "<br>".join(lines), "x": 0.0, "xanchor": "left",
                           "xref": "container", "y": 1.0, "yanchor": "top",
                           "yref": "container", "pad": {"t": 18, "l": 10},
                           "font": {"size": 15}}
        margin = dict(layout.get("margin") or {})
        kept = 40 if layout.get("annotations") else 0       # labels drawn above the plot
        margin["t"] = max(int(margin.get("t") or 0), 20 * len(lines) + 30 + kept)
        layout["margin"] = margin
    return {**fig, "data": data, "layout": layout}


TITLE_CHARS = 52    # a 15 px title's line that ends left of the toolbar in a 735 px chart


def _wrapped(text: str, most: int) -> list[str]:
    """``text`` in lines of at most ``most`` characters, broken between words."""
    lines: list[str] = []
    for word in text.split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= most:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return lines


def _tick(value: float) -> str:
    return f"{value:,.0f}" if value >= 1 and value == round(value) else f"{value:.3g}"


def value_axis(values: Sequence[float]) -> dict[str, Any]:
    """A log axis of values ticked at 1-2-5 steps, each written in full (plotly's own log
    ticks label the minor ones as bare digits: 100, 9, 8 ... 2 for 900 ... 200)."""
    known = [float(v) for v in values if v is not None and v == v and 0 < v < math.inf]
    if not known:
        return {"type": "log"}
    low, high = min(known), max(known)
    exps = range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
    ticks: list[float] = []

    def near(ts: list[float]) -> int:
        return sum(low / 1.05 <= t <= high * 1.05 for t in ts)

    for mantissas in ((1,), (1, 2, 5), (1, 2, 3, 5, 7),
                      (1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 9)):
        every = [m * 10.0 ** e for e in exps for m in mantissas]
        ticks = [t for t in every if low / 1.3 <= t <= high * 1.3]
        if near(ticks) >= 3 or (len(ticks) >= 4 and near(ticks) >= 2):
            break
    if len(ticks) > 10:                    # many decades: powers of ten only
        ticks = [t for t in ticks if f"{t:e}".startswith("1")] or ticks
    if near(ticks) < 2:                    # a narrow band: even steps across it
        span = high * 1.2 - low / 1.2
        step = 10.0 ** math.floor(math.log10(span / 4))
        step *= next(m for m in (1, 2, 5, 10) if span / (m * step) <= 5)
        ticks = [round(k * step, 12) for k in range(math.ceil(low / 1.2 / step),
                                                     math.floor(high * 1.2 / step) + 1)]
    # The range holds the ticks chosen near the data: plotly's own autorange could stop
    # short of both (a fresh clone's CI drew a CPU chart whose band held no tick at all).
    near_ticks = [t for t in ticks if low / 1.05 <= t <= high * 1.05]
    lo, hi = min([low, *near_ticks]), max([high, *near_ticks])
    pad = 0.05 * max(math.log10(hi / lo), 0.1)
    return {"type": "log", "tickvals": ticks, "ticktext": [_tick(t) for t in ticks],
            "range": [math.log10(lo) - pad, math.log10(hi) + pad]}


def _style(traces: list[dict[str, Any]]) -> None:
    """Each series its own colour and marker, markers and lines smaller the later a series is
    drawn: two equal series stay visible, the later inside the earlier."""
    n = max(len(traces) - 1, 1)
    for i, t in enumerate(traces):
        if t.get("type", "scatter") != "scatter":
            continue
        colour, k = PALETTE[i % len(PALETTE)], (n - i) / n
        t["line"] = {**t.get("line", {}), "color": colour, "width": round(1 + 2.5 * k, 2)}
        t["marker"] = {**t.get("marker", {}), "color": colour, "size": round(6 + 8 * k, 1),
                       "symbol": SYMBOLS[i % len(SYMBOLS)]}


def _ok(rows: Any) -> Any:
    return rows[(rows["status"] == "ok") & rows["value"].notna()]


def _series(rows: Any, benchmarks: Sequence[str] | None, metric: str) -> dict[str, Any]:
    """{benchmark: rows of that metric, sorted by msg_size}."""
    ok = _ok(rows)
    sel = ok[ok["metric"] == metric]
    if benchmarks is not None:
        sel = sel[sel["benchmark"].isin(benchmarks)]
    return {name: group.sort_values("msg_size") for name, group in sel.groupby("benchmark")}


def size_axis(sizes: Sequence[float]) -> dict[str, Any]:
    """A log axis of message sizes ticked at powers of two as people write them (4K, 64K,
    1M), at most 8 ticks, instead of plotly's 2 3 ... 100k."""
    from netbench.api import format_size

    known = [float(s) for s in sizes if s is not None and s == s and s > 0]
    if not known:
        return {"type": "log"}
    low, high = math.floor(math.log2(min(known))), math.ceil(math.log2(max(known)))
    stride = max(1, math.ceil((high - low + 1) / 8))
    exps = [e for e in range(low, high + 1) if (e - low) % stride == 0]
    return {"type": "log", "tickvals": [2.0 ** e for e in exps],
            "ticktext": [format_size(2 ** e) for e in exps]}


def _figure(traces: list[dict[str, Any]], title: str, xtitle: str, ytitle: str,
            log_x: bool = True, log_y: bool = False) -> dict[str, Any]:
    xaxis: dict[str, Any] = {"title": {"text": xtitle}}
    if log_x:
        xaxis.update(size_axis([x for t in traces for x in t.get("x", [])]))
    else:
        xaxis["type"] = "category"
    yaxis: dict[str, Any] = {"title": {"text": ytitle}, "type": "linear"}
    if log_y:
        yaxis.update(value_axis(_extent(traces)))
    # showlegend: plotly hides the legend of a one-trace chart, and with it the series' name.
    return {"data": traces, "layout": {
        "title": {"text": title}, "height": 420, "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "xaxis": xaxis, "yaxis": yaxis, "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25}}}


def _extent(traces: Sequence[dict[str, Any]]) -> list[float]:
    """Every y a chart draws, error bars' ends included."""
    out: list[float] = []
    for t in traces:
        err = t.get("error_y") or {}
        for i, y in enumerate(t.get("y", [])):
            if y is None or y != y:
                continue
            out.append(y)
            if err.get("array"):
                out += [y + err["array"][i], y - err["arrayminus"][i]]
    return out


def single_size(fig: dict[str, Any] | None) -> dict[str, Any] | None:
    """A size chart whose series all sit at one size: that size as a category and the series
    side by side (plotly's scattermode group), never stacked on one x; a bound line becomes
    a wide dash in its own slot (a line from one x to the same x is not drawn)."""
    from netbench.api import format_size

    if fig is None or fig["layout"]["xaxis"].get("type") != "log":
        return fig
    xs = {x for t in fig["data"] for x in t.get("x", []) if x is not None and x == x}
    if len(xs) != 1:
        return fig
    size = next(iter(xs))
    cat = format_size(int(size)) if float(size).is_integer() else str(size)
    data = []
    for t in fig["data"]:
        t = {**t, "x": [cat] * len(t.get("x", [])), "offsetgroup": t.get("name", "")}
        if t.get("mode") == "lines":        # a flat bound over [size, size]: one wide dash
            colour = t.get("line", {}).get("color", "#555")
            t.update(x=[cat], y=t["y"][:1], mode="markers", marker={
                "symbol": "line-ew-open", "size": 36, "color": colour,
                "line": {"width": 3, "color": colour}})
        data.append(t)
    xaxis = {"title": fig["layout"]["xaxis"].get("title", {}), "type": "category"}
    return {**fig, "data": data, "layout": {**fig["layout"], "xaxis": xaxis,
                                            "scattermode": "group", "scattergap": 0.3}}


_HOVER = ("<b>%{fullData.name}</b><br>%{customdata[0]}: %{y:.4g} %{customdata[1]}"
          "<br>%{customdata[2]}<br>run %{customdata[3]}<br>n %{customdata[4]}<extra></extra>")


def _error(metric: str, values: Sequence[float], samples: Sequence[Any]) -> tuple[float, float]:
    """(above, below) the drawn point: the spread of repeats where there are several, else the
    95% interval from the stored samples (the median's by order statistics for p50, the
    mean's otherwise); 0 without evidence."""
    values = sorted(values)
    mid = median_sorted(values)
    if len(values) > 1:
        return values[-1] - mid, mid - values[0]
    data = [float(x) for s in samples if s is not None for x in s]
    if len(data) < 2:
        return 0.0, 0.0
    if metric == "lat_p50":
        data.sort()
        n = len(data)
        half = 1.96 * math.sqrt(n) / 2
        lo, hi = data[max(int(n / 2 - half), 0)], data[min(int(n / 2 + half), n - 1)]
        return max(hi - mid, 0.0), max(mid - lo, 0.0)
    width = stats.ci95_halfwidth(data)
    return (width, width) if width == width else (0.0, 0.0)


def _line(g: Any, name: str, dash: str = "solid") -> dict[str, Any]:
    """One trace over msg_size from rows of one metric: repeats of a case drawn as one point
    (their median) with their spread as the error bar; hover names case, run and n."""
    cases: dict[tuple[Any, str], dict[str, Any]] = {}
    has_samples = "samples" in g
    for size, params, value, metric, unit, run_id, n, samples in zip(
            g["msg_size"].tolist(), g["params"].tolist(), g["value"].tolist(),
            g["metric"].tolist(), g["unit"].tolist(), g["run_id"].tolist(),
            g["n_samples"].tolist() if "n_samples" in g else [0] * len(g),
            g["samples"].tolist() if has_samples else [None] * len(g)):
        case = cases.setdefault((size, params), {"values": [], "samples": [], "runs": {},
                                                 "metric": metric, "unit": unit, "n": 0})
        case["values"].append(float(value))
        case["runs"][run_id] = True
        case["n"] = max(case["n"], int(n) if n == n and n is not None else 0)
        if samples is not None:
            case["samples"].append(samples)
    points = []
    for (size, params), case in cases.items():
        values = case["values"]
        above, below = _error(str(case["metric"]), values, case["samples"])
        points.append((size, median_sorted(sorted(values)), above, below, [
            str(case["metric"]), str(case["unit"]), case_text(params), ", ".join(case["runs"]),
            f"{len(values)} repeats" if len(values) > 1 else str(case["n"] or "-")]))
    points.sort(key=lambda p: (p[0] is None or p[0] != p[0], p[0]))
    return {"type": "scatter", "mode": "lines+markers", "name": name, "legendgroup": name,
            "line": {"dash": dash}, "x": [p[0] for p in points], "y": [p[1] for p in points],
            "error_y": {"type": "data", "symmetric": False, "array": [p[2] for p in points],
                        "arrayminus": [p[3] for p in points], "visible": True, "thickness": 1},
            "customdata": [p[4] for p in points], "hovertemplate": _HOVER}


def _flat(x: Sequence[Any], y: Sequence[float], name: str, dash: str,
          group: str | None = None) -> dict[str, Any]:
    """A line at given points; ``group`` names what it is whatever its value (a bound), so
    the baseline's twin of it is found by that and drawn in its colour."""
    return {"type": "scatter", "mode": "lines", "x": list(x), "y": list(y), "name": name,
            "legendgroup": group or name, "line": {"dash": dash},
            "hovertemplate": "%{fullData.name}<extra></extra>"}


def memory_bound(rows: Any) -> tuple[float, str] | None:
    """The host memcpy bound in Gbit/s and where it was read: the best host memory copy
    (transport memory, its headline rate) whose buffers are beyond the last-level cache
    (BEYOND_CACHE x, the cache from the run's fingerprint), never a sweep's best point, which
    is a cache's rate. Where no run says its cache size, the largest buffers measured; where
    every size fit in the cache, no bound."""
    from netbench.api import BEYOND_CACHE, format_size

    ok = _ok(rows)
    mem = ok[(ok["transport"] == "memory") & is_headline(ok) & (ok["unit"] == "GB/s")]
    if mem.empty:
        return None
    source = str(mem["benchmark"].iloc[0])
    envs = {text: Fingerprint(text).cpu_cache for text in
            set(mem["env_json"].dropna())} if "env_json" in mem else {}
    beyond, unknown = [], []
    for size, params, value, env in zip(mem["msg_size"].tolist(), mem["params"].tolist(),
                                        mem["value"].tolist(),
                                        mem["env_json"].tolist() if "env_json" in mem
                                        else [None] * len(mem)):
        size = int(size or json.loads(params or "{}").get("bound_size") or 0)
        cache = envs.get(env) if isinstance(env, str) else None
        if cache:
            if size >= BEYOND_CACHE * cache[0]:
                beyond.append((float(value), size, cache))
        elif size:
            unknown.append((float(value), size, None))
    if beyond:
        value, size, cache = max(beyond)
        return value * 8, (f"({source}) at {format_size(size)}, beyond the "
                           f"{format_size(cache[0])} L{cache[1] or '?'}")
    if unknown:
        largest = max(size for _, size, _ in unknown)
        value = max(v for v, size, _ in unknown if size == largest)
        return value * 8, f"({source}) at {format_size(largest)} (cache size not recorded)"
    return None


def bandwidth_chart(rows: Any) -> dict[str, Any] | None:
    traces = []
    for name, g in _series(rows, None, "bw_avg").items():
        traces.append(_line(g, f"{name} (Gbit/s)"))
    # The TCP reference: each TCP bandwidth case's headline, one line per shape of the params
    # that vary besides the size (streams, direction), so cases are never mixed on one line.
    ok = _ok(rows)
    tcp = ok[(ok["transport"] == "tcp") & is_headline(ok) & (ok["unit"] == "Gbit/s")]
    varying = _varying(tcp)
    for name, g in tcp.groupby("benchmark"):
        keys = [k for k in varying.get(name, []) if k != "msg_size"]
        shape = g["params"].map(lambda p, keys=keys: " ".join(
            f"{k}={param_text(k, _parsed(p).get(k))}" for k in keys))
        for text, sub in g.sort_values("msg_size").groupby(shape):
            traces.append(_line(sub, " ".join(filter(None, ["TCP reference", name, text]))
                                + " (Gbit/s)", dash="dash"))
    if not traces:
        return None
    # Loopback TCP cannot beat host memcpy: draw that bound (the memory's copy, in Gbit/s).
    found = memory_bound(rows)
    title = "Bandwidth vs message size (" + ("TCP reference dashed, " if any(
        t["line"]["dash"] == "dash" for t in traces) else "")
    if found is not None:
        bound, where = found
        sizes = sorted({x for t in traces for x in t["x"] if x == x and x is not None})
        traces.append(_flat([sizes[0], sizes[-1]] if sizes else [1, 1 << 20], [bound, bound],
                            f"host memcpy bound {bound:.0f} Gbit/s {where}", "dot",
                            "host memcpy bound"))
        title += "memcpy bound dotted)"
    else:                                # the title promises only what is drawn
        title += "no memcpy bound: no mem.copy beyond the cache in this view)"
    return _figure(traces, title, "message size", "Gbit/s", log_y=True)


def latency_chart(rows: Any) -> dict[str, Any] | None:
    traces = []
    for metric, dash in (("lat_p50", "solid"), ("lat_p99", "dash"), ("lat_p99.9", "dot")):
        for name, g in _series(rows, None, metric).items():
            unit = g["unit"].iloc[0]
            traces.append(_line(g, f"{name} {metric} [{unit}]", dash))
    if not traces:
        return None
    return _figure(traces, "Latency percentiles vs message size", "message size", "us",
                   log_y=True)


def other_chart(rows: Any, drawn: dict[str, Any]) -> dict[str, Any] | None:
    """Every benchmark no other chart drew (a plugin's, say): its headline metric per case,
    one dot each on a log axis, a series per benchmark, so nothing stored goes uncharted."""
    ok = _ok(rows)
    if ok.empty:
        return None
    names = " ".join(str(t.get("name", "")) for fig in drawn.values() if fig
                     for t in fig["data"])
    left = [b for b in dict.fromkeys(ok["benchmark"]) if str(b) not in names]
    traces = []
    for bench in left:
        mine = ok[(ok["benchmark"] == bench) & is_headline(ok[ok["benchmark"] == bench])]
        if mine.empty:
            continue
        cases = case_names([(bench, p) for p in mine["params"]])
        unit = str(mine["unit"].iloc[0])
        traces.append({"type": "scatter", "mode": "markers", "name": f"{bench} ({unit})",
                       "x": [float(v) for v in mine["value"]], "y": cases,
                       "hovertemplate": "%{y}: %{x:.4g} " + html.escape(unit)
                                        + "<extra></extra>"})
    if not traces:
        return None
    return {"data": traces, "layout": {
        "title": {"text": "Other benchmarks: each case's headline figure"},
        "height": 160 + 22 * sum(len(t["y"]) for t in traces),
        "margin": {"l": 20, "r": 20, "t": 50, "b": 60},
        "xaxis": {"title": {"text": "value (unit in the legend)"}, "type": "log"},
        "yaxis": {"type": "category", "automargin": True}, "showlegend": True,
        "legend": {"orientation": "h", "y": -0.25}}}


def cpu_chart(rows: Any) -> dict[str, Any] | None:
    """CPU-seconds per Gbit moved, one dot per case (never two cases on one bar): TCP's own
    metric, RDMA's from its CPU share and bandwidth. A log axis of dots, not bars: a bar's
    length on a log axis means nothing."""
    ok = _ok(rows)
    ok = ok[ok["metric"].isin(["cpu_per_gbit", "cpu_client", "bw_avg"])]
    points: dict[str, list[tuple[str, float]]] = {}
    varying = _varying(ok)
    cases: dict[tuple[str, str, int], dict[str, Any]] = {}
    for bench, run_id, case, metric, value, params, transport in zip(*(
            ok[c].tolist() for c in ("benchmark", "run_id", "case_index", "metric", "value",
                                     "params", "transport"))):
        entry = cases.setdefault((bench, run_id, case), {"params": params,
                                                         "transport": transport})
        entry[metric] = value
    for (bench, _run, _case), by in cases.items():
        params = _parsed(by["params"])
        label = " ".join([bench, *(f"{k}={param_text(k, params.get(k))}"
                                   for k in varying.get(bench, ["msg_size"]))])
        if "cpu_per_gbit" in by:
            value = float(by["cpu_per_gbit"])
        elif "cpu_client" in by and by.get("bw_avg"):
            value = float(by["cpu_client"]) / 100.0 / float(by["bw_avg"])
        else:
            continue
        points.setdefault(by["transport"] or bench.split(".")[0], []).append((label, value))
    if not points:
        return None
    traces, categories = [], []
    for transport, pts in sorted(points.items()):
        merged: dict[str, list[float]] = {}
        for label, value in pts:                       # repeats of a case: one dot, median
            merged.setdefault(label, []).append(value)
        labels = sorted(merged)
        categories += labels
        traces.append({"type": "scatter", "mode": "markers", "name": transport.upper(),
                       "y": labels, "x": [median_sorted(sorted(merged[k])) for k in labels],
                       "marker": {"size": 10},
                       "hovertemplate": "%{y}: %{x:.3g} CPU-s/Gbit<extra>%{fullData.name}"
                                        "</extra>"})
    has = set(points)
    title = ("CPU cost per Gbit/s: RDMA vs TCP (lower is better)" if {"rdma", "tcp"} <= has
             else f"CPU cost per Gbit/s: {', '.join(t.upper() for t in sorted(has))} only "
             f"(no {'RDMA' if 'rdma' not in has else 'TCP'} rows in this run; lower is better)")
    return {"data": traces, "layout": {
        "title": {"text": title}, "height": max(300, 60 + 24 * len(categories)),
        "margin": {"l": 20, "r": 20, "t": 50, "b": 50},
        "xaxis": {"title": {"text": "CPU-s / Gbit (log)"},
                  **value_axis([x for t in traces for x in t["x"]])},
        "yaxis": {"type": "category", "automargin": True, "categoryorder": "array",
                  "categoryarray": categories}, "legend": {"orientation": "h", "y": -0.2}}}


@lru_cache(maxsize=65536)
def _parsed(params: str | None) -> dict[str, Any]:
    """A params JSON string as a dict (cached: a store repeats a few thousand of them)."""
    return json.loads(params or "{}")


def _varying(rows: Any) -> dict[str, list[str]]:
    """Per benchmark, the params whose values differ between its cases: what names a case."""
    seen: dict[str, dict[str, set[str]]] = {}
    for bench, params in set(zip(rows["benchmark"], rows["params"])):
        for key, value in _parsed(params).items():
            seen.setdefault(bench, {}).setdefault(key, set()).add(json.dumps(value))
    return {b: sorted(k for k, v in per.items() if len(v) > 1) or ["msg_size"]
            for b, per in seen.items()}


def busbw_chart(rows: Any) -> dict[str, Any] | None:
    ok = _ok(rows)
    coll = ok[(ok["metric"] == "busbw") & ok["msg_size"].notna()]
    traces = [_line(g, name) for name, g in coll.groupby("benchmark")]
    if not traces:
        return None
    return _figure(traces, "Collective bus bandwidth vs size (nccl-tests busbw)", "bytes",
                   "GB/s")


def h2d_chart(rows: Any) -> dict[str, Any] | None:
    """Copy and feed bandwidth per GPU and host memory kind, each GPU's link bound dashed.

    The bound is the one the benchmark divided by (bw / link_efficiency), so the line is the
    probe's narrowest hop of exactly the GPU that row measured."""
    ok = _ok(rows)
    pcie = ok[ok["transport"] == "pcie"]
    bw = pcie[pcie["metric"] == "bw"]
    if bw.empty:
        return None
    traces, bounds = [], {}
    # Bytes one operation moved (a copy, a loader's batch), as the benchmark declared them.
    ops = bw["op_bytes"] if "op_bytes" in bw else bw["msg_size"]
    bw = bw.assign(copy_bytes=ops.where(ops.notna(), bw["msg_size"]).astype(float),
                   host_mem=bw["params"].map(lambda p: json.loads(p).get("host_mem", "")),
                   run=bw["label"].where(bw["label"].fillna("") != "", bw["suite"]))
    several = bw["run_id"].nunique() > 1
    for (bench, device, mem, _, run), g in bw.groupby(
            ["benchmark", "device", "host_mem", "run_id", "run"]):
        g = g.groupby("copy_bytes", as_index=False)["value"].mean()     # repeats: one point
        name = " ".join(p for p in (bench, device, mem) if p) + (f" ({run})" if several else "")
        traces.append({**_flat(g["copy_bytes"], g["value"], name, "solid"),
                       "mode": "lines+markers"})
    share = pcie[pcie["metric"].isin(["link_efficiency", "link_fraction"])
                 & (pcie["flow"] != "both" if "flow" in pcie else True)   # a bound each way
                 & (pcie["value"] > 0)]
    pairs = share.merge(bw, on=["run_id", "case_index"], suffixes=("_share", ""))
    for device, bw_value, fraction in zip(pairs["device"], pairs["value"],
                                          pairs["value_share"]):
        bounds[device] = bw_value / fraction
    sizes = sorted(bw["copy_bytes"].dropna().unique())
    for device, bound in bounds.items():
        traces.append(_flat(sizes or [0], [bound] * max(len(sizes), 1),
                            f"{device} link bound {bound:.2f} GB/s", "dash",
                            f"{device} link bound"))
    return _figure(traces, "Host-to-GPU feed vs the link's theoretical bound (dashed)", "bytes",
                   "GB/s")


def h2d_missing(rows: Any) -> str:
    """Why there is no H2D chart: the gpu.* skip reason, and the GPU links the probe found."""
    gpu = rows[(rows["transport"] == "pcie") & (rows["status"] != "ok")]
    text = "no host-to-GPU (pcie) rows in this run"
    if not gpu.empty:
        text = (f"{gpu['benchmark'].iloc[0]} {gpu['status'].iloc[0]}: "
                f"{gpu['reason'].iloc[0]}")
    if "env_json" not in rows or rows["env_json"].dropna().empty:
        return text
    env = Fingerprint(rows["env_json"].dropna().iloc[0])
    links = [p.summary for p in env.pcie_paths if p.kind in ("gpu", "display")]
    return text + ("; GPU links found by the probe: " + "; ".join(links) if links else "")


# The order a reader meets verdicts in: what fails the gate, then what nearly does.
WORST_FIRST = (Verdict.LOST, Verdict.REGRESSED, Verdict.DISTURBED, Verdict.NOISY,
               Verdict.UNVERIFIED, Verdict.IMPROVED, Verdict.UNCHANGED)
CHAR_PX = 7.2       # a 12 px label's average character width: the right margin's text column


def comparison_chart(verdicts: Sequence[Any],
                     headline: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """A verdict, read at a glance: one horizontal bar per case's headline metric (and per
    other metric that moved with evidence, as compare prints them; the rest folded into a
    count under the chart), worst first: lost, regressed, then what nearly fails. Each row's
    change and verdict are written in a column of their own right of the plot, never on the
    bar, so a fall's sign and size stay legible at any width. The axis holds the bulk of the
    changes: a bar beyond it stops at the edge, its true change in the column."""
    if not verdicts:
        return None
    shown, folded = headline_first(verdicts, headline)
    shown.sort(key=lambda t: (WORST_FIRST.index(t[2].verdict) if t[2].verdict in WORST_FIRST
                              else len(WORST_FIRST),
                              -abs(t[2].change) if math.isfinite(t[2].change) else -math.inf))
    chosen = [v for _, _, v in shown]
    labels = [f"{name} {v.metric}" for name, _, v in shown]
    seen: dict[str, int] = {}
    for i, label in enumerate(labels):           # identical names would share a row
        seen[label] = seen.get(label, 0) + 1
        if seen[label] > 1:
            labels[i] = f"{label} #{seen[label]}"
    # A lost case measured nothing on the candidate: drawn as all of it gone (-100%).
    changes = [-100.0 if v.verdict == Verdict.LOST else 100 * v.change
               if math.isfinite(v.change) else math.copysign(1e9, v.change) for v in chosen]
    ordered = sorted(abs(c) for c in changes)
    # The scale comes from the measured figures: a count's relative change (an error counter
    # from 3 to 30: +900%, from 0: infinite) says nothing of how far the others moved.
    scaled = sorted(abs(c) for c, v in zip(changes, chosen)
                    if math.isfinite(v.change) and v.unit != "count") or ordered
    bulk = scaled[min(int(0.9 * len(scaled)), len(scaled) - 1)]
    limit = max(1.5 * bulk, 4 * 100 * max(v.threshold for v in chosen), 1.0)
    limit = min(limit, max(ordered) * 1.05) if max(ordered) > 0 else 1.0
    # The axis spans the changes drawn (zero always in view), so a rise alone never opens an
    # empty -limit side, and a fall (at most -100%) never runs the axis to -200%.
    low = max(min(min(changes), 0.0), -limit)
    high = min(max(max(changes), 0.0), limit)
    pad = max(0.05 * (high - low), 1.0)
    # A fall stops at -100%: its margin never runs the axis past -110%, however far a rise
    # on the other side stretched the span (a -100% beside +700% padded it to -117%).
    left = max(low - pad, -110.0) if low >= -100.0 else low - pad
    column = [f"LOST: {_short(v.reason, 28)}" if v.verdict == Verdict.LOST else
              f"{c:+.1f}% {v.verdict}{' (off scale)' if abs(c) > limit else ''}"
              for c, v in zip(changes, chosen)]
    traces = []
    for kind, colour in VERDICT_COLOURS.items():
        picked = [i for i, v in enumerate(chosen) if v.verdict == kind]
        if not picked:
            continue
        traces.append({
            "type": "bar", "orientation": "h", "name": kind, "y": [labels[i] for i in picked],
            "x": [max(min(changes[i], limit), -limit) for i in picked],
            "marker": {"color": colour}, "text": [column[i] for i in picked],
            "textposition": "none",
            "customdata": [[chosen[i].unit, _fmt(chosen[i].baseline),
                            _fmt(chosen[i].candidate), chosen[i].evidence,
                            "-" if chosen[i].p_adjusted is None
                            else f"{chosen[i].p_adjusted:.3g} adjusted",
                            chosen[i].reason if kind == Verdict.LOST
                            else _load_text(chosen[i])]
                           for i in picked],
            "hovertemplate": "%{y}<br>%{text}<br>%{customdata[1]} -> %{customdata[2]} "
                             "%{customdata[0]}<br>evidence %{customdata[3]}, p "
                             "%{customdata[4]}<br>%{customdata[5]}<extra></extra>"})
    # The change and verdict of each row, in a column right of the plot in its verdict's
    # colour: a fall's label never runs into the row names, whatever the width.
    notes = [{"xref": "paper", "x": 1.0, "xanchor": "left", "xshift": 8, "yref": "y",
              "y": label, "text": html.escape(text), "showarrow": False,
              "font": {"size": 12, "color": TEXT_COLOURS.get(v.verdict, "#333333")},
              "align": "left"}
             for label, text, v in zip(labels, column, chosen)]
    if folded:
        notes.append({"xref": "paper", "yref": "paper", "x": 0.0, "y": 0.0, "xanchor": "left",
                      "yanchor": "top", "yshift": -58, "showarrow": False, "align": "left",
                      "font": {"size": 12, "color": "#555555"},
                      "text": "other metrics folded: " + ", ".join(
                          f"{n} {k}" for k, n in sorted(folded.items()))
                      + " (netbench compare --all lists each)"})
    right = int(min(max(len(t) for t in column) * CHAR_PX + 20, 320))
    return {"data": traces, "layout": {
        "title": {"text": "Baseline vs candidate: change per case, worst first", "x": 0.0,
                  "xanchor": "left"},
        "height": 150 + 24 * len(chosen), "barmode": "overlay", "annotations": notes,
        "margin": {"l": 20, "r": right, "t": 40, "b": 90},
        "xaxis": {"title": {"text": "% change (candidate vs baseline)"},
                  "range": [left, high + pad], "zeroline": True},
        "yaxis": {"type": "category", "automargin": True, "categoryorder": "array",
                  "categoryarray": labels[::-1]},
        # The column names each row's verdict in its colour: a legend would only repeat it.
        "showlegend": False}}


def _short(text: str, most: int) -> str:
    return text if len(text) <= most else text[:most - 1].rstrip() + "\u2026"


def _load_text(v: Any) -> str:
    """What the hover says of the host's load on each side (netbench.env.hostload), and why a
    disturbed verdict is not a regression."""
    base, cand = ("not recorded" if b is None else f"{b:.2g}" for b in v.busy)
    text = f"cores busy outside netbench: baseline {base}, candidate {cand}"
    if v.disturbed:
        text += f" (disturbed: {v.disturbed})"
    elif v.needs:
        text += f" ({v.needs})"
    return text


def _fmt(value: float) -> str:
    return f"{value:.4g}" if value == value else "-"


def trend_chart(history: Any) -> dict[str, Any] | None:
    """Each chosen case's metric across runs on a time axis, as a share of its first run's
    value (one axis for every unit): each series its own colour, each judged step's marker
    filled with its verdict's colour (a key in the legend); a dotted line where the
    environment changed, with everything that changed written level above the plot."""
    if history is None or not history.series:
        return None
    traces = []
    names = case_names([(s.benchmark, s.params) for s in history.series])
    kinds: set[str] = set()
    n = max(len(history.series) - 1, 1)
    for i, (name, s) in enumerate(zip(names, history.series)):
        first = s.steps[0].value or 1.0
        colour = PALETTE[i % len(PALETTE)]
        kinds |= {st.verdict for st in s.steps if st.verdict in VERDICT_COLOURS}
        # Up is better on the one axis: a latency (lower is better) as first / value, so a
        # slower link and a longer round trip both fall, never one rising beside the other.
        lower = s.better == "lower"
        traces.append({
            "type": "scatter", "mode": "lines+markers",
            "name": f"{name} {s.metric}" + (" (first / value)" if lower else ""),
            "x": [str(st.started_at) for st in s.steps],
            "y": [(first / st.value if st.value else None) if lower else st.value / first
                  for st in s.steps],
            "line": {"color": colour, "width": round(1 + 2 * (n - i) / n, 2)},
            # Every series starts at 1: the later drawn smaller, so none hides another.
            "marker": {"size": round(7 + 7 * (n - i) / n, 1), "symbol": SYMBOLS[i % len(SYMBOLS)],
                       "color": [VERDICT_COLOURS.get(st.verdict, colour) for st in s.steps],
                       "line": {"color": colour, "width": 1.5}},
            "customdata": [[_fmt(st.value), s.unit, st.run_id, st.label or "-",
                            st.verdict or "first run",
                            "-" if st.change is None else f"{st.change:+.1%}"]
                           for st in s.steps],
            "hovertemplate": "%{fullData.name}<br>%{customdata[0]} %{customdata[1]} "
                             "(%{customdata[5]})<br>run %{customdata[2]}, label "
                             "%{customdata[3]}<br>%{customdata[4]}<extra></extra>"})
    for kind in (k for k in VERDICT_COLOURS if k in kinds):     # the key: legend entries only
        traces.append({"type": "scatter", "mode": "markers", "x": [None], "y": [None],
                       "name": f"verdict: {kind}", "legendgroup": "verdict",
                       "legendgrouptitle": {"text": "marker fill:"}, "hoverinfo": "skip",
                       "marker": {"size": 11, "color": VERDICT_COLOURS[kind],
                                  "line": {"color": "#333", "width": 1}}})
    shapes, notes, lines = [], [], 0
    for run in history.runs:
        if not run["changes"]:
            continue
        when = str(run["started_at"])
        shapes.append({"type": "line", "xref": "x", "yref": "paper", "x0": when, "x1": when,
                       "y0": 0, "y1": 1, "line": {"dash": "dot", "color": "#555"}})
        what = [plot_text(f"{k}: {_was(a)} -> {_was(b)}") for k, a, b in run["changes"]]
        # Level text above the plot, stacked over the notes before it, anchored to stay inside
        # the figure at either edge: a rotated note ran off the chart.
        notes.append({"x": when, "y": 1, "xref": "x", "yref": "paper", "yanchor": "bottom",
                      "xanchor": "auto", "yshift": 4 + 14 * lines, "showarrow": False,
                      "align": "left", "text": "<br>".join(what), "font": {"size": 10},
                      "bgcolor": "rgba(255,255,255,0.85)"})
        lines += len(what)
    return {"data": traces, "layout": {
        "title": {"text": "Trend across runs against each series' first run, up is better "
                          "(dotted: the environment changed)"},
        "height": 460 + 14 * lines, "margin": {"l": 70, "r": 20, "t": 60 + 14 * lines, "b": 60},
        "xaxis": {"title": {"text": "run started (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": "vs first run (up: better)"}}, "shapes": shapes,
        "annotations": notes, "showlegend": True, "legend": {"orientation": "h", "y": -0.25}}}


SOAK_POINTS = 2000      # windows a soak's timeline draws at most: the rest binned, lowest kept


def _binned(timeline: Sequence[tuple[Any, float, float]], most: int = SOAK_POINTS) -> list[Any]:
    """A long soak's windows for drawing: at most ``most`` points, each bin drawn by its
    lowest share (a dip never averages away); judging used every window."""
    if len(timeline) <= most:
        return list(timeline)
    size = -(-len(timeline) // most)
    return [min(timeline[i:i + size], key=lambda w: w[2] if w[2] == w[2] else math.inf)
            for i in range(0, len(timeline), size)]


def soak_chart(cases: Sequence[Any]) -> dict[str, Any] | None:
    """Each burn-in's windows over time as a share of its reference (the line rate, or the
    soak's median window: drawn at 1), dips shaded, windows whose error counters grew marked
    and named on hover; 24 h of 1 s windows drawn binned (SOAK_POINTS), judged whole."""
    if not cases:
        return None
    traces, shapes = [], []
    names = case_names([(c.benchmark, c.params) for c in cases])
    for i, (name, c) in enumerate(zip(names, cases)):
        colour = PALETTE[i % len(PALETTE)]
        drawn = _binned(c.timeline)
        factor, unit = readable([c.reference] if c.reference else [], c.unit)
        traces.append({
            "type": "scattergl" if len(drawn) > 500 else "scatter", "mode": "lines+markers",
            "name": f"{name} {c.metric}", "x": [str(t) for t, _, _ in drawn],
            "y": [s if s == s else None for _, _, s in drawn],
            "line": {"color": colour, "width": 1.5}, "marker": {"size": 4, "color": colour},
            "customdata": [[_fmt(v), c.unit] for _, v, _ in drawn],
            "hovertemplate": "%{fullData.name}<br>%{x}<br>%{customdata[0]} %{customdata[1]} "
                             "(%{y:.2f} of the reference)<extra></extra>"})
        for dip in c.dips:
            end = dip.start + timedelta(seconds=dip.seconds)
            shapes.append({"type": "rect", "xref": "x", "yref": "paper", "x0": str(dip.start),
                           "x1": str(end), "y0": 0, "y1": 1, "line": {"width": 0},
                           "fillcolor": "rgba(178,24,43,0.15)", "layer": "below"})
        marked = [(t, s, text) for dip, text in _dip_events(c)
                  for t, _, s in c.timeline
                  if dip.start <= t <= dip.start + timedelta(seconds=dip.seconds)]
        if marked:
            # A fabric burn-in's "events" are what a pass named (analysis.fabric).
            what = "what the pass named" if all(k.startswith("named: ") for d in c.dips
                                                 for k in d.events) else "error counters grew"
            traces.append({
                "type": "scatter", "mode": "markers", "name": f"{name}: {what}",
                "x": [str(t) for t, _, _ in marked],
                "y": [s if s == s else 0 for _, s, _ in marked],
                "marker": {"symbol": "x", "size": 11, "color": "#b2182b"},
                "text": [e for _, _, e in marked],
                "hovertemplate": "%{x}<br>%{text}<extra></extra>"})
        reference = (f"{_fmt(c.reference * factor)} {unit}" if c.reference else "unknown")
        traces.append({"type": "scatter", "mode": "lines", "hoverinfo": "skip",
                       "name": f"reference: {c.reference_from} ({reference})",
                       "x": [str(c.timeline[0][0]), str(c.timeline[-1][0])], "y": [1, 1],
                       "line": {"color": "#555", "dash": "dash", "width": 1}})
    return {"data": traces, "layout": {
        "title": {"text": "Burn-in: each window against what the link should reach "
                          "(shaded: dips under 0.9 of it; x: error counters grew)"},
        "height": 460, "margin": {"l": 70, "r": 20, "t": 60, "b": 60},
        "xaxis": {"title": {"text": "window started (UTC)"}, "type": "date"},
        "yaxis": {"title": {"text": "of the reference (1: all of it)"}, "rangemode": "tozero"},
        "shapes": shapes, "showlegend": True, "legend": {"orientation": "h", "y": -0.25}}}


def _dip_events(case: Any) -> list[tuple[Any, str]]:
    """Each dip whose windows grew error counters, with them as a hover names them."""
    return [(dip, ", ".join(f"{k} +{v:,}" for k, v in sorted(dip.events.items())[:6]))
            for dip in case.dips if dip.events]


def _was(value: Any) -> str:
    missing = value is None or value == "" or (isinstance(value, float) and value != value) \
        or str(value) in ("nan", "None")
    return "(not recorded)" if missing else str(value)


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(visible(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _busiest(group: Any) -> str:
    """The case of a run that ran beside the most other work (netbench.env.hostload), or '-'."""
    if "load_other_cores" not in group or group["load_other_cores"].isna().all():
        return "-"
    from netbench.env.hostload import BUSY_CORES

    load = group["load_other_cores"].fillna(0)
    if "load_steal_cores" in group:
        load = load + group["load_steal_cores"].fillna(0)
    worst = group.loc[load.idxmax()]
    flag = (" (busy: a change against a side that ran quieter is reported disturbed)"
            if load.max() >= BUSY_CORES else "")
    return f"{load.max():.2g} cores busy outside netbench during {worst['benchmark']}{flag}"


MAX_COUNTER_ROWS = 200      # cases in the counters panel (those with errors first)


def counters_panel(rows: Any) -> str:
    """What the NIC and the kernel counted while each case ran (netbench.env.counters): a
    row per case whose counters grew, the error counters first and marked, then the largest
    of the rest; cases with errors first: a device's (a flap, drops) before the network
    namespace's TCP retransmits alone, then the most grown."""
    if "counters" not in rows:
        return ""
    from netbench.env.counters import netns_wide, nonzero_errors
    from netbench.store import counters_of

    found = []
    for _, r in rows.drop_duplicates(["run_id", "host", "case_index"]).iterrows():
        grown = counters_of(r["counters"])
        if not grown:
            continue
        errors = nonzero_errors(grown)
        others = sorted(((k, v) for k, v in grown.items() if k not in errors),
                        key=lambda kv: (-kv[1] if isinstance(kv[1], int) else 0, kv[0]))[:6]
        rank = (not errors, all(netns_wide(k) for k in errors), -sum(errors.values()))
        found.append((rank, r, errors, others))
    head = "<h2>Counters: what the NIC and the kernel counted while each case ran</h2>"
    if not found:
        return head + ("<p>No case's counters grew (or none were read: --no-counters, "
                       "an older netbench).</p>")
    found.sort(key=lambda t: t[0])
    names = dict(zip([(r["benchmark"], r["params"]) for _, r, _, _ in found],
                     case_names([(r["benchmark"], r["params"]) for _, r, _, _ in found])))
    cells = []
    for _, r, errors, others in found[:MAX_COUNTER_ROWS]:
        case = names[(r["benchmark"], r["params"])] + (
            f" ({r['host']} -> {r['peer']})" if r.get("peer") else "")
        err = ", ".join(counter_growth(k, v) for k, v in sorted(errors.items()))
        rest = ", ".join(counter_growth(k, v) for k, v in others)
        # A loopback case's TCP retransmits are the kernel's queueing, normal there: shown,
        # never shaded as a device's errors are.
        normal = loopback_errors(r, errors)
        kind = "note" if normal else "err" if err else ""
        err += " (loopback: normal)" if normal else ""
        cells.append(f"<tr><td>{html.escape(visible(r['run_id']))}</td>"
                     f"<td>{html.escape(visible(case))}</td>"
                     f"<td class=\"{kind}\">{html.escape(visible(err or '-'))}"
                     f"</td><td>{html.escape(visible(rest))}</td></tr>")
    more = (f"<p class=\"note\">{len(found) - MAX_COUNTER_ROWS} more case(s) not shown.</p>"
            if len(found) > MAX_COUNTER_ROWS else "")
    return (head + "<table id=\"counters\"><thead><tr><th>run</th><th>case</th>"
            "<th>error counters</th><th>the largest others</th></tr></thead><tbody>"
            + "".join(cells) + "</tbody></table>" + more)


def reached_panel(reached: Sequence[Any], error: str = "") -> str:
    """Each case against what its hardware reaches elsewhere (analysis.expectations): the
    figure, its share of the published one and the source; where none holds, why."""
    if not reached and not error:
        return ""
    head = "<h3>Against published figures (what the same hardware reaches elsewhere)</h3>"
    if error:
        return head + f"<p>not judged: {html.escape(visible(error))}</p>"
    names = case_names([(r.benchmark, r.params) for r in reached])
    body = [[name, r.metric, f"{_fmt(r.value)} {r.unit}",
             f"{r.share:.0%}" if r.share is not None else "",
             r.entry.text() if r.entry is not None else r.why]
            for r, name in zip(reached, names)]
    return head + _table(["case", "metric", "measured", "of what this hardware reaches",
                          "published figure (source)"], body)


def environment_panel(rows: Any, latest: Any = None, base: Any = None) -> str:
    """The runs drawn (with --baseline, both sides' runs), the devices they ran on, and what
    the view's runs (and ``latest``, the newest run of the view's label) skipped and why:
    never another label's."""
    import pandas as pd

    sides = [("candidate", rows), ("baseline", base)] if base is not None else [("", rows)]
    runs, vms, skip_rows = [], set(), []
    for side, frame in sides:
        for run_id, group in frame.groupby("run_id", sort=False):
            first = group.iloc[0]
            env = Fingerprint(first["env_json"])
            vms.add(env.virtual_machine)
            runs.append(([side] if base is not None else []) + [
                run_id, first["label"] or "-", first["host"], str(first["started_at"])[:19],
                env.kernel, env.cpu_model,
                ", ".join(sorted(set(group["benchmark"]))),          # whole: wraps, not cut
                ", ".join(f"{k} {v}" for k, v in env.versions.items()),
                _busiest(group)])
        own = [frame] + ([latest] if latest is not None and side != "baseline" else [])
        failed = pd.concat([f[f["status"] != "ok"] for f in own])
        skip_rows += [([side] if base is not None else []) + [r["benchmark"], r["status"],
                                                               r["reason"]]
                      for _, r in failed.drop_duplicates(["benchmark", "reason"]).iterrows()]
    every = pd.concat([f for _, f in sides])
    facts: list[tuple[str, Any]] = []
    for value in sorted({v for v in every["env_nic"].dropna()}):
        facts.append(("NIC", value))
    for value in sorted({v for v in every["env_rdma_device"].dropna()}):
        facts.append(("RDMA device", value))
    for value in sorted({v for v in every["env_gpu"].dropna()}):
        facts.append(("GPU", value))
    for value in sorted(v for v in vms if v):
        facts.append(("virtual machine", f"{value}: link fields are the hypervisor's"))
    for value in sorted({v for v in every["reason"].dropna() if "emulated" in str(v)}):
        facts.append(("note", value))
    head = ["side"] if base is not None else []
    return ("<h2>Environment: what was measured where</h2>" +
            _table(head + ["run", "label", "host", "started (UTC)", "kernel", "cpu",
                           "benchmarks", "versions", "host load (busiest case)"], runs) +
            (_table(["device", "as probed"], facts) if facts else "") +
            "<h2>Skipped and failed, and why</h2>" +
            (_table(head + ["benchmark", "status", "reason"], skip_rows) if skip_rows
             else "<p>Nothing was skipped or failed in this view.</p>") +
            counters_panel(rows))


CHARTS = ("comparison", "trend", "soak", "fabric", "fabric_graph", "bandwidth", "latency",
          "cpu", "busbw", "h2d", "other")
# What a reader calls each chart (the ids are the page's own).
CHART_NAMES = {"comparison": "Comparison", "trend": "Trend across runs",
               "fabric": "Fabric pair matrix", "fabric_graph": "Switch graph",
               "bandwidth": "Bandwidth vs message size", "latency": "Latency vs message size",
               "cpu": "CPU cost per Gbit/s", "busbw": "Collective bus bandwidth",
               "h2d": "Host-to-GPU feed", "other": "Other benchmarks", "soak": "Burn-in timeline"}
_WITH_BASELINE = ("bandwidth", "latency", "busbw", "h2d")
def _charts(rows: Any, matrix: Any = None) -> dict[str, dict[str, Any] | None]:
    # A fabric run's curves are its pairs' median, the spread over pairs as the error bar;
    # the pairs themselves are the heatmap's, its elements the switch graph's.
    from netbench.report.heatmap import fabric_chart
    from netbench.report.switchgraph import switch_graph

    charts = {"bandwidth": bandwidth_chart(rows), "latency": latency_chart(rows),
              "cpu": cpu_chart(rows), "busbw": busbw_chart(rows), "h2d": h2d_chart(rows),
              "fabric": fabric_chart(matrix) if matrix is not None else None,
              "fabric_graph": switch_graph(matrix) if matrix is not None else None}
    charts["other"] = other_chart(rows, charts)
    return charts


def _missing(rows: Any) -> dict[str, str]:
    return {"bandwidth": "no bandwidth rows in this view",
            "latency": "no latency rows in this view",
            "cpu": "no CPU cost rows in this view", "busbw": "no collective rows in this view",
            "h2d": h2d_missing(rows),
            "fabric": "no fabric sweep in this view (netbench fabric: every pair of hosts)",
            "fabric_graph": "no fabric sweep in this view: the switch graph draws a sweep's "
                            "switches and links (netbench fabric --topology FILE names them)",
            "comparison": "no comparison asked for (netbench report --baseline A "
                          "--candidate B)",
            "trend": "a trend needs a case measured in at least two runs of this view's "
                     "label(s)",
            "other": "",      # every benchmark is drawn above: nothing to say
            "soak": "no burn-in in this view (netbench soak: a case window after window)"}


def _with_baseline(fig: dict[str, Any] | None, base: dict[str, Any] | None,
                   sides: tuple[str, str] = ("", "")) -> Any:
    """The candidate's chart with the baseline's curves drawn beside it: each in its
    candidate twin's colour and dash (a latency's dash is its percentile), faded, its markers
    open and larger, so it shows around the candidate's even where the two are equal. Each
    series' name says its side by its labels (``sides``: the candidate's, the baseline's):
    "TCP reference ... [after]" beside "... [before] (baseline)"."""
    if fig is None and base is None:
        return None
    cand_side, base_side = sides
    own = [dict(t) for t in (fig or {"data": []})["data"]]
    _style(own)
    twins = {t.get("legendgroup", t["name"]): t for t in own}
    if base is not None and cand_side:
        for t in own:
            t["legendgroup"] = t.get("legendgroup", t["name"])
            t["name"] = f"{t['name']} [{cand_side}]"
    theirs = [dict(t) for t in (base or {"data": []})["data"]]
    _style(theirs)
    faded = []
    for i, t in enumerate(theirs):
        twin = twins.get(t.get("legendgroup", t["name"]))
        colour = (twin or t)["line"]["color"] if twin else PALETTE[(len(own) + i) % len(PALETTE)]
        marker = {**(twin or t).get("marker", {})}
        name = f"{t['name']} [{base_side}] (baseline)" if base_side else \
            f"{t['name']} (baseline)"
        faded.append({**t, "name": name, "opacity": 0.6,
                      "line": {**t.get("line", {}), "color": colour,
                               "width": (twin or t)["line"]["width"]},
                      "marker": {**marker, "color": colour,
                                 "symbol": f"{marker.get('symbol', 'circle')}-open",
                                 "size": marker.get("size", 8) + 5,
                                 "line": {"width": 2, "color": colour}}})
    shape = fig or base
    layout = dict(shape["layout"])
    if faded and "tickvals" in layout["yaxis"]:       # ticks over both sides' values
        layout["yaxis"] = {**layout["yaxis"], **value_axis(_extent(own + faded))}
    if faded and "tickvals" in layout["xaxis"]:
        layout["xaxis"] = {**layout["xaxis"],
                           **size_axis([x for t in own + faded for x in t.get("x", [])])}
    return {**shape, "data": own + faded, "layout": layout}


def _side(rows: Any) -> str:
    """A side's name in a legend: its labels (or its runs where unlabelled)."""
    labels = sorted({str(x) for x in rows["label"].fillna("") if str(x)})
    return ", ".join(labels) or ", ".join(sorted(set(rows["run_id"].astype(str))))[:40]


def _view(view: Any) -> dict[str, Any]:
    """One view (``analysis.views.View``) as the page's data: its charts, what it does not
    draw and why, its environment."""
    rows, base = view.rows, view.base
    title = visible(view.title) if view.kind == "label" else view.title
    figures = _charts(rows, view.matrix)
    based = _charts(base, view.base_matrix) if base is not None else {}
    sides = (_side(rows), _side(base)) if base is not None else ("", "")
    for name in _WITH_BASELINE:
        figures[name] = _with_baseline(figures[name], based.get(name), sides)
    figures = {k: single_size(v) if k in _WITH_BASELINE else v for k, v in figures.items()}
    figures["comparison"] = comparison_chart(
        view.verdicts, {**headlines(base), **headlines(rows)} if base is not None
        else headlines(rows))
    figures["trend"] = trend_chart(view.trend)
    figures["soak"] = soak_chart(view.soaks)
    missing = _missing(rows)
    runs = view.runs
    return {"title": title,
            "figures": {k: _safe(v) for k, v in figures.items() if v is not None},
            "missing": {k: html.escape(visible(v)) for k, v in missing.items()},
            "env": reached_panel(view.reached, view.reached_error)
            + environment_panel(rows, view.latest, base), "runs": runs,
            "labels": view.labels,
            "note": html.escape(visible(
                f"{title}: {len(rows)} rows from run(s) {', '.join(runs)}; each benchmark "
                "from the latest of them that measured it. Error bars: the spread of "
                "repeats, else the 95% interval from the stored samples."))}


def _key(view: Any) -> str:
    """A view's page address: no control characters in it."""
    return "compare" if view.kind == "compare" else f"{view.kind}:{visible(view.name or '')}"


def render(chosen: Any, out: str | Path) -> dict[str, Any]:
    """Write the dashboard of the views analysis chose (``analysis.views.Views``), one shown
    at a time through the picker; returns what it drew (for the CLI and tests)."""
    from plotly.offline import get_plotlyjs

    views: dict[str, dict[str, Any]] = {}
    for view in chosen.views:
        views.setdefault(_key(view), _view(view))
    first = _key(chosen.views[chosen.chosen])
    blocks = [f'<div class="chart" id="chart-{name}"></div>' for name in CHARTS]
    # What a view does not draw, and why, in one list after what it draws: placeholders
    # between the charts pushed the first chart down the page.
    blocks.append('<div class="empty" id="missing"></div>')
    picker = "".join(f'<option value="{html.escape(k)}"{" selected" if k == first else ""}>'
                     f'{html.escape(v["title"])}</option>' for k, v in views.items())
    page = _PAGE.format(
        title=html.escape("netbench dashboard"), plotly=get_plotlyjs(), blocks="\n".join(blocks),
        picker=picker,
        # No "<" at all inside the script: no label can close it or open a comment there.
        data=json.dumps({"views": views, "chosen": first, "charts": CHARTS,
                         "names": CHART_NAMES},
                        default=_json_default).replace("<", "\\u003c"))
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, lambda tmp: tmp.write_text(page))
    except OSError as exc:
        raise NetbenchError(f"cannot write {out}: {exc.strerror}") from None
    view = views[first]
    drawn = sorted(view["figures"])
    return {"run": ", ".join(view["runs"]), "view": view["title"], "views": list(views),
            "charts": sorted(drawn), "path": str(out), "bytes": len(page)}


def _json_default(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if hasattr(value, "item"):
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 24px; color: #222; }}
.chart {{ border: 1px solid #ddd; margin: 12px 0; }}
.empty {{ border: 1px dashed #bbb; padding: 12px; margin: 12px 0; color: #555; }}
table {{ border-collapse: collapse; margin: 8px 0; }}
td, th {{ border: 1px solid #ddd; padding: 4px 8px; text-align: left; font-size: 13px; }}
.note {{ color: #555; font-size: 13px; }}
td.err {{ color: #b00020; font-weight: bold; background: #fde8eb; }}
</style>
<script>window.nbErrors = 0; window.addEventListener("error", () => window.nbErrors++);</script>
<script>{plotly}</script>
</head><body data-status="loading">
<h1>{title}</h1>
<p><label>View: <select id="view">{picker}</select></label></p>
<p class="note" id="note"></p>
{blocks}
<div id="env"></div>
<script>
const NB = {data};
function facts() {{
  const out = {{}};
  const box = e => {{
    if (!e) return null;
    const b = e.getBoundingClientRect();
    return [b.left, b.top, b.right, b.bottom];
  }};
  for (const div of document.querySelectorAll(".chart")) {{
    if (div.style.display === "none" || !div.data) continue;
    const texts = sel => Array.from(div.querySelectorAll(sel)).map(t => t.textContent);
    out[div.id.slice(6)] = {{
      title: div._fullLayout.title.text, traces: div.data.map(t => t.name),
      xticks: texts(".xtick text"), yticks: texts(".ytick text"),
      bars: div.querySelectorAll(".bars .point").length,
      errorbars: div.querySelectorAll(".errorbars .errorbar").length,
      hover: div.data.map(t => t.hovertemplate || ""),
      customdata: div.data.map(t => (t.customdata || []).length),
      xrange: div._fullLayout.xaxis.range, shapes: (div._fullLayout.shapes || []).length,
      legend: texts(".legend .legendtext"), notes: texts(".annotation-text"),
      points: Array.from(div.querySelectorAll(".scatterlayer .trace")).map(g =>
        Array.from(g.querySelectorAll(".point")).map(p => p.getAttribute("transform"))),
      texts: div.data.map(t => Array.isArray(t.text) ? t.text : []),
      // Where things were drawn (page pixels: left, top, right, bottom), so a test reads
      // overlaps and clipping as a user would see them.
      width: div.getBoundingClientRect().width,
      boxes: {{yticks: Array.from(div.querySelectorAll(".ytick text")).map(box),
               notes: Array.from(div.querySelectorAll(".annotation")).map(a =>
                 [a.textContent, ...box(a.querySelector(".annotation-text") || a)]),
               title: box(div.querySelector(".gtitle")),
               modebar: box(div.querySelector(".modebar")),
               plot: box(div.querySelector(".nsewdrag"))}}}};
  }}
  return out;
}}
function show(key) {{
  const view = NB.views[key];
  document.body.dataset.status = "loading";
  document.getElementById("note").textContent = "";
  document.getElementById("note").innerHTML = view.note;
  document.getElementById("env").innerHTML = view.env;
  const missing = [];
  const done = NB.charts.map(name => {{
    const div = document.getElementById("chart-" + name);
    const fig = view.figures[name];
    if (!fig) {{
      Plotly.purge(div); div.style.display = "none";
      if (view.missing[name])
        missing.push("<li><b>" + NB.names[name] + "</b>: " + view.missing[name] + "</li>");
      return Promise.resolve();
    }}
    div.style.display = "";
    return Plotly.react(div, fig.data, fig.layout, {{displaylogo: false}});
  }});
  const list = document.getElementById("missing");
  list.style.display = missing.length ? "" : "none";
  list.innerHTML = missing.length ? "<b>Not drawn in this view</b><ul>" + missing.join("")
    + "</ul>" : "";
  return Promise.all(done).then(() => {{
    const drawn = Array.from(document.querySelectorAll(".chart"))
      .filter(d => d.style.display !== "none" && d.querySelector(".main-svg")).length;
    document.body.dataset.view = key;
    document.body.dataset.labels = view.labels.join(",");
    document.body.dataset.charts = String(drawn);
    document.body.dataset.facts = JSON.stringify(facts());
    document.body.dataset.errors = String(window.nbErrors);
    document.body.dataset.status = "rendered";
  }}).catch(err => {{ document.body.dataset.status = "error: " + err; }});
}}
const picker = document.getElementById("view");
const asked = decodeURIComponent((location.hash.match(/view=([^&]*)/) || [])[1] || "");
if (asked && NB.views[asked]) picker.value = asked;
picker.addEventListener("change", () => show(picker.value));
show(picker.value);
</script>
</body></html>
"""
