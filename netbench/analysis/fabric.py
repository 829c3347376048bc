"""The verdicts of a fabric sweep: each pair against the fabric's median, each host judged by
all of its pairs in one role, so that a slow host (its NIC, PCIe path or config: slow with
every peer) is told apart from a slow link or switch path (a few pairs only).

A cell is one (client, server) pair of one case: the case's headline metric as the client
measured it. For tcp.stream and the RDMA write/send tests the client sends, so a row of the
matrix is a host's egress and a column its ingress (rdma.read_bw moves data the other way).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from netbench.errors import UsageError
from netbench.store import keyed, params_json, params_of

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
    role: str                     # as client or as server, named by its data: see roles()
    pairs: int
    slow: int
    median_ratio: float | None

    @property
    def at_fault(self) -> bool:
        return self.pairs >= 2 and self.slow > HOST_SHARE * self.pairs


@dataclass
class Matrix:
    """``cells``: a DataFrame, one row per pair (client, server, value, ratio, slow, cause,
    reason), numpy all the way: a million pairs are judged in seconds."""

    benchmark: str
    params: str
    metric: str
    unit: str
    better: str
    endpoints: list[str]
    median: float | None
    cells: Any = None
    hosts: list[HostVerdict] = field(default_factory=list)
    roles: tuple[str, str] = ("sending", "receiving")   # the client's, the server's

    def _cells(self, frame: Any) -> list[Cell]:
        return [Cell(str(r.client), str(r.server), None if r.value != r.value else r.value,
                     None if r.ratio != r.ratio else r.ratio, bool(r.slow), str(r.reason or ""),
                     str(r.cause or "")) for r in frame.itertuples()]

    @property
    def faulty_hosts(self) -> list[HostVerdict]:
        return [h for h in self.hosts if h.at_fault]

    @property
    def slow_links(self) -> list[Cell]:
        return self._cells(self.cells[self.cells["slow"] & (self.cells["cause"] == "link")])

    @property
    def failed(self) -> list[Cell]:
        return self._cells(self.cells[self.cells["value"].isna()])

    def worst(self, count: int) -> list[Cell]:
        return self._cells(self.cells.dropna(subset=["ratio"]).nsmallest(count, "ratio"))

    def all_cells(self) -> list[Cell]:
        return self._cells(self.cells)

    def flagged(self) -> bool:
        return bool(self.faulty_hosts or self.slow_links or self.failed)


def _headline(benchmark: str) -> str | None:
    from netbench import registry

    try:
        bench = registry.get(benchmark)
    except Exception:
        return None
    return bench.headline or (bench.metrics[0].name if bench.metrics else None)


def _line_rates(measured: Any) -> dict[str, float]:
    """Each client's link rate in Gbit/s, as its own fingerprint recorded it (probe)."""
    from netbench.analysis.accept import probed_line_rate

    if "env_json" not in measured or "device" not in measured:
        return {}
    rates = {}
    for host, group in measured.groupby("host"):
        rate = probed_line_rate(group.iloc[0].to_dict())
        if rate:
            rates[str(host)] = rate
    return rates


def analyse(rows: Any, threshold: float = THRESHOLD, metric: str | None = None,
            min_line_rate: float | None = None) -> list[Matrix]:
    """One matrix per (benchmark, case params) of a sweep's rows: its headline metric (or
    ``metric``) per pair, the median, slow pairs, and who is at fault. A bandwidth pair is
    also set against its client's link rate from the probe (``of_line``); with
    ``min_line_rate`` a pair below that share of it is slow too."""
    import numpy as np
    import pandas as pd

    if not 0 < threshold < 1:
        raise UsageError(f"threshold {threshold:g}: a fraction between 0 and 1 (0.1 = 10%)")
    if "peer" not in rows or rows.empty:
        return []
    out = []
    # A rank's NIC is its case's device param (one rank per NIC): part of the endpoint, not of
    # the case, so a sweep over several NICs is one matrix, not one per client NIC.
    rows = rows.assign(params=_case_params(rows))
    for (bench, params), group in rows.groupby(["benchmark", "params"], sort=True):
        name = metric or _headline(str(bench))
        measured = group[(group["metric"] == name) & group["value"].notna()]
        failed = group[group["status"] == "failed"]
        if measured.empty and failed.empty:
            continue
        first = measured.iloc[0] if not measured.empty else None
        endpoints = sorted(set(group["host"].dropna()) | set(group["peer"].dropna()))
        better = str(first["better"]) if first is not None else "higher"
        # Repeats of a pair count as their median; the fabric's median is over pairs.
        cells = (measured.groupby(["host", "peer"], sort=True)["value"].median()
                 .rename_axis(["client", "server"]).reset_index())
        median = float(np.median(cells["value"])) if len(cells) else None
        value = cells["value"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = (value / median if better == "higher" else median / value) if median \
                else np.full(len(value), np.nan)
        cells["ratio"] = np.where(np.isfinite(ratio), ratio, np.nan)
        cells["slow"] = cells["ratio"] < 1 - threshold
        rates = _line_rates(measured) if first is not None and first["unit"] == "Gbit/s" \
            else {}
        cells["line_rate"] = cells["client"].map(rates).astype(float)
        cells["of_line"] = cells["value"] / cells["line_rate"]
        if min_line_rate is not None:
            cells["slow"] = cells["slow"] | (cells["of_line"] < min_line_rate)
        cells["reason"], cells["cause"] = None, None
        done = set(zip(cells["client"], cells["server"]))
        lost = failed[[(h, p) not in done for h, p in zip(failed["host"], failed["peer"])]]
        lost = lost.drop_duplicates(["host", "peer"])
        if len(lost):
            cells = pd.concat([cells, pd.DataFrame({
                "client": lost["host"].astype(str).to_numpy(),
                "server": lost["peer"].astype(str).to_numpy(), "value": np.nan,
                "ratio": np.nan, "slow": False, "line_rate": np.nan, "of_line": np.nan,
                "reason": lost["reason"].to_numpy(), "cause": None})], ignore_index=True)
        m = Matrix(str(bench), str(params), str(name), str(first["unit"]) if first is not None
                   else "", better, endpoints, median, cells,
                   roles=roles(str(group["op"].iloc[0]) if "op" in group else "",
                               str(params), better))
        _attribute(m)
        out.append(m)
    return out


def _case_params(rows: Any) -> Any:
    """Each row's case, as the matrices group it: its params as planned (``keyed``: a failed
    pair's row and its measured twins alike), without ``device`` (the endpoint's, not the
    case's: a rank per NIC is one matrix, not one per client NIC)."""
    (keyed_rows,) = keyed(rows)
    cache: dict[Any, str] = {}

    def without_device(text: Any) -> str:
        if text not in cache:
            cache[text] = params_json({k: v for k, v in params_of(text).items()
                                       if k != "device"})
        return cache[text]

    return keyed_rows["params"].map(without_device)


def roles(op: str, params: str, better: str) -> tuple[str, str]:
    """What the client and the server of a pair do with the data, to name a host's role in
    a verdict truly: a slow RDMA READ client is slow receiving, not sending. Latency and
    both-ways runs move data both ways: the roles are just client and server."""
    p = params_of(params)
    if better == "lower" or p.get("bidirectional") is True or p.get("direction") == "both":
        return "client", "server"
    if op.startswith("read") or p.get("direction") == "reverse":
        return "receiving", "sending"
    return "sending", "receiving"


def _attribute(m: Matrix) -> None:
    """Per host and role, how many of its pairs are slow; a slow pair is the fault of a
    host that is slow in that role with most of its peers, else of the link between them."""
    import numpy as np

    cells = m.cells
    ok = cells[cells["value"].notna()]
    m.hosts = []
    for column, role in zip(("client", "server"), m.roles):
        stats = ok.groupby(column).agg(pairs=("slow", "size"), slow=("slow", "sum"),
                                       median_ratio=("ratio", "median"))
        m.hosts += [HostVerdict(str(name), role, int(r.pairs), int(r.slow),
                                None if r.median_ratio != r.median_ratio else
                                float(r.median_ratio)) for name, r in stats.iterrows()]
    m.hosts.sort(key=lambda h: (h.name, h.role))
    as_client = {h.name for h in m.hosts if h.at_fault and h.role == m.roles[0]}
    as_server = {h.name for h in m.hosts if h.at_fault and h.role == m.roles[1]}
    cause = np.where(cells["client"].isin(as_client), "client",
                     np.where(cells["server"].isin(as_server), "server", "link"))
    cells["cause"] = np.where(cells["slow"], cause, None)


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
        if len(m.cells) > worst:
            lines[-1] += f" (the {worst} worst below)"
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
        line = m.cells["of_line"].dropna() if "of_line" in m.cells else []
        if len(line):
            lines.append(f"  vs the probed link rate: median {line.median():.2f}, worst "
                         f"{line.min():.2f}")
        for c in m.worst(worst):
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
                        "ratio": c.ratio, "slow": c.slow, "cause": c.cause,
                        "of_line": of_line}
                       for c, of_line in zip(m.all_cells(), m.cells["of_line"].map(
                           lambda x: None if x != x else float(x)))]} for m in matrices]
