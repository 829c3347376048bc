"""What the NIC and the kernel counted while a case ran: read before and after it, outside the
timed section, the difference kept with the case.

A NIC is not accepted on speed alone: a link at line rate while its symbol errors climb, a port
that flapped once, TCP that only kept its rate by retransmitting, are what later stall a job.
A snapshot holds every counter it could read, keyed ``<source>/<object>/<name>``:

- ``net/<if>/<name>``: the netdev's ``/sys/class/net/<if>/statistics/*`` and its
  ``carrier_changes`` (every interface of the network namespace: a flap on any is news);
- ``ethtool/<if>/<name>``: ``ethtool -S`` of each interface backed by a device (PFC pause
  frames per priority, rx_discards_phy, out_of_buffer on mlx5), parsed generically;
- ``rdma/<dev>/<port>/<name>`` and ``rdma_hw/<dev>/<port>/<name>``: the port's
  ``counters/*`` and ``hw_counters/*`` under /sys/class/infiniband (mlx5's symbol_error,
  link_downed, out_of_sequence ...; rxe's own set);
- ``tcp/<name>``, ``tcpext/<name>``: the kernel's Tcp and TcpExt counters of this network
  namespace (/proc/net/snmp, /proc/net/netstat: RetransSegs, TCPLostRetransmit ...).

``delta`` keeps what grew; a counter that went backwards (a driver reload, a wrap) is left
out and said, never a negative delta. A counter read but absent from a case's deltas stayed
put: the run keeps the names it read, so a later run's first error is news. ``ERRORS`` names
the counters that are errors whatever the driver (lower is better, 0 is healthy). What cannot
be read (no such device, permissions, no ethtool) is a note, said once a run.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

MAX_INTERFACES = 64          # interfaces read a snapshot (sorted; the rest noted)
MAX_COUNTERS = 4096          # counters kept a snapshot
ETHTOOL_TIMEOUT = 2.0        # seconds for all the `ethtool -S` of one snapshot

# Error counters by name, whatever the object: lower is better, 0 is the healthy value.
ERRORS = frozenset({
    # netdev
    "carrier_changes", "rx_errors", "tx_errors", "rx_dropped", "tx_dropped", "rx_crc_errors",
    "rx_frame_errors", "rx_missed_errors", "rx_fifo_errors", "tx_fifo_errors",
    "tx_carrier_errors",
    # InfiniBand port counters (PortCounters), mlx5 and rxe
    "symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors",
    "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors", "port_xmit_discards",
    "port_xmit_constraint_errors", "port_rcv_constraint_errors",
    "local_link_integrity_errors", "excessive_buffer_overrun_errors", "VL15_dropped",
    # mlx5 hw_counters
    "out_of_sequence", "packet_seq_err", "duplicate_request", "rnr_nak_retry_err",
    "local_ack_timeout_err", "implied_nak_seq_err", "req_cqe_error", "resp_cqe_error",
    "rx_icrc_encapsulated",
    # rxe hw_counters
    "rcvd_seq_err", "retry_exceeded_err", "retry_rnr_exceeded_err", "completer_retry_err",
    "send_err", "rcvd_rnr_err",
    # the kernel's TCP
    "RetransSegs", "InErrs", "TCPLostRetransmit", "TCPTimeouts", "TCPSynRetrans",
    # ethtool (mlx5)
    "rx_discards_phy", "rx_out_of_buffer", "rx_crc_errors_phy", "rx_symbol_err_phy",
})


# What /proc/net/snmp holds that is no counter: gauges and constants (a gauge that falls is
# no wrap, and a constant never grows).
NOT_COUNTERS = frozenset({"tcp/CurrEstab", "tcp/RtoAlgorithm", "tcp/RtoMin", "tcp/RtoMax",
                          "tcp/MaxConn"})
# The netdev's own statistics (/sys/class/net/<if>/statistics): a driver's `ethtool -S` may
# repeat some (rx_errors, rx_dropped); summed by name, those count once, from the netdev.
NETDEV_STATS = frozenset({
    "collisions", "multicast", "rx_bytes", "rx_compressed", "rx_crc_errors", "rx_dropped",
    "rx_errors", "rx_fifo_errors", "rx_frame_errors", "rx_length_errors", "rx_missed_errors",
    "rx_nohandler", "rx_over_errors", "rx_packets", "tx_aborted_errors", "tx_bytes",
    "tx_carrier_errors", "tx_compressed", "tx_dropped", "tx_errors", "tx_fifo_errors",
    "tx_heartbeat_errors", "tx_packets", "tx_window_errors"})
# Where a peer case's far end could not say its counters: kept in the case's deltas, so
# "not read" is never mistaken for "read, nothing grew".
FAR_UNREAD = "far/unread"


@dataclass
class Snapshot:
    values: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)     # what could not be read, and why


def is_error(key: str) -> bool:
    """Is ``key`` (``source/object/name``) one of the error counters?"""
    return key.rsplit("/", 1)[-1] in ERRORS


def netns_wide(key: str) -> bool:
    """Does ``key`` count the whole network namespace (the kernel's TCP: any traffic's
    retransmits), not one device?"""
    return key.removeprefix("far/").startswith(("tcp/", "tcpext/"))


def by_name(deltas: Mapping[str, int], keys: object = None) -> dict[str, tuple[int, list[str]]]:
    """Deltas summed by counter name over the objects that have it (every interface's
    carrier_changes, both ends), each with the keys summed; ``keys``: only those for which
    it returns True. An ``ethtool`` repeat of a netdev statistic counts once (the netdev's)."""
    out: dict[str, tuple[int, list[str]]] = {}
    for key, value in deltas.items():
        if key == FAR_UNREAD or (callable(keys) and not keys(key)):
            continue
        source, name = key.removeprefix("far/").split("/", 1)[0], key.rsplit("/", 1)[-1]
        if source == "ethtool" and name in NETDEV_STATS:
            continue
        total, where = out.get(name, (0, []))
        out[name] = (total + value, where + [key])
    return out


def snapshot(sysfs: str | Path = "/sys", proc: str | Path = "/proc",
             ethtool: bool = True) -> Snapshot:
    """Every counter this host and network namespace let netbench read, now."""
    snap = Snapshot()
    _netdevs(Path(sysfs), snap, ethtool)
    _rdma(Path(sysfs), snap)
    _kernel_tcp(Path(proc), snap)
    if len(snap.values) > MAX_COUNTERS:
        kept = sorted(snap.values, key=lambda k: (not is_error(k), k))[:MAX_COUNTERS]
        snap.notes.append(f"{len(snap.values)} counters; the first {MAX_COUNTERS} kept "
                          "(errors first)")
        snap.values = {k: snap.values[k] for k in kept}
    return snap


def delta(before: Snapshot, after: Snapshot) -> tuple[dict[str, int], list[str]]:
    """What grew between two snapshots, and what went backwards or vanished (said, one note
    a counter or an object, the same words each time: a run says each once; left out)."""
    out: dict[str, int] = {}
    notes = []
    gone: set[str] = set()
    for key, was in before.values.items():
        now = after.values.get(key)
        if now is None:
            gone.add("/".join(key.split("/")[:2]))
            continue
        if now < was:
            notes.append(f"{key} went backwards during a case (a driver reload or a wrap): "
                         "that case's delta left out")
        elif now > was:
            out[key] = now - was
    # An interface or port that vanished mid-case (renamed or removed, as a driver reload
    # does): named once, not a counter at a time; the run goes on reading what is there.
    present = {"/".join(key.split("/")[:2]) for key in after.values}
    notes += [f"{obj} vanished during a case (renamed or removed, as a driver reload does): "
              "what it counted in that case is unknown" for obj in sorted(gone - present)]
    return out, notes


def vanished_between(previous: Snapshot, now: Snapshot) -> list[str]:
    """The interfaces and ports the last case's end read that this case's start does not (a
    driver reload between two windows of a soak): named as delta names one mid-case."""
    def objects(snap: Snapshot) -> set[str]:
        return {"/".join(key.split("/")[:2]) for key in snap.values}

    return [f"{obj} vanished between cases (renamed or removed, as a driver reload does)"
            for obj in sorted(objects(previous) - objects(now))]


MAX_COUNTER_FILE = 1 << 20     # bytes a statistics file (or /proc/net/snmp) may hold


def _small_text(path: Path, limit: int = 4096) -> str | None:
    """A regular file's text, at most ``limit`` bytes, or None: a FIFO planted in a
    --sysfs-root hung the run, a link to /dev/zero read until memory ran out, bytes that
    are no UTF-8 raised (read as replaced characters now)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            data = f.read(limit + 1)
        except OSError:
            return None
    return None if len(data) > limit else data.decode(errors="replace")


def _read_int(path: Path) -> int | None:
    text = (_small_text(path) or "").strip()
    try:
        return int(text.split()[0], 0) if text else None
    except ValueError:
        return None


def _readable(directory: Path, prefix: str, snap: Snapshot) -> None:
    """Every integer file of ``directory`` into ``snap`` under ``prefix/<file>``."""
    try:
        names = sorted(os.listdir(directory))
    except OSError as exc:
        if directory.exists():
            snap.notes.append(f"{directory}: {exc.strerror or exc}")
        return
    denied = 0
    for name in names:
        path = directory / name
        value = _read_int(path)
        if value is None:
            denied += path.is_file() and not os.access(path, os.R_OK)
            continue
        snap.values[f"{prefix}/{name}"] = value
    if denied:
        snap.notes.append(f"{directory}: {denied} counter(s) not readable (permissions)")


def _netdevs(sysfs: Path, snap: Snapshot, ethtool: bool) -> None:
    try:
        names = os.listdir(sysfs / "class" / "net")
    except OSError as exc:
        snap.notes.append(f"{sysfs / 'class' / 'net'}: {exc.strerror or exc}; no netdev "
                          "counters")
        return
    # Interfaces backed by a device first: a host with hundreds of virtual ones (a
    # Kubernetes node's cali*) keeps its NICs.
    backed = {n for n in names if (sysfs / "class" / "net" / n / "device").exists()}
    names = sorted(names, key=lambda n: (n not in backed, n))
    if len(names) > MAX_INTERFACES:
        snap.notes.append(f"{len(names)} interfaces; the first {MAX_INTERFACES} read (those "
                          "backed by a device first)")
        names = names[:MAX_INTERFACES]
    for name in names:
        base = sysfs / "class" / "net" / name
        _readable(base / "statistics", f"net/{name}", snap)
        flaps = _read_int(base / "carrier_changes")
        if flaps is not None:
            snap.values[f"net/{name}/carrier_changes"] = flaps
    devices = [n for n in names if n in backed]
    tool = shutil.which("ethtool") if ethtool and devices else None
    if devices and ethtool and tool is None:
        snap.notes.append("ethtool not installed: `ethtool -S` counters (pause frames, "
                          "discards) not read")
    deadline = time.monotonic() + ETHTOOL_TIMEOUT
    for name in devices if tool else ():
        if name in _ETHTOOL_STUCK:
            continue
        left = deadline - time.monotonic()
        if left <= 0:
            snap.notes.append(f"ethtool -S took over {ETHTOOL_TIMEOUT:g} s a snapshot: the "
                              "rest of the interfaces' not read that time")
            break
        _ethtool(str(tool), name, snap, left)


_ETHTOOL_LINE = re.compile(r"\s*([^:]+?):\s+(-?\d+)\s*$")
# Interfaces whose `ethtool -S` did not answer in time: not asked again by this process (a
# driver stuck under the rtnl lock would hold every later snapshot too).
_ETHTOOL_STUCK: set[str] = set()


def _ethtool(tool: str, name: str, snap: Snapshot, timeout: float) -> None:
    try:
        proc = subprocess.Popen([tool, "-S", name], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
    except OSError as exc:
        snap.notes.append(f"ethtool -S {name}: {exc.strerror or exc}")
        return
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _ETHTOOL_STUCK.add(name)
        proc.kill()
        try:
            proc.wait(0.5)
        except subprocess.TimeoutExpired:
            pass                # stuck in the kernel: left behind, never waited on again
        snap.notes.append(f"ethtool -S {name} did not answer in time: not asked again")
        return
    if proc.returncode:
        return                  # a driver without statistics: nothing to say each case
    for line in out.splitlines()[1:]:     # first: "NIC statistics:"
        m = _ETHTOOL_LINE.match(line)
        if m:
            snap.values[f"ethtool/{name}/{m.group(1).strip().replace(' ', '_')}"] = int(
                m.group(2))


def _rdma(sysfs: Path, snap: Snapshot) -> None:
    root = sysfs / "class" / "infiniband"
    try:
        devices = sorted(os.listdir(root))
    except OSError:
        return                  # no RDMA devices here: nothing to say
    for dev in devices:
        try:
            ports = sorted(os.listdir(root / dev / "ports"))
        except OSError as exc:
            snap.notes.append(f"{root / dev / 'ports'}: {exc.strerror or exc}")
            continue
        for port in ports:
            base = root / dev / "ports" / port
            _readable(base / "counters", f"rdma/{dev}/{port}", snap)
            _readable(base / "hw_counters", f"rdma_hw/{dev}/{port}", snap)


def _kernel_tcp(proc: Path, snap: Snapshot) -> None:
    for name, wanted in (("snmp", {"Tcp": "tcp"}), ("netstat", {"TcpExt": "tcpext"})):
        path = proc / "net" / name
        text = _small_text(path, MAX_COUNTER_FILE)
        if text is None:
            snap.notes.append(f"{path}: unreadable, or no regular file of at most "
                              f"{MAX_COUNTER_FILE >> 20} MiB; no kernel TCP counters")
            continue
        lines = text.splitlines()
        # Pairs of lines: "Tcp: Name1 Name2 ..." then "Tcp: 1 2 ...".
        for head, body in zip(lines[::2], lines[1::2]):
            group, _, names = head.partition(":")
            prefix = wanted.get(group)
            if prefix is None or not body.startswith(group + ":"):
                continue
            for key, value in zip(names.split(), body.partition(":")[2].split()):
                if f"{prefix}/{key}" in NOT_COUNTERS:
                    continue
                try:
                    snap.values[f"{prefix}/{key}"] = int(value)
                except ValueError:
                    continue


def nonzero_errors(deltas: Mapping[str, int]) -> dict[str, int]:
    """The error counters that grew."""
    return {k: v for k, v in deltas.items() if v and is_error(k)}
