"""The host's own state while a case ran: how busy it was outside netbench.

A verdict on a shared machine has to know whether a side ran beside other work: a CI runner's
neighbour, a hypervisor stealing the vCPU, a CPU held at a low clock. Read around every case
(outside the timed section, a few /proc and /sys reads, well under a millisecond):

- ``load_other_cores``: CPU time used by everything but netbench's own processes (this process,
  its descendants: the loopback server, spawned ranks) over the case, in cores (1.0 = one core
  busy the whole time) — what /proc/stat counts busy, less what netbench's process tree used;
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
from dataclasses import dataclass
from glob import glob
from typing import Any

COLUMNS = ("load_other_cores", "load_own_cores", "load_steal_cores", "load_avg1",
           "load_cpu_mhz", "load_throttle_events")

# A side whose case had this many cores busy outside netbench ran beside other work: its
# slowdowns are not evidence against the code (see netbench.analysis.verdict).
BUSY_CORES = 0.25

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class _Snapshot:
    at: float
    busy: float | None          # seconds, all CPUs, from /proc/stat
    steal: float | None
    own: float | None           # seconds, netbench's process tree
    throttle: int | None


def _proc_stat() -> tuple[float | None, float | None]:
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
    except OSError:
        return None, None
    if not fields or fields[0] != "cpu" or len(fields) < 8:
        return None, None
    values = [int(x) for x in fields[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is already
    # inside user (the kernel adds it there), so it is not added again.
    busy = values[0] + values[1] + values[2] + values[5] + values[6]
    steal = values[7] if len(values) > 7 else 0
    return busy / _TICK, steal / _TICK


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
    return _Snapshot(time.monotonic(), busy, steal, _own_seconds(), _throttle_count())


def finish(begin: _Snapshot) -> dict[str, Any]:
    """The case's load columns, from ``begin`` (``start()``) to now."""
    end = start()
    wall = end.at - begin.at
    out: dict[str, Any] = dict.fromkeys(COLUMNS)
    if wall <= 0:
        return out
    if end.own is not None and begin.own is not None:
        out["load_own_cores"] = round(max(end.own - begin.own, 0.0) / wall, 4)
    if end.busy is not None and begin.busy is not None:
        busy = max(end.busy - begin.busy, 0.0)
        own = max(end.own - begin.own, 0.0) if end.own is not None and begin.own is not None \
            else 0.0
        # Tick-granular counters: a short case can read a few ticks either way.
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


def busy(row: Any) -> float:
    """A row's cores busy outside netbench plus stolen ones (0 where unrecorded)."""
    total = 0.0
    for key in ("load_other_cores", "load_steal_cores"):
        value = row.get(key) if hasattr(row, "get") else None
        if value is not None and value == value:        # not NaN
            total += float(value)
    return total
