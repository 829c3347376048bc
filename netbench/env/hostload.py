"""The host's own state while a case ran: how busy it was outside netbench.

A verdict on a shared machine has to know whether a side ran beside other work: a CI runner's
neighbour, a hypervisor stealing the vCPU, a CPU held at a low clock. Read around every case
(outside the timed section, a few /proc and /sys reads, well under a millisecond):

- ``load_other_cores``: CPU time everything but netbench's own processes (this process, its
  descendants: the loopback server, spawned ranks) wanted over the case, in cores (1.0 = one
  core's worth the whole time): each user-space task's time running plus waiting for a CPU,
  from /proc/PID/task/TID/schedstat (nanoseconds); where the kernel has no schedstat, what
  /proc/stat counts as user and system time less netbench's own (the share other work got,
  which a busy-polling case understates); not recorded for cases under MIN_WALL seconds;
- ``load_own_cores``: netbench's own processes, the same way;
- ``load_steal_cores``: time the hypervisor ran someone else on this guest's vCPUs;
- ``load_avg1``: the 1-minute load average when the case ended;
- ``load_cpu_mhz``: the mean current clock over the CPUs where cpufreq exposes it;
- ``load_throttle_events``: thermal throttling events (core and package) during the case.

A figure the kernel does not expose here is missing (None), never guessed.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass
from glob import glob
from typing import Any

COLUMNS = ("load_other_cores", "load_own_cores", "load_steal_cores", "load_avg1",
           "load_cpu_mhz", "load_throttle_events")

# A side whose case had this many cores busy outside netbench ran beside other work: its
# slowdowns are not evidence against the code (see netbench.analysis.verdict).
BUSY_CORES = 0.25

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MIN_WALL = 0.25      # seconds: a shorter case's load is not recorded (see finish)


@dataclass
class _Snapshot:
    at: float
    busy: float | None          # seconds, all CPUs, from /proc/stat
    steal: float | None
    own: float | None           # seconds, netbench's process tree
    throttle: int | None
    others: dict[int, int] | None = None   # task id -> ns run + waiting, other processes


def _own_pids() -> set[int] | None:
    try:
        import psutil

        me = psutil.Process()
        return {me.pid, *(p.pid for p in me.children(recursive=True))}
    except Exception:       # psutil missing or the tree changing under it
        return None


def _others(own: set[int] | None) -> dict[int, int] | None:
    """Every user-space task outside netbench's process tree: the nanoseconds it ran plus
    those it waited for a CPU (/proc/PID/task/TID/schedstat). Run plus wait is what other
    work wanted of the CPUs, not the share it got: a busy-polling case crowds a neighbour
    out (it then runs little), yet the neighbour's wakeups and cache still move the figure.
    Kernel threads (no command line) are left out: they are mostly the case's own traffic."""
    if own is None or not os.path.exists("/proc/self/schedstat"):
        return None
    out: dict[int, int] = {}
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return None
    for pid in pids:
        if pid in own:
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if not f.read(1):
                    continue                        # a kernel thread
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue                                # ended meanwhile
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    ran, waited = f.read().split()[:2]
                out[int(tid)] = int(ran) + int(waited)
            except (OSError, ValueError):
                continue
    return out


def _proc_stat() -> tuple[float | None, float | None]:
    """Busy and stolen seconds over the CPUs this process may run on (a container's or a
    pinned run's neighbours on other CPUs are not its neighbours)."""
    try:
        allowed = {f"cpu{c}" for c in os.sched_getaffinity(0)}
        with open("/proc/stat") as f:
            lines = [line.split() for line in f if line.startswith("cpu")]
    except (OSError, AttributeError):
        return None, None
    busy = steal = 0
    seen = False
    for fields in lines:
        if fields[0] not in allowed or len(fields) < 9:
            continue
        values = [int(x) for x in fields[1:]]
        # user nice system idle iowait irq softirq steal ...: guest time is inside user
        # already. irq and softirq are left out: they are mostly the traffic netbench itself
        # makes (a NIC's receive path, soft-RoCE's work, a shaper's timers), not a neighbour.
        busy += values[0] + values[1] + values[2]
        steal += values[7]
        seen = True
    return (busy / _TICK, steal / _TICK) if seen else (None, None)


def _own_seconds() -> float | None:
    """CPU seconds of this process and every live descendant, each with the children it has
    reaped (so a process that ended during the case still counts)."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        me = psutil.Process()
        procs = [me, *me.children(recursive=True)]
    except psutil.Error:
        return None
    total = 0.0
    for proc in procs:
        try:
            t = proc.cpu_times()
        except psutil.Error:        # ended between the listing and the read
            continue
        total += t.user + t.system + getattr(t, "children_user", 0.0) + getattr(
            t, "children_system", 0.0)
    return total


def _throttle_count() -> int | None:
    paths = glob("/sys/devices/system/cpu/cpu[0-9]*/thermal_throttle/*_throttle_count")
    if not paths:
        return None
    total = 0
    for path in paths:
        try:
            with open(path) as f:
                total += int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
    return total


def _cpu_mhz() -> float | None:
    values = []
    for path in glob("/sys/devices/system/cpu/cpu[0-9]*/cpufreq/scaling_cur_freq"):
        try:
            with open(path) as f:
                values.append(int(f.read().strip()) / 1000.0)
        except (OSError, ValueError):
            continue
    return sum(values) / len(values) if values else None


def start() -> _Snapshot:
    busy, steal = _proc_stat()
    own = _own_seconds()
    return _Snapshot(time.monotonic(), busy, steal, own, _throttle_count(),
                     _others(_own_pids()))


def finish(begin: _Snapshot) -> dict[str, Any]:
    """The case's load columns, from ``begin`` (``start()``) to now."""
    end = start()
    wall = end.at - begin.at
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    if wall <= 0:
        return out
    if end.own is not None and begin.own is not None:
        out["load_own_cores"] = round(max(end.own - begin.own, 0.0) / wall, 4)
    # The counters tick every 10 ms: below MIN_WALL a case's share is a few ticks either way,
    # so it is not recorded rather than recorded wrong; and without netbench's own time (no
    # psutil) the rest cannot be told from netbench's own work.
    if end.others is not None and begin.others is not None and wall >= MIN_WALL:
        # Tasks that began during the case count from zero; those that ended are lost.
        wanted = sum(max(ns - begin.others.get(tid, 0), 0) for tid, ns in end.others.items())
        out["load_other_cores"] = round(wanted / 1e9 / wall, 4)
    elif (end.busy is not None and begin.busy is not None and end.own is not None
            and begin.own is not None and wall >= MIN_WALL):
        busy = max(end.busy - begin.busy, 0.0)      # no schedstat: the share it got, at least
        own = max(end.own - begin.own, 0.0)
        out["load_other_cores"] = round(max(busy - own, 0.0) / wall, 4)
    if end.steal is not None and begin.steal is not None:
        out["load_steal_cores"] = round(max(end.steal - begin.steal, 0.0) / wall, 4)
    if end.throttle is not None and begin.throttle is not None:
        out["load_throttle_events"] = max(end.throttle - begin.throttle, 0)
    try:
        out["load_avg1"] = round(os.getloadavg()[0], 3)
    except OSError:
        pass
    out["load_cpu_mhz"] = _cpu_mhz()
    return out


class Meter:
    """``start``/``finish`` around each case of a run, remembering the last readings: a case
    shorter than MIN_WALL (a 0.1 s tcp.rr repeat) is measured from the newest earlier reading
    at least MIN_WALL before its end, so its load is the host's over the case and just before
    it, never a few ticks either way and never unrecorded."""

    def __init__(self) -> None:
        self._marks: deque[_Snapshot] = deque(maxlen=256)
        self._marks.append(start())

    def start(self) -> _Snapshot:
        snap = start()
        self._marks.append(snap)
        return snap

    def finish(self, begin: _Snapshot) -> dict[str, Any]:
        now = time.monotonic()
        if now - begin.at < MIN_WALL:
            older = [m for m in self._marks if now - m.at >= MIN_WALL]
            if older:
                begin = older[-1]
        out = finish(begin)
        self._marks.append(start())
        return out


def busy(row: Any) -> float:
    """A row's cores busy outside netbench plus stolen ones (0 where unrecorded)."""
    total = 0.0
    for key in ("load_other_cores", "load_steal_cores"):
        value = row.get(key) if hasattr(row, "get") else None
        if value is not None and value == value:        # not NaN
            total += float(value)
    return total
