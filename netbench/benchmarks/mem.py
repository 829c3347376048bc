"""``mem.copy``: host memory-copy bandwidth, the physical bound for loopback TCP.

A bound must be the memory's rate, not the cache's: buffers that fit in the last-level cache
copy about twice as fast (here 16 MiB at 21 GB/s, 256 MiB at 11 GB/s, beside a 32 MiB L3),
so by default each buffer is at least ``BEYOND_CACHE`` times the last-level cache that sysfs
reports (256 MiB beside 32 MiB), and the row names the size it measured and the cache it is
beyond; a row of a size within that reach says it read the cache. Small buffers on 4 KiB
pages read about half of what the same host copies with huge pages (page walks and
placement, not Python), so the buffers are anonymous mappings that ask for transparent huge
pages (madvise), first touched by the copying thread, and the row says how much of them the
kernel backed with huge pages. A slice assignment between two memoryviews is one memcpy in
C, so Python adds a fixed cost per iteration that vanishes at these sizes. Bandwidth counts
each byte once (bytes copied / time), the nvbandwidth convention, in decimal GB/s.
"""

from __future__ import annotations

import mmap
import time

from netbench.api import (
    BEYOND_CACHE,
    Benchmark,
    Case,
    Context,
    Measurement,
    Metric,
    NetbenchError,
    Param,
    format_size,
    host_memory_available,
    last_level_cache,
)

MIN_BOUND_SIZE = 64 << 20      # the default's smallest buffer, whatever the cache
UNKNOWN_CACHE_SIZE = 1 << 30   # the default's buffer where sysfs names no cache
FILL_CHUNK = 1 << 20


def bound_size(cache: tuple[int, int] | None) -> int:
    """The default's buffer size: a power of two at least BEYOND_CACHE x the last-level cache."""
    if cache is None:
        return UNKNOWN_CACHE_SIZE
    size = MIN_BOUND_SIZE
    while size < BEYOND_CACHE * cache[0]:
        size *= 2
    return size


def cache_note(size: int, cache: tuple[int, int] | None) -> str:
    """Where ``size`` buffers stand against the last-level cache, for the row."""
    if cache is None:
        return "last-level cache size unknown (sysfs names none)"
    llc, level = cache
    if size >= BEYOND_CACHE * llc:
        return f"{format_size(size)} buffers, {size / llc:.0f}x the {format_size(llc)} L{level}: " \
            "memory, not cache"
    return (f"{format_size(size)} buffers are within {BEYOND_CACHE}x the {format_size(llc)} "
            f"L{level}: this reads the cache, not a memory bound")


def _anon_huge_kib() -> int | None:
    """AnonHugePages of this process (kB), None where the kernel does not say."""
    try:
        with open("/proc/self/smaps_rollup") as f:
            for line in f:
                if line.startswith("AnonHugePages:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return None


class _Buffer:
    """An anonymous mapping, huge pages requested, faulted in by the caller's thread."""

    def __init__(self, size: int, huge: bool, fill: int) -> None:
        try:
            self.map = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except (OSError, MemoryError, OverflowError) as exc:
            raise NetbenchError(f"mem.copy: cannot map {size} bytes: {exc}") from None
        self.advised = False
        if huge and hasattr(mmap, "MADV_HUGEPAGE"):
            try:
                self.map.madvise(mmap.MADV_HUGEPAGE)
                self.advised = True
            except OSError:              # THP disabled or unsupported: plain pages
                pass
        self.view = memoryview(self.map)
        chunk = bytes([fill]) * min(FILL_CHUNK, size)
        for offset in range(0, size, len(chunk)):
            n = min(len(chunk), size - offset)
            self.view[offset:offset + n] = chunk[:n]

    def close(self) -> None:
        self.view.release()
        self.map.close()


class MemCopy(Benchmark):
    name = "mem.copy"
    transport = "memory"
    size_means = "bytes per copy"
    description = "host memcpy bandwidth (the bound on loopback TCP and pageable copies)"
    metrics = (
        Metric("bw", "GB/s", "higher", "bytes copied / total time"),
        Metric("bw_peak", "GB/s", "higher", "fastest single iteration", "bw", "max"),
    )
    params = (
        Param("msg_size", "size", 0, f"bytes per copy; 0 = the host's memory bound: buffers "
              f"{BEYOND_CACHE}x the last-level cache or more (the row names the size)",
              minimum=0, maximum=16 << 30, sweep=True),
        Param("iterations", "int", 20, "timed copies (per size)", minimum=1,
              maximum=1_000_000),
        Param("warmup", "int", 2, "untimed copies first", minimum=0, maximum=1_000_000),
        Param("hugepages", "bool", True, "ask for transparent huge pages (madvise)"),
    )

    def describe(self, case: Case) -> str:
        """msg_size=0 named by the size it will copy, in progress lines and --dry-run."""
        text = super().describe(case)
        if case.params["msg_size"]:
            return text
        size = format_size(bound_size(last_level_cache()))
        return text.replace("msg_size=0", f"msg_size=0 (the bound: {size} buffers)", 1)

    def run(self, case: Case, ctx: Context) -> Measurement:
        cache = last_level_cache()
        size = case.params["msg_size"] or bound_size(cache)
        free = host_memory_available()
        if free is not None and 2 * size > free:
            raise NetbenchError(f"mem.copy: 2 x {format_size(size)} buffers are more than this "
                                f"host has available ({free} bytes)"
                                + ("" if case.params["msg_size"] else
                                   "; give a smaller msg_size (it will read as the cache's "
                                   "rate if it fits there)"))
        bw, peak, rates, huge = self._one_size(size, case, ctx)
        return Measurement({"bw": bw, "bw_peak": peak}, {"bw": rates}, device="host",
                           note=f"{cache_note(size, cache)}; {huge}",
                           resolved={} if case.params["msg_size"] else {"msg_size": size})

    def _one_size(self, size: int, case: Case,
                  ctx: Context) -> tuple[float, float, list[float], str]:
        huge = case.params["hugepages"]
        before = _anon_huge_kib()
        src = _Buffer(size, huge, 0x5A)
        try:
            dst = _Buffer(size, huge, 0)
        except NetbenchError:
            src.close()
            raise
        try:
            after = _anon_huge_kib()
            if before is None or after is None:
                granted = "huge pages: unknown"
            else:
                share = min(1.0, (after - before) * 1024 / (2 * size))
                granted = (f"huge pages back {share:.0%} of the buffers"
                           if src.advised else "4 KiB pages (huge pages not requested)")
            for _ in range(case.params["warmup"]):
                dst.view[:] = src.view
            clock = time.perf_counter_ns
            per_iter = []
            iterations = case.params["iterations"]
            for i in range(iterations):
                if ctx.cancelled.is_set():
                    break
                t0 = clock()
                dst.view[:] = src.view
                per_iter.append(clock() - t0)
                ctx.progress((i + 1) / iterations)
        finally:
            dst.close()
            src.close()
        if not per_iter:
            raise NetbenchError("mem.copy: cancelled before the first copy")
        rates = [size / ns for ns in per_iter]          # bytes/ns == GB/s
        return size * len(per_iter) / sum(per_iter), max(rates), rates, granted
