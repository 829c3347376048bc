#!/usr/bin/env python3
"""compare, report, history and runs over a large store: 200 runs x 2,000 rows, timed.

    python bench/analysis_scale.py [--runs 200] [--rows 2000]
    python bench/analysis_scale.py --runs 10000 --rows 100      # a year of nightly CI

The store is made from one real run of suites/ci.toml on this machine, replicated with
jittered values into distinct runs (new run ids, labels and timestamps), so every row has the
real schema and shapes. Targets: `netbench compare`, `report`, `history` and `runs` under 5 s
each; the dashboard under 10 MB.
"""

from __future__ import annotations

import argparse
import math
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path


def _clean(value: object) -> object:
    """pandas' missing values (NaN, NA) back to None; arrays to lists, for the Arrow schema."""
    import pandas as pd

    if value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return None
    return value.tolist() if hasattr(value, "tolist") else value


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--work", help="keep the store in this folder, and time an existing one "
                    "there again instead of building it")
    args = ap.parse_args()
    import pandas as pd

    from netbench.store import ResultStore

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="nb-scale-"))
    if args.work and (work / "store").is_dir():
        print(f"store: reusing {work / 'store'}")
        return _time(work, args.runs)
    seed_dir = work / "seed"
    subprocess.run([sys.executable, "-m", "netbench", "run", "suites/ci.toml", "--results",
                    str(seed_dir)], check=True, capture_output=True, timeout=600)
    seed = ResultStore(seed_dir).read()           # rows with the run's environment joined
    ok = seed[seed["status"] == "ok"].reset_index(drop=True)
    # Grow one run to --rows rows: the real cases repeated over more message sizes.
    reps = -(-args.rows // len(ok))
    template = pd.concat([ok.assign(msg_size=ok["msg_size"].fillna(0) * (2 ** k),
                                    case_index=ok["case_index"] + 1000 * k)
                          for k in range(reps)], ignore_index=True).head(args.rows)
    store = ResultStore(work / "store")
    store.check_writable()
    rng = random.Random(1)
    start = datetime.now(UTC) - timedelta(days=args.runs)
    t0 = time.perf_counter()
    for i in range(args.runs):
        run = template.copy()
        run["run_id"] = f"scale{i:04d}"
        run["label"] = f"nightly-{i:04d}"
        run["started_at"] = start + timedelta(days=i)
        run["value"] = run["value"] * [rng.gauss(1.0, 0.03) for _ in range(len(run))]
        run["msg_size"] = run["msg_size"].astype("Int64")
        records = [{k: _clean(v) for k, v in r.items()}
                   for r in run.astype(object).to_dict("records")]
        store.write_run(store.path_for(run["run_id"].iloc[0], str(run["started_at"].iloc[0])),
                        records)
    print(f"store: {args.runs} runs x {len(template)} rows = {args.runs * len(template)} rows, "
          f"{sum(p.stat().st_size for p in (work / 'store').iterdir()) / 1e6:.1f} MB "
          f"(built in {time.perf_counter() - t0:.1f} s)")
    return _time(work, args.runs)


def _time(work: Path, runs: int) -> int:
    timings = {}
    for name, cmd in (
            ("compare", ["compare", "nightly-0000", f"nightly-{runs - 1:04d}", "--json"]),
            ("history", ["history", "--json"]),
            ("runs", ["runs", "--json"]),
            ("report", ["report", "-o", str(work / "dash.html"), "--baseline", "nightly-0000",
                        "--candidate", f"nightly-{runs - 1:04d}"])):
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "netbench", *cmd, "--results",
                               str(work / "store")], capture_output=True, text=True, timeout=300)
        timings[name] = time.perf_counter() - t0
        if proc.returncode not in (0, 1):
            print(proc.stderr[-1000:])
            return 2
    size = (work / "dash.html").stat().st_size / 1e6
    print(f"netbench compare: {timings['compare']:.2f} s   (target < 5 s)")
    print(f"netbench report:  {timings['report']:.2f} s   (target < 5 s)")
    print(f"netbench history: {timings['history']:.2f} s   (its default: the newest 50 runs; "
          "target < 5 s)")
    print(f"netbench runs:    {timings['runs']:.2f} s   (target < 5 s)")
    print(f"dashboard size:   {size:.2f} MB  (target < 10 MB)")
    ok_all = all(t < 5 for t in timings.values()) and size < 10
    print("PASS" if ok_all else "MISS")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
