"""Error counters that were quiet in the baseline and grew in the candidate: after a driver or
firmware update, the first symbol error, link-down or out-of-sequence packet is news whatever
the bandwidth says.

Each case's rows carry what its counters grew by (netbench.env.counters, the ``counters``
column). Per case (benchmark and params) and per error counter name, summed over the objects
that have it (``rx_errors`` of every interface, ``symbol_error`` of every port, this end's and
the far end's), the most it grew in any one invocation: where every baseline invocation read
0 and a candidate invocation read more, that is news. A far end's counters count only where
both sides read them (an older server says nothing, which is not 0). News on the case's own
device (its interface or RDMA port, the far end's where the row names it) fails the gate;
another interface that carried the case's traffic (its bytes grew as the busiest's did: a
collective's loopback) and the kernel's TCP counters, which count the whole network
namespace, are shown, not gated; an interface that carried none of it (another program's
temporary veth) is not the case's news at all.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from netbench.analysis.verdict import Verdict
from netbench.env import counters
from netbench.fingerprint import Fingerprint
from netbench.store import counters_of


@dataclass
class CounterNews:
    benchmark: str
    params: str
    name: str                   # the counter, summed over its objects
    baseline: int               # the most it grew in one baseline invocation (0)
    candidate: int              # the most it grew in one candidate invocation
    where: list[str] = field(default_factory=list)   # the counters that grew, whole
    gated: bool = True          # on the case's own device (fails compare); else shown

    @property
    def verdict(self) -> Verdict:
        """An error counter quiet before and grown now on the case's own device regressed;
        one of the namespace's (loopback TCP) is shown, no verdict on the case."""
        return Verdict.REGRESSED if self.gated else Verdict.UNCHANGED


def _own(key: str, device: Any, peer_device: Any, netdev: str | None = None) -> bool:
    """Is ``key`` a counter of the case's own device (this end's, or the far end's; for an
    RDMA device this end's netdev under it too)?"""
    far = key.startswith("far/")
    dev = peer_device if far else device
    if not isinstance(dev, str) or not dev or counters.netns_wide(key):
        return False
    parts = key.removeprefix("far/").split("/")
    return len(parts) >= 3 and (parts[1] == dev.split(":", 1)[0]
                                or (not far and parts[1] == netdev))


def _iface(key: str) -> str | None:
    """The interface a counter is of ("net/eth0/rx_errors" -> "eth0"; far end's alike), or
    None for what is no interface's (the kernel's TCP counters, an RDMA port's)."""
    parts = key.removeprefix("far/").split("/")
    return parts[1] if len(parts) >= 3 and parts[0] == "net" else None


CARRIED = 0.1   # an interface moved this share of the busiest one's bytes: the case's traffic


def _carriers(deltas: dict[str, int]) -> set[str] | None:
    """The interfaces that carried the case's traffic, measured: those whose bytes grew by at
    least ``CARRIED`` of the busiest one's during it. A collective's "2 ranks" names no
    interface; loopback carried its gigabytes, and another program's temporary veth that
    flapped beside it carried none: its carrier_changes are no news of the case. None where
    no interface's bytes were read (then every interface's counters stay)."""
    moved: dict[str, int] = {}
    for key, value in deltas.items():
        iface = _iface(key)
        if iface is not None and key.rsplit("/", 1)[-1] in ("rx_bytes", "tx_bytes"):
            moved[iface] = moved.get(iface, 0) + int(value)
    top = max(moved.values(), default=0)
    if not top:
        return None
    return {i for i, v in moved.items() if v >= CARRIED * top}


def _grown(rows: Any) -> dict[tuple[str, str], dict[str, tuple[int, set[str], bool]]]:
    """(benchmark, params) -> error name -> (the most it grew in one invocation, where, on
    the case's own device); only cases whose counters were read. A name that grew only at a
    far end some invocation could not read is left out (``far/unread``: not a 0)."""
    out: dict[tuple[str, str], dict[str, tuple[int, set[str], bool]]] = {}
    if rows is None or len(rows) == 0 or "counters" not in rows:
        return out
    devices = rows["device"] if "device" in rows else [None] * len(rows)
    peers = rows["peer_device"] if "peer_device" in rows else [None] * len(rows)
    envs = rows["env_json"] if "env_json" in rows else [None] * len(rows)
    seen: set[tuple[Any, Any, Any]] = set()
    netdevs: dict[tuple[Any, Any], dict[str, str]] = {}
    for bench, params, text, run, host, index, device, peer_device, env in zip(
            rows["benchmark"], rows["params"], rows["counters"], rows["run_id"], rows["host"],
            rows["case_index"], devices, peers, envs):
        if (run, host, index) in seen:
            continue
        seen.add((run, host, index))
        deltas = counters_of(text)
        if deltas is None:
            continue
        if (run, host) not in netdevs:
            netdevs[(run, host)] = Fingerprint(env).rdma_netdevs()
        netdev = netdevs[(run, host)].get(str(device))
        case = out.setdefault((str(bench), str(params)), {})
        if counters.FAR_UNREAD in deltas:
            case.setdefault("", (0, set(), False))       # marks: a far end went unread
        carried = _carriers(deltas)
        deltas = {k: v for k, v in deltas.items()
                  if carried is None or _iface(k) is None or _iface(k) in carried
                  or _own(k, device, peer_device, netdev)}
        for name, (total, where) in counters.by_name(deltas, counters.is_error).items():
            most, places, own = case.get(name, (0, set(), False))
            case[name] = (max(most, total), places | set(where),
                          own or any(_own(k, device, peer_device, netdev) for k in where))
    return out


def counter_news(base: Any, cand: Any) -> list[CounterNews]:
    """The error counters every baseline invocation of a case kept at 0 and a candidate
    invocation grew, case by case (cases both sides read counters for)."""
    before, after = _grown(base), _grown(cand)
    news = []
    for case in sorted(set(before) & set(after)):
        blind = "" in before[case] or "" in after[case]     # a far end unread on a side
        for name, (most, where, own) in sorted(after[case].items()):
            places = sorted(w for w in where if not (blind and w.startswith("far/")))
            if not name or not places or before[case].get(name, (0, set(), False))[0]:
                continue
            news.append(CounterNews(case[0], case[1], name, 0, most, places, own))
    return news
