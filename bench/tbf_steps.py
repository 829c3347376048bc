"""The smallest change the regression suite's default settings catch: tcp.stream between two
network namespaces over a veth shaped with `tc tbf`, one run of driver-regression.toml's
tcp.stream cases (its interleaved repeats, its thresholds) at each rate, each compared with the
first rate's run (--no-history: the other rates' runs are deliberate changes, not this
link's noise). Root only (namespaces); bounded: one suite run per rate.

    sudo python bench/tbf_steps.py [--rates 1000,990,980,970,960,950] [--streams 4]

Prints one line per rate: `<rate> Mbit/s change <median change> verdicts <counts> exit <rc>`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from netbench.run.peer import ServerProcess  # noqa: E402


def sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


def suite_file(out: Path, streams: list[int] | None) -> Path:
    data = tomllib.loads((ROOT / "suites" / "driver-regression.toml").read_text())
    lines = ["[suite]"] + [f"{k} = {json.dumps(v)}" for k, v in data["suite"].items()]
    for case in data["case"]:
        if case["benchmark"] == "tcp.stream":
            case = {**case, **({"streams": streams} if streams else {})}
            lines += ["[[case]]"] + [f"{k} = {json.dumps(v)}" for k, v in case.items()]
    lines += ["[thresholds]"] + [f"{json.dumps(k)} = {json.dumps(v)}"
                                 for k, v in data["thresholds"].items()]
    out.write_text("\n".join(lines) + "\n")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rates", default="1000,990,980,970,960,950")
    parser.add_argument("--streams", help="override the suite's streams, e.g. 4")
    args = parser.parse_args()
    if os.geteuid() != 0:
        print("tbf_steps: needs root (network namespaces)")
        return 2
    rates = [int(r) for r in args.rates.split(",")]
    work = Path(tempfile.mkdtemp(prefix="nb-tbf-"))
    suite = suite_file(work / "suite.toml",
                       [int(s) for s in args.streams.split(",")] if args.streams else None)
    tag = str(os.getpid() % 100000)
    a, b, va, vb = f"nbsA{tag}", f"nbsB{tag}", f"nbsa{tag}", f"nbsb{tag}"
    try:
        sh("ip", "netns", "add", a)
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        sh("ip", "link", "set", va, "netns", a)
        sh("ip", "link", "set", vb, "netns", b)
        for ns, dev, addr in ((a, va, "10.204.0.1/24"), (b, vb, "10.204.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
               f"{rates[0]}mbit", "burst", "256kb", "latency", "100ms")
        server = ServerProcess(bind="10.204.0.2", prefix=("ip", "netns", "exec", b))
        results = work / "results"
        try:
            for rate in rates:
                for ns, dev in ((a, va), (b, vb)):
                    sh("tc", "-n", ns, "qdisc", "change", "dev", dev, "root", "tbf", "rate",
                       f"{rate}mbit", "burst", "256kb", "latency", "100ms")
                run = subprocess.run(
                    ["ip", "netns", "exec", a, sys.executable, "-m", "netbench", "run",
                     str(suite), "--peer", server.address, "--label", f"tbf{rate}",
                     "--results", str(results)], capture_output=True, text=True,
                    timeout=900, cwd=ROOT)
                if run.returncode != 0:
                    print(f"{rate} Mbit/s: run failed: {run.stderr[-400:]}")
                    return 1
        finally:
            server.stop()
        for rate in rates[1:]:
            proc = subprocess.run([sys.executable, "-m", "netbench", "compare",
                                   f"tbf{rates[0]}", f"tbf{rate}", "--results", str(results),
                                   "--thresholds", str(suite), "--no-history", "--json"],
                                  capture_output=True, text=True, cwd=ROOT)
            goodput = [v for v in json.loads(proc.stdout)["verdicts"]
                       if v["metric"] == "goodput"]
            counts: dict[str, int] = {}
            for v in goodput:
                counts[v["verdict"]] = counts.get(v["verdict"], 0) + 1
            changes = sorted(v["change"] for v in goodput)
            print(f"{rate} Mbit/s ({rate / rates[0] - 1:+.1%}) goodput change "
                  f"{changes[len(changes) // 2]:+.2%} verdicts "
                  + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
                  + f" of {len(goodput)} cases; exit {proc.returncode}")
    finally:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
