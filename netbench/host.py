"""Host probes a benchmark may call while it runs (through ``netbench.api``, which re-exports
them): the PCIe path it loads, the memory and last-level cache it sizes buffers by, and the
CPU time it spent. Apart from the plugin contract in api.py, which declares; these read."""

from __future__ import annotations

import time
from pathlib import Path

from netbench.env import linkpath
from netbench.units import parse_size


def pcie_path(sysfs_root: str, address: str) -> linkpath.LinkPath | None:
    """The PCIe path of ``address`` read now (hops, their bound and state, downgrades): for a
    benchmark to see how the links run while it loads them."""
    return linkpath.walk(Path(sysfs_root), address)


def host_memory_available() -> int | None:
    """Bytes of host memory available now (MemAvailable in /proc/meminfo), None if unknown."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


BEYOND_CACHE = 8    # a memory bound's buffers: each at least this many times the last-level cache


def last_level_cache(sysfs_root: str | Path = "/sys") -> tuple[int, int] | None:
    """(bytes, level) of cpu0's last-level data cache from sysfs (cache/index*/level, size,
    type), None where the kernel does not say. A copy of buffers that fit there measures the
    cache, not memory."""
    best: tuple[int, int] | None = None
    base = Path(sysfs_root) / "devices" / "system" / "cpu" / "cpu0" / "cache"
    try:
        indexes = sorted(base.glob("index[0-9]*"))
    except OSError:
        return None
    for index in indexes:
        try:
            if (index / "type").read_text().strip() == "Instruction":
                continue
            level = int((index / "level").read_text().strip())
            size = parse_size((index / "size").read_text().strip())
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if size > 0 and (best is None or (level, size) > (best[1], best[0])):
            best = (size, level)
    return best


def _host_cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of the whole host from /proc/stat; (0, 0) where unreadable."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    return sum(fields) - idle, sum(fields)


class CpuMeter:
    """CPU time of this process (all threads) and of the whole host over an interval.

    ``process_pct`` is in percent of one core (100 = one core fully busy), as iperf3 reports.
    The process's time is CLOCK_PROCESS_CPUTIME_ID (nanoseconds), not times()'s 10 ms ticks: a
    stream using 1.6% of a core for 2 s is three ticks, and tick-quantized values passed for
    a tight spread that compare called a regression. Standard library only, so it costs
    nothing where Python is slow (the soft-RoCE VM).
    """

    def __init__(self) -> None:
        self.start()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._p0 = time.process_time()
        self._h0 = _host_cpu_times()

    def stop(self) -> dict[str, float | None]:
        wall = max(time.monotonic() - self._t0, 1e-9)
        h1 = _host_cpu_times()
        proc_s = time.process_time() - self._p0
        total = h1[1] - self._h0[1]
        return {
            "wall_s": wall,
            "process_cpu_s": proc_s,
            "process_pct": 100.0 * proc_s / wall,
            "host_pct": 100.0 * (h1[0] - self._h0[0]) / total if total > 0 else None,
        }
