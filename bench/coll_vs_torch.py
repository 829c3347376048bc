#!/usr/bin/env python3
"""netbench's coll.all_reduce against a bare torch.distributed loop, side by side, one run.

    python bench/coll_vs_torch.py [--rounds 5] [--world 2] [--backend gloo]

The bare loop is the least code that times all_reduce the nccl-tests way (warm-up, barrier,
N back-to-back ops, synchronise); netbench's row must stay within 5% of it (time per op, median
over alternating rounds). The machine is shared and noisy: read the ratios, not the absolutes.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SIZES = [1 << 10, 64 << 10, 1 << 20, 16 << 20]


def bare_worker() -> None:
    """One rank of the reference loop; rank 0 prints {size: us per op}."""
    import torch
    import torch.distributed as dist

    backend = os.environ["BARE_BACKEND"]
    dist.init_process_group(backend)
    rank = dist.get_rank()
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    sync = torch.cuda.synchronize if backend == "nccl" else (lambda: None)
    iters, warmup = int(os.environ["BARE_ITERS"]), int(os.environ["BARE_WARMUP"])
    out = {}
    for size in SIZES:
        x = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(warmup):
            dist.all_reduce(x)
        sync()
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        sync()
        t = (time.perf_counter() - t0) / iters * 1e6
        times = [None] * dist.get_world_size()
        dist.all_gather_object(times, t)
        out[size] = sum(times) / len(times)
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()


def bare(world: int, backend: str, iters: int, warmup: int) -> dict[int, float]:
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000),
               WORLD_SIZE=str(world), BARE_BACKEND=backend, BARE_ITERS=str(iters),
               BARE_WARMUP=str(warmup))
    procs = [subprocess.Popen([sys.executable, __file__, "--bare-worker"],
                              env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    return {int(k): v for k, v in json.loads(outs[0]).items()}


def netbench(world: int, backend: str, iters: int, warmup: int) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as results:
        proc = subprocess.run([sys.executable, "-m", "netbench", "run", "coll.all_reduce",
                               "-p", "msg_size=" + ",".join(map(str, SIZES)),
                               "-p", f"world_size={world}", "-p", f"backend={backend}",
                               "-p", f"iterations={iters}", "-p", f"warmup={warmup}",
                               "--json", "--results", results],
                              capture_output=True, text=True, timeout=600, check=True)
    return {r["msg_size"]: r["value"] for r in json.loads(proc.stdout)
            if r["metric"] == "time_us"}


def main() -> int:
    if "--bare-worker" in sys.argv:
        bare_worker()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args()
    ratios: dict[int, list[float]] = {s: [] for s in SIZES}
    print(f"coll.all_reduce vs bare torch.distributed loop: {args.world} ranks, {args.backend}, "
          f"{args.iters} iters, float32 sum; time per op in us")
    for i in range(args.rounds):
        nb = netbench(args.world, args.backend, args.iters, args.warmup)
        ref = bare(args.world, args.backend, args.iters, args.warmup)
        cells = []
        for size in SIZES:
            ratios[size].append(nb[size] / ref[size])
            cells.append(f"{size >> 10:>6} KiB {nb[size]:9.1f} / {ref[size]:9.1f}")
        print(f"  round {i + 1}: " + " | ".join(cells))
    print("median ratio netbench / bare loop (target <= 1.05)")
    worst = 0.0
    for size in SIZES:
        ratio = statistics.median(ratios[size])
        worst = max(worst, ratio)
        print(f"  {size >> 10:>6} KiB: {ratio:.3f}")
    print("PASS" if worst <= 1.05 else "MISS")
    return 0 if worst <= 1.05 else 1


if __name__ == "__main__":
    sys.exit(main())
