#!/usr/bin/env python3
"""Writing a long run: the cost of storing one case at the start and at the end of a run.

    python bench/store_append.py [--cases 2000]

Rows are a real tcp.rr case's (5 metrics, samples on lat_p50), measured once here and stored
--cases times as one run, the way the runner stores them: one part file per case, compacted
when the run ends. Beside it, the old way (the whole run rewritten after every case), timed at
the same case numbers. Append-only means the per-case figure at the end is about the one at
the start.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--cases", type=int, default=2000)
    args = ap.parse_args()
    import pandas as pd

    from netbench.store import ResultStore

    work = Path(tempfile.mkdtemp(prefix="nb-append-"))
    subprocess.run([sys.executable, "-m", "netbench", "run", "tcp.rr", "-p", "iterations=2000",
                    "--results", str(work / "seed")], check=True, capture_output=True,
                   timeout=300)
    seed = pd.read_parquet(work / "seed")
    template = [{k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in r.items()}
                for r in seed.astype(object).where(seed.notna(), None).to_dict("records")]
    store = ResultStore(work / "store")
    store.check_writable()
    path = store.path_for("append000001", "2026-12-01T00:00:00")
    writer = store.open_run(path)
    per_case = []
    for index in range(args.cases):
        rows = [{**r, "run_id": "append000001", "case_index": index} for r in template]
        t0 = time.perf_counter()
        writer.append(rows)
        per_case.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    writer.close()
    compact = time.perf_counter() - t0
    head, tail = per_case[:100], per_case[-100:]
    first, last = statistics.median(head) * 1e3, statistics.median(tail) * 1e3
    print(f"{args.cases} cases x {len(template)} rows, one part file per case:")
    print(f"  store a case at its start: {first:.2f} ms (median of the first 100)")
    print(f"  store a case at its end:   {last:.2f} ms (median of the last 100); "
          f"end/start {last / first:.2f}")
    print(f"  compaction at the end:     {compact:.2f} s "
          f"({len(pd.read_parquet(path))} rows in one file)")
    old = ResultStore(work / "old")
    old.check_writable()
    times = {}
    for n in (100, args.cases):
        rows = [{**r, "run_id": "old", "case_index": i} for i in range(n) for r in template]
        t0 = time.perf_counter()
        old.write_run(old.path_for("old", "2026-12-01T00:00:00"), rows)
        times[n] = (time.perf_counter() - t0) * 1e3
    print(f"  the old way (rewrite the run after each case): {times[100]:.1f} ms at case "
          f"100, {times[args.cases]:.1f} ms at case {args.cases} "
          f"(x{times[args.cases] / times[100]:.1f})")
    return 0 if last / first < 3 else 1


if __name__ == "__main__":
    sys.exit(main())
