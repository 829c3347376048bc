"""The verdicts of a fabric sweep: each pair against the fabric's median, each host judged by
all of its pairs in one role, so that a slow host (its NIC, PCIe path or config: slow with
every peer) is told apart from a slow link or switch path (a few pairs only).

A cell is one (client, server) pair of one case: the case's headline metric as the client
measured it. For tcp.stream and the RDMA write/send tests the client sends, so a row of the
matrix is a host's egress and a column its ingress (rdma.read_bw moves data the other way).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netbench.errors import UsageError

THRESHOLD = 0.10          # a pair this far below the fabric's median (above, for latency) is slow
HOST_SHARE = 0.5          # a host is at fault when more than this share of its pairs is slow


@dataclass
class Cell:
    client: str
    server: str
    value: float | None           # None: the pair failed
    ratio: float | None           # value / fabric median, better-is-higher oriented (<1 slow)
    slow: bool
    reason: str = ""              # a failed pair's reason
    cause: str = ""               # "client", "server" (the host at fault) or "link"


@dataclass
class HostVerdict:
    name: str
    role: str                     # "sending" (as client) or "receiving" (as server)
    pairs: int
    slow: int
    median_ratio: float | None

    @property
    def at_fault(self) -> bool:
        return self.pairs >= 2 and self.slow > HOST_SHARE * self.pairs


@dataclass
class Matrix:
    benchmark: str
    params: str
    metric: str
    unit: str
    better: str
    endpoints: list[str]
    median: float | None
    cells: list[Cell] = field(default_factory=list)
    hosts: list[HostVerdict] = field(default_factory=list)

    @property
    def faulty_hosts(self) -> list[HostVerdict]:
        return [h for h in self.hosts if h.at_fault]

    @property
    def slow_links(self) -> list[Cell]:
        return [c for c in self.cells if c.slow and c.cause == "link"]

    @property
    def failed(self) -> list[Cell]:
        return [c for c in self.cells if c.value is None]

    def flagged(self) -> bool:
        return bool(self.faulty_hosts or self.slow_links or self.failed)


def _headline(benchmark: str) -> str | None:
    from netbench import registry

    try:
        bench = registry.get(benchmark)
    except Exception:
        return None
    return bench.headline or (bench.metrics[0].name if bench.metrics else None)


def analyse(rows: Any, threshold: float = THRESHOLD, metric: str | None = None
            ) -> list[Matrix]:
    """One matrix per (benchmark, case params) of a sweep's rows: its headline metric (or
    ``metric``) per pair, the median, slow pairs, and who is at fault."""
    if not 0 < threshold < 1:
        raise UsageError(f"threshold {threshold:g}: a fraction between 0 and 1 (0.1 = 10%)")
    if "peer" not in rows or rows.empty:
        return []
    out = []
    for (bench, params), group in rows.groupby(["benchmark", "params"], sort=True):
        name = metric or _headline(str(bench))
        measured = group[group["metric"] == name]
        failed = group[group["status"] == "failed"]
        if measured.empty and failed.empty:
            continue
        first = measured.iloc[0] if not measured.empty else None
        endpoints = sorted(set(group["host"].dropna()) | set(group["peer"].dropna()))
        m = Matrix(str(bench), str(params), str(name), str(first["unit"]) if first is not None
                   else "", str(first["better"]) if first is not None else "higher",
                   endpoints, None)
        values: dict[tuple[str, str], list[float]] = {}
        for client, server, value in zip(measured["host"], measured["peer"],
                                         measured["value"]):
            if value == value and value is not None:
                values.setdefault((str(client), str(server)), []).append(float(value))
        pooled = [statistics.median(v) for v in values.values()]
        m.median = statistics.median(pooled) if pooled else None
        for (client, server), vals in sorted(values.items()):
            value = statistics.median(vals)
            ratio = None
            if m.median:
                ratio = value / m.median if m.better == "higher" else m.median / value \
                    if value else None
            m.cells.append(Cell(client, server, value, ratio,
                                ratio is not None and ratio < 1 - threshold))
        for client, server, reason in zip(failed["host"], failed["peer"], failed["reason"]):
            if (str(client), str(server)) not in values:
                m.cells.append(Cell(str(client), str(server), None, None, False, str(reason)))
        _attribute(m)
        out.append(m)
    return out


def _attribute(m: Matrix) -> None:
    """Per host and role, how many of its pairs are slow; a slow pair is the fault of a
    host that is slow in that role with most of its peers, else of the link between them."""
    by: dict[tuple[str, str], list[Cell]] = {}
    for c in m.cells:
        if c.value is None:
            continue
        by.setdefault((c.client, "sending"), []).append(c)
        by.setdefault((c.server, "receiving"), []).append(c)
    m.hosts = []
    for (name, role), cells in sorted(by.items()):
        ratios = [c.ratio for c in cells if c.ratio is not None]
        m.hosts.append(HostVerdict(name, role, len(cells), sum(c.slow for c in cells),
                                   statistics.median(ratios) if ratios else None))
    faulty = {(h.name, h.role) for h in m.hosts if h.at_fault}
    for c in m.cells:
        if not c.slow:
            continue
        c.cause = ("client" if (c.client, "sending") in faulty else
                   "server" if (c.server, "receiving") in faulty else "link")


def summary(matrices: Sequence[Matrix], worst: int = 10) -> str:
    """What the terminal prints: per case, the hosts at fault, the slow links, the failed
    pairs and the worst pairs."""
    lines = []
    for m in matrices:
        params = json.loads(m.params or "{}")
        case = " ".join(f"{k}={v}" for k, v in sorted(params.items())
                        if k in ("msg_size", "streams", "direction", "qps", "bidirectional"))
        lines.append(f"{m.benchmark} {case}".rstrip() + f": {m.metric} over "
                     f"{len(m.endpoints)} endpoints, {len(m.cells)} pairs, median "
                     + (f"{m.median:.4g} {m.unit}" if m.median is not None else "-"))
        for h in m.faulty_hosts:
            lines.append(f"  HOST {h.name}: slow {h.role} with {h.slow} of {h.pairs} peers "
                         f"(median {h.median_ratio:.2f} x the fabric's): its NIC, PCIe path "
                         "or config")
        for c in m.slow_links:
            lines.append(f"  LINK {c.client} -> {c.server}: {c.ratio:.2f} x the median, "
                         "while both hosts are fine with their other peers: the link or "
                         "switch path")
        for c in m.failed:
            lines.append(f"  FAILED {c.client} -> {c.server}: {c.reason}")
        ranked = sorted((c for c in m.cells if c.ratio is not None), key=lambda c: c.ratio)
        for c in ranked[:worst]:
            lines.append(f"    {c.client:>20} -> {c.server:<20} {c.value:.4g} {m.unit}  "
                         f"{c.ratio:.2f} x median" + ("  slow" if c.slow else ""))
        if not m.flagged():
            lines.append("  nothing flagged")
    return "\n".join(lines)


def as_json(matrices: Sequence[Matrix]) -> list[Mapping[str, Any]]:
    return [{"benchmark": m.benchmark, "params": json.loads(m.params or "{}"),
             "metric": m.metric, "unit": m.unit, "median": m.median,
             "endpoints": m.endpoints,
             "faulty_hosts": [{"host": h.name, "role": h.role, "slow": h.slow,
                               "pairs": h.pairs} for h in m.faulty_hosts],
             "slow_links": [{"client": c.client, "server": c.server, "ratio": c.ratio}
                            for c in m.slow_links],
             "failed": [{"client": c.client, "server": c.server, "reason": c.reason}
                        for c in m.failed],
             "cells": [{"client": c.client, "server": c.server, "value": c.value,
                        "ratio": c.ratio, "slow": c.slow, "cause": c.cause}
                       for c in m.cells]} for m in matrices]
