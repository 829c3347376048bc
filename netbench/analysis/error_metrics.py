"""Error counters judged like any metric: for compare and history, each case invocation's growth
of every error counter of the case's own device is a metric, ``err.<name>`` (this end) and
``far.err.<name>`` (the far end), unit ``count``, lower is better.

So a NIC that dropped 5 packets a case before a driver update and 500 after is a regression
with its p-value, like a bandwidth that fell, and a counter that never grew stays silent.
(``counter_news`` says the first error after a clean baseline, which one invocation a side
can show; this judges how much, which needs invocations, as every verdict does.)

The metrics come from the rows' ``counters`` column (netbench.env.counters) when rows are read
for a verdict, not stored twice. A case's error counter becomes a metric where it grew in some
invocation of that case in what is judged (baseline, candidate, history): every invocation
whose counters were read then has a value, 0 where it did not grow, so an unchanged clean NIC
adds nothing to read. What is the case's own:
- its device's objects: the interface (``net/<if>``, ``ethtool/<if>``) or the RDMA port
  (``rdma*/<dev>/<port>``), and for an RDMA device the netdev under it (the run's probe names
  it; this end only, the far end's probe is not in the rows);
- the far end's, by the row's ``peer_device``, where that end's counters were read;
- the kernel's TCP counters (RetransSegs ...) for cases whose transport is TCP: they count the
  network namespace, where a TCP case's own retransmits are.
Another interface's errors (a management NIC's, docker0's) are not the case's: shown in its
counters, never judged here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from netbench.env import counters
from netbench.fingerprint import Fingerprint
from netbench.store import counters_of

THIS_END, FAR_END = "err.", "far.err."
UNIT = "count"


def is_error_metric(metric: str) -> bool:
    """Is ``metric`` one this module derives (``err.<name>``, ``far.err.<name>``)?"""
    return metric.startswith((THIS_END, FAR_END))


def on_loopback(device: Any, peer: Any = None) -> bool:
    """Did the case run over loopback: the kernel's (``lo``), or two ends on one RDMA device
    (peer ``loopback``)?"""
    return device == "lo" or peer == "loopback"


def inside_the_kernel(device: Any, peer: Any) -> bool:
    """Did the case's traffic never leave the kernel (the ``lo`` interface, to the loopback
    peer: a host's routable address on ``lo`` to a remote peer does not)? Then every error
    it counts happened in this host's own stack, with no link or NIC to lose anything: a
    sender outrunning the receiver's backlog, loss probes fired while a stolen vCPU held the
    ACKs (a CI A/A beside a hypervisor stealing 0.7 of a core: RetransSegs 0 -> 43). Two
    ends on one RDMA device are not: their traffic crosses the HCA, whose counters count."""
    return device == "lo" and peer == "loopback"


def _device_name(device: Any) -> str:
    return device.split(":", 1)[0] if isinstance(device, str) else ""


# Retransmissions the receiver reported as duplicates (D-SACK) or the sender undid as spurious
# lost nothing: a late ACK or reordering, never a drop. Every retransmit of a loopback stream
# here is one (RetransSegs 16 = TCPDSACKRecvSegs 16, all undone), and they come and go run by
# run (an A/A on an idle host: 0 against 18 a case), so they count no error. A queue that
# drops thousands keeps them: the receiver never had those segments.
_NOT_LOST = {"tcp/RetransSegs": ("tcpext/TCPDSACKRecvSegs", "tcpext/TCPDSACKRecv"),
             "tcpext/TCPTimeouts": ("tcpext/TCPSpuriousRTOs",)}


def lost_only(deltas: Mapping[str, int], key: str, value: int) -> int:
    """A TCP retransmit counter's growth less what its own counters say was spurious (the
    first of ``_NOT_LOST``'s that was read: D-SACKed segments, else D-SACK blocks)."""
    far = "far/" if key.startswith("far/") else ""
    for spurious in _NOT_LOST.get(key.removeprefix("far/"), ()):
        if far + spurious in deltas:
            return max(value - int(deltas[far + spurious]), 0)
    return value


def own_errors(deltas: Mapping[str, int], device: Any, peer_device: Any = None,
               netdev: str | None = None, tcp: bool = False) -> dict[str, int]:
    """The case's own error counters' growth, by metric name, summed over its objects (an
    ``ethtool`` repeat of a netdev statistic counts once, from the netdev)."""
    mine = {_device_name(device)} | ({netdev} if netdev else set())
    theirs = {_device_name(peer_device)}
    out: dict[str, int] = {}
    for key, value in deltas.items():
        if key == counters.FAR_UNREAD or not counters.is_error(key):
            continue
        far = key.startswith("far/")
        parts = key.removeprefix("far/").split("/")
        name = parts[-1]
        if parts[0] == "ethtool" and name in counters.NETDEV_STATS:
            continue
        if counters.netns_wide(key):
            own = tcp
            value = lost_only(deltas, key, value)
        else:
            own = len(parts) >= 3 and parts[1] in (theirs if far else mine) - {""}
        if own:
            metric = (FAR_END if far else THIS_END) + name
            out[metric] = out.get(metric, 0) + value
    return out


def _invocations(rows: Any) -> list[tuple[int, dict[str, int], bool]]:
    """Each case invocation (a run's host's case_index) whose counters were read: the index of
    its first row, its own errors' growth, and whether its far end's were read."""
    if rows is None or rows.empty or "counters" not in rows:
        return []
    column = {c: rows[c].tolist() if c in rows else [None] * len(rows)
              for c in ("run_id", "host", "case_index", "counters", "device", "peer_device",
                        "transport", "env_json")}
    netdevs: dict[Any, dict[str, str]] = {}
    seen, out = set(), []
    for i, (run, host, index, text, device, peer_device, transport, env) in enumerate(
            zip(*column.values())):
        if (run, host, index) in seen:
            continue
        seen.add((run, host, index))
        deltas = counters_of(text)
        if deltas is None:
            continue
        if (run, host) not in netdevs:
            netdevs[(run, host)] = Fingerprint(env).rdma_netdevs()
        grown = own_errors(deltas, device, peer_device,
                           netdevs[(run, host)].get(str(device)), transport == "tcp")
        out.append((i, grown, counters.FAR_UNREAD not in deltas))
    return out


def with_error_metrics(*frames: Any) -> list[Any]:
    """``frames`` (rows, or None) each with a row added per case invocation and error metric
    that grew in any frame's invocation of that case: what compare and history judge."""
    import pandas as pd

    found = [_invocations(f) for f in frames]
    wanted: dict[tuple[str, str], set[str]] = {}
    for frame, invocations in zip(frames, found):
        for i, grown, _ in invocations:
            case = (str(frame["benchmark"].iat[i]), str(frame["params"].iat[i]))
            wanted.setdefault(case, set()).update(m for m, v in grown.items() if v)
    out = []
    for frame, invocations in zip(frames, found):
        added = []
        for i, grown, far_read in invocations:
            case = (str(frame["benchmark"].iat[i]), str(frame["params"].iat[i]))
            for metric in sorted(wanted.get(case, ())):
                if metric.startswith(FAR_END) and not far_read:
                    continue        # not read is not 0
                value = float(grown.get(metric, 0))
                # A count of its own: none of the case's first row's statistic (tcp.rr's is
                # lat_min, an extreme) or cost.
                added.append({**frame.iloc[i].to_dict(), "metric": metric, "value": value,
                              "unit": UNIT, "better": "lower", "n_samples": 1,
                              "samples": [value], "unit_note": None, "statistic": None,
                              "per_metric": None, "cost": None})
        out.append(frame if not added else pd.concat([frame, pd.DataFrame(added)],
                                                     ignore_index=True))
    return out
