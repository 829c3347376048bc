"""What a long soak costs the host it runs on, over a simulated clock: the runner, the plan's
windows and the Parquet store are netbench's own; only the benchmark is a stand-in that
returns a window's figures at once (a goodput and its 0.1 s samples, as tcp.stream stores
them), so a day of 1 s windows is simulated in minutes.

    python bench/soak_cost.py --windows 1000 10000 86400

Prints, at each length: the process's RSS at each quarter of the soak and its peak with the
final compaction, the part files and bytes stored a window while it runs (merged every
MERGE_PARTS windows), the compacted file's bytes a window, and the harness's time a window.
Memory must not grow with the length (docs/soak.md quotes the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _rss_kb() -> int:
    """The process's resident set now (not its peak), in KiB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one(windows: int, window: float) -> dict:
    from netbench.api import Benchmark, Measurement, Metric, Param
    from netbench.run.runner import Runner
    from netbench.run.suite import Plan, PlannedCase, soaked
    from netbench.store import ResultStore

    class Stand(Benchmark):
        """tcp.stream's shape: a goodput a window and a sample every 0.1 s of it."""
        name, family, transport, description = "sim.stream", "sim", "tcp", "simulated"
        metrics = (Metric("goodput", "Gbit/s", "higher"),)
        params = (Param("duration", "float", 1.0, "seconds a window", minimum=0.01,
                        maximum=3600),)

        def window_params(self, seconds: float) -> dict:
            return {"duration": seconds}

        def run(self, case, ctx):
            n = max(int(case.params["duration"] / 0.1), 1)
            samples = [9.4 + (i % 7) * 0.01 for i in range(n)]
            return Measurement({"goodput": sum(samples) / n}, {"goodput": samples},
                               device="eth0")

    bench = Stand()
    (case,) = bench.expand({})
    plan = soaked(Plan("sim", [PlannedCase(case, bench, 60.0)]), windows * window, window)
    results = Path(tempfile.mkdtemp(prefix="soakcost-"))
    store = ResultStore(results)
    env = {"host": "sim", "sysfs_root": "/sys", "no_counters": False}
    began = time.perf_counter()
    runner = Runner(store, env)
    sizes = []

    class Watch:
        def start_run(self, *a): pass
        def start_case(self, *a, **k): pass
        def progress(self, f): pass
        def interval(self, *a): pass

        def end_case(self, index, planned, rows):
            if (index + 1) % max(windows // 4, 1) == 0:
                # The RSS first, then a scan with no Path per entry: globbing 20,000 parts
                # was itself the growth an earlier reading of this script saw.
                rss = _rss_kb()
                stored = files = 0
                for folder in os.scandir(results):
                    if folder.name.endswith(".parts"):
                        for entry in os.scandir(folder.path):
                            if entry.name.startswith("part-"):
                                stored += entry.stat().st_size
                                files += 1
                sizes.append((index + 1, rss, stored, files))

    runner.reporter = Watch()
    result = runner.run(plan)
    took = time.perf_counter() - began
    final = sum(p.stat().st_size for p in results.glob("*.parquet"))
    subprocess.run(["rm", "-rf", str(results)], check=False)
    return {"windows": windows, "rss_kb_at_quarters": [s[1] for s in sizes],
            "peak_rss_kb_with_compaction": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "part_files_at_end": sizes[-1][3] if sizes else None,
            "parts_bytes_a_window": round(sizes[-1][2] / sizes[-1][0]) if sizes else None,
            "file_bytes_a_window": round(final / windows),
            "harness_ms_a_window": round(1000 * took / windows, 2),
            "stored": result.tally}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--windows", type=int, nargs="+", default=[1000, 10000])
    ap.add_argument("--window", type=float, default=1.0, help="simulated seconds a window")
    args = ap.parse_args()
    for n in args.windows:        # each length in its own process: its own peak RSS
        out = subprocess.run([sys.executable, __file__, "--one", str(n), str(args.window)],
                             capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr[-2000:], flush=True)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--one":
        os.environ.setdefault("NETBENCH_NO_HOOKS", "1")
        print(json.dumps(one(int(sys.argv[2]), float(sys.argv[3]))))
    else:
        main()
