"""What cutting a stream into windows costs: tcp.stream through a veth shaped with tc tbf (two
network namespaces, as tests/test_netns.py builds them), one straight run of D seconds beside
`netbench soak` of the same D seconds in windows of W, interleaved, the goodput of each:

    python bench/soak_overhead.py --seconds 60 --window 10 --trials 3     # as root

Prints each trial's pair and the ratio soak / straight (time-weighted mean of the windows
against the straight run's goodput). Each window is its own connection (no warm-up): the cost
is its slow start and the harness between windows, which the ratio shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


def _seconds(stamp: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(stamp).timestamp()


def main() -> None:
    from netbench.run.peer import ServerProcess

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--window", type=float, default=10)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--mbit", type=int, default=1000)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("needs root: network namespaces")
    a, b, va, vb = "nbOa", "nbOb", "nbOva", "nbOvb"
    for ns in (a, b):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        sh("ip", "netns", "add", ns)
    try:
        sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        sh("ip", "link", "set", va, "netns", a)
        sh("ip", "link", "set", vb, "netns", b)
        for ns, dev, addr in ((a, va, "10.209.0.1/24"), (b, vb, "10.209.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
               f"{args.mbit}mbit", "burst", "256kb", "latency", "100ms")
        server = ServerProcess(bind="10.209.0.2", prefix=("ip", "netns", "exec", b))
        ratios = []
        try:
            for trial in range(args.trials):
                with tempfile.TemporaryDirectory() as results:
                    run = ["ip", "netns", "exec", a, sys.executable, "-m", "netbench"]
                    straight = subprocess.run(
                        [*run, "run", "tcp.stream", "--peer", server.address, "-p",
                         f"duration={args.seconds}", "--results", results, "--json"],
                        capture_output=True, text=True, cwd=ROOT, check=True)
                    rows = json.loads(straight.stdout)
                    one = next(r["value"] for r in rows if r["metric"] == "goodput")
                    soak = subprocess.run(
                        [*run, "soak", "tcp.stream", "--peer", server.address, "--duration",
                         f"{args.seconds}", "--window", f"{args.window}", "--results",
                         results, "--json"], capture_output=True, text=True, cwd=ROOT,
                        check=True)
                    (case,) = json.loads(soak.stdout)["cases"]
                    values = [v for _, v, _ in case["timeline"]]
                    mean = sum(values) / len(values)
                    ratios.append(mean / one)
                    # The link's idle time between windows (the harness, a connection's
                    # setup): the windows' starts against their length.
                    starts = [_seconds(t) for t, _, _ in case["timeline"]]
                    span = starts[-1] - starts[0]
                    duty = (len(starts) - 1) * args.window / span if span > 0 else 1.0
                    print(f"trial {trial + 1}: straight {one * 1000:.1f} Mbit/s, soak "
                          f"{mean * 1000:.1f} Mbit/s over {len(values)} windows: "
                          f"ratio {mean / one:.4f}; windows {duty:.4f} of the soak's time",
                          flush=True)
        finally:
            server.stop()
        print(f"soak / straight: median {sorted(ratios)[len(ratios) // 2]:.4f} over "
              f"{len(ratios)} trials ({args.seconds:g} s, windows of {args.window:g} s, tbf "
              f"{args.mbit} Mbit/s)")
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


if __name__ == "__main__":
    main()
