"""A burn-in judged: every window of a case against what the hardware should reach (the link's
probed line rate, else the soak's own median window), the dips named with their start,
length and depth and what the NIC and the kernel counted inside them, and the error counters'
growth per hour.

A soak's windows are the invocations of one case (``netbench soak``: the runner stores each
as it ends, with the counters that grew in it and the host's load), so they are read back
from the store like any run: one row a window of the case's headline metric, oldest first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from netbench.analysis.cases import is_headline, probed_line_rate
from netbench.env import counters
from netbench.fingerprint import Fingerprint
from netbench.store import counters_of
from netbench.units import from_gbit, is_rate

DIP_BELOW = 0.9     # a window under this share of the reference is in a dip
# Counters that say the link itself went away (not a packet lost on it).
LINK_EVENTS = ("carrier_changes", "link_downed", "carrier_down_count", "link_error_recovery")


@dataclass
class Dip:
    """Consecutive windows under DIP_BELOW of the reference."""
    start: datetime
    seconds: float
    windows: int
    depth: float                      # the lowest window's share of the reference
    events: dict[str, int] = field(default_factory=dict)   # counter key -> growth inside it


@dataclass
class SoakCase:
    """One case's burn-in: its windows' figures against the reference, and its dips."""
    benchmark: str
    params: str
    metric: str
    unit: str
    better: str
    reference: float | None           # what a window should reach, in the metric's unit
    reference_from: str               # "line rate 10 Gbit/s" or "the soak's median window"
    windows: int
    seconds: float                    # the windows' measured time, summed
    lowest: float | None              # the worst window's share of the reference
    p1: float | None
    median: float | None
    dips: list[Dip]
    link_events: int                  # carrier changes, link downs in the whole soak
    errors: dict[str, int]            # the case's own device's error counters that grew
    namespace: dict[str, int]         # the namespace's (the kernel's TCP), shown apart
    timeline: list[tuple[datetime, float, float]]   # (window start, value, share)
    failed: int = 0                   # windows that failed: in the timeline at 0

    @property
    def errors_per_hour(self) -> float:
        hours = self.seconds / 3600.0
        return sum(self.errors.values()) / hours if hours > 0 else 0.0


def _quantile(ordered: list[float], q: float) -> float:
    """The q quantile of sorted values (linear between ranks)."""
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _share(value: float, reference: float, better: str) -> float:
    """How much of the reference a window reached, 1 = all of it, whichever way is better."""
    if better == "lower":
        return reference / value if value > 0 else 0.0
    return value / reference


def physical_line_rate(row: Any) -> float | None:
    """Gbit/s of the link a window ran on, where that is what the hardware should reach: an
    RDMA port's rate, a NIC's speed; not a virtual interface's (a veth says 10000 Mb/s
    whatever shapes it) nor an emulated RDMA device's, whose soak is judged against its own
    median window."""
    device = str(row.get("device") or "").partition(":")[0]
    env = Fingerprint(row.get("env_json"))
    nic, rdma = env.nic(device), env.rdma(device)
    if rdma is not None and rdma.emulated:
        return None     # rxe, siw: the CPU's pace, not its netdev's nominal rate (rxe in a VM
        # says 10 Gb/s and moves tens of Mbit/s: every window a dip of 0.01)
    if rdma is None and (nic is None or nic.virtual):
        return None
    return probed_line_rate(row)


def judge(rows: Any, dip_below: float = DIP_BELOW, metric: str | None = None,
          line_rate: float | None = None) -> list[SoakCase]:
    """Each soaked case of these rows (one run's), window by window: its headline metric, or
    ``metric``; against ``line_rate`` (Gbit/s) where given, else the link's own (a rate on a
    physical link), else the soak's median window."""
    if rows.empty:
        return []
    import pandas as pd

    chosen = is_headline(rows) if metric is None else rows["metric"] == metric
    ok = rows[(rows["status"] == "ok") & chosen]
    # A window that failed carried nothing: a share of 0 (the link went, the far end died).
    failed = rows[rows["status"] == "failed"].drop_duplicates(["run_id", "case_index"])
    out = []
    for (bench, params), measured in ok.groupby(["benchmark", "params"], sort=False):
        lost = failed[(failed["benchmark"] == bench) & (failed["params"] == params)]
        group = pd.concat([measured, lost.assign(value=0.0)]).sort_values(
            ["case_started_at", "case_index"], kind="stable")
        first = measured.iloc[0]
        values = [float(v) for v in group["value"]]
        better, unit = str(first["better"]), str(first["unit"])
        line = (line_rate or physical_line_rate(first.to_dict())) if is_rate(unit) else None
        if line and better == "higher":
            reference, source = from_gbit(line, unit), f"line rate {line:g} Gbit/s"
        else:
            ordered = sorted(values)
            reference, source = _quantile(ordered, 0.5), "the soak's median window"
        shares = [_share(v, reference, better) if reference else math.nan for v in values]
        starts = list(group["case_started_at"])
        lengths = [float(s) if s == s else 0.0 for s in group["case_seconds"]]
        grown = [counters_of(t) or {} for t in group["counters"]] if "counters" in group \
            else [{}] * len(group)
        events = [{k: int(v) for k, v in g.items() if counters.is_error(k)} for g in grown]
        out.append(_case(str(bench), str(params), first, reference, source, shares, values,
                         starts, lengths, events, dip_below, len(lost)))
    return out


def _case(bench: str, params: str, first: Any, reference: float | None, source: str,
          shares: list[float], values: list[float], starts: list[Any], lengths: list[float],
          events: list[dict[str, int]], dip_below: float, failed: int) -> SoakCase:
    dips: list[Dip] = []
    current: Dip | None = None
    for share, start, seconds, grown in zip(shares, starts, lengths, events):
        if share == share and share < dip_below:
            if current is None:
                current = Dip(start.to_pydatetime() if hasattr(start, "to_pydatetime")
                              else start, 0.0, 0, share)
                dips.append(current)
            current.seconds = (start - current.start).total_seconds() + seconds
            current.windows += 1
            current.depth = min(current.depth, share)
            for key, value in grown.items():
                current.events[key] = current.events.get(key, 0) + value
        else:
            current = None
    errors: dict[str, int] = {}
    namespace: dict[str, int] = {}
    for grown in events:
        for key, value in grown.items():
            into = namespace if counters.netns_wide(key) else errors
            into[key] = into.get(key, 0) + value
    known = sorted(s for s in shares if s == s)
    links = sum(v for k, v in errors.items() if k.rsplit("/", 1)[-1] in LINK_EVENTS)
    return SoakCase(
        bench, params, str(first["metric"]), str(first["unit"]), str(first["better"]),
        reference, source, len(values), sum(lengths),
        known[0] if known else None, _quantile(known, 0.01) if known else None,
        _quantile(known, 0.5) if known else None, dips, links, errors, namespace,
        list(zip(starts, values, shares)), failed)


def soak_failures(c: SoakCase, min_window_line_rate: float | None = None,
                  max_dips: int | None = None, max_link_downs: int | None = None,
                  max_errors_per_hour: float | None = None) -> list[str]:
    """What of a soak breaks these bounds, each said with its evidence (accept's soak bounds,
    and the pytest plugin's ``assert_soak``): every window at ``min_window_line_rate`` of the
    line rate, at most ``max_dips`` dips, ``max_link_downs`` link events and
    ``max_errors_per_hour``."""
    name = f"{c.benchmark} {c.metric}"
    if c.windows < 2:
        return [f"{name}: {c.windows} window: not a soak (netbench soak)"]
    failures = []
    bound = min_window_line_rate
    if bound is not None and not c.reference_from.startswith("line rate"):
        failures.append(f"{name}: line rate unknown (a virtual interface, or none probed; "
                        "set [accept] line_rate)")
    elif bound is not None:
        low = [s for _, _, s in c.timeline if s == s and s < bound]
        if low:
            worst = min(c.dips, key=lambda d: d.depth) if c.dips else None
            failures.append(
                f"{name}: {len(low)} of {c.windows} windows under {bound:.0%} of the "
                f"{c.reference_from} (lowest {c.lowest:.2f}"
                + (f", a dip from {worst.start:%H:%M:%S} for {worst.seconds:.0f} s"
                   if worst else "") + ")")
    if max_dips is not None and len(c.dips) > max_dips:
        failures.append(f"{name}: {len(c.dips)} dips > {max_dips} ("
                        + "; ".join(f"{d.start:%H:%M:%S} {d.seconds:.0f} s at {d.depth:.2f}"
                                    for d in c.dips[:5]) + ")")
    if max_link_downs is not None and c.link_events > max_link_downs:
        failures.append(f"{name}: {c.link_events} link events > {max_link_downs}")
    if max_errors_per_hour is not None and c.errors_per_hour > max_errors_per_hour:
        failures.append(f"{name}: {c.errors_per_hour:,.1f} errors an hour > "
                        f"{max_errors_per_hour:g}")
    return failures
