"""One self-contained HTML dashboard (plotly.js inlined: works offline, no CDN).

Charts, from whatever families the store holds (stays generic over the schema): bandwidth vs
message size per transport with the TCP baseline overlaid, latency percentiles vs size, CPU
cost per Gbit/s for RDMA and TCP, collective busbw vs size, host-to-GPU vs the link bound,
baseline vs candidate coloured by verdict, and an environment panel with what was skipped and
why. It draws the latest run (or the one asked for); values only, never raw samples, so the
file stays small for any store, and the page says so.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from netbench.errors import NetbenchError
from netbench.store import COLUMNS
from netbench.textfile import write_atomic

VERDICT_COLOURS = {"regressed": "#d62728", "improved": "#2ca02c", "unchanged": "#7f7f7f",
                   "noisy": "#ff7f0e", "inconclusive": "#c7c7c7"}


def _ok(rows: Any) -> Any:
    return rows[(rows["status"] == "ok") & rows["value"].notna()]


def _series(rows: Any, benchmarks: Sequence[str] | None, metric: str) -> dict[str, Any]:
    """{benchmark: rows of that metric, sorted by msg_size}."""
    ok = _ok(rows)
    sel = ok[ok["metric"] == metric]
    if benchmarks is not None:
        sel = sel[sel["benchmark"].isin(benchmarks)]
    return {name: group.sort_values("msg_size") for name, group in sel.groupby("benchmark")}


def _figure(traces: list[dict[str, Any]], title: str, xtitle: str, ytitle: str,
            log_x: bool = True, log_y: bool = False) -> dict[str, Any]:
    return {"data": traces, "layout": {
        "title": {"text": title}, "height": 420, "margin": {"l": 70, "r": 20, "t": 50, "b": 60},
        "xaxis": {"title": {"text": xtitle}, "type": "log" if log_x else "category"},
        "yaxis": {"title": {"text": ytitle}, "type": "log" if log_y else "linear"},
        "legend": {"orientation": "h", "y": -0.25}}}


def _line(x: Sequence[Any], y: Sequence[float], name: str, dash: str = "solid") -> dict:
    return {"type": "scatter", "mode": "lines+markers", "x": list(x), "y": list(y),
            "name": name, "line": {"dash": dash}}


def bandwidth_chart(rows: Any) -> dict[str, Any] | None:
    traces = []
    for name, g in _series(rows, None, "bw_avg").items():
        traces.append(_line(g["msg_size"], g["value"], f"{name} (Gbit/s)"))
    for name, g in _series(rows, ["tcp.stream"], "goodput").items():
        shape = g["params"].map(lambda p: (json.loads(p).get("streams"),
                                           json.loads(p).get("direction")))
        for (streams, direction), sub in g.groupby(shape):
            traces.append(_line(sub["msg_size"], sub["value"],
                                f"TCP baseline {name} {direction} x{streams} (Gbit/s)",
                                dash="dash"))
    if not traces:
        return None
    # Loopback TCP cannot beat host memcpy: draw that bound (the best copy, in Gbit/s).
    mem = _series(rows, ["mem.copy"], "bw").get("mem.copy")
    if mem is not None and not mem.empty:
        bound = float(mem["value"].max()) * 8
        sizes = sorted({x for t in traces for x in t["x"] if x == x and x is not None})
        traces.append(_line([sizes[0], sizes[-1]] if sizes else [1, 1 << 20], [bound, bound],
                            f"host memcpy bound {bound:.0f} Gbit/s (mem.copy)", "dot"))
    return _figure(traces, "Bandwidth vs message size (TCP baseline dashed, memcpy bound "
                   "dotted)", "message size (B)", "Gbit/s", log_y=True)


def latency_chart(rows: Any) -> dict[str, Any] | None:
    traces = []
    for metric, dash in (("lat_p50", "solid"), ("lat_p99", "dash"), ("lat_p99.9", "dot")):
        for name, g in _series(rows, None, metric).items():
            unit = g["unit"].iloc[0]
            traces.append(_line(g["msg_size"], g["value"], f"{name} {metric} [{unit}]", dash))
    if not traces:
        return None
    return _figure(traces, "Latency percentiles vs message size", "message size (B)", "us",
                   log_y=True)


def cpu_chart(rows: Any) -> dict[str, Any] | None:
    """CPU-seconds per Gbit moved: TCP's own metric, RDMA's from its CPU share and bandwidth."""
    ok = _ok(rows)
    names, values = [], []
    for (bench, _case), g in ok.groupby(["benchmark", "case_index"]):
        by = dict(zip(g["metric"], g["value"]))
        size = g["msg_size"].iloc[0]
        label = f"{bench} {int(size) if size == size and size is not None else ''}"
        if "cpu_per_gbit" in by:
            names.append(label)
            values.append(by["cpu_per_gbit"])
        elif "cpu_client" in by and by.get("bw_avg"):
            names.append(label)
            values.append(by["cpu_client"] / 100.0 / by["bw_avg"])
    if not names:
        return None
    fig = _figure([{"type": "bar", "x": names, "y": values, "name": "CPU-s per Gbit"}],
                  "CPU cost per Gbit/s: RDMA vs TCP (lower is better)", "case", "CPU-s / Gbit",
                  log_x=False, log_y=True)
    return fig


def busbw_chart(rows: Any) -> dict[str, Any] | None:
    ok = _ok(rows)
    coll = ok[ok["benchmark"].str.startswith("coll.") & (ok["metric"] == "busbw")
              & ok["msg_size"].notna()]
    traces = [_line(g.sort_values("msg_size")["msg_size"], g.sort_values("msg_size")["value"],
                    name) for name, g in coll.groupby("benchmark")]
    if not traces:
        return None
    return _figure(traces, "Collective bus bandwidth vs size (nccl-tests busbw)", "bytes",
                   "GB/s")


def h2d_chart(rows: Any) -> dict[str, Any] | None:
    """Copy and feed bandwidth per GPU and host memory kind, each GPU's link bound dashed.

    The bound is the one the benchmark divided by (bw / link_efficiency), so the line is the
    probe's narrowest hop of exactly the GPU that row measured."""
    ok = _ok(rows)
    pcie = ok[ok["benchmark"].str.startswith("gpu.") & (ok["transport"] == "pcie")]
    bw = pcie[pcie["metric"] == "bw"]
    if bw.empty:
        return None
    traces, bounds = [], {}
    bw = bw.assign(copy_bytes=[_copy_bytes(b, p, m) for b, p, m in
                               zip(bw["benchmark"], bw["params"], bw["msg_size"])],
                   host_mem=bw["params"].map(lambda p: json.loads(p).get("host_mem", "")),
                   run=bw["label"].where(bw["label"].fillna("") != "", bw["suite"]))
    several = bw["run_id"].nunique() > 1
    for (bench, device, mem, _, run), g in bw.groupby(
            ["benchmark", "device", "host_mem", "run_id", "run"]):
        g = g.groupby("copy_bytes", as_index=False)["value"].mean()     # repeats: one point
        name = " ".join(p for p in (bench, device, mem) if p) + (f" ({run})" if several else "")
        traces.append(_line(g["copy_bytes"], g["value"], name))
    share = pcie[pcie["metric"].isin(["link_efficiency", "link_fraction"])
                 & (pcie["benchmark"] != "gpu.bidir")      # bidir's bound is both directions
                 & (pcie["value"] > 0)]
    pairs = share.merge(bw, on=["run_id", "case_index"], suffixes=("_share", ""))
    for device, bw_value, fraction in zip(pairs["device"], pairs["value"],
                                          pairs["value_share"]):
        bounds[device] = bw_value / fraction
    sizes = sorted(bw["copy_bytes"].dropna().unique())
    for device, bound in bounds.items():
        traces.append(_line(sizes or [0], [bound] * max(len(sizes), 1),
                            f"{device} link bound {bound:.2f} GB/s", "dash"))
    return _figure(traces, "Host-to-GPU feed vs the link's theoretical bound (dashed)", "bytes",
                   "GB/s")


_ITEMSIZE = {"uint8": 1, "int32": 4, "float16": 2, "bfloat16": 2, "float32": 4}


def _copy_bytes(benchmark: str, params: str, msg_size: Any) -> float | None:
    """Bytes per copy: msg_size, or for the loader feed one batch (batch x sample x dtype)."""
    if benchmark != "gpu.loader_feed":
        return msg_size
    p = json.loads(params or "{}")
    try:
        dims = [int(d) for d in str(p["sample_shape"]).lower().split("x")]
        return float(p["batch_size"] * math.prod(dims) * _ITEMSIZE[p["dtype"]])
    except (KeyError, ValueError, TypeError):
        return None


def h2d_missing(rows: Any) -> str:
    """Why there is no H2D chart: the gpu.* skip reason, and the GPU links the probe found."""
    gpu = rows[rows["benchmark"].str.startswith("gpu.") & (rows["status"] != "ok")]
    text = "no gpu.* rows in this run"
    if not gpu.empty:
        text = f"gpu.* {gpu['status'].iloc[0]}: {gpu['reason'].iloc[0]}"
    try:
        env = json.loads(rows["env_json"].dropna().iloc[0])
    except (IndexError, KeyError, TypeError, ValueError):
        return text
    links = [p["summary"] for p in env.get("pcie_paths", []) if p.get("kind") in ("gpu", "display")]
    return text + ("; GPU links found by the probe: " + "; ".join(links) if links else "")


def comparison_chart(verdicts: Sequence[Any]) -> dict[str, Any] | None:
    if not verdicts:
        return None
    labels = [f"{v.benchmark} {v.metric} {v.msg_size or ''}" for v in verdicts]
    colours = [VERDICT_COLOURS[v.verdict] for v in verdicts]
    bars = {"type": "bar", "x": labels, "y": [100 * v.change for v in verdicts],
            "marker": {"color": colours},
            "text": [v.verdict for v in verdicts], "name": "change %"}
    return _figure([bars], "Baseline vs candidate: relative change, coloured by verdict "
                   "(red regressed, green improved, grey unchanged, orange noisy, light grey "
                   "inconclusive)", "case", "% change",
                   log_x=False)


def latest_per_benchmark(index: Any) -> dict[str, str]:
    """benchmark -> the latest run that measured it (that only skipped it, if none did)."""
    picks: dict[str, str] = {}
    for _, run in index.iterrows():                      # oldest first: later runs win
        for bench in run["benchmarks"]:
            if bench in run["ok_benchmarks"] or bench not in picks:
                picks[bench] = run["run_id"]
    return picks


def _table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    head = "".join(f"<th>{html.escape(str(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>"
                   for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def environment_panel(rows: Any, latest: Any) -> str:
    """The runs drawn, the devices they ran on, and what the latest run skipped and why."""
    import pandas as pd

    runs, vms = [], set()
    for run_id, group in rows.groupby("run_id", sort=False):
        first = group.iloc[0]
        env = json.loads(first["env_json"] or "{}")
        vms.add(env.get("virtual_machine"))
        runs.append((run_id, first["label"] or "-", first["host"],
                     str(first["started_at"])[:19], env.get("kernel"), env.get("cpu_model"),
                     ", ".join(sorted(set(group["benchmark"])))[:120],
                     ", ".join(f"{k} {v}" for k, v in (env.get("versions") or {}).items() if v)))
    facts: list[tuple[str, Any]] = []
    for value in sorted({v for v in rows["env_nic"].dropna()}):
        facts.append(("NIC", value))
    for value in sorted({v for v in rows["env_rdma_device"].dropna()}):
        facts.append(("RDMA device", value))
    for value in sorted({v for v in rows["env_gpu"].dropna()}):
        facts.append(("GPU", value))
    for value in sorted(v for v in vms if v):
        facts.append(("virtual machine", f"{value}: link fields are the hypervisor's"))
    for value in sorted({v for v in rows["reason"].dropna() if "emulated" in str(v)}):
        facts.append(("note", value))
    skipped = pd.concat([rows[rows["status"] != "ok"], latest[latest["status"] != "ok"]])
    skip_rows = [(r["benchmark"], r["status"], r["reason"])
                 for _, r in skipped.drop_duplicates(["benchmark", "reason"]).iterrows()]
    return ("<h2>Environment: what was measured where</h2>" +
            _table(["run", "label", "host", "started (UTC)", "kernel", "cpu", "benchmarks",
                    "versions"], runs) + _table(["", ""], facts) +
            "<h2>Skipped and failed, and why</h2>" +
            (_table(["benchmark", "status", "reason"], skip_rows) if skip_rows
             else "<p>Nothing was skipped or failed in this run.</p>"))


def render(store: Any, out: str | Path, run: str | None = None, verdicts: Sequence[Any] = (),
           compared: str = "") -> dict[str, Any]:
    """Write the dashboard; returns what it drew (for the CLI and tests)."""
    from plotly.offline import get_plotlyjs

    index = store.runs()
    if index.empty:
        raise NetbenchError(f"the store {store.directory} is empty: nothing to draw; run "
                            "`netbench run` first")
    runs = index["run_id"]
    columns = [name for name, _ in COLUMNS if name != "samples"]     # values only: small page
    latest_id = runs.iloc[-1]
    if run:
        if not (runs == run).any():
            raise NetbenchError(f"no run {run!r} in the store")
        rows = store.read([run], columns)
        latest = rows if run == latest_id else store.read([latest_id], columns)
        chosen = run
    else:
        picks = latest_per_benchmark(index)
        frame = store.read(sorted(set(picks.values()) | {latest_id}), columns)
        rows = frame[[picks.get(b) == r for b, r in zip(frame["benchmark"], frame["run_id"])]]
        latest = frame[frame["run_id"] == latest_id]
        chosen = ", ".join(dict.fromkeys(index[index["run_id"].isin(picks.values())]["run_id"]))
    charts = [("bandwidth", bandwidth_chart(rows)), ("latency", latency_chart(rows)),
              ("cpu", cpu_chart(rows)), ("busbw", busbw_chart(rows)), ("h2d", h2d_chart(rows)),
              ("comparison", comparison_chart(verdicts))]
    missing = {"bandwidth": "no bandwidth rows in this run",
               "latency": "no latency rows in this run",
               "cpu": "no CPU cost rows in this run", "busbw": "no collective rows in this run",
               "h2d": h2d_missing(rows),
               "comparison": "no comparison asked for (netbench report --baseline A "
                             "--candidate B)"}
    blocks, figures = [], {}
    for name, fig in charts:
        if fig is None:
            blocks.append(f'<div class="empty"><b>{name}</b>: {html.escape(missing[name])}</div>')
        else:
            figures[name] = fig
            blocks.append(f'<div class="chart" id="chart-{name}"></div>')
    title = "netbench dashboard" + (f" — {compared}" if compared else "")
    page = _PAGE.format(
        title=html.escape(title), plotly=get_plotlyjs(), blocks="\n".join(blocks),
        figures=json.dumps(figures, default=_json_default).replace("</", "<\\/"),
        env=environment_panel(rows, latest),
        note=html.escape(f"Each benchmark from its latest run ({len(rows)} rows from "
                         f"{rows['run_id'].nunique()} of {len(runs)} stored runs); charts use "
                         "each row's value, raw samples stay in the Parquet store."))
    out = Path(out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(out, lambda tmp: tmp.write_text(page))
    except OSError as exc:
        raise NetbenchError(f"cannot write {out}: {exc.strerror}") from None
    return {"run": chosen, "charts": sorted(figures), "path": str(out), "bytes": len(page)}


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
</style>
<script>window.nbErrors = 0; window.addEventListener("error", () => window.nbErrors++);</script>
<script>{plotly}</script>
</head><body data-status="loading">
<h1>{title}</h1>
<p class="note">{note}</p>
{blocks}
{env}
<script>
const figures = {figures};
const done = Object.entries(figures).map(([name, fig]) =>
  Plotly.newPlot("chart-" + name, fig.data, fig.layout, {{displaylogo: false}}));
Promise.all(done).then(() => {{
  document.body.dataset.charts = String(document.querySelectorAll(".chart .main-svg").length
                                        ? Object.keys(figures).length : 0);
  document.body.dataset.errors = String(window.nbErrors);
  document.body.dataset.status = "rendered";
}}).catch(err => {{ document.body.dataset.status = "error: " + err; }});
</script>
</body></html>
"""
