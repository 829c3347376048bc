"""Console presentation: progress while running, the summary table after.

On a terminal, a live line with a bar and the elapsed time; elsewhere (CI logs, pipes, or
CI=true), plain lines, one when a case starts and one when it ends.
"""

from __future__ import annotations

import json
import math
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TextIO

from netbench import stats
from netbench.api import Case, format_size


def format_value(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 1e5:
        return f"{value:.4g}" if magnitude >= 1e9 else f"{value:,.0f}"
    return f"{value:.4g}"


class Reporter:
    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        if interactive is None:
            interactive = self.stream.isatty() and not os.environ.get("CI")
        self.interactive = interactive
        self._total = 0
        self._fraction: float | None = None
        self._label = ""
        self._started = 0.0
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def start_run(self, run_id: str, suite: str, n_cases: int, label: str) -> None:
        self._total = n_cases
        tag = f", label {label!r}" if label else ""
        self._write(f"netbench run {run_id}: {suite}, {n_cases} case(s){tag}\n")

    def start_case(self, index: int, case: Case, description: str | None = None) -> None:
        text = description or case.describe()
        self._label = f"[{index + 1:>{len(str(self._total))}}/{self._total}] {text}"
        self._fraction = None
        self._started = time.monotonic()
        if self.interactive:
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, daemon=True)
            self._ticker.start()
        else:
            self._write(self._label + "\n")

    def progress(self, fraction: float) -> None:
        self._fraction = min(max(fraction, 0.0), 1.0)

    def _tick(self) -> None:
        while not self._stop.wait(0.2):
            elapsed = time.monotonic() - self._started
            bar = ""
            if self._fraction is not None:
                filled = int(self._fraction * 20)
                bar = f" [{'#' * filled}{'.' * (20 - filled)}] {self._fraction:4.0%}"
            self._write(f"\r\x1b[K{self._label}{bar} {elapsed:5.1f}s")

    def end_case(self, index: int, planned: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        elapsed = time.monotonic() - self._started
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
            self._write("\r\x1b[K")
        status = rows[0]["status"] if rows else "failed"
        if status == "ok":
            wanted = getattr(getattr(planned, "bench", None), "headline", None)
            first = next((r for r in rows if r["metric"] == wanted), rows[0])
            outcome = f"ok  {first['metric']} {format_value(first['value'])} {first['unit']}"
        else:
            reason = str(rows[0]["reason"])
            outcome = f"{status}: {reason if len(reason) <= 110 else reason[:107] + '...'}"
        prefix = self._label if self.interactive else "   "
        self._write(f"{prefix} -> {outcome} ({elapsed:.1f} s)\n")


def _varying_params(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """Per benchmark, the params whose values differ between its cases in these rows."""
    seen: dict[str, dict[str, set[str]]] = {}
    for row in rows:
        params = json.loads(row["params"] or "{}")
        per = seen.setdefault(row["benchmark"], {})
        for key, value in params.items():
            per.setdefault(key, set()).add(json.dumps(value))
    return {bench: sorted(k for k, vals in per.items() if len(vals) > 1 and k != "msg_size")
            for bench, per in seen.items()}


def _grid(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(header[i]), *(len(r[i]) for r in body)) for i in range(len(header))]
    lines = ["  ".join(h.rjust(w) if i else h.ljust(w)
                       for i, (h, w) in enumerate(zip(header, widths))).rstrip()]
    for r in body:
        lines.append("  ".join(c.rjust(w) if i else c.ljust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip())
    return lines


def summary_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per benchmark, one line per case and one column per metric (unit in the header).

    Where a metric has raw samples, the headline column also gets its mean ± 95% CI.
    """
    varying = _varying_params(rows)
    cases: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["benchmark"], row["case_index"]), []).append(row)
    out: list[str] = []
    for bench in dict.fromkeys(row["benchmark"] for row in rows):
        bench_cases = [v for (b, _), v in cases.items() if b == bench]
        order: list[str] = []          # declared order, merged across cases
        units: dict[str, str] = {}
        for case_rows in bench_cases:
            previous = None
            for row in case_rows:
                if row["status"] != "ok":
                    continue
                name = row["metric"]
                if name not in units:
                    units[name] = row["unit"]
                    order.insert(order.index(previous) + 1 if previous else 0, name)
                previous = name
        metrics = {name: units[name] for name in order}
        keys = varying[bench]
        header = [bench, *keys, *(f"{m} [{u}]" for m, u in metrics.items())]
        body, notes = [], []
        for case_rows in bench_cases:
            first = case_rows[0]
            params = json.loads(first["params"] or "{}")
            size = format_size(int(first["msg_size"])) if first["msg_size"] is not None else ""
            cells = [size or "-", *(str(params.get(k, "")) for k in keys)]
            if first["status"] != "ok":
                body.append([*cells, *([first["status"]] + ["-"] * (len(metrics) - 1)
                                       if metrics else [])])
                note = f"  {first['status']}: {first['reason']}"
                if first["status"] == "failed" and note not in notes:
                    notes.append(note)          # skips are listed once, after the tables
                continue
            by_metric = {r["metric"]: r for r in case_rows}
            for metric in metrics:
                row = by_metric.get(metric)
                cell = format_value(row["value"]) if row else "-"
                samples = row.get("samples") if row else None
                if samples is not None and len(samples) >= 2 and metric != "lat_p50":
                    cell += f" ±{format_value(stats.ci95_halfwidth(samples))}"
                cells.append(cell)
            body.append(cells)
        out.extend(_grid(header, body))
        out.extend(notes)
        out.append("")
    if any(r.get("samples") is not None for r in rows if r["status"] == "ok"):
        out.append("± is the 95% confidence interval of the mean of the stored samples "
                   "(per interval, per window or per rank)")
    return "\n".join(out).rstrip()
