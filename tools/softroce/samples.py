#!/usr/bin/python3
"""The RDMA suite's bandwidth rows carry per-window samples that compare can test: bw_avg and
msg_rate each with at least MIN windows whose mean is the row's value within TOLERANCE. The
windows are equal-time shares of the run (bidirectional: both directions' i-th windows
summed), so their mean is the value by construction, a stall included; the tolerance is only
for rounding. Prints each row's mean beside its value.

    samples.py ROWS.jsonl [ROWS.jsonl ...]

Standard library only (it runs in the VM).
"""

from __future__ import annotations

import json
import sys

MIN = 10
TOLERANCE = 0.01


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
            mean, value = sum(samples) / len(samples), row["value"]
            off = mean / value - 1 if value else float("inf")
            print(f"{'ok  ' if abs(off) <= TOLERANCE else 'BAD '} {where}: {len(samples)} "
                  f"windows, mean {mean:.6g}, value {value:.6g} ({off:+.4%}), "
                  f"min {min(samples):.4g}, max {max(samples):.4g} {row.get('unit', '')}")
            if not abs(off) <= TOLERANCE:
                problems.append(f"{where}: samples average {mean:.6g}, the value is "
                                f"{value:.6g} ({off:+.2%}, want within {TOLERANCE:.0%})")
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
