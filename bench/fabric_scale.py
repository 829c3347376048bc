#!/usr/bin/env python3
"""The fabric sweep on paper and by simulation: the schedule for 2,048 hosts, and the verdicts
over 1,024 hosts' pairs (about a million), timed.

    python bench/fabric_scale.py [--hosts 2048] [--analyse 1024] [--per-pair 10]

The simulated sweep is a tcp.stream matrix at 90-100 Gbit/s with one host slow sending (40%
of the rate) and one slow link: the verdicts must name exactly those. Targets: the schedule in
under 1 s, the analysis in under 10 s.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--hosts", type=int, default=2048)
    ap.add_argument("--analyse", type=int, default=1024)
    ap.add_argument("--per-pair", type=float, default=10.0, help="seconds one pair measures")
    args = ap.parse_args()
    import numpy as np
    import pandas as pd

    from netbench.analysis import fabric
    from netbench.sweep import schedule

    names = [f"node{i:04d}" for i in range(args.hosts)]
    t0 = time.perf_counter()
    s = schedule.build(names)
    build_s = time.perf_counter() - t0
    print(f"schedule, all pairs each direction, {args.hosts} hosts: {len(s.rounds)} rounds of "
          f"{s.concurrency()} pairs, {s.pairs} pairs, built in {build_s:.3f} s "
          "(target < 1 s)")
    for k in (None, 64):
        ks = schedule.build(names, k=k) if k else s
        hours = ks.wall_seconds(args.per_pair) / 3600
        print(f"  {'k=' + str(k) if k else 'no k'}: {len(ks.rounds)} rounds x "
              f"{args.per_pair:g} s a pair = {hours:.1f} h")
    one = schedule.build(names, pattern="one-to-all", center=names[0])
    print(f"  one-to-all: {len(one.rounds)} rounds = "
          f"{one.wall_seconds(args.per_pair) / 3600:.1f} h")

    n = args.analyse
    hosts = [f"node{i:04d}" for i in range(n)]
    rng = np.random.default_rng(1)
    client, server = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    keep = client != server
    client, server = client[keep], server[keep]
    value = rng.uniform(90, 100, len(client))
    value[client == 7] *= 0.4                          # a slow NIC: slow sending to everyone
    value[(client == 3) & (server == 5)] *= 0.5        # one bad link
    host_names = np.array(hosts, dtype=object)
    rows = pd.DataFrame({"benchmark": "tcp.stream", "params": '{"msg_size":131072}',
                         "metric": "goodput", "unit": "Gbit/s", "better": "higher",
                         "status": "ok", "reason": None, "host": host_names[client],
                         "peer": host_names[server], "value": value})
    t0 = time.perf_counter()
    (m,) = fabric.analyse(rows)
    analyse_s = time.perf_counter() - t0
    faulty = [(h.name, h.role) for h in m.faulty_hosts]
    links = [(c.client, c.server) for c in m.slow_links]
    print(f"analysis of {n} hosts, {len(rows)} pairs: {analyse_s:.2f} s (target < 10 s); "
          f"hosts at fault {faulty}; slow links {links}")
    import json

    from netbench.report.heatmap import fabric_chart

    t0 = time.perf_counter()
    figure = json.dumps(fabric_chart(m))
    chart_s = time.perf_counter() - t0
    print(f"heatmap of {n} hosts: {len(figure) / 1e6:.2f} MB of figure in {chart_s:.2f} s "
          f"(tiles of {-(-n // 256)} hosts; the page adds plotly.js, ~4.6 MB; target: a "
          "dashboard under 10 MB that opens)")
    opened = _open_in_chromium(figure)
    right = faulty == [("node0007", "sending")] and links == [("node0003", "node0005")]
    ok = build_s < 1 and analyse_s + chart_s < 10 and right and len(figure) < 5e6 and opened
    print("PASS" if ok else "MISS")
    return 0 if ok else 1


def _open_in_chromium(figure: str) -> bool:
    """The heatmap in a page with plotly.js, opened in headless Chromium: drawn, and how
    long it took (True where there is no Chromium to ask: said, not counted as a pass)."""
    import shutil
    import subprocess
    import tempfile

    from plotly.offline import get_plotlyjs

    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if not browser:
        print("chromium not found: the page was not opened")
        return True
    page = ("<html><body><div id=c></div><script>" + get_plotlyjs() + "</script><script>"
            f"var f={figure};Plotly.newPlot('c',f.data,f.layout).then(function(){{"
            "document.title='drawn '+document.querySelectorAll('.heatmaplayer').length;});"
            "</script></body></html>")
    with tempfile.NamedTemporaryFile("w", suffix=".html", delete=False) as f:
        f.write(page)
    t0 = time.perf_counter()
    out = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu",
                          "--virtual-time-budget=20000", "--dump-dom", f"file://{f.name}"],
                         capture_output=True, text=True, timeout=180)
    drawn = "<title>drawn 1</title>" in out.stdout
    print(f"page {len(page) / 1e6:.2f} MB, opened in headless Chromium in "
          f"{time.perf_counter() - t0:.1f} s: " + ("heatmap drawn" if drawn else "NOT drawn"))
    return drawn


if __name__ == "__main__":
    sys.exit(main())
