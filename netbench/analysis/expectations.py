"""What the same hardware reaches elsewhere: published figures, each with its conditions and
its public source, matched to the machine a row was measured on ("is my number normal?").

The table is data (``netbench/expectations.toml``, shipped), and a site adds its own beside
its suites (``expectations.toml`` there, or ``--expectations FILE``): its own SKUs, its own
acceptance figures. An entry names a benchmark and metric, a figure (``at_least`` for what
is better higher, ``at_most`` for lower), its unit, its ``source`` and the hardware it holds
for (``when``: the RDMA port's link layer and rate, the GPU's model and its PCIe path's
generation and width, the ranks of a collective, a smallest message); a row matches an
entry when its fingerprint says each of those. A site's entry matching a row wins over every
shipped one; among the entries left, the one with the most conditions wins; two as specific
with different figures are refused, naming both. An emulated device (rxe,
siw) matches nothing: no hardware figure applies to it.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netbench.env.linkpath import GENERATION
from netbench.errors import UsageError
from netbench.fingerprint import Fingerprint
from netbench.store import params_of, split_unit
from netbench.textfile import load_toml
from netbench.units import canonical, parse_size

SHIPPED = Path(__file__).resolve().parent.parent / "expectations.toml"
SITE_FILE = "expectations.toml"          # beside a suite: the site's own table
KEYS = {"name", "benchmark", "metric", "at_least", "at_most", "unit", "source", "when", "note"}
WHEN = {"link_layer": str, "rate_gbps": float, "gpu": str, "pcie_gen": int,
        "pcie_width": int, "world_size": int, "msg_size_min": "size", "msg_size_max": "size",
        "params": dict, "loopback": "bool"}
HARDWARE = {"link_layer", "rate_gbps", "gpu", "pcie_gen", "pcie_width", "world_size"}
_ADDRESS = re.compile(r"^([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])")


@dataclass(frozen=True)
class Expectation:
    name: str
    benchmark: str
    metric: str
    figure: float                 # in ``unit``
    unit: str
    better: str                   # "higher": at least the figure; "lower": at most
    source: str
    when: Mapping[str, Any] = field(default_factory=dict)
    origin: str = ""              # "<file>:<line>"
    site: bool = False            # from a site's table (wins over a shipped one as specific)

    def share(self, value: float, unit: str) -> float | None:
        """``value`` (in ``unit``) as a share of the figure, higher-is-better (1.0: as the
        hardware reaches elsewhere; 0.8: a fifth short, for a latency too)."""
        mine, theirs = canonical(value, split_unit(unit)["unit"]), canonical(self.figure, self.unit)
        if mine[1] != theirs[1] or not value > 0 or not self.figure > 0:
            return None
        return mine[0] / theirs[0] if self.better == "higher" else theirs[0] / mine[0]

    def text(self) -> str:
        bound = "at least" if self.better == "higher" else "at most"
        return f"{self.name}: {bound} {self.figure:g} {self.unit} ({self.source})"


def load(paths: Sequence[str | Path],
         units: Mapping[str, Mapping[str, str]] | None) -> list[Expectation]:
    """The shipped table, then each of ``paths`` (a site's: wins where as specific).
    ``units``: each installed benchmark's metrics and their units (registry.metric_units()),
    so an entry naming another, or a unit that does not fit its metric, is refused with its
    file and line (None: not checked)."""
    out = _load(SHIPPED, units, site=False)
    for path in paths:
        out += _load(Path(path), units, site=True)
    return out


def _load(path: Path, units: Mapping[str, Mapping[str, str]] | None,
          site: bool) -> list[Expectation]:
    data, text = load_toml(path, "expectations table")
    entries = data.get("expect")
    unknown = set(data) - {"expect"}
    if unknown or not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{path}: an expectations table is [[expect]] entries only"
                         + (f" (unknown: {', '.join(sorted(unknown))})" if unknown else ""))
    starts = [i + 1 for i, line in enumerate(text.splitlines())
              if line.strip() == "[[expect]]"]
    return [_entry(e, f"{path}:{line}", units, site) for e, line in zip(entries, starts)]


def _entry(raw: dict[str, Any], where: str, units: Mapping[str, Mapping[str, str]] | None,
           site: bool) -> Expectation:
    def bad(what: str) -> UsageError:
        return UsageError(f"{where}: [[expect]] {raw.get('name', '')!r}: {what}")

    if extra := set(raw) - KEYS:
        raise bad(f"unknown key(s) {', '.join(sorted(extra))}; accepted: {', '.join(sorted(KEYS))}")
    for key in ("name", "benchmark", "metric", "unit", "source"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise bad(f"{key} is required (text)"
                      + ("; every figure names where it was published" if key == "source"
                         else ""))
    metrics = units.get(raw["benchmark"]) if units is not None else {raw["metric"]: raw["unit"]}
    if metrics is None:
        raise bad(f"unknown benchmark {raw['benchmark']!r}")
    if raw["metric"] not in metrics:
        raise bad(f"{raw['benchmark']} has no metric {raw['metric']!r}; it has "
                  f"{', '.join(metrics)}")
    bounds = [k for k in ("at_least", "at_most") if k in raw]
    if len(bounds) != 1 or isinstance(raw[bounds[0]], bool) or not isinstance(
            raw[bounds[0]], int | float) or not raw[bounds[0]] > 0:
        raise bad("give one figure: at_least (what is better higher) or at_most (lower), a "
                  "positive number")
    declared = split_unit(metrics[raw["metric"]])["unit"]
    if canonical(1.0, raw["unit"])[1] != canonical(1.0, declared)[1]:   # GB/s fits Gbit/s
        raise bad(f"unit {raw['unit']!r} does not fit {raw['benchmark']} {raw['metric']} "
                  f"({declared})")
    when = raw.get("when", {})
    if not isinstance(when, dict):
        raise bad("when is a table of conditions")
    for key, value in when.items():
        kind = WHEN.get(key)
        if kind is None:
            raise bad(f"unknown condition {key!r}; accepted: {', '.join(WHEN)}")
        if kind == "bool":
            if not isinstance(value, bool):
                raise bad(f"condition {key} = {value!r} is not true or false")
            continue
        try:
            when[key] = parse_size(value) if kind == "size" else kind(value)
        except (TypeError, ValueError):
            raise bad(f"condition {key} = {value!r} is not {kind if kind != 'size' else 'a size'}"
                      ) from None
    return Expectation(raw["name"], raw["benchmark"], raw["metric"], float(raw[bounds[0]]),
                       raw["unit"], "higher" if bounds[0] == "at_least" else "lower",
                       raw["source"], when, where, site)


def facts(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a row's fingerprint says of the hardware it ran on, as ``when`` names it; an
    emulated RDMA device says ``emulated_device``."""
    env = Fingerprint(row.get("env_json"))
    out: dict[str, Any] = {}
    name, _, port = str(row.get("device") or "").partition(":")
    rdma = env.rdma(name)
    if rdma is not None:
        if rdma.emulated:
            return {"emulated_device": rdma.name}
        found = rdma.port_of(port)
        if found is not None:
            out["link_layer"], out["rate_gbps"] = found.link_layer, found.rate_gbps()
    address = _ADDRESS.match(str(row.get("env_gpu") or ""))
    if not address and str(row.get("transport") or "") == "nccl":
        # A collective on GPUs: its row names no one GPU; the host's, where they are one model
        # (an 8-GPU system), are the ranks'.
        models = {g.model for g in env.gpus if g.model}
        if len(models) == 1:
            out["gpu"] = models.pop()
    if address:
        gpu, path = env.gpu(address.group(1)), env.pcie_path(address.group(1))
        if gpu is not None:
            out["gpu"] = gpu.model
        hop = next((h for h in (path.hops if path else ())
                    if h.get("address") == address.group(1)), {})
        bound = hop.get("bound")            # what the GPU's own link trains to: (GT/s, lanes)
        if isinstance(bound, list | tuple) and len(bound) == 2 and bound[0]:
            out["pcie_gen"] = GENERATION.get(bound[0])
            out["pcie_width"] = bound[1]
    params = params_of(row.get("params"))
    if "world_size" in params:
        out["world_size"] = params["world_size"]
    out["msg_size"] = row.get("msg_size")
    # Both ends on one device (two QPs of one HCA) or a far end: unknown on rows without a peer.
    peer = row.get("peer")
    out["loopback"] = None if peer is None else peer == "loopback"
    out["params"] = params
    return out


def _holds(when: Mapping[str, Any], have: Mapping[str, Any]) -> bool:
    for key, want in when.items():
        if key in ("msg_size_min", "msg_size_max"):
            size = have.get("msg_size")
            if not isinstance(size, int | float) or (
                    size < want if key == "msg_size_min" else size > want):
                return False
        elif key == "gpu":
            # A whole token of the model's name: B200 is not GB200's, H200 not GH200's.
            if not re.search(rf"(?<![a-z0-9]){re.escape(want.lower())}(?![a-z0-9])",
                             str(have.get("gpu") or "").lower()):
                return False
        elif key == "params":
            if any(have.get("params", {}).get(k) != v for k, v in want.items()):
                return False
        elif key == "link_layer":
            if str(have.get(key) or "").lower() != want.lower():
                return False
        elif have.get(key) != want:
            return False
    return True


def match(row: Mapping[str, Any], table: Sequence[Expectation]) -> tuple[Expectation | None, str]:
    """The entry of ``table`` that holds for ``row``'s hardware (the most specific), or None
    and why none does."""
    candidates = [e for e in table if e.benchmark == row.get("benchmark")
                  and e.metric == row.get("metric")]
    if not candidates:
        return None, "no published figure for this benchmark and metric"
    have = facts(row)
    if "emulated_device" in have:
        return None, (f"{have['emulated_device']} is an emulated device: no published hardware "
                      "figure applies")
    held = [e for e in candidates if _holds(e.when, have)]
    if not held:
        if any(_holds({k: v for k, v in e.when.items() if k in HARDWARE}, have)
               for e in candidates):
            return None, ("no published figure for this case on this hardware (its figures "
                          "are for other message sizes or settings)")
        return None, "no published figure for this hardware"
    # A site's entry that holds wins over every shipped one, however specific: its own
    # acceptance figure for its own hardware (a shipped entry it did not foresee, say one
    # naming the buffer memory, must not shadow it). Among the entries left, the most
    # specific.
    if any(e.site for e in held):
        held = [e for e in held if e.site]
    best = max(len(e.when) for e in held)
    top = [e for e in held if len(e.when) == best]
    if len({e.figure for e in top}) > 1:
        raise UsageError("two expectations as specific hold for the same hardware with "
                         "different figures: " + "; ".join(f"{e.origin} {e.text()}"
                                                            for e in top[:2])
                         + ": make one more specific (another `when` condition) or drop one")
    return top[0], ""


@dataclass(frozen=True)
class Reached:
    """One case's figure against what its hardware reaches elsewhere: the entry it matched
    and its share (None: no entry holds, and ``why``)."""
    benchmark: str
    metric: str
    params: str                   # the case's params, as stored
    value: float                  # the median of its repeats, in ``unit``
    unit: str
    entry: Expectation | None
    share: float | None
    why: str = ""


def reached(rows: Any, table: Sequence[Expectation]) -> list[Reached]:
    """Each measured case metric of ``rows`` (records or a frame) that the table has any
    entry for (its benchmark and metric), against the entry its hardware matches: the median
    of the case's repeats as a share of the figure (higher is better, a latency too)."""
    records = rows.to_dict("records") if hasattr(rows, "to_dict") else list(rows)
    named = {(e.benchmark, e.metric) for e in table}
    cases: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for row in records:
        value = row.get("value")
        if (row.get("status") == "ok" and isinstance(value, int | float) and value == value
                and (row.get("benchmark"), row.get("metric")) in named):
            key = (str(row["benchmark"]), str(row["metric"]), str(row.get("params") or ""),
                   f"{row.get('host')}:{row.get('device')}")
            cases.setdefault(key, []).append(row)
    out = []
    for (bench, metric, params, _), group in cases.items():
        median = statistics.median(float(r["value"]) for r in group)
        unit = str(group[0].get("unit") or "")
        entry, why = match(group[0], table)
        out.append(Reached(bench, metric, params, median, unit, entry,
                           entry.share(median, unit) if entry else None, why))
    return out


def reached_safely(rows: Any, site: Sequence[str | Path],
                   units: Mapping[str, Mapping[str, str]] | None) -> tuple[list[Reached], str]:
    """``reached`` against the shipped table and a site's, for a report that must not fail on
    a bad table (a run's rows are stored already): what was reached, and the error that kept
    it from being judged ("" when none)."""
    try:
        return reached(rows, load([p for p in site if Path(p).is_file()], units)), ""
    except UsageError as exc:
        return [], str(exc)


def reached_beside(rows: Any, target: str | Path,
                   units: Mapping[str, Mapping[str, str]] | None) -> tuple[list[Reached], str]:
    """``reached_safely`` with the site's table beside a run's suite file (if it has one)."""
    return reached_safely(rows, [Path(target).parent / SITE_FILE], units)
