#!/usr/bin/env python3
"""What reading the NIC's and the kernel's counters around every case costs the figures: each
case run with counters (the default, both ends) and with --no-counters, alternating, in one
run, against a loopback netbench serve.

    python bench/counters_cost.py [--rounds 5]

One line a point: ``<case> <metric> with <median> without <median> ratio <r>`` (the median of
per-round ratios, with / without, in the metric's better direction: 1.0 means no cost), and
the snapshot's own time (``netbench.env.counters.snapshot``, this host, median of 50). The
counters are read outside the timed section, so the target is no movement beyond this shared
machine's noise: every ratio within 0.95..1.05. Exit 1 where one is outside.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

NETBENCH = [sys.executable, "-m", "netbench"]
POINTS = [  # (benchmark, params, metric, higher is better)
    ("tcp.rr", {"msg_size": 64, "duration": 2}, "lat_p50", False),
    ("tcp.stream", {"duration": 2, "warmup": 0.5}, "goodput", True),
    ("mem.copy", {"msg_size": "64M"}, "bw", True),
]


def run(benchmark: str, params: dict, metric: str, peer: str, results: str,
        counters: bool) -> float:
    cmd = [*NETBENCH, "run", benchmark, "--json", "--results", results]
    for key, value in params.items():
        cmd += ["-p", f"{key}={value}"]
    if benchmark.startswith("tcp."):
        cmd += ["--peer", peer]
    if not counters:
        cmd.append("--no-counters")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    rows = {r["metric"]: r for r in json.loads(done.stdout)}
    return float(rows[metric]["value"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    from netbench.env import counters
    from netbench.run.peer import ServerProcess

    took = []
    for _ in range(50):
        t0 = time.perf_counter()
        snap = counters.snapshot()
        took.append(time.perf_counter() - t0)
    print(f"snapshot {len(snap.values)} counters median {statistics.median(took) * 1e3:.2f} ms "
          f"(this host; read twice a case at each end, outside the timed section)")
    server = ServerProcess()
    missed = 0
    try:
        with tempfile.TemporaryDirectory() as results:
            for benchmark, params, metric, higher in POINTS:
                with_, without, ratios = [], [], []
                for i in range(args.rounds):
                    order = (True, False) if i % 2 == 0 else (False, True)
                    got = {c: run(benchmark, params, metric, server.address, results, c)
                           for c in order}
                    with_.append(got[True])
                    without.append(got[False])
                    ratios.append(got[True] / got[False] if higher else got[False] / got[True])
                ratio = statistics.median(ratios)
                missed += not 0.95 <= ratio <= 1.05
                print(f"{benchmark} {metric} with {statistics.median(with_):.4g} without "
                      f"{statistics.median(without):.4g} ratio {ratio:.3f} "
                      f"({args.rounds} rounds, alternating)", flush=True)
    finally:
        server.stop()
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
