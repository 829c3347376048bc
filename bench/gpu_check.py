#!/usr/bin/env python3
"""Every GPU check in one go, each figure beside its reference, for short GPU-machine slots.

    python bench/gpu_check.py            (make gpu-check)

- Feed: netbench gpu.h2d / gpu.d2h (pinned, 64 MiB and 256 MiB) vs nvbandwidth's
  host_to_device_memcpy_ce / device_to_host_memcpy_ce where nvbandwidth is on PATH, otherwise
  vs a minimal torch loop of queued copies timed with CUDA events; target ratio >= 0.95.
  Then gpu.d2d, gpu.bidir, pageable H2D and gpu.loader_feed, each with the link's share.
- NCCL collectives: netbench coll.* on all local GPUs (needs >= 2) vs a bare torch.distributed
  loop (bench/coll_vs_torch.py) and, where all_reduce_perf (nccl-tests) is on PATH, vs that.
- Prints what it skipped and why (no CUDA, one GPU only, no nccl-tests, no nvbandwidth).
Runs in about 3-4 minutes on one GPU.
Exit 1 when a check that ran missed its target; 0 otherwise.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tempfile

SIZES = ["1M", "16M", "256M"]
FEED_SIZES = [64 << 20, 256 << 20]


def netbench_rows(args: list[str]) -> list[dict]:
    with tempfile.TemporaryDirectory() as results:
        proc = subprocess.run([sys.executable, "-m", "netbench", "run", *args, "--json",
                               "--results", results], capture_output=True, text=True,
                              timeout=900)
    if proc.returncode != 0:
        print(proc.stderr[-1500:])
        raise SystemExit(1)
    return json.loads(proc.stdout)


def nccl_tests_busbw(gpus: int) -> dict[int, float]:
    """all_reduce_perf's out-of-place busbw per size (GB/s), where nccl-tests is installed."""
    exe = shutil.which("all_reduce_perf")
    if not exe:
        return {}
    out = subprocess.run([exe, "-b", "1M", "-e", "256M", "-f", "16", "-g", str(gpus)],
                         capture_output=True, text=True, timeout=600).stdout
    figures = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) > 8 and re.fullmatch(r"\d+", cols[0]):
            # columns: size count type redop root time algbw busbw ...
            figures[int(cols[0])] = float(cols[7])
    return figures


def torch_copy_gbps(torch, to_device: bool, size: int, iterations: int = 20) -> float:
    """The reference: back-to-back pinned copies between two CUDA events, nothing else."""
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    src, dst = (host, dev) if to_device else (dev, host)
    for _ in range(3):
        dst.copy_(src, non_blocking=True)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iterations):
        dst.copy_(src, non_blocking=True)
    end.record()
    end.synchronize()
    return size * iterations / (start.elapsed_time(end) * 1e6)


def nvbandwidth_gbps(size: int) -> dict[str, float]:
    """nvbandwidth's SUM line per copy-engine test, where nvbandwidth is on PATH."""
    exe = shutil.which("nvbandwidth")
    if not exe:
        return {}
    out = subprocess.run([exe, "-t", "host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
                          "-b", str(size >> 20)], capture_output=True, text=True,
                         timeout=300).stdout
    found = {}
    for line in out.splitlines():
        cols = line.split()
        if len(cols) == 3 and cols[0] == "SUM":
            found["h2d" if cols[1].startswith("host_to_device") else "d2h"] = float(cols[2])
    return found


def check_feed(torch) -> bool:
    """H2D and D2H against the reference; the rest of the family printed with the link."""
    missed = False
    print("gpu.h2d / gpu.d2h pinned (GB/s): netbench vs reference")
    for size in FEED_SIZES:
        reference = nvbandwidth_gbps(size)
        source = "nvbandwidth" if reference else "torch loop"
        for op in ("h2d", "d2h"):
            rows = netbench_rows([f"gpu.{op}", "-p", f"msg_size={size}", "-p", "iterations=40"])
            values = {r["metric"]: r["value"] for r in rows if r["status"] == "ok"}
            if "bw" not in values:
                print(f"  gpu.{op} failed: {rows[0]['reason']}")
                missed = True
                continue
            ref = reference.get(op) or torch_copy_gbps(torch, op == "h2d", size, 40)
            ratio = values["bw"] / ref
            missed |= ratio < 0.95
            eff = values.get("link_efficiency")
            print(f"  {op} {size >> 20:>4} MiB  {values['bw']:7.2f}  {source} {ref:7.2f}  "
                  f"ratio {ratio:.3f}  link efficiency "
                  f"{f'{eff:.2f}' if eff is not None else 'n/a (' + rows[0]['reason'] + ')'}")
    for args in (["gpu.h2d", "-p", "host_mem=pageable"], ["gpu.d2d"], ["gpu.bidir"],
                 ["gpu.loader_feed"], ["gpu.loader_feed", "-p", "device=cpu"]):
        rows = netbench_rows(args + ["-p", "gpu=0"] if args[0] != "gpu.loader_feed" else args)
        shown = ", ".join(f"{r['metric']} {r['value']:.3g} {r['unit']}" for r in rows
                          if r["status"] == "ok")
        print(f"  {' '.join(args):<34} {shown or rows[0]['status'] + ': ' + rows[0]['reason']}")
        missed |= any(r["status"] == "failed" for r in rows)
    return missed


def main() -> int:
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device; nothing to check here")
        return 0
    gpus = torch.cuda.device_count()
    print(f"{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, "
          f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}")
    missed = check_feed(torch)
    if gpus < 2:
        print("skipped: NCCL collectives need >= 2 GPUs (one rank per GPU); this host has 1")
    else:
        rows = netbench_rows(["coll.all_reduce", "-p", f"world_size={gpus}", "-p",
                              "backend=nccl", "-p", "msg_size=" + ",".join(SIZES),
                              "-p", "iterations=50"])
        ours = {r["msg_size"]: r["value"] for r in rows if r["metric"] == "busbw"}
        ref = nccl_tests_busbw(gpus)
        print("coll.all_reduce busbw (GB/s): netbench vs nccl-tests all_reduce_perf")
        for size, value in sorted(ours.items()):
            other = ref.get(size)
            ratio = f"{value / other:.3f}" if other else "n/a (nccl-tests not found)"
            print(f"  {size >> 20:>5} MiB  {value:8.2f}  {other or float('nan'):8.2f}  {ratio}")
            if other and value / other < 0.95:
                missed = True
        for op in ("all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all",
                   "send_recv"):
            rows = netbench_rows([f"coll.{op}", "-p", f"world_size={gpus}", "-p",
                                  "backend=nccl", "-p", "msg_size=64M", "-p", "iterations=20"])
            busbw = next(r["value"] for r in rows if r["metric"] == "busbw")
            print(f"  coll.{op:<15} 64 MiB busbw {busbw:8.2f} GB/s")
        proc = subprocess.run([sys.executable, "bench/coll_vs_torch.py", "--backend", "nccl",
                               "--world", str(gpus), "--rounds", "3"], text=True, timeout=900)
        missed |= proc.returncode != 0
    print("MISS" if missed else "PASS")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
