"""A node's quick health check (``netbench healthcheck``), judged: what the node must show
(its RDMA ports active at their rate and link layer, its GPUs, its interfaces up), what its
error counters did since the last check, and the suite's own ``[[check]]``s on a short
measurement (a loopback RDMA write per NIC, a host-to-GPU copy per GPU).

The spec is the healthcheck suite itself (``suites/healthcheck.toml``): ``[[case]]``s to
measure, ``[[check]]``s to judge them (``netbench.analysis.accept``) and a ``[healthcheck]``
table::

    [healthcheck]
    rdma_names = ["mlx5_*"]        # the RDMA devices judged (globs; default: every one)
    rdma_ports = 8                 # ACTIVE RDMA ports this node must show, at least
    rate_gbps = 400                # each at this rate (sysfs: "400 Gb/sec (4X NDR)")
    link_width = "4X"              # and this many lanes (a port trained on fewer: "2X")
    link_layer = "InfiniBand"
    gpu_count = 8                  # GPUs the node must show
    netdevs = ["eth0"]             # interfaces that must be up
    must_run = ["rdma.write_bw", "gpu.h2d"]   # benchmarks this node must run: skipped fails
    since_last = { link_downed = 0, symbol_error = 0, carrier_changes = 0 }

A check of hardware the node does not have (a GPU check on a host with no GPU, every case of
it skipped) does not apply and is said so, unless ``must_run`` names its benchmark; a case
that failed fails its check. Hardware the node must have is what the table above names, so a
device gone after a driver update fails there. A counter that grew past its bound keeps
failing (the counters are not taken as the new reference) until someone looks: the state
file, ``RESULTS/_healthcheck_counters.json``, removed starts afresh. The outcome is one line
(``FAIL: mlx5_1 port 1: state DOWN, expected ACTIVE; ...``) and NHC's exit codes: 0 healthy,
1 not.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netbench.env import counters
from netbench.errors import UsageError
from netbench.fingerprint import Fingerprint
from netbench.textfile import load_toml

DEFAULT_SPEC = Path(__file__).resolve().parents[2] / "suites" / "healthcheck.toml"
KEYS = {"rdma_names": list, "rdma_ports": int, "rate_gbps": float, "link_width": str,
        "link_layer": str, "gpu_count": int, "netdevs": list, "must_run": list,
        "since_last": dict}
COUNTERS = "counters since the last check"


@dataclass(frozen=True)
class Finding:
    check: str                    # what was checked: "rdma ports", a [[check]]'s name ...
    ok: bool
    what: str                     # one line: what was found (and, failing, what was expected)
    applies: bool = True          # False: not on this node (no such hardware): said, not failed


@dataclass(frozen=True)
class HealthSpec:
    rdma_names: tuple[str, ...] = ()
    rdma_ports: int | None = None
    rate_gbps: float | None = None
    link_width: str | None = None
    link_layer: str | None = None
    gpu_count: int | None = None
    netdevs: tuple[str, ...] = ()
    must_run: tuple[str, ...] = ()
    since_last: Mapping[str, int] = field(default_factory=dict)
    checks: bool = False          # the suite has [[check]]s on what it measures
    cases: bool = True            # ... and [[case]]s to measure (none: the node alone)


def load_spec(path: str | Path) -> HealthSpec:
    """The ``[healthcheck]`` table of a healthcheck suite; a bad key or value is refused
    naming the file, the key and what is accepted."""
    data, _ = load_toml(Path(path), "healthcheck suite")
    raw = data.get("healthcheck", {})
    if not isinstance(raw, dict):
        raise UsageError(f"{path}: [healthcheck] is a table")
    out: dict[str, Any] = {}
    for key, value in raw.items():
        kind = KEYS.get(key)
        if kind is None:
            raise UsageError(f"{path}: [healthcheck] unknown key {key!r}; accepted: "
                             f"{', '.join(KEYS)}")
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise UsageError(f"{path}: [healthcheck] {key} = {value!r}: a {kind.__name__}")
        if kind in (int, float) and not value > 0:
            raise UsageError(f"{path}: [healthcheck] {key} = {value!r}: a positive number")
        if kind is list and not all(isinstance(n, str) and n for n in value):
            raise UsageError(f"{path}: [healthcheck] {key}: a list of names")
        if key == "since_last" and not all(
                isinstance(v, int) and not isinstance(v, bool) and v >= 0
                for v in value.values()):
            raise UsageError(f"{path}: [healthcheck] since_last: counter name = the growth "
                             "allowed since the last check (a whole number, 0 or more)")
        out[key] = tuple(value) if kind is list else value
    names = [c.get("name") for c in data.get("check", []) if isinstance(c, dict)]
    if twice := sorted({n for n in names if n and names.count(n) > 1}):
        raise UsageError(f"{path}: [[check]] name {twice[0]!r} is given twice: each check's "
                         "verdict is a series of its own (netbench_healthcheck_check_ok)")
    return HealthSpec(**out, checks=bool(data.get("check")), cases=bool(data.get("case")))


def judge_node(spec: HealthSpec, env: Mapping[str, Any]) -> list[Finding]:
    """What the node shows (a probe's fingerprint) against what it must."""
    fp = Fingerprint(env)
    out = []
    # A soft-RoCE or siw device beside the NICs is no port the node's hardware must show.
    ports = [(d, p) for d in fp.rdma_devices if not d.emulated for p in d.ports
             if not spec.rdma_names or any(fnmatch.fnmatchcase(d.name, g)
                                             for g in spec.rdma_names)]
    if (spec.rdma_ports is not None or spec.rate_gbps is not None or spec.link_layer
            or spec.link_width):
        bad = []
        for dev, port in ports:
            where = f"{dev.name} port {port.port}"
            if "ACTIVE" not in str(port.state or "").upper():
                bad.append(f"{where}: state {_state(port.state)}, expected ACTIVE")
                continue
            rate = port.rate_gbps()
            if spec.rate_gbps is not None and rate != spec.rate_gbps:
                bad.append(f"{where}: rate {port.rate or 'unreadable'}, expected "
                           f"{spec.rate_gbps:g} Gb/sec")
            width = re.search(r"\((\d+X)\b", port.rate or "")
            if spec.link_width and (width.group(1) if width else None) != spec.link_width.upper():
                bad.append(f"{where}: width {width.group(1) if width else 'unreadable'} "
                           f"({port.rate}), expected {spec.link_width.upper()}")
            if spec.link_layer and str(port.link_layer or "").lower() != spec.link_layer.lower():
                bad.append(f"{where}: link layer {port.link_layer}, expected {spec.link_layer}")
        active = sum(1 for _, p in ports if "ACTIVE" in str(p.state or "").upper())
        if spec.rdma_ports is not None and active < spec.rdma_ports:
            bad.insert(0, f"{active} of {spec.rdma_ports} RDMA ports active "
                          f"({len(ports)} found)")
        out.append(Finding("rdma ports", not bad, "; ".join(bad) or
                           f"{active} RDMA port(s) active"
                           + (f" at {spec.rate_gbps:g} Gb/sec" if spec.rate_gbps else "")))
    if spec.gpu_count is not None:
        found = len(fp.gpus)
        out.append(Finding("gpus", found >= spec.gpu_count,
                           f"{found} GPU(s) found" + ("" if found >= spec.gpu_count else
                                                      f", expected {spec.gpu_count}")))
    for name in spec.netdevs:
        nic = fp.nic(name)
        state = nic.operstate if nic else None
        up = state in ("up", "unknown") and nic is not None
        out.append(Finding(f"interface {name}", up, "not found" if nic is None else
                           f"operstate {state}" + ("" if up else ", expected up")))
    return out


def _state(text: Any) -> str:
    return str(text or "unreadable").split(":")[-1].strip()


def judge_counters(spec: HealthSpec, previous: Mapping[str, int] | None,
                   now: Mapping[str, int]) -> list[Finding]:
    """Each ``since_last`` counter's growth since the last check (summed over the ports and
    interfaces that have it); a first check only records them."""
    if not spec.since_last:
        return []
    if previous is None:
        return [Finding(COUNTERS, True,
                        "first check here: counters recorded, judged from the next")]
    grown, _ = counters.delta(counters.Snapshot(dict(previous)), counters.Snapshot(dict(now)))
    # A counter lower than last time was reset (a driver reload, a reboot): what it reads
    # now grew since, from 0.
    went_back = [k for k, v in now.items() if k in previous and v < previous[k]]
    grown.update({k: now[k] for k in went_back if now[k] > 0})
    summed = counters.by_name(grown)
    bad, said = [], []
    for name, allowed in spec.since_last.items():
        total, where = summed.get(name, (0, []))
        if not any(k.rsplit("/", 1)[-1] == name for k in now):
            said.append(f"{name}: not counted here")
            continue
        if total > allowed:
            objects = ", ".join(k.split("/", 1)[1].rsplit("/", 1)[0] for k in where[:4])
            bad.append(f"{name} +{total:,} since the last check ({objects}), allowed "
                       f"{allowed:,}")
    note = (f" ({len(went_back)} counter(s) reset since: counted from 0)" if went_back
            else "")
    return [Finding(COUNTERS, not bad,
                    ("; ".join(bad) or ("no growth past its bound" + (
                        f"; {'; '.join(said)}" if said else ""))) + note)]


def judge_checks(spec: HealthSpec, outcomes: Sequence[Any],
                 rows: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """The suite's ``[[check]]``s (``accept.evaluate``'s outcomes) and the measured ``rows``:
    a case that failed fails its check; a check whose every case was skipped for want of its
    hardware does not apply on this node, unless ``must_run`` names its benchmark."""
    out = []
    for o in outcomes:
        mine = [r for r in rows if r.get("benchmark") == o.check.benchmark]
        failed_rows = [r for r in mine if r.get("status") == "failed"]
        skipped = bool(mine) and all(r.get("status") == "skipped" for r in mine)
        if failed_rows:
            out.append(Finding(o.check.name, False, f"{len(failed_rows)} case(s) failed: "
                               f"{failed_rows[0].get('reason')}"))
        elif skipped and o.check.benchmark in spec.must_run:
            out.append(Finding(o.check.name, False, f"skipped, and this node must run "
                               f"{o.check.benchmark}: {mine[0].get('reason')}"))
        elif skipped:
            out.append(Finding(o.check.name, True, f"{o.check.benchmark} was skipped: "
                               f"{mine[0].get('reason')}", applies=False))
        elif o.unjudged:
            out.append(Finding(o.check.name, True, o.unjudged, applies=False))
        else:
            out.append(Finding(o.check.name, o.passed,
                               o.message.splitlines()[-1].strip() if not o.passed
                               else o.measured_text()))
    return out


def failed(findings: Sequence[Finding]) -> list[Finding]:
    return [f for f in findings if not f.ok]


def reason(findings: Sequence[Finding], most: int = 200) -> str:
    """The one line a drained node's reason carries: what failed, first things first."""
    text = "; ".join(f"{f.check}: {f.what}" for f in failed(findings))
    return text if len(text) <= most else text[:most - 3] + "..."


def keeps_counters(findings: Sequence[Finding]) -> bool:
    """Whether the counters read now become the next check's reference: not while a counter
    grown past its bound fails (it fails until someone looks)."""
    return all(f.ok for f in findings if f.check == COUNTERS)
