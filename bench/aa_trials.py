"""A/A trials under load: unchanged code compared with itself, run after run, with a CPU hog
beside one side in half of the trials. Every verdict of regressed or improved here is a false
alarm; the script prints each trial and the false-alarm rate.

    python bench/aa_trials.py [--trials 10] [--suite suites/ci.toml] [--json]

The runs are the CI suite's TCP and collective cases with its own settings (its interleaved
repeats), one `netbench run` each, chained: trial i compares run i with run i + 1. The hog (a
busy loop pinned to CPU 0, as `stress-ng --cpu 1` would be) runs through runs 2, 5, 8, ...,
so the trials go quiet/quiet, quiet/hog, hog/quiet, quiet/quiet, ...: six of ten have a hog
beside one side only, the rest none. Exit 1 when any trial called anything regressed or
exited non-zero.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def tcp_and_collectives(suite: Path, out: Path) -> Path:
    """The suite's [suite] table and its tcp.* and coll.* cases, as a suite file."""
    data = tomllib.loads(suite.read_text())
    lines = ["[suite]"] + [f"{k} = {json.dumps(v)}" for k, v in data.get("suite", {}).items()
                           if k != "softroce"]
    for case in data.get("case", []):
        if case["benchmark"].split(".")[0] in ("tcp", "coll"):
            lines += ["[[case]]"] + [f"{k} = {json.dumps(v)}" for k, v in case.items()]
    out.write_text("\n".join(lines) + "\n")
    return out


def hog() -> subprocess.Popen:
    code = ("import os\nos.sched_setaffinity(0, {0})\nwhile True:\n    pass\n")
    return subprocess.Popen([sys.executable, "-c", code])


def _cores(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _change(verdict: dict) -> str:
    """The relative change, or both values where it has none (a 0 baseline: JSON null)."""
    if verdict.get("change") is not None:
        return f"{verdict['change']:+.1%}"
    return f"{verdict.get('baseline')} -> {verdict.get('candidate')}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--suite", type=Path, default=ROOT / "suites" / "ci.toml")
    parser.add_argument("--results", type=Path, help="store (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="one JSON object at the end")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="nb-aa-"))
    results = args.results or work / "results"
    suite = tcp_and_collectives(args.suite, work / "aa.toml")
    netbench = [sys.executable, "-m", "netbench"]
    hogged = [i % 3 == 2 for i in range(args.trials + 1)]
    began = time.monotonic()
    for i, with_hog in enumerate(hogged):
        busy = hog() if with_hog else None
        try:
            run = subprocess.run([*netbench, "run", str(suite), "--results", str(results),
                                  "--label", f"aa{i}"], capture_output=True, text=True,
                                 timeout=600, cwd=ROOT)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        if run.returncode != 0:
            print(f"run {i}: exit {run.returncode}: {run.stderr[-500:]}", file=sys.stderr)
            return 1
    trials, alarms = [], 0
    for i in range(args.trials):
        proc = subprocess.run([*netbench, "compare", f"aa{i}", f"aa{i + 1}", "--results",
                               str(results), "--no-history", "--json",
                               "--thresholds", str(args.suite)],     # as its users compare
                              capture_output=True, text=True, cwd=ROOT)
        verdicts = json.loads(proc.stdout)["verdicts"] if proc.stdout else []
        count = {k: sum(v["verdict"] == k for v in verdicts)
                 for k in ("regressed", "improved", "disturbed", "noisy", "unverified",
                           "unchanged")}
        side = ("none" if hogged[i] == hogged[i + 1] and not hogged[i] else
                "both" if hogged[i] and hogged[i + 1] else
                "baseline" if hogged[i] else "candidate")
        # With each side's load (other work + stolen, stolen): what the verdict saw.
        false = [f"{v['benchmark']} {v['metric']} {_change(v)} "
                 f"(busy {_cores(v['busy'][0])} vs {_cores(v['busy'][1])}, stolen "
                 f"{_cores(v.get('steal', [None] * 2)[0])} vs "
                 f"{_cores(v.get('steal', [None] * 2)[1])})" for v in verdicts
                 if v["verdict"] in ("regressed", "improved")]
        alarms += bool(count["regressed"]) or proc.returncode != 0
        trials.append({"trial": i + 1, "hog": side, "exit": proc.returncode, **count,
                       "metrics": len(verdicts), "false_alarms": false})
        if not args.json:
            print(f"trial {i + 1:2d} hog {side:9s} exit {proc.returncode} "
                  + " ".join(f"{k} {n}" for k, n in count.items())
                  + (f"  ({'; '.join(false)})" if false else ""))
    metrics = sum(t["metrics"] for t in trials)
    called = sum(t["regressed"] + t["improved"] for t in trials)
    summary = {"trials": len(trials), "trials_with_a_regression": alarms,
               "metric_false_alarm_rate": called / metrics if metrics else 0.0,
               "metrics_judged": metrics, "seconds": round(time.monotonic() - began, 1),
               "cpus": os.cpu_count()}
    if args.json:
        print(json.dumps({"summary": summary, "trials": trials}, indent=1))
    else:
        print(f"{alarms} of {len(trials)} trials called something regressed; "
              f"{called} of {metrics} metric verdicts regressed or improved "
              f"({summary['metric_false_alarm_rate']:.2%}); {summary['seconds']} s")
    return 1 if alarms else 0


if __name__ == "__main__":
    sys.exit(main())
