"""``mem.copy``: host memory-copy bandwidth, the physical bound for loopback TCP.

A slice assignment between two memoryviews is one memcpy in C, so Python adds a fixed cost
per iteration that vanishes at the default 64 MiB. Bandwidth counts each byte once (bytes
copied / time), the nvbandwidth convention, in decimal GB/s.
"""

from __future__ import annotations

import time

from netbench.api import Benchmark, Case, Context, Measurement, Metric, NetbenchError, Param


class MemCopy(Benchmark):
    name = "mem.copy"
    transport = "memory"
    description = "host memcpy bandwidth (the bound on loopback TCP and pageable copies)"
    metrics = (
        Metric("bw", "GB/s", "higher", "bytes copied / total time"),
        Metric("bw_peak", "GB/s", "higher", "fastest single iteration"),
    )
    params = (
        Param("msg_size", "size", 64 << 20, "bytes per copy", minimum=1, maximum=16 << 30,
              sweep=True),
        Param("iterations", "int", 20, "timed copies", minimum=1, maximum=1_000_000),
        Param("warmup", "int", 2, "untimed copies first (fault the pages in)", minimum=0,
              maximum=1_000_000),
    )

    def run(self, case: Case, ctx: Context) -> Measurement:
        size = case.params["msg_size"]
        try:
            src = memoryview(bytearray(b"\x5a") * size)
            dst = memoryview(bytearray(size))
        except MemoryError:
            raise NetbenchError(f"mem.copy: cannot allocate 2 x {size} bytes") from None
        for _ in range(case.params["warmup"]):
            dst[:] = src
        clock = time.perf_counter_ns
        per_iter = []
        iterations = case.params["iterations"]
        for i in range(iterations):
            if ctx.cancelled.is_set():
                break
            t0 = clock()
            dst[:] = src
            per_iter.append(clock() - t0)
            ctx.progress((i + 1) / iterations)
        rates = [size / ns for ns in per_iter]          # bytes/ns == GB/s
        return Measurement({"bw": size * len(per_iter) / sum(per_iter), "bw_peak": max(rates)},
                           {"bw": rates}, device="host")
