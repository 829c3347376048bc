"""Console presentation: progress while running, the summary table after, and the text the
CLI prints (the probe's report, a dry run's plan, the end of a run and of a fabric sweep,
the stored runs, compare's, history's and accept's views); the CLI parses, dispatches and
prints what these return.

On a terminal, a live line with a bar and the elapsed time; elsewhere (CI logs, pipes, or
CI=true), plain lines, one when a case starts and one when it ends.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

from netbench import stats
from netbench.analysis import error_metrics
from netbench.analysis.cases import case_names
from netbench.analysis.verdict import VERDICTS, Verdict
from netbench.api import Case, format_size, json_safe
from netbench.env import counters
from netbench.fingerprint import Fingerprint, Nic
from netbench.store import columns_of, counters_of
from netbench.store.schema import split_unit
from netbench.textfile import printable  # stored params and hosts may hold escapes
from netbench.units import readable


def format_value(value: float | None) -> str:
    """Four significant digits in plain decimals: never 2.014e+04, never 1.2e-05."""
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    if value == 0:
        return "0"
    if abs(value) >= 1e15:           # no measurement's: a broken or forged figure, kept short
        return f"{value:.4g}"
    places = min(max(3 - math.floor(math.log10(abs(value))), 0), 9)
    return f"{value:,.{places}f}"


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
        self._said: dict[str, int] = {}       # each skip or failure reason: the case it was at
        # Each planned case's seconds from the store's earlier runs (run.estimate), None where
        # unknown: the ETA a case line shows; and what the cases finished so far took.
        self.estimates: list[float | None] = []
        self._took: list[float] = []

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

    def start_run(self, run_id: str, suite: str, n_cases: int, label: str) -> None:
        self._total = n_cases
        tag = f", label {label!r}" if label else ""
        self._write(f"netbench run {run_id}: {suite}, {n_cases} case(s){tag}\n")

    def start_case(self, index: int, case: Case, description: str | None = None) -> None:
        text = description or case.describe()
        left = remaining(self.estimates, self._took, index) if self.estimates else None
        eta = f" (about {duration_text(left)} left)" if left and index else ""
        self._label = f"[{index + 1:>{len(str(self._total))}}/{self._total}] {text}{eta}"
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

    def interval(self, start: float, end: float,
                 values: Mapping[str, tuple[float, str]]) -> None:
        """One interval of the running case, as iperf3 prints it:
        ``    [  1.0-  2.0 s]  goodput 9.41 Gbit/s  retr 0`` (over the progress line)."""
        parts = []
        for name, (value, unit) in values.items():
            factor, shown = readable([value], unit) if unit else (1.0, "")
            text = (f"{int(value):,}" if not unit and float(value).is_integer()
                    else format_value(value * factor))
            parts.append(f"{name} {text}{' ' + shown if shown else ''}")
        line = f"    [{start:6.1f}-{end:6.1f} s]  " + "  ".join(parts)
        self._write(("\r\x1b[K" if self.interactive else "") + line + "\n")

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
        self._took.append(elapsed)
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None
            self._write("\r\x1b[K")
        status = rows[0]["status"] if rows else "failed"
        if status == "ok":
            wanted = getattr(getattr(planned, "bench", None), "headline", None)
            first = next((r for r in rows if r["metric"] == wanted), rows[0])
            value = first["value"]
            factor, unit = readable([value] if value is not None else [], str(first["unit"]))
            outcome = (f"ok  {first['metric']} "
                       f"{format_value(None if value is None else value * factor)} {unit}")
        else:
            # A reason whole the first time (never cut mid-word), then by reference: a suite
            # of twenty skipped GPU cases says its 400-character reason once, not twenty times.
            reason = str(rows[0]["reason"])
            first_said = self._said.setdefault(reason, index + 1)
            outcome = (f"{status}: {reason}" if first_said == index + 1 else
                       f"{status}: the reason given at [{first_said}]")
        prefix = self._label if self.interactive else "   "
        self._write(f"{prefix} -> {outcome} ({elapsed:.1f} s)\n")


class SoakProgress(Reporter):
    """A soak's progress, one line a window (rewritten in place on a terminal), as perftest's
    --run_infinitely prints: elapsed, remaining, the current window, the worst window so far
    and the error counters that grew so far."""

    def __init__(self, windows: int, window: float, stream: TextIO | None = None) -> None:
        super().__init__(stream)
        self.windows, self.window = windows, window
        self._began = time.monotonic()
        self._worst: tuple[float, str, int] | None = None     # (score, text, window)
        self._events = 0
        self._done = 0                   # windows this process ran (a resume ran some before)

    def start_run(self, run_id: str, suite: str, n_cases: int, label: str) -> None:
        tag = f", label {label!r}" if label else ""
        self._write(f"netbench soak {run_id}: {suite}, {n_cases:,} windows of "
                    f"{self.window:g} s ({duration_text(n_cases * self.window)}){tag}\n")

    def start_case(self, index: int, case: Case, description: str | None = None) -> None:
        pass

    def end_case(self, index: int, planned: Any, rows: Sequence[Mapping[str, Any]]) -> None:
        wanted = getattr(getattr(planned, "bench", None), "headline", None)
        ok = [r for r in rows if r["status"] == "ok"]
        first = next((r for r in ok if r["metric"] == wanted), ok[0] if ok else None)
        now = "failed: " + str(rows[0]["reason"])[:80] if rows and not ok else "-"
        if first is not None and first["value"] is not None:
            value = float(first["value"])
            factor, unit = readable([value], str(first["unit"]))
            now = f"{first['metric']} {format_value(value * factor)} {unit}"
            score = value if first["better"] != "lower" else -value
            if self._worst is None or score < self._worst[0]:
                self._worst = (score, now, index + 1)
        for row in rows[:1]:
            grown = counters_of(row.get("counters")) or {}
            self._events += sum(v for k, v in grown.items() if counters.is_error(k)
                                and not counters.netns_wide(k))
        self._done += 1
        elapsed = time.monotonic() - self._began
        left = max(self.windows - index - 1, 0) * elapsed / self._done
        worst = f"{self._worst[1]} (window {self._worst[2]})" if self._worst else "-"
        line = (f"soak {duration_text(elapsed)} elapsed, about {duration_text(left)} left; "
                f"window {index + 1}/{self.windows}: {now}; worst {worst}; "
                f"{self._events:,} error events")
        self._write(("\r\x1b[K" + line) if self.interactive else line + "\n")


def dip_line(dip: Any) -> str:
    """A dip as an engineer reads it: "14:02:10-14:02:30 (20 s, 4 windows): 0.48 of line rate
    10 Gbit/s; veth0 carrier_changes +2"."""
    end = dip.start + timedelta(seconds=dip.seconds)
    grown = ", ".join(f"{_counter_name(k)} +{v:,}" for k, v in sorted(dip.events.items()))
    return (f"{dip.start:%H:%M:%S}-{end:%H:%M:%S} ({dip.seconds:.0f} s, {dip.windows} "
            f"window{'s' if dip.windows > 1 else ''}): {dip.depth:.2f} of the reference"
            + (f"; {printable(grown)}" if grown else ""))


def _counter_name(key: str) -> str:
    """"net/eth0/statistics/carrier_changes" reads "eth0 carrier_changes"; an RDMA port's
    and the kernel's stay whole."""
    parts = key.removeprefix("far/").split("/")
    where = "far " if key.startswith("far/") else ""
    if len(parts) >= 3 and parts[0] in ("net", "ethtool"):
        return f"{where}{parts[1]} {parts[-1]}"
    return key


def soak_ending(result: Any, resume_command: str, resumed: bool = False,
                judged: int | None = None) -> tuple[str, int]:
    """What a soak says on stderr when it ends, and its exit code: how an interrupted soak
    goes on (130, 143 or 129: the signal's), a window that failed (1), else 0. A soak that
    stored no window (``resumed``: an earlier process stored some) has no run to resume:
    it is started again. ``judged``: the windows the verdict read back; none of those
    stored is a failure (a file no reader takes judged nothing), never a pass."""
    notes = [f"fallback: {note}\n" for note in dict.fromkeys(result.fallbacks)]
    unread = judged == 0 and bool(result.tally.get("ok"))
    if unread:
        notes.append(f"netbench: soak {result.run_id}: {result.tally['ok']} window(s) stored "
                     "but none read back (the store's warning above says why): nothing was "
                     "judged\n")
    counts = ", ".join(f"{n} {s}" for s, n in sorted(result.tally.items()))
    if result.path is not None:
        notes.append(f"stored {counts or 'no'} windows in {result.path}\n")
    notes += uncompacted_note(result, "soak", "window")
    if result.gave_up and not result.tally and not resumed:
        notes.append(f"netbench: soak {result.run_id} stopped before any window was stored: "
                     f"{printable(result.gave_up)}; nothing was kept. Once it can run, start "
                     f"it again:\n  {resume_command.rsplit(' --resume ', 1)[0]}\n")
        return "".join(notes), 1
    if result.gave_up:
        notes.append(f"netbench: soak {result.run_id} stopped: {printable(result.gave_up)}; "
                     "the windows it stored are kept. Once it can run again, go on with:\n"
                     f"  {resume_command}\n")
        return "".join(notes), 1
    if result.interrupted:
        notes.append(f"netbench: soak {result.run_id} stopped ({result.stopped_by or 'SIGINT'}); "
                     f"the windows that ended are kept. Go on with:\n  {resume_command}\n")
        return "".join(notes), 128 + int(getattr(signal, result.stopped_by or "SIGINT"))
    return "".join(notes), 1 if result.tally.get("failed") or result.uncompacted or unread \
        else 0


def uncompacted_note(result: Any, what: str, unit: str) -> list[str]:
    """A run whose parts could not be compacted into its file (its disk full): every
    stored ``unit`` kept, where, and what compacts them (any reader of the store with space
    again, as after a writer killed while compacting)."""
    if not result.uncompacted:
        return []
    where = Path(str(result.path)).parent
    return [f"netbench: {what} {result.run_id}: {printable(result.uncompacted)}; every {unit} "
            f"stored stays in {result.path}, read as it is. Once there is space, the next "
            f"netbench command on {where} compacts them: netbench runs --results "
            f"{shlex.quote(str(where))}\n"]


def soak_text(cases: Sequence[Any], run_id: str) -> str:
    """`netbench soak`'s verdict (``analysis.soak.judge``): each case's windows against the
    reference (lowest, p1, median), its dips with what the counters saw inside them, and
    the errors per hour."""
    lines = []
    for c in cases:
        factor, unit = readable([c.reference] if c.reference else [], c.unit)
        ref = (f"{format_value(c.reference * factor)} {unit}, {c.reference_from}"
               if c.reference else "unknown")
        lines.append(f"{printable(c.benchmark)} {c.metric}: {c.windows:,} windows over "
                     f"{duration_text(c.seconds)} in run {run_id}; reference {ref}")
        lines.append(f"  windows of the reference: lowest {fixed(c.lowest, 2)}, p1 "
                     f"{fixed(c.p1, 2)}, median {fixed(c.median, 2)}"
                     + (f"; {c.failed} failed, counted at 0" if c.failed else ""))
        for dip in c.dips[:20]:
            lines.append(f"  DIP {dip_line(dip)}")
        if len(c.dips) > 20:
            lines.append(f"  ... and {len(c.dips) - 20} more dips")
        if not c.dips:
            lines.append("  no dip: every window reached 0.9 of the reference")
        lines.append(f"  errors: {c.errors_per_hour:,.1f} an hour ({sum(c.errors.values()):,} "
                     f"in all), link events {c.link_events}"
                     + ("; " + ", ".join(printable(f"{_counter_name(k)} +{v:,}") for k, v in
                                        sorted(c.errors.items())[:6]) if c.errors else ""))
        if c.namespace:
            lines.append("  the namespace's TCP (any traffic's, not gated): " + ", ".join(
                f"{_counter_name(k)} +{v:,}" for k, v in sorted(c.namespace.items())[:4]))
    return "\n".join(lines) if lines else f"run {run_id}: no window measured"


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


def decimals(values: Iterable[float]) -> int:
    """Decimals for a column: four significant digits of its largest value, then the same for
    every cell (no 2.014e+04, no column mixing 3 and 0.0034)."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    if not finite:
        return 0
    return min(max(3 - math.floor(math.log10(max(finite))), 0), 6)


def fixed(value: float | None, places: int) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "-"
    return f"{value:,.{places}f}"


def _grid(header: Sequence[str], body: Sequence[Sequence[str]],
          units: Sequence[str] | None = None) -> list[str]:
    heads = [header] + ([units] if units and any(units) else [])
    widths = [max(*(len(h[i]) for h in heads), *(len(r[i]) for r in body))
              for i in range(len(header))]
    return ["  ".join(c.rjust(w) if i else c.ljust(w)
                      for i, (c, w) in enumerate(zip(r, widths))).rstrip()
            for r in (*heads, *body)]


# What a reference tool's column means, said once under the table that shows it.
COLUMN_NOTES = {"#wrong": "nccl-tests columns; #wrong: result elements checked wrong, a row "
                "with any fails",
                "retr": "retr: TCP segments retransmitted while it ran, iperf3's Retr"}


def _retransmits(rows: Sequence[Mapping[str, Any]]) -> str | None:
    """A TCP case's retransmits (tcp/RetransSegs while it ran), the median over its
    invocations whose counters were read; None for other transports or none read."""
    counts: dict[Any, int] = {}
    for row in rows:
        if row.get("transport") != "tcp":
            return None
        grown = counters_of(row.get("counters"))
        if grown is not None:       # one invocation's rows share its counters
            counts.setdefault(row.get("case_started_at") or len(counts),
                              int(grown.get("tcp/RetransSegs", 0)))
    if not counts:
        return None
    return f"{int(stats.median_sorted(sorted(counts.values()))):,}"


def summary_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Per benchmark, one line per case and one column per metric: a size column, the params
    that vary, the reference tool's own leading columns, then the metrics with their unit
    once under the name, each column with fixed decimals. Skipped and failed cases say so
    in the row. Collectives split into out-of-place and in-place groups with #wrong, as
    nccl-tests prints them. Each figure is the median of the case's repeats; ± (95% CI of the
    repeats' mean, or of one run's samples) only where shown."""
    varying = _varying_params(rows)
    cases: dict[tuple[str, int], list[Mapping[str, Any]]] = {}
    for row in rows:
        cases.setdefault((row["benchmark"], row["case_index"]), []).append(row)
    out: list[str] = []
    shown_pm = ""
    many = 0
    for bench in dict.fromkeys(row["benchmark"] for row in rows):
        bench_cases = [v for (b, _), v in cases.items() if b == bench]
        order: list[str] = []          # declared order, merged across cases
        units: dict[str, str] = {}
        qualified: dict[str, str] = {}
        for case_rows in bench_cases:
            previous = None
            for row in case_rows:
                if row["status"] != "ok":
                    continue
                name = row["metric"]
                if name not in units:
                    # The unit once in its column ("us"), its qualifier once under the table
                    # ("us: half RTT"): eight columns of "us (half RTT)" made tcp.rr 149 wide.
                    spelled = split_unit(row["unit"])
                    units[name] = spelled["unit"]
                    if spelled.get("unit_note"):
                        qualified[str(spelled["unit"])] = str(spelled["unit_note"])
                    order.insert(order.index(previous) + 1 if previous else 0, name)
                previous = name
        # Cases that differ in in_place are one line in two groups, as nccl-tests prints them.
        placements = any("in_place" in json.loads(c[0]["params"] or "{}")
                         for c in bench_cases)
        keys = [k for k in varying[bench] if not (placements and k == "in_place")]
        lines: dict[tuple[Any, ...], dict[str, Any]] = {}
        notes: list[str] = []
        ran = any(c[0]["status"] == "ok" for c in bench_cases)
        for case_rows in bench_cases:
            first = case_rows[0]
            params = json.loads(first["params"] or "{}")
            size = format_size(int(first["msg_size"])) if first["msg_size"] is not None else "-"
            # The reference tools' columns describe what ran: none where no case of this
            # benchmark ran (a table of skips), "-" for a skipped case beside ones that did.
            lead = columns_of(first.get("lead")) if ran else []
            ident = (size, *(str(params.get(k, "")) for k in keys), *(v for _, v in lead))
            line = lines.setdefault(ident, {"lead": lead, "cells": {}, "status": None,
                                            "trail": {}})
            group = ("in-place" if params.get("in_place") else "out-of-place") \
                if placements else ""
            if first["status"] != "ok":
                line["status"] = line["status"] or first["status"]
                note = f"  {first['status']}: {first['reason']}"
                if first["status"] == "failed" and note not in notes:
                    notes.append(note)          # skips are listed once, after the tables
                continue
            for row in case_rows:            # each repeat's row: the case's figure is theirs
                line["cells"].setdefault((group, row["metric"]), []).append(row)
            line["trail"][group] = dict(columns_of(first.get("trail")))
            retr = _retransmits(case_rows)
            if retr is not None:
                line["trail"][group]["retr"] = retr
        groups = (["out-of-place", "in-place"] if placements else [""])
        groups = [g for g in groups if any(g == c[0] for ln in lines.values()
                                          for c in ln["cells"])] or groups[:1]
        columns = [(g, m) for g in groups for m in order]
        # Each column in the unit it reads best in: 0.1909 Gbit/s as 190.9 Mbit/s.
        scale = {col: readable([v for ln in lines.values() if col in ln["cells"]
                                for v in [_figure(ln["cells"][col])[0]] if v is not None],
                               units[col[1]]) for col in columns}
        places = {col: decimals(_figure(ln["cells"][col])[0] * scale[col][0]
                                for ln in lines.values() if col in ln["cells"]
                                and _figure(ln["cells"][col])[0] is not None)
                  for col in columns}
        lead_names = [n for n, _ in next(iter(lines.values()))["lead"]] if lines else []
        # The reference tool's columns after the figures (nccl-tests' #wrong), per group.
        trail = list(dict.fromkeys(name for c in bench_cases if c[0]["status"] == "ok"
                                   for name, _ in columns_of(c[0].get("trail"))))
        if any("retr" in t for ln in lines.values() for t in ln["trail"].values()):
            trail.append("retr")
        header = ["size", *keys, *lead_names]
        unit_row = [""] * len(header)
        if not order:                           # nothing measured: a column for why
            header.append("status")
            unit_row.append("")
        for g, m in columns:
            header.append(f"{g + ' ' if g and m == order[0] else ''}{m}")
            unit_row.append(scale[(g, m)][1])
            if m == order[-1]:
                header.extend(trail)
                unit_row.extend([""] * len(trail))
        body = []
        for ident, line in lines.items():
            cells = list(ident)
            if not line["cells"]:
                status = line["status"] or "skipped"
                body.append([*cells, status, *([""] * (len(header) - len(cells) - 1))])
                continue
            for g, m in columns:
                row = line["cells"].get((g, m))
                value, half, repeats = _figure(row) if row else (None, None, 0)
                factor = scale[(g, m)][0]
                cell = fixed(None if value is None else value * factor,
                             places[(g, m)]) if row else "-"
                if half is not None and m != "lat_p50":
                    cell += f" ±{fixed(half * factor, places[(g, m)])}"
                    shown_pm = shown_pm or ("repeats" if repeats > 1 else "samples")
                    many = max(many, repeats)
                cells.append(cell)
                if m == order[-1]:
                    shown = line["trail"].get(g, {}) if row else {}
                    cells.extend(shown.get(name, "-") for name in trail)
            body.append(cells)
        notes_here = [COLUMN_NOTES[name] for name in trail if name in COLUMN_NOTES]
        notes_here += [f"{u}: {q}" for u, q in sorted(qualified.items())]
        out.append(bench + "".join(f"  ({n})" for n in notes_here))
        out.extend(_grid(header, body, unit_row))
        out.extend(notes)
        out.append("")
    if many > 1:
        out.append(f"each figure is the median of the case's repeats (the figure compare, "
                   f"history and export use); ± is the 95% confidence interval of the "
                   f"repeats' mean (up to {many} a case), where only one ran: of its samples")
    elif shown_pm:
        out.append("± is the 95% confidence interval of the mean of the stored samples "
                   "(per interval, per window or per rank) within one run: it understates how "
                   "far runs move (--repeat 3 measures that)")
    return "\n".join(out).rstrip()


def _figure(rows: Sequence[Mapping[str, Any]]) -> tuple[float | None, float | None, int]:
    """A case metric's figure over its repeats' rows: their median (the case's figure
    wherever it is read), the half-width of the 95% interval of their mean (of one run's own
    samples where it ran once), and how many repeats measured it."""
    values = sorted(float(r["value"]) for r in rows
                    if r.get("value") is not None and math.isfinite(float(r["value"])))
    if not values:
        return None, None, 0
    if len(values) >= 2:
        return stats.median_sorted(values), stats.ci95_halfwidth(values), len(values)
    samples = next((r.get("samples") for r in rows if r.get("value") is not None), None)
    half = (stats.ci95_halfwidth([float(x) for x in samples])
            if samples is not None and len(samples) >= 2 else None)
    return values[0], half, 1


# Beside its case's headline, a derived metric is shown only where it moved with evidence or
# the host disturbed it; the rest are folded into counts.
NOTED = (Verdict.LOST, Verdict.REGRESSED, Verdict.IMPROVED, Verdict.DISTURBED)


def headline_first(verdicts: Sequence[Any], headlines: Mapping[str, str] | None = None,
                   everything: bool = False) -> tuple[list[tuple[str, bool, Any]],
                                                      dict[str, int]]:
    """The verdicts a reader sees, case by case: (the case's name, whether this is its
    headline metric, the verdict), the headline first and then only the other metrics in
    ``NOTED`` (``everything``: all of them); and how many of each verdict were folded."""
    by_case: dict[tuple[str, str], list[Any]] = {}
    for v in verdicts:
        by_case.setdefault((v.benchmark, v.params), []).append(v)
    names = dict(zip(by_case, case_names(list(by_case))))
    shown: list[tuple[str, bool, Any]] = []
    folded: dict[str, int] = {}
    for key, group in by_case.items():
        wanted = (headlines or {}).get(key[0]) or group[0].metric
        head = next((v for v in group if v.metric == wanted), group[0])
        for v in [head, *[v for v in group if v is not head]]:
            if v is not head and not everything and v.verdict not in NOTED:
                folded[v.verdict] = folded.get(v.verdict, 0) + 1
                continue
            shown.append((names[key], v is head, v))
    return shown, folded


def compare_summary(verdicts: Sequence[Any], headlines: Mapping[str, str] | None = None,
                    everything: bool = False) -> str:
    """compare's console view, read as a verdict: one line per case (its headline metric, the
    verdict and why), then under it only the other metrics that changed with evidence or ran
    disturbed; the rest folded into one count line. ``everything``: every metric's row."""
    lines = []
    header = ("case", "metric", "baseline", "candidate", "change", "verdict", "why")
    body: list[tuple[str, ...]] = []
    shown, folded = headline_first(verdicts, headlines, everything)
    for name, is_head, v in shown:
        lost = v.verdict == Verdict.LOST
        body.append((printable(name) if is_head else "",
                     printable(f"{v.metric} [{v.unit}]"),
                     format_value(v.baseline), "-" if lost else format_value(v.candidate),
                     "-" if lost or not math.isfinite(v.change) else f"{v.change:+.1%}",
                     v.verdict.display,
                     printable(_why(v))))
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    for row in (header, *body):
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    if folded:
        lines.append("other metrics (--all shows them): "
                     + ", ".join(f"{n} {k}" for k, n in sorted(folded.items())))
    counts = {k: sum(v.verdict == k for v in verdicts) for k in VERDICTS}
    lines.append("verdicts: " + ", ".join(f"{n} {k}" for k, n in counts.items()))
    busy = sorted({v.disturbed for v in verdicts if v.disturbed})
    for text in busy[:6]:
        lines.append(f"busy host: {printable(text)}")
    return "\n".join(lines)


def _why(v: Any) -> str:
    """The evidence behind a verdict, in a few words."""
    n_base, n_cand = v.invocations
    if v.verdict == Verdict.LOST:
        return f"measured on the baseline, not on the candidate: {v.reason}"
    if v.verdict == Verdict.UNVERIFIED:
        return v.needs
    if v.verdict == Verdict.DISTURBED:
        return v.disturbed
    if v.evidence == "history":
        basis = f"spread of {v.history_runs} earlier runs on this host"
    elif v.evidence == "repeats":
        basis = f"{n_base} vs {n_cand} repeats"
    else:
        basis = "within the threshold" if v.verdict == Verdict.UNCHANGED else ""
    # The p that decided is adjusted for the many metrics tested at once: said so, with the
    # test's own beside it where they differ.
    p = "" if v.p_adjusted is None else (
        f", p {_p_text(v.p_adjusted)} adjusted"
        + (f" ({_p_text(v.p_value)} alone)" if v.p_value is not None
           and _p_text(v.p_value) != _p_text(v.p_adjusted) else ""))
    extra = f"; {v.needs}" if v.verdict == Verdict.NOISY and v.needs else ""
    # What this evidence could have told apart: the smallest change it detects.
    sees = (f"; detects {v.detectable:.1%}" if getattr(v, "detectable", None) is not None
            and math.isfinite(v.detectable) else "")
    also = "".join(f"; {x}" for x in (getattr(v, "per", ""), v.disturbed) if x)
    if v.verdict == Verdict.UNCHANGED and abs(v.change) <= v.threshold:
        return f"within {v.threshold:.0%}{sees}{also}"
    return f"{basis}{p}{extra}{sees}{also}"


def _p_text(p: float) -> str:
    """A p-value that never reads as the threshold it missed (0.0498 is < 0.05, not 0.050)."""
    if p < 0.001:
        return "< 0.001"
    text = f"{p:.3f}"
    return f"{p:.4f}" if text in ("0.050", "0.010") else text


def row_to_json(row: dict[str, Any]) -> dict[str, Any]:
    """A stored row for `run --json`: its times as ISO text."""
    out = {}
    for key, value in row.items():
        out[key] = value.isoformat() if isinstance(value, datetime) else value
    return out


def env_change(what: str, old: Any, new: Any) -> str:
    """One environment change, as compare and history print it."""
    return (f"{printable(what)}: {printable(old) if old is not None else '-'} -> "
            f"{printable(new) if new is not None else '-'}")


def relative(first: float | None, newest: float | None) -> str:
    """newest against first, as history prints a change; '-' where either is missing or 0."""
    if first is None or newest is None or first == 0 or first != first or newest != newest:
        return "-"
    return f"{(newest - first) / abs(first):+.1%}"


def plan_text(plan: Any, env: Mapping[str, Any],
              estimates: Sequence[float | None] = ()) -> str:
    """`run --dry-run`: the cases a run would measure, each validated, what would be skipped
    here and why, and how long it should take (``estimates``: each case's seconds in the
    store's earlier runs, run.estimate); nothing is measured or stored."""
    lines = [f"{plan.suite}: {len(plan.cases)} case(s)"]
    estimates = list(estimates) or [None] * len(plan.cases)
    skipped = 0
    for index, (planned, seconds) in enumerate(zip(plan.cases, estimates), 1):
        reason = planned.bench.available_for(planned.case, env)
        skipped += bool(reason)
        took = f"about {duration_text(seconds)}, " if seconds is not None and not reason else ""
        lines.append(f"  [{index}] {planned.bench.describe(planned.case)} ({took}timeout "
                     f"{planned.timeout:g} s)"
                     + (f"\n      would be skipped: {reason}" if reason else ""))
    known = [s for s, p in zip(estimates, plan.cases) if s is not None]
    unknown = len(plan.cases) - len(known) - skipped
    if known:
        lines.append(f"about {duration_text(sum(known))} for the {len(known)} case(s) timed "
                     "in the store's earlier runs on this host"
                     + (f"; {unknown} never timed here (each at most its timeout)"
                        if unknown > 0 else ""))
    else:
        lines.append("no time estimate: no case of this plan ran on this host before "
                     "(the store's earlier runs time each case)")
    return "\n".join(lines)


def remaining(estimates: Sequence[float | None], done: Sequence[float],
              start: int) -> float | None:
    """Seconds left for the cases from ``start`` on: their estimates, an unknown one at the
    mean of ``done`` (the seconds the cases finished so far took); None while nothing can
    stand in for an unknown one."""
    ahead = estimates[start:]
    unknown = sum(e is None for e in ahead)
    if unknown and not done:
        return None
    fill = sum(done) / len(done) if done else 0.0
    return sum(e for e in ahead if e is not None) + unknown * fill


def duration_text(seconds: float) -> str:
    """12 s, 4 min 10 s, 2 h 05 min."""
    seconds = max(int(round(seconds)), 0)
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def resuming(resume: Any) -> str:
    """What a resumed run keeps and what it runs again."""
    return (f"resuming run {resume.run_id}: {len(resume.done)} finished case(s) kept, "
            f"{len(resume.record['redone'])} to run")


def run_ending(result: Any, n_cases: int, *, rank: int | None, as_json: bool,
               resumed: bool, jsonl: str | None, resume_command: str,
               published: Sequence[str] = ()) -> tuple[str, str, int]:
    """What `netbench run` prints when its run ends, as (stdout, stderr, exit code).

    ``rank``: a rank other than 0 under a launcher, which says only its first failure
    (rank 0 reports the run). Otherwise the rows as JSON with ``as_json`` (the table then
    goes to stderr), the summary table, each fallback once with a count, the skipped cases
    grouped by reason, what the run's file holds, how an interrupted run goes on (130, 143
    or 129: the signal's exit code; 1 where it stopped itself, its store full), and the first
    failure (exit 1). ``published``: each case against its published figure
    (``reached_lines``)."""
    stopped = 1 if result.gave_up else 128 + int(getattr(signal, result.stopped_by or "SIGINT"))
    failed = [r for r in result.rows if r["status"] == "failed"]
    if rank is not None:
        said = "".join(f"netbench: error: rank {rank}: {row['benchmark']}: {row['reason']}\n"
                       for row in failed[:1])
        return "", said, stopped if result.interrupted else (1 if failed else 0)
    table = summary_table(result.rows) + "\n" if result.rows else ""
    if as_json:                         # the rows alone on stdout, for a pipe
        rows = json.dumps(json_safe([row_to_json(r) for r in result.rows]), default=str,
                          allow_nan=False)
        out, err = rows + "\n", [table]
    else:
        out, err = table, []
    err += [line + "\n" for line in published]
    err += _run_notes(result, resumed) + uncompacted_note(result, "run", "case")
    if result.interrupted:
        err += _stop_notes(result, n_cases, resumed, jsonl, resume_command)
        return out, "".join(err), stopped
    if result.uncompacted and not failed:
        return out, "".join(err), 1
    if failed:
        first = failed[0]
        more = f" (and {len(failed) - 1} more failed)" if len(failed) > 1 else ""
        err.append(f"netbench: error: {first['benchmark']}: {first['reason']}{more}\n")
        return out, "".join(err), 1
    return out, "".join(err), 0


def reached_lines(reached: Sequence[Any], error: str = "") -> list[str]:
    """Each case against what its hardware reaches elsewhere (``analysis.expectations.
    reached``): a matched case's share of the figure with the figure and its source, and the
    cases nothing matched, counted by why; ``error``: a table that could not be read."""
    if error:
        return [f"published figures: not judged: {printable(error)}"]
    if not reached:
        return []
    lines = ["published figures (what the same hardware reaches elsewhere, "
             "docs/expectations.md):"]
    names = case_names([(r.benchmark, r.params) for r in reached])
    unmatched: dict[str, Counter[str]] = {}
    for r, name in zip(reached, names):
        if r.entry is None:
            unmatched.setdefault(r.why, Counter())[f"{r.benchmark} {r.metric}"] += 1
            continue
        share = f"{r.share:.0%}" if r.share is not None else "?"
        lines.append(f"  {printable(name)} {r.metric}: {format_value(r.value)} {r.unit}, "
                     f"{share} of what this hardware reaches ({printable(r.entry.text())})")
    for why, counts in unmatched.items():
        what = ", ".join(f"{k} ({n} case{'s' * (n > 1)})" for k, n in counts.items())
        rule = "; the line-rate and link bounds still apply" if "hardware" in why else ""
        lines.append(f"  {printable(why)}: {printable(what)}{rule}")
    return lines


def health_text(findings: Sequence[Any], acted: str = "", notes: Sequence[str] = ()) -> str:
    """`netbench healthcheck` (``analysis.health.Finding``): the verdict in one line first
    (NHC's log line; Node Problem Detector's message is stdout's start), then one line a
    check, PASS, FAIL or N/A (not on this node, and why), and what was done in Slurm."""
    bad = [f for f in findings if not f.ok]
    lines = ["netbench healthcheck: " + (
        "FAIL: " + "; ".join(f"{printable(f.check)}: {printable(f.what)}" for f in bad)
        if bad else f"PASS ({sum(f.applies for f in findings)} checks)")]
    for f in findings:
        word = "N/A " if not f.applies else ("PASS" if f.ok else "FAIL")
        lines.append(f"  {word}  {printable(f.check)}: {printable(f.what)}")
    lines += [f"note: {printable(n)}" for n in notes]
    if acted:
        lines.append(f"slurm: {printable(acted)}")
    return "\n".join(lines)


def _run_notes(result: Any, resumed: bool) -> list[str]:
    """Fallbacks said once with a count, skipped cases grouped by reason, and what the run's
    file holds."""
    err = []
    for note, times in Counter(result.fallbacks).items():   # a per-case note, said once
        err.append(f"fallback: {note}" + (f" ({times} times)" if times > 1 else "") + "\n")
    err += [line + "\n" for line in counter_lines(result.rows)]
    skipped: dict[str, list[str]] = {}
    for row in result.rows:
        if row["status"] == "skipped":
            skipped.setdefault(row["reason"], []).append(row["benchmark"])
    for reason, names in skipped.items():
        err.append(f"skipped: {', '.join(dict.fromkeys(names))}"
                   f"{f' ({len(names)} cases)' if len(names) > 1 else ''}: {reason}\n")
    # What the run's file holds (a part that turned unreadable is not in it), not what ran.
    n_rows, by_status = len(result.rows), {s: result.count(s) for s in
                                           ("ok", "skipped", "failed")}
    kept = result.stored
    if kept is not None:
        n_rows, by_status = kept
    counts = ", ".join(f"{by_status[s]} {s}" for s in ("ok", "skipped", "failed"))
    if kept is not None and resumed:
        counts += " in the whole run"
    if result.path is not None:
        err.append(f"stored {n_rows} rows ({counts} cases) in {result.path}\n")
    return err


def counter_growth(key: str, value: Any) -> str:
    """A counter's growth as a person reads it: bytes in decimal units ("+6.01 GB", not
    "+6006204515"), counts with thousands separated."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return f"{printable(key)} {printable(str(value))}"
    if key.endswith("_bytes") or key.endswith("/bytes"):
        size = float(value)
        for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
            if abs(size) >= scale:
                return f"{printable(key)} +{size / scale:.3g} {unit}"
        return f"{printable(key)} +{int(size)} B"
    return f"{printable(key)} +{value:,}"


def on_loopback(row: Mapping[str, Any]) -> bool:
    """The case ran over the host's loopback (no NIC): its TCP retransmits are the kernel's
    own queueing (a sender outrunning the receiver's backlog), normal there, no NIC's news."""
    return error_metrics.on_loopback(row.get("device"), row.get("peer"))


def loopback_errors(row: Mapping[str, Any], errors: Mapping[str, Any]) -> bool:
    """Every error counter that grew is the namespace's TCP one, on a loopback case."""
    return bool(errors) and on_loopback(row) and all(counters.netns_wide(k) for k in errors)


def counter_lines(rows: Iterable[Mapping[str, Any]], limit: int = 20) -> list[str]:
    """A line for each case whose error counters grew while it ran (netbench.env.counters):
    ``counters: tcp.stream (case 3): tcp/RetransSegs +523, net/veth0/carrier_changes +2``;
    loopback cases' TCP retransmits (normal there) in one line for all of them."""
    out, seen = [], set()
    quiet: dict[str, int] = {}
    cases = 0
    for row in rows:
        key = (row.get("run_id"), row.get("host"), row.get("case_index"))
        if key in seen:
            continue
        seen.add(key)
        grown = counters.nonzero_errors(counters_of(row.get("counters")) or {})
        if loopback_errors(row, grown):
            cases += 1
            for name, value in grown.items():
                quiet[name] = quiet.get(name, 0) + int(value)
        elif grown:
            where = f" {row.get('host')} -> {row.get('peer')}" if row.get("peer") else ""
            out.append(f"counters: {row.get('benchmark')} (case {int(row['case_index']) + 1})"
                       f"{where}: " + ", ".join(counter_growth(k, v) for k, v in
                                                sorted(grown.items())))
    if len(out) > limit:
        out = out[:limit] + [f"counters: ... and {len(out) - limit} more case(s) with errors"]
    if quiet:
        out.append(f"counters: {cases} loopback case(s) retransmitted ("
                   + ", ".join(counter_growth(k, v) for k, v in sorted(quiet.items()))
                   + " in all): normal over lo, where a sender outruns the receiver's "
                   "backlog; over a NIC they are news")
    return out


def _stop_notes(result: Any, n_cases: int, resumed: bool, jsonl: str | None,
                resume_command: str) -> list[str]:
    """An interrupted run: the case cut off, and where its finished rows are and how the run
    continues."""
    err = []
    how = f"stopped: {printable(result.gave_up)}" if result.gave_up else "interrupted" \
        if result.stopped_by in ("", "SIGINT") else f"stopped by {result.stopped_by}"
    if result.cut_off is not None:
        index, description = result.cut_off
        err.append(f"case {index + 1}/{n_cases} ({description}) was cut off: not "
                   "stored; a resume runs it again\n")
    if result.path is None and not resumed:
        err.append(f"netbench: {how} before any case finished; nothing was stored\n")
    elif jsonl:
        err.append(f"netbench: {how}; finished rows were kept in {jsonl}\n")
    else:
        err.append(f"netbench: {how}; finished rows were kept; continue with: "
                   f"{resume_command}\n")
    return err


def fabric_ending(result: Any, matrices: Sequence[Any], as_json: bool,
                  where: str) -> tuple[str, str, int]:
    """What `netbench fabric` prints on rank 0 after the sweep, as (stdout, stderr, exit
    code): the verdicts as JSON with ``as_json`` (the summary then goes to stderr), the
    summary, and where the rows went; exit 1 when a matrix flags something."""
    from netbench.report.formats import fabric_json

    summary = fabric_text(matrices) + "\n"
    stored = (f"stored {len(result.rows)} rows of {result.schedule.pairs} pairs in run "
              f"{result.run_id} ({where})\n")
    code = 1 if any(m.verdict.fails_gate() for m in matrices) else 0
    if not as_json:
        return summary, stored, code
    data = json.dumps(json_safe({"run_id": result.run_id,
                                 "matrices": fabric_json(matrices)}), allow_nan=False)
    return data + "\n", summary + stored, code


def fabric_soak_ending(result: Any, passes: Sequence[Any], as_json: bool,
                       where: str) -> tuple[str, str, int]:
    """`netbench fabric --soak` on rank 0: each pass's verdict in a line (what it named, or
    nothing), then each thing named with the passes that named it and its words, the last
    pass's matrix in full; JSON with ``as_json`` (the text then goes to stderr). Exit 1 when
    any pass flags something: a trunk that slowed for one pass of twelve fails the burn-in."""
    from netbench.analysis.fabric import named_in_passes
    from netbench.report.formats import fabric_json

    seconds = (result.facts.get("soak") or {}).get("seconds")
    lines = [f"burn-in: {len(passes)} pass(es) of the sweep"
             + (f" over {seconds:g} s" if seconds else "")
             + (" (one pass: a soak shorter than a sweep is one sweep)"
                if len(passes) == 1 else "")]
    for one in passes:
        # Each suspect by name and share of healthy; its evidence is in the lines below.
        named = [s.text(m.unit, bool(m.localization and m.localization.inferred),
                        m.roles).split(": ")[0].split(" (")[0]
                 + ("" if s.of_healthy is None else f" at {s.of_healthy:.2f} of healthy")
                 for m in one.matrices for s in m.suspects]
        named += [f"HOST {h.name} ({h.role})" for m in one.matrices for h in m.faulty_hosts]
        failed = sum(len(m.failed) for m in one.matrices)
        pairs = sum(len(m.cells) for m in one.matrices)
        lines.append(f"  pass {one.number} ({one.started_at[11:19]}): {pairs} pairs, "
                     + ("; ".join(named) if named else "nothing named")
                     + (f", {failed} failed" if failed else ""))
    things = named_in_passes(list(passes))
    for _, numbers, said in things:
        lines.append(f"NAMED in pass(es) {_spans(numbers)} of {len(passes)}: {said}")
    if not things:
        lines.append("nothing named in any pass")
    if passes:
        lines.append(f"the last pass (pass {passes[-1].number}) in full:")
        lines.append(fabric_text(passes[-1].matrices))
    text = "\n".join(lines) + "\n"
    stored = (f"stored {len(result.rows)} rows of {len(passes)} pass(es) in run "
              f"{result.run_id} ({where})\n")
    code = 1 if any(m.verdict.fails_gate() for one in passes for m in one.matrices) else 0
    if not as_json:
        return text, stored, code
    data = json.dumps(json_safe({
        "run_id": result.run_id, "soak_seconds": seconds,
        "passes": [{"pass": one.number, "started_at": one.started_at,
                    "matrices": fabric_json(one.matrices)} for one in passes],
        "named": [{"elements": key, "passes": numbers, "text": said}
                  for key, numbers, said in things]}), allow_nan=False)
    return data + "\n", text + stored, code


def _spans(numbers: Sequence[int]) -> str:
    """[1, 2, 3, 5] -> "1-3, 5"."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][-1] + 1:
            spans[-1].append(n)
        else:
            spans.append([n])
    return ", ".join(f"{s[0]}-{s[-1]}" if len(s) > 1 else str(s[0]) for s in spans)


def list_text(catalog: Mapping[str, Any]) -> str:
    """`netbench list`: each benchmark, whether it can run here and why not, its params with
    their defaults and accepted values, its metrics; broken plugins and hooks."""
    lines = []
    for entry in catalog["benchmarks"]:
        state = "ready" if entry["available"] else f"unavailable: {entry['reason']}"
        lines.append(f"{entry['name']:<14} [{entry['transport']}] {entry['description']}")
        lines.append(f"{'':<14} {state}")
        for p in entry["params"]:
            default = format_size(p["default"]) if p["kind"] == "size" else str(p["default"])
            lines.append(f"{'':<16}{p['name']} = {default:<10} {p['help']} ({p['accepted']})")
        metrics = ", ".join(f"{m['name']} [{m['unit']}, {m['better']} is better]"
                            for m in entry["metrics"])
        lines.append(f"{'':<16}metrics: {metrics}")
    for name, why in catalog["broken_plugins"].items():
        lines.append(f"{name:<14} BROKEN PLUGIN: {why}")
    if catalog["hooks"]:
        lines.append("hooks: " + ", ".join(catalog["hooks"]))
    for why in catalog["broken_hooks"]:
        lines.append(f"BROKEN HOOK: {why}")
    return "\n".join(lines)


def probe_text(raw: Mapping[str, Any]) -> str:
    """`netbench probe`: the fingerprint for a person (--json gives all of it)."""
    from netbench.env.linkpath import hop_line

    env = Fingerprint(raw)
    mem = env.memory_bytes
    lines = [f"host      {env.host}  ({env.os}, kernel {env.kernel}, {env.arch})",
             f"cpu       {env.cpu_model}  {env.cpu_cores} logical / "
             f"{env.cpu_physical_cores} physical",
             f"memory    {mem / 2**30:.1f} GiB" if mem else "memory    unknown"]
    if env.virtual_machine:
        lines.append(f"vm        inside {env.virtual_machine}")
    lines.append("versions  " + ", ".join(f"{k} {v}" for k, v in env.versions.items()))
    lines.append("nics")
    for nic in env.nics:
        speed = f"{nic.speed_mbps} Mb/s" if nic.speed_mbps else "speed unknown"
        extra = ", ".join(f"{k} {getattr(nic, k)}" for k in Nic.SHOWN if getattr(nic, k))
        lines.append(f"  {nic.name:<12} {nic.operstate or '?':<8} mtu {nic.mtu}, "
                     f"{speed}" + (f", {extra}" if extra else ""))
    lines.append("gpus" + ("" if env.gpus else "      none on the PCI bus"))
    for gpu in env.gpus:
        ids = f"[{(gpu.vendor_id or '?')[2:]}:{(gpu.device_id or '?')[2:]}]"
        lines.append(f"  {gpu.pci_address}  " + ", ".join(
            str(v) for v in (gpu.model, gpu.driver, gpu.driver_version) if v) + f" {ids}")
    lines.append("pcie" + ("" if env.pcie_paths else "      no GPU or RDMA NIC on a PCIe link"))
    for path in env.pcie_paths:
        lines.append(f"  [{path.kind}] {path.summary}")
        lines.extend(f"      {hop_line(hop)}" for hop in path.hops)
    lines.append("rdma" + ("" if env.rdma_devices else
                           "      none (no /sys/class/infiniband devices)"))
    for dev in env.rdma_devices:
        lines.append(f"  {dev.name:<12} fw {dev.fw_ver}, {dev.node_type}")
        for port in dev.ports:
            lines.append(f"    port {port.port}: {port.state}, {port.link_layer}, {port.rate}"
                         + (f", netdev {port.netdev}" if port.netdev else ""))
    return "\n".join(lines)


def runs_table(index: Any) -> str:
    """`netbench runs`: a line per stored run (``store.runs()``'s frame), and how to continue
    the newest interrupted one."""
    lines = [f"{'run id':<12}  {'label':<24} {'started (UTC)':<19}  {'host':<16} "
             f"{'suite':<18} {'ok':>3} {'skip':>4} {'fail':>4}  {'state':<11} benchmarks"]
    for row in index.itertuples():
        benches = printable(", ".join(row.benchmarks))
        lines.append(
            f"{printable(row.run_id):<12}  {printable(row.label or '-')[:24]:<24} "
            f"{row.started_at.strftime('%Y-%m-%d %H:%M:%S'):<19}  "
            f"{printable(row.host or '-')[:16]:<16} "
            f"{printable(row.suite or '-')[:18]:<18} {row.ok:>3} {row.skipped:>4} "
            f"{row.failed:>4}  {row.state:<11} "
            f"{benches[:60] + ('...' if len(benches) > 60 else '')}")
    stopped = index[index["state"] == "interrupted"]
    if not stopped.empty:
        last = stopped.iloc[-1]
        soak = _soak_footer(last.get("soak"))       # a soak goes on as a soak
        how = ("run SUITE" if soak is None else
               f"soak {printable(last['suite'])} --duration {soak[0]:.15g}s --window "
               f"{soak[1]:.15g}s" if soak else
               f"soak {printable(last['suite'])} --duration D --window W (as it was started: "
               "its file's soak footer is unreadable)")
        lines.append(f"interrupted: continue one with `netbench {how} --resume "
                     f"{printable(last['run_id'])}` (same suite, same host)")
    return "\n".join(lines)


def _soak_footer(text: Any) -> tuple[float, float] | tuple[()] | None:
    """A run's ``netbench_soak`` footer as (duration, window) seconds; None: no soak; ():
    a soak whose footer is no such JSON (a file written by hand, or damaged)."""
    if not text:
        return None
    try:
        data = json.loads(text)
        duration, window = float(data["duration"]), float(data["window"])
    except (ValueError, TypeError, KeyError, RecursionError):
        return ()
    return (duration, window) if math.isfinite(duration) and math.isfinite(window) else ()


def thresholds_text(thresholds: Mapping[str, float], source: str) -> str:
    """One line saying which thresholds judged, so a verdict is never read against the wrong
    line: "thresholds: goodput 3%, ... (suite driver-regression's ...); default 5%"."""
    if not source:
        return "thresholds: 5% for every metric (the default; --thresholds FILE sets them)"
    shown = ", ".join(f"{k} {v * 100:.4g}%" for k, v in sorted(thresholds.items()))
    rest = "" if "default" in thresholds else "; 5% for the rest"
    return f"thresholds: {shown}{rest} ({source})"


def sides_text(base: Any, cand: Any, thresholds: Mapping[str, float], source: str) -> str:
    """The two sides a report compares (Selections) and the thresholds that judged them."""
    return (f"baseline:  {base.describe()}\ncandidate: {cand.describe()}\n"
            f"{thresholds_text(thresholds, source)}")


def report_text(info: Mapping[str, Any]) -> str:
    """`netbench report`: where the page went and what its first view draws."""
    return (f"wrote {info['path']} ({info['bytes'] / 1e6:.1f} MB); first view: {info['view']} "
            f"= run {info['run']}; charts: {', '.join(info['charts']) or 'none'}; "
            f"{len(info['views'])} view(s) in the picker")


def compare_text(done: Any, everything: bool = False) -> str:
    """`netbench compare` (``analysis.compare.Comparison``): the two sides (selections),
    which thresholds judged, the verdicts (``compare_summary``), the cases no side could
    judge, error counters quiet before and grown now, and what changed in the environment."""
    from netbench.analysis.cases import headlines

    baseline, candidate, verdicts = done.baseline, done.candidate, done.verdicts
    failed, changes, news, new, unasked = (done.failed, done.changes, done.news, done.new,
                                           done.unasked)
    lines = [f"baseline:  {printable(baseline.describe())}",
             f"candidate: {printable(candidate.describe())}",
             printable(thresholds_text(done.thresholds, done.source)),
             compare_summary(verdicts, {**headlines(baseline.rows),
                                        **headlines(candidate.rows)}, everything=everything)]
    lost = {(v.benchmark, v.params) for v in verdicts if v.verdict == Verdict.LOST}
    for bench, params in new:
        lines.append(f"new: {printable(bench)} {printable(params)}: only the candidate "
                     "measured it (not judged)")
    for bench, params in unasked:
        lines.append(f"not asked: {printable(bench)} {printable(params)}: only the baseline "
                     "measured it, and no candidate run was asked to run it (another suite or "
                     "target: not judged; the same suite without it would be LOST)")
    for side_name, bench, params, reason in failed:
        if (bench, params) in lost:
            continue                    # a lost verdict above, with its reason
        lines.append(f"not judged: {side_name}: every invocation of {printable(bench)} "
                     f"{printable(params)} failed: {printable(reason[:200])}")
    named = dict(zip([(n.benchmark, n.params) for n in news],
                     case_names([(n.benchmark, n.params) for n in news])))
    for n in news:          # the case by its name (tcp.stream msg_size=64K), not its JSON
        lines.append(f"counters: news: {printable(named[(n.benchmark, n.params)])}: "
                     f"{printable(n.name)} 0 -> {n.candidate:,} in one invocation "
                     f"({', '.join(printable(w) for w in n.where[:4])})"
                     + ("" if n.gated else "; not the case's own device (the namespace's "
                        "TCP, or another interface that carried its traffic): not gated"))
    lines += reached_lines(done.reached, done.reached_error)
    lines.append("environment changes:" if changes else "environment: no differences recorded")
    lines.extend(f"  {env_change(what, a, b)}" for what, a, b in changes)
    return "\n".join(lines)


def history_text(h: Any, window: int) -> str:
    """`netbench history` (``analysis.history.build``'s History): the runs, numbered, with
    what changed in each; a line per case metric; the metrics measured in one run only."""
    lines = [f"history: {len(h.runs)} runs, {len(h.series)} case metrics; each run judged "
             f"against up to {window} before it since the last step (compare's test)"]
    for i, run in enumerate(h.runs, 1):
        changed = "; ".join(env_change(k, a, b) for k, a, b in run["changes"][:4])
        more = f" (+{len(run['changes']) - 4} more)" if len(run["changes"]) > 4 else ""
        lines.append((f"  #{i:<3} {printable(run['run_id'])}  "
                      f"{run['started_at']:%Y-%m-%d %H:%M}  "
                      f"{printable(run['label'] or '-')[:20]:<20}"
                      + (f"  changed: {changed}{more}" if changed else "")).rstrip())
        for n in run.get("news", [])[:4]:
            lines.append(f"       counters: news: {printable(n.benchmark)}: {printable(n.name)} "
                         f"0 -> {n.candidate}" + ("" if n.gated else " (the namespace's TCP)"))
    lines.extend(f"  left out {printable(run_id)}: {printable(why)}"
                 for run_id, why in h.left_out[:10])
    for name, v in zip(case_names([(v.benchmark, v.params) for v in h.lost]), h.lost):
        lines.append(f"  LOST in the newest run: {printable(name)}: "
                     f"{printable(v.reason[:200])}")
    lines.append("")
    lines.extend(_history_table(h) if h.series else ["no case measured in two or more runs: "
                                                      "no trend"])
    lines.extend(_change_point_lines(h))
    if h.single:
        once = Counter((b, m) for b, m, _ in h.single)      # a metric of several cases: once
        lines.append(f"{len(h.single)} case metric(s) measured in one run only, no trend: "
                     + ", ".join(f"{b} {m}" + (f" ({n} cases)" if n > 1 else "")
                                 for (b, m), n in list(once.items())[:6])
                     + (" ..." if len(once) > 6 else ""))
    return "\n".join(lines)


def history_gate(h: Any, allow_lost: bool = False) -> str:
    """What fails `netbench history`'s gate in its newest run, in words ("" when nothing):
    case metrics that regressed, cases it lost (unless ``allow_lost``)."""
    regressed = sum(s.newest.verdict == Verdict.REGRESSED for s in h.series)
    lost = sum(v.verdict.fails_gate(allow_lost=allow_lost) for v in h.lost)
    return " and ".join(x for x in (f"regressed in {regressed} case metric(s)" if regressed
                                    else "", f"lost {lost} case(s)" if lost else "") if x)


def _change_point_lines(h: Any) -> list[str]:
    """Where each series stepped (its change points), by run number and date: the answer to
    "when did this get slower"; and which series were too short to segment."""
    from netbench.analysis.segments import MIN_RUNS

    number = {r["run_id"]: i for i, r in enumerate(h.runs, 1)}
    names = case_names([(s.benchmark, s.params) for s in h.series])
    out = []
    for name, s in zip(names, h.series):
        if s.change_points:
            out.append(f"steps: {printable(name)} {printable(s.metric)}: " + ", ".join(
                f"{c.change:+.1%} at #{number.get(c.run_id, '?')} ({printable(c.run_id)}, "
                f"{c.started_at:%Y-%m-%d %H:%M})" for c in s.change_points))
    short = sum(len(s.steps) < MIN_RUNS for s in h.series)
    if short:
        out.append(f"{short} case metric(s) in fewer than {MIN_RUNS} runs: too short to "
                   f"segment (change points need {MIN_RUNS} or more runs)")
    return out


def _history_table(h: Any) -> list[str]:
    """A line per case metric: its trend, first and newest values, two changes, the newest
    verdict and the earlier runs where it moved (by the runs' numbers)."""
    from netbench.analysis.history import sparkline

    number = {r["run_id"]: i for i, r in enumerate(h.runs, 1)}
    names = case_names([(s.benchmark, s.params) for s in h.series])
    # Two changes, each named: the newest against the window it was judged by (the verdict's
    # own figure), and against the first value shown (what the trend line spans).
    header = ("benchmark", "case", "metric", "unit", "trend", "first", "newest",
              "vs window", "vs first", "newest verdict", "earlier steps")
    body = []
    for name, s in zip(names, h.series):
        new = s.newest
        marks = [f"{'down' if st.verdict == Verdict.REGRESSED else 'up'} #{number[st.run_id]}"
                 for st in s.steps[1:-1] if st.verdict in (Verdict.REGRESSED, Verdict.IMPROVED)]
        verdict = new.verdict.display if new.verdict else ""
        body.append((printable(s.benchmark), printable(name[len(s.benchmark) + 1:]),
                     printable(s.metric), printable(s.unit),
                     sparkline([st.value for st in s.steps]),
                     format_value(s.steps[0].value), format_value(new.value),
                     "-" if new.change is None else f"{new.change:+.1%}",
                     relative(s.steps[0].value, new.value),
                     f"{verdict} (#{number[new.run_id]} vs {new.against})",
                     ", ".join(marks) or "-"))
    widths = [max(len(h_), *(len(r[i]) for r in body)) for i, h_ in enumerate(header)]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()
            for row in (header, *body)]


def accept_text(spec: Any, chosen: Any, outcomes: Sequence[Any]) -> str:
    """`netbench accept`: the spec and the run judged, a PASS or FAIL line per check (a
    failure with its message under it), and the counts."""
    rows = chosen.rows
    lines = [f"acceptance: {printable(spec.name)}, {printable(chosen.describe())} (host "
             f"{printable(', '.join(dict.fromkeys(str(h) for h in rows['host'])))}, label "
             f"{printable(repr(rows['label'].iloc[0]))})"]
    for o in outcomes:
        state = "FAIL" if not o.passed else "NONE" if o.unjudged else "PASS"
        lines.append(f"  {state}  {printable(o.check.name)}: "
                     f"expected {o.expected}; {o.measured_text(most=4)}"
                     + ("" if state == "PASS" else f"\n        {printable(o.message)}"))
    failed = sum(not o.passed for o in outcomes)
    unjudged = sum(bool(o.passed and o.unjudged) for o in outcomes)
    lines.append(f"{len(outcomes) - failed - unjudged} passed, {failed} failed"
                 + (f", {unjudged} not judged (no published figure for this hardware)"
                    if unjudged else ""))
    return "\n".join(lines)


WORST_ELEMENTS = 3        # elements the fabric's summary quotes, lowest median first


def fabric_text(matrices: Sequence[Any], worst: int = 10) -> str:
    """What the terminal prints: per case, the hosts at fault, the slow links, the failed
    pairs and the worst pairs."""
    from netbench.analysis.elements import worst as worst_elements

    lines = []
    for m in matrices:
        params = json.loads(m.params or "{}")
        case = " ".join(f"{k}={v}" for k, v in sorted(params.items())
                        if k in ("msg_size", "streams", "direction", "qps", "bidirectional"))
        healthy = m.localization.reference if m.localization else None
        lines.append(f"{m.benchmark} {case}".rstrip() + f": {m.metric} over "
                     f"{len(m.endpoints)} endpoints, {len(m.cells)} pairs, median "
                     + (f"{m.median:.4g} {m.unit}" if m.median is not None else "-")
                     + (f", healthy {healthy:.4g} (the fast pairs' median)"
                        if healthy is not None and m.median is not None else "")
                     + (f"; slow: {m.localization.cut_from}"
                        if m.localization and m.localization.cut is not None else ""))
        if len(m.cells) > worst:
            lines[-1] += f" (the {worst} worst below)"
        for h in m.faulty_hosts:
            lines.append(f"  HOST {h.name}: slow {h.role} with {h.slow} of {h.pairs} peers "
                         f"(median {h.median_ratio:.2f} x the healthy rate): its NIC, PCIe path "
                         "or config")
        loc = m.localization
        for suspect in m.suspects:
            lines.append("  " + suspect.text(m.unit, loc.inferred if loc else False, m.roles))
        unexplained = m.unexplained
        for c in m.slow_links:
            if (c.client, c.server) in unexplained:
                lines.append(f"  LINK {c.client} -> {c.server}: {c.ratio:.2f} x the healthy rate, "
                             "while both hosts are fine with their other peers: the pair's "
                             "own path (one pair: retest it)")
        if m.elements and m.topology is not None and not m.topology.inferred:
            # The links' and switches' evidence, worst first, named or not (hosts have their
            # own lines; an inferred shape's groups are no names to send an engineer to).
            lines.append("  worst elements (median of the pairs through each, x healthy):")
            lines += [f"    {e.text()}" for e in worst_elements(m.elements, WORST_ELEMENTS,
                                                                   hosts=False)]
        lines += _error_lines(m)
        for note in m.notes:
            lines.append(f"  note: {note}")
        for c in m.failed:
            lines.append(f"  FAILED {c.client} -> {c.server}: {c.reason}")
        line = m.cells["of_line"].dropna() if "of_line" in m.cells else []
        if len(line):
            lines.append(f"  vs the probed link rate: median {line.median():.2f}, worst "
                         f"{line.min():.2f}")
        for c in m.worst(worst):
            lines.append(f"    {c.client:>20} -> {c.server:<20} {c.value:.4g} {m.unit}  "
                         f"{c.ratio:.2f} x healthy" + ("  slow" if c.slow else ""))
        if not m.flagged():
            lines.append("  nothing flagged")
    return "\n".join(lines)


def _error_lines(m: Any) -> list[str]:
    """The elements whose pairs grew error counters, with the evidence; else the pairs."""
    if not m.errors:
        return []
    lines = []
    loc = m.error_localization
    for suspect in loc.suspects if loc else []:
        lines.append(f"  ERRORS {', '.join(suspect.elements[:3])}: {suspect.slow} of "
                     f"{suspect.pairs} pairs through it grew error counters")
    for (client, server), grown in sorted(m.errors.items())[:WORST_ELEMENTS * 2]:
        lines.append(f"    {client} -> {server}: " + ", ".join(
            f"{k} +{v}" for k, v in sorted(grown.items())))
    return lines
