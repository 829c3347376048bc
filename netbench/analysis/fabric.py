"""The verdicts of a fabric sweep: each pair against the fabric's healthy rate, and the
elements that explain the slow pairs (``netbench.analysis.localize`` over the topology given,
or the one the pairs imply): a slow host (its NIC, PCIe path or config: slow with every peer)
told apart from a slow link, switch or trunk, which never blames the hosts behind it.

A cell is one (client, server) pair of one case: the case's headline metric as the client
measured it. For tcp.stream and the RDMA write/send tests the client sends, so a row of the
matrix is a host's egress and a column its ingress (rdma.read_bw moves data the other way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netbench.analysis.cases import flow_of, headline_of, probed_line_rate, roles
from netbench.analysis.elements import ElementStat, element_table
from netbench.analysis.localize import (
    MIN_DEFICIT,
    Localization,
    Pair,
    Suspect,
    check_fraction,
    localize,
    reference,
    slow_cut,
)
from netbench.analysis.verdict import Verdict
from netbench.env.counters import by_name, is_error, netns_wide
from netbench.env.topology import Topology, infer
from netbench.errors import UsageError
from netbench.store import counters_of, keyed, params_json, params_of
from netbench.units import from_gbit, is_rate

THRESHOLD = 0.10          # a pair this far below the healthy rate (above, for latency) is slow
HOST_SHARE = 0.5          # a host is at fault when more than this share of its pairs is slow


@dataclass
class Cell:
    client: str
    server: str
    value: float | None           # None: the pair failed
    ratio: float | None           # value / the healthy rate, higher-is-better (<1 slower)
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
    """``cells``: a DataFrame, one row per pair (client, server, path, value, ratio, slow,
    cause, reason; a traced sweep's pair one row per switch path it took), numpy all the
    way: a million pairs are judged in seconds."""

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
    faulty: list[HostVerdict] = field(default_factory=list)   # hosts localize names
    localization: Localization | None = None
    notes: list[str] = field(default_factory=list)     # topology warnings, said once
    topology: Topology | None = None          # the shape judged on: given, or inferred
    elements: list[ElementStat] = field(default_factory=list)   # each element's evidence
    # Pairs whose cases grew a device's error counters (netbench.env.counters), and the
    # elements that explain them (``localize`` with "slow" read as "grew errors"): a flap
    # or a bad cable shows in its pairs' counters whatever their speed.
    errors: dict[tuple[str, str], dict[str, int]] = field(default_factory=dict)
    error_localization: Localization | None = None

    def _cells(self, frame: Any) -> list[Cell]:
        return [Cell(str(r.client), str(r.server), None if r.value != r.value else r.value,
                     None if r.ratio != r.ratio else r.ratio, bool(r.slow), str(r.reason or ""),
                     str(r.cause or "")) for r in frame.itertuples()]

    @property
    def faulty_hosts(self) -> list[HostVerdict]:
        return sorted({(h.name, h.role): h for h in self.faulty}.values(),
                      key=lambda h: (h.name, h.role))

    @property
    def suspects(self) -> list[Suspect]:
        """The links, switches and paths at fault (hosts are in ``faulty_hosts``)."""
        return [s for s in (self.localization.suspects if self.localization else [])
                if s.host is None]

    @property
    def unexplained(self) -> set[tuple[str, str]]:
        """Slow pairs no suspect explains: each pair's own path."""
        return {(p.client, p.server) for p in self.localization.unexplained} \
            if self.localization else set()

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
        return bool(self.faulty_hosts or self.suspects or self.slow_links or self.failed
                    or self.errors)

    @property
    def verdict(self) -> Verdict:
        """The sweep's outcome in the one spelling: a pair that measured nothing is lost; a
        host, element or link named is a regression (of the fabric against its own healthy
        rate); else unchanged."""
        if self.failed:
            return Verdict.LOST
        return Verdict.REGRESSED if self.flagged() else Verdict.UNCHANGED


def _line_rates(measured: Any) -> dict[str, float]:
    """Each client's link rate in Gbit/s, as its own fingerprint recorded it (probe)."""
    if "env_json" not in measured or "device" not in measured:
        return {}
    rates = {}
    for host, group in measured.groupby("host"):
        rate = probed_line_rate(group.iloc[0].to_dict())
        if rate:
            rates[str(host)] = rate
    return rates


def analyse(rows: Any, threshold: float = THRESHOLD, metric: str | None = None,
            min_line_rate: float | None = None,
            topology: Topology | None = None,
            min_deficit: float | None = MIN_DEFICIT) -> list[Matrix]:
    """One matrix per (benchmark, case params) of a sweep's rows: its headline metric (or
    ``metric``) per pair, slow pairs, and what is at fault (``netbench.analysis.localize``:
    the elements of ``topology``, or of the shape the pairs imply, that explain the slow
    pairs; never the hosts beside a slow link). A pair is judged against the healthy rate
    (the median of the fast pairs: a fault that slows most pairs would drag the median of
    all of them down with it), and a bandwidth pair also against its client's link rate
    from the probe (``of_line``); with ``min_line_rate`` a pair below that share of it is
    slow too."""
    import numpy as np
    import pandas as pd

    try:                         # localize's own check, as a user's mistake
        check_fraction("threshold", threshold)
        check_fraction("min_deficit", min_deficit)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if "peer" not in rows or rows.empty:
        return []
    out = []
    # A rank's NIC is its case's device param (one rank per NIC): part of the endpoint, not of
    # the case, so a sweep over several NICs is one matrix, not one per client NIC.
    rows = rows.assign(params=_case_params(rows))
    for (bench, params), group in rows.groupby(["benchmark", "params"], sort=True):
        name = metric or headline_of(group)
        measured = group[(group["metric"] == name) & group["value"].notna()]
        failed = group[group["status"] == "failed"]
        if measured.empty and failed.empty:
            continue
        first = measured.iloc[0] if not measured.empty else None
        endpoints = sorted(set(group["host"].dropna()) | set(group["peer"].dropna()))
        better = str(first["better"]) if first is not None else "higher"
        measured, unknown = _traced(measured, better, topology, threshold, min_deficit)
        # Repeats of a pair count as their median (a traced pair's, per path it took); the
        # fabric's median is over pairs.
        cells = (measured.groupby(["host", "peer", "path"], sort=True)["value"].median()
                 .rename_axis(["client", "server", "path"]).reset_index())
        median = float(np.median(cells["value"])) if len(cells) else None
        value = cells["value"].to_numpy(dtype=float)
        with np.errstate(divide="ignore", invalid="ignore"):
            oriented = value if better == "higher" else 1.0 / value
            judged = reference(oriented, threshold)
            healthy = judged[0]
            cut = slow_cut(oriented, healthy, threshold, min_deficit)
            ratio = (value / healthy if better == "higher" else 1.0 / (healthy * value)) \
                if healthy else np.full(len(value), np.nan)
        cells["ratio"] = np.where(np.isfinite(ratio), ratio, np.nan)
        cells["slow"] = cells["ratio"] < 1 - cut[0]
        # The probed link rate (Gbit/s) in the metric's own unit: a GB/s bus bandwidth
        # against a 100 Gbit/s link is out of 12.5.
        unit = str(first["unit"]) if first is not None else ""
        rates = ({h: from_gbit(r, unit) for h, r in _line_rates(measured).items()}
                 if is_rate(unit) else {})
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
                "server": lost["peer"].astype(str).to_numpy(), "path": "", "value": np.nan,
                "ratio": np.nan, "slow": False, "line_rate": np.nan, "of_line": np.nan,
                "reason": lost["reason"].to_numpy(), "cause": None})], ignore_index=True)
        m = Matrix(str(bench), str(params), str(name), str(first["unit"]) if first is not None
                   else "", better, endpoints, median, cells,
                   roles=roles(flow_of(group.iloc[0].to_dict()), better))
        if unknown:
            m.notes.append(f"{unknown} traced measurement(s) judged by nothing: a flow that "
                           "shared a link and read its share (a fault that left that much "
                           "would read the same), or whose trace failed beside other flows")
        _attribute(m, topology, threshold, judged, cut)
        _attribute_errors(m, group)
        out.append(m)
    return out


def _traced(measured: Any, better: str, topology: Topology | None,
            threshold: float, min_deficit: float | None = MIN_DEFICIT) -> tuple[Any, int]:
    """A traced sweep's rows as the planner judged them: each figure over its flow's fair
    share of its round (``fair_share``: a collision on a link is not a fault), a flow that
    shared a link and read its share set aside (no evidence either way), as is one whose
    share is unknown (0); and the switch path its trace named (``path``, "a>b>c"; "" where
    untraced or not the topology's). Rows of other sweeps pass as they are."""
    import numpy as np

    measured = measured.assign(path="")
    unknown = 0
    if "fair_share" in measured and measured["fair_share"].notna().any() and \
            better == "higher":
        share = measured["fair_share"].astype(float).fillna(1.0).to_numpy()
        value = measured["value"].astype(float).to_numpy()
        with np.errstate(divide="ignore", invalid="ignore"):
            judged = value / share
        alone = np.where(share >= 1.0, value, np.nan)
        healthy = reference(alone, threshold)[0]
        deficit = slow_cut(alone, healthy, threshold, min_deficit)[0]
        keep = (share >= 1.0) | ((share > 0) & (healthy is not None) &
                                 (judged < (1 - deficit) * (healthy or 0.0)))
        unknown = int((~keep).sum())
        measured = measured[keep].assign(value=judged[keep])
    if topology is not None and "route" in measured and measured["route"].notna().any():
        found = [topology.path_of_route(r, str(h), str(p)) for r, h, p in zip(
            measured["route"], measured["host"], measured["peer"])]
        measured = measured.assign(path=[">".join(f) if f else "" for f in found])
    return measured, unknown


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


def _attribute(m: Matrix, topology: Topology | None, threshold: float,
               healthy: tuple[float | None, str],
               cut: tuple[float, float | None, str] | None = None) -> None:
    """Per host and role, how many of its pairs are slow (the evidence a verdict quotes);
    then which elements explain the slow pairs (``localize``): a host is at fault only
    where it is one of them, and a slow pair is the fault of the host that explains it,
    else of the link or switch path."""
    import numpy as np

    cells = m.cells
    ok = cells[cells["value"].notna()]
    stats_of: dict[tuple[str, str], HostVerdict] = {}
    for column, role in zip(("client", "server"), m.roles):
        stats = ok.groupby(column).agg(pairs=("slow", "size"), slow=("slow", "sum"),
                                       median_ratio=("ratio", "median"))
        for name, r in stats.iterrows():
            stats_of[(str(name), role)] = HostVerdict(
                str(name), role, int(r.pairs), int(r.slow),
                None if r.median_ratio != r.median_ratio else float(r.median_ratio))
    m.hosts = sorted(stats_of.values(), key=lambda h: (h.name, h.role))
    paths = ok["path"].tolist() if "path" in ok else [""] * len(ok)
    pairs = [Pair(c, s, None if v != v else v, tuple(p.split(">")) if p else None)
             for c, s, v, p in zip(_strings(ok["client"]), _strings(ok["server"]),
                                   ok["value"].astype(float).tolist(), paths)]
    slow = ok["slow"].tolist()
    if topology is not None:
        m.notes += topology.check_hosts(m.endpoints)
    else:       # inferred here, as localize would: the picture and the table need it too
        topology = infer([(p.client, p.server, not s) for p, s in zip(pairs, slow)])
    m.topology = topology
    m.localization = localize(pairs, topology, threshold, m.better, slow=slow, healthy=healthy,
                              cut=cut)
    m.elements = element_table(m, topology)
    m.notes += m.localization.warnings
    client_at_fault, server_at_fault = set(), set()
    for suspect in m.localization.suspects:
        if suspect.host is None:
            continue
        name, way = suspect.host
        ways = [way] if way else [w for w, role in (("send", m.roles[0]), ("recv", m.roles[1]))
                                  if getattr(stats_of.get((name, role)), "slow", 0)]
        for w in ways or ("send", "recv"):
            role = m.roles[0] if w == "send" else m.roles[1]
            verdict = stats_of.get((name, role))
            if verdict is not None:
                m.faulty.append(verdict)
            (client_at_fault if w == "send" else server_at_fault).add(name)
    cause = np.where(cells["client"].isin(client_at_fault), "client",
                     np.where(cells["server"].isin(server_at_fault), "server", "link"))
    cells["cause"] = np.where(cells["slow"], cause, None)


def _attribute_errors(m: Matrix, group: Any) -> None:
    """The pairs whose cases grew error counters, summed by name over the pair's cases and
    both its ends, and the fewest elements that explain them."""
    if "counters" not in group:
        return
    seen = set()
    for client, server, index, text in zip(group["host"], group["peer"], group["case_index"],
                                           group["counters"]):
        if (client, server, index) in seen:
            continue
        seen.add((client, server, index))
        # A device's errors; the kernel's TCP counters are the whole namespace's (a few
        # retransmits in a healthy sweep are not a fault): compare and accept judge those.
        grown = by_name(counters_of(text) or {}, lambda k: is_error(k) and not netns_wide(k))
        if grown:
            mine = m.errors.setdefault((str(client), str(server)), {})
            for name, (value, _) in grown.items():
                mine[name] = mine.get(name, 0) + value
    if not m.errors or m.topology is None:
        return
    ok = m.cells[m.cells["value"].notna()].drop_duplicates(["client", "server"])
    pairs = [Pair(c, s, 1.0) for c, s in zip(_strings(ok["client"]), _strings(ok["server"]))]
    m.error_localization = localize(pairs, m.topology, slow=[
        (p.client, p.server) in m.errors for p in pairs], healthy=(1.0, "error counters"))


def _strings(column: Any) -> list[str]:
    """A column of host names as Python strings, a million in well under a second (names
    repeat: each is made once)."""
    import pandas as pd

    codes, names = pd.factorize(column)
    names = [str(n) for n in names]
    return [names[i] for i in codes.tolist()]


@dataclass
class SoakPass:
    """One pass of a fabric burn-in: a sweep of its own, judged on its own pairs."""
    number: int                   # 1, 2, ...
    started_at: str               # ISO time
    matrices: list[Matrix]


def soak_passes(rows: Any, passes: list[dict[str, Any]], threshold: float = THRESHOLD,
                metric: str | None = None, min_line_rate: float | None = None,
                topology: Topology | None = None,
                min_deficit: float | None = MIN_DEFICIT) -> list[SoakPass]:
    """A burn-in's rows pass by pass (``passes``: each one's first ``case_index``, as the
    sweep kept them in its ``netbench_fabric`` footer), each judged as a sweep of its own:
    a trunk that slows in the third hour is named in the passes after it slowed, against the
    healthy rate of those passes, never averaged away over the hours before."""
    return [SoakPass(n, str(passes[n - 1].get("started_at", "")),
                     analyse(part, threshold, metric, min_line_rate, topology, min_deficit))
            for n, part in soak_passes_frames(rows, passes)]


def pass_frames(rows: Any, passes: dict[str, list[dict[str, Any]]]) -> list[tuple[str, Any]]:
    """``rows`` as what is judged apart: each pass of a fabric burn-in (``passes``: by run,
    selection.kept_passes) with its name ("pass 3 of run R: "), and the other runs' rows as
    one ("") -- a trunk slow in 2 passes of 12 is not averaged away by the other 10."""
    if not passes or rows is None or not len(rows) or "run_id" not in rows:
        return [("", rows)]
    soaked = rows["run_id"].astype(str).isin(list(passes))
    out = [("", rows[~soaked])] if (~soaked).any() else []
    for run, starts in passes.items():
        mine = rows[rows["run_id"].astype(str) == run]
        for one in soak_passes_frames(mine, starts):
            out.append((f"pass {one[0]} of run {run}: ", one[1]))
    return out


def soak_passes_frames(rows: Any, passes: list[dict[str, Any]]) -> list[tuple[int, Any]]:
    """A burn-in's rows split at each pass's first case_index: (pass number, its rows)."""
    out = []
    index = rows["case_index"]
    for i, start in enumerate(passes):
        part = rows[index >= int(start["case_index"])]
        if i + 1 < len(passes):
            part = part[part["case_index"] < int(passes[i + 1]["case_index"])]
        if len(part):
            out.append((i + 1, part))
    return out


def judge_sweep(rows: list[dict[str, Any]], soak: dict[str, Any] | None, threshold: float,
                min_line_rate: float | None, topology: Topology | None,
                min_deficit: float) -> list[Matrix] | list[SoakPass]:
    """A sweep's rows judged: its matrices, or a burn-in's (``soak``: the sweep's
    ``netbench_fabric`` soak facts) passes."""
    import pandas as pd

    frame = pd.DataFrame(rows)
    if soak is not None:
        return soak_passes(frame, soak["passes"], threshold, None, min_line_rate, topology,
                           min_deficit)
    return analyse(frame, threshold, None, min_line_rate, topology, min_deficit)


def named_in_passes(passes: list[SoakPass]) -> list[tuple[str, list[int], str]]:
    """Each thing a burn-in's passes named (an element or its group, a host and its role),
    the passes that named it, and its words in the last of them; the earliest named first."""
    seen: dict[str, tuple[list[int], str]] = {}
    for one in passes:
        for m in one.matrices:
            for s in m.suspects:
                key = " / ".join(s.elements)
                said = s.text(m.unit, m.localization.inferred if m.localization else False,
                              m.roles)
                seen.setdefault(key, ([], ""))[0].append(one.number)
                seen[key] = (seen[key][0], said)
            for h in m.faulty_hosts:
                key = f"host:{h.name} {h.role}"
                said = f"HOST {h.name}: slow {h.role} with {h.slow} of {h.pairs} peers"
                seen.setdefault(key, ([], ""))[0].append(one.number)
                seen[key] = (seen[key][0], said)
    return sorted(((k, sorted(set(n)), t) for k, (n, t) in seen.items()),
                  key=lambda e: (e[1][0], e[0]))


def burn_in_timeline(rows: Any, passes: list[dict[str, Any]],
                     topology: Topology | None = None) -> Any:
    """A fabric burn-in as the dashboard's burn-in timeline draws a soak (analysis.soak's
    SoakCase): each pass a window, its figure the lowest share of the pass's healthy rate an
    element (else a pair) read, the passes that named something its dips, each with what
    it named. None where no pass could be judged."""
    from datetime import datetime, timedelta

    from netbench.analysis.elements import worst
    from netbench.analysis.soak import Dip, SoakCase

    timeline, named = [], []
    first = None
    for number, part in soak_passes_frames(rows, passes):
        matrices = [m for m in analyse(part, topology=topology) if m.cells is not None]
        if not matrices:
            continue
        m = max(matrices, key=lambda x: len(x.cells))
        first = first or m
        lows = [e.median for e in worst(m.elements, 1)]
        lows += [s.of_healthy for s in m.suspects if s.of_healthy is not None]
        ratios = m.cells["ratio"].dropna() if "ratio" in m.cells else []
        low = min(lows) if lows else (float(ratios.min()) if len(ratios) else float("nan"))
        try:
            start = datetime.fromisoformat(str(passes[number - 1].get("started_at")))
        except ValueError:
            continue
        timeline.append((start, low, low))
        named.append([s.text(m.unit).split(": ")[0] for s in m.suspects]
                     + [f"HOST {h.name}" for h in m.faulty_hosts])
    if first is None or not timeline:
        return None
    dips = []
    for i, ((start, low, _), things) in enumerate(zip(timeline, named)):
        if not things:
            continue
        end = timeline[i + 1][0] if i + 1 < len(timeline) else start + timedelta(seconds=1)
        # Up to, not into, the next pass: that one's reading is its own.
        dips.append(Dip(start, (end - start).total_seconds() * 0.999, 1, low,
                        {f"named: {t}": 1 for t in things[:3]}))
    shares = sorted(s for _, s, _ in timeline if s == s)
    return SoakCase(first.benchmark, first.params, f"{first.metric}, lowest element",
                    "x healthy", "higher", 1.0,
                    "each pass's healthy rate (its lowest element drawn)", len(timeline),
                    (timeline[-1][0] - timeline[0][0]).total_seconds(),
                    shares[0] if shares else None, shares[0] if shares else None,
                    shares[len(shares) // 2] if shares else None, dips, 0, {}, {}, timeline)
