"""``mem.copy``: host memory-copy bandwidth, the physical bound for loopback TCP.

A bound must be the best the host does. Small buffers on 4 KiB pages read about half of what
the same host copies with huge pages or at larger sizes (page walks and placement, not
Python), so the buffers are anonymous mappings that ask for transparent huge pages (madvise),
first touched by the copying thread, and by default the bound is the best over a range of
sizes; the row names the size that won and how much of the buffers the kernel backed with
huge pages. A slice assignment between two memoryviews is one memcpy in C, so Python adds a
fixed cost per iteration that vanishes at these sizes. Bandwidth counts each byte once (bytes
copied / time), the nvbandwidth convention, in decimal GB/s.
"""

from __future__ import annotations

import mmap
import time

from netbench.api import (
    Benchmark,
    Case,
    Context,
    Measurement,
    Metric,
    NetbenchError,
    Param,
    format_size,
    host_memory_available,
)

AUTO_SIZES = (16 << 20, 64 << 20, 256 << 20, 1 << 30)
FILL_CHUNK = 1 << 20


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
    description = "host memcpy bandwidth (the bound on loopback TCP and pageable copies)"
    metrics = (
        Metric("bw", "GB/s", "higher", "bytes copied / total time"),
        Metric("bw_peak", "GB/s", "higher", "fastest single iteration", "bw", "max"),
    )
    params = (
        Param("msg_size", "size", 0, "bytes per copy; 0 = the best over 16 MiB..1 GiB "
              "(the host's bound; the row names the size)", minimum=0, maximum=16 << 30,
              sweep=True),
        Param("iterations", "int", 20, "timed copies (per size)", minimum=1,
              maximum=1_000_000),
        Param("warmup", "int", 2, "untimed copies first", minimum=0, maximum=1_000_000),
        Param("hugepages", "bool", True, "ask for transparent huge pages (madvise)"),
    )

    def run(self, case: Case, ctx: Context) -> Measurement:
        size = case.params["msg_size"]
        free = host_memory_available()
        if size:
            sizes = [size]
            if free is not None and 2 * size > free:
                raise NetbenchError(f"mem.copy: 2 x {size} bytes is more than this host has "
                                    f"available ({free} bytes)")
        else:
            budget = free // 4 if free is not None else AUTO_SIZES[1] * 2
            sizes = [s for s in AUTO_SIZES if 2 * s <= budget] or [AUTO_SIZES[0]]
        best: tuple[float, float, list[float], int, str] | None = None
        for index, n in enumerate(sizes):
            bw, peak, rates, huge = self._one_size(n, case, ctx, index, len(sizes))
            if best is None or bw > best[0]:
                best = (bw, peak, rates, n, huge)
            if ctx.cancelled.is_set():
                break
        assert best is not None
        bw, peak, rates, n, huge = best
        note = (f"best of {', '.join(format_size(s) for s in sizes)}: {format_size(n)}; "
                if len(sizes) > 1 else "") + huge
        return Measurement({"bw": bw, "bw_peak": peak}, {"bw": rates}, device="host",
                           note=note, resolved={"bound_size": n} if not size else {})

    def _one_size(self, size: int, case: Case, ctx: Context, index: int,
                  count: int) -> tuple[float, float, list[float], str]:
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
                ctx.progress((index + (i + 1) / iterations) / count)
        finally:
            dst.close()
            src.close()
        if not per_iter:
            raise NetbenchError("mem.copy: cancelled before the first copy")
        rates = [size / ns for ns in per_iter]          # bytes/ns == GB/s
        return size * len(per_iter) / sum(per_iter), max(rates), rates, granted
