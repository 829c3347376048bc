#!/usr/bin/python3
"""The RDMA suite's bandwidth rows carry per-window samples that compare can test: bw_avg and
msg_rate each with at least MIN windows, their mean within 25% of the reported figure (the
windows' rates average to the run's rate, bidirectional ones as the sum of both directions).

    samples.py ROWS.jsonl [ROWS.jsonl ...]

Standard library only (it runs in the VM).
"""

from __future__ import annotations

import json
import sys

MIN = 10


def check(path: str) -> list[str]:
    problems, seen = [], 0
    with open(path) as f:
        for line in f:
            row = json.loads(line)
            if (not str(row.get("benchmark", "")).endswith("_bw") or row.get("status") != "ok"
                    or row.get("metric") not in ("bw_avg", "msg_rate")):
                continue
            seen += 1
            where = f"{path}: {row['benchmark']} {row.get('params', '')} {row['metric']}"
            samples = row.get("samples") or []
            if len(samples) < MIN:
                problems.append(f"{where}: {len(samples)} samples, want >= {MIN}")
                continue
            mean = sum(samples) / len(samples)
            if not 0.75 <= mean / row["value"] <= 1.25:
                problems.append(f"{where}: samples average {mean:.4g}, the value is "
                                f"{row['value']:.4g}")
    if not seen:
        problems.append(f"{path}: no ok bandwidth rows")
    return problems


def main() -> int:
    problems = [p for path in sys.argv[1:] for p in check(path)]
    for p in problems:
        print("FAIL", p)
    print("window samples: " + ("ok" if not problems else f"{len(problems)} problem(s)"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
