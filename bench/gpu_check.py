#!/usr/bin/env python3
"""Every GPU check in one go, each figure beside its reference, for short GPU-machine slots.

    python bench/gpu_check.py            (make gpu-check)

- NCCL collectives: netbench coll.* on all local GPUs (needs >= 2) vs a bare torch.distributed
  loop (bench/coll_vs_torch.py) and, where all_reduce_perf (nccl-tests) is on PATH, vs that.
- Prints what it skipped and why (no CUDA, one GPU only, no nccl-tests).
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
    missed = False
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
