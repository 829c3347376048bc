#!/usr/bin/env python3
"""netbench's coll.all_reduce against a bare torch.distributed loop, side by side, one run.

    python bench/coll_vs_torch.py [--rounds 8] [--world 2] [--backend gloo]

The bare loop is the least code that times all_reduce the nccl-tests way (warm-up, barrier,
N back-to-back ops, synchronise), in ranks it spawns itself. netbench runs the same sizes with
the same iteration counts as one suite. Rounds run in ABBA order (netbench first in even
rounds, the bare loop first in odd ones) so drift on this shared machine hits both; each size
gets enough iterations to run for a good fraction of a second. Printed: time per op of both,
the median ratio netbench / bare over rounds with its 90% bootstrap interval and the spread.
Target: <= 1.02 at every size (netbench's harness costs the collective nothing measurable).
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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from netbench.stats import median_interval  # noqa: E402

# size -> iterations: ~0.1-0.5 s of timed work per size on a 2-core host with gloo.
SIZES = {1 << 10: 2000, 64 << 10: 1000, 1 << 20: 200, 16 << 20: 30}
# --same-ranks: many short pairs (~0.2 s a measurement) instead of few long ones.
SAME_RANK_SIZES = {1 << 10: 150, 64 << 10: 130, 1 << 20: 100, 16 << 20: 20}
WARMUP = 10
TARGET = 1.02


def _init_rank() -> tuple:
    """This rank, bound as netbench's cpu_bind=rank would (before torch starts a thread)."""
    import torch
    import torch.distributed as dist

    backend = os.environ["BARE_BACKEND"]
    if os.environ.get("BARE_BIND") == "rank":
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[int(os.environ["RANK"]) % len(cpus)]})
    dist.init_process_group(backend)
    rank = dist.get_rank()
    device = torch.device("cuda", rank) if backend == "nccl" else torch.device("cpu")
    return torch, dist, rank, dist.get_world_size(), device


def _average(dist: object, world: int, mine: float) -> float:
    times = [None] * world
    dist.all_gather_object(times, mine)
    return sum(times) / world


def bare_loop(torch: object, dist: object, device: object, size: int, iters: int) -> float:
    """The reference: us per all_reduce, as the least code times it (this rank's figure)."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    x = torch.ones(size // 4, dtype=torch.float32, device=device)
    for _ in range(WARMUP):
        dist.all_reduce(x)
    sync()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    sync()
    return (time.perf_counter() - t0) / iters * 1e6


def bare_worker() -> None:
    """One rank of the reference loop; rank 0 prints {size: us per op}."""
    torch, dist, rank, world, device = _init_rank()
    out = {size: _average(dist, world, bare_loop(torch, dist, device, int(size), iters))
           for size, iters in json.loads(os.environ["BARE_SIZES"]).items()}
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()


def same_rank_worker() -> None:
    """Both timed sections in the same rank processes, alternating per size (ABBA): the
    process, its placement and its memory are the same for both, so what is left of the ratio
    is the timed section itself. Rank 0 prints {size: [[netbench_us, bare_us], ...]}."""
    from netbench.benchmarks import _ranks

    torch, dist, rank, world, device = _init_rank()
    out: dict[int, list[list[float]]] = {}
    for size, iters in SAME_RANK_SIZES.items():
        spec = {"op": "all_reduce", "bytes": size, "dtype": "float32", "iters": iters,
                "warmup": WARMUP, "reduce_op": "sum", "root": 0, "in_place": False}
        pairs = []
        for i in range(int(os.environ["BARE_ROUNDS"])):
            first_nb = i % 2 == 0
            got = {}
            for who in (("nb", "bare") if first_nb else ("bare", "nb")):
                if who == "nb":
                    res = _ranks.run_case(torch, dist, spec, rank, world, device)
                    assert res["wrong"] == 0, res
                    mine = res["time_us"]
                else:
                    mine = bare_loop(torch, dist, device, size, iters)
                got[who] = _average(dist, world, mine)
            pairs.append([got["nb"], got["bare"]])
        out[size] = pairs
    if rank == 0:
        print(json.dumps(out))
    dist.destroy_process_group()


def _spawn(flag: str, world: int, backend: str, bind: str, **extra: str) -> str:
    """``world`` ranks of this script in ``flag`` mode; rank 0's output."""
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29500 + os.getpid() % 1000),
               WORLD_SIZE=str(world), BARE_BACKEND=backend, BARE_BIND=bind, **extra)
    procs = [subprocess.Popen([sys.executable, __file__, flag], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in range(world)]
    return [p.communicate(timeout=3600)[0] for p in procs][0]


def same_ranks(world: int, backend: str, bind: str, rounds: int) -> dict[int, list]:
    out = _spawn("--same-rank-worker", world, backend, bind, BARE_ROUNDS=str(rounds))
    return {int(k): v for k, v in json.loads(out).items()}


def bare(world: int, backend: str, bind: str) -> dict[int, float]:
    out = _spawn("--bare-worker", world, backend, bind, BARE_SIZES=json.dumps(SIZES))
    return {int(k): v for k, v in json.loads(out).items()}


def netbench(world: int, backend: str, bind: str) -> dict[int, float]:
    with tempfile.TemporaryDirectory() as tmp:
        suite = Path(tmp) / "coll.toml"
        suite.write_text('[suite]\nname = "coll-vs-torch"\n' + "".join(
            f'\n[[case]]\nbenchmark = "coll.all_reduce"\nmsg_size = {size}\n'
            f'iterations = {iters}\nwarmup = {WARMUP}\nworld_size = {world}\n'
            f'backend = "{backend}"\ndtype = "float32"\ncpu_bind = "{bind}"\n'
            for size, iters in SIZES.items()))
        proc = subprocess.run([sys.executable, "-m", "netbench", "run", str(suite), "--json",
                               "--results", str(Path(tmp) / "r")],
                              capture_output=True, text=True, timeout=600, check=True)
    return {r["msg_size"]: r["value"] for r in json.loads(proc.stdout)
            if r["metric"] == "time_us"}


def main() -> int:
    if "--bare-worker" in sys.argv:
        bare_worker()
        return 0
    if "--same-rank-worker" in sys.argv:
        same_rank_worker()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--backend", default="gloo")
    ap.add_argument("--bind", default="rank", choices=("rank", "none"),
                    help="both sides: rank i on CPU i (netbench's cpu_bind), or unbound")
    ap.add_argument("--same-ranks", type=int, default=0, metavar="N",
                    help="instead: N ABBA pairs of netbench's timed section and the bare loop "
                    "inside the same rank processes (isolates the timed section)")
    args = ap.parse_args()
    if args.same_ranks:
        pairs = same_ranks(args.world, args.backend, args.bind, args.same_ranks)
        print(f"timed section: netbench's run_case vs the bare loop in the same {args.world} "
              f"{args.backend} ranks (bound: {args.bind}), {args.same_ranks} ABBA pairs per size")
        worst = 0.0
        for size in SIZES:
            r = [nb / ref for nb, ref in pairs[size]]
            low, high = median_interval(r)
            worst = max(worst, statistics.median(r))
            print(f"  {size >> 10:>6} KiB: {statistics.median(r):.3f} [{low:.3f}-{high:.3f}] "
                  f"({min(r):.3f}-{max(r):.3f})")
        print("PASS" if worst <= TARGET else "MISS")
        return 0 if worst <= TARGET else 1
    ratios: dict[int, list[float]] = {s: [] for s in SIZES}
    print(f"coll.all_reduce vs bare torch.distributed loop: {args.world} ranks, {args.backend}, "
          f"float32 sum, iterations {SIZES}; ranks bound: {args.bind}; time per op in us; "
          "ABBA rounds")
    for i in range(args.rounds):
        if i % 2 == 0:
            nb = netbench(args.world, args.backend, args.bind)
            ref = bare(args.world, args.backend, args.bind)
        else:
            ref = bare(args.world, args.backend, args.bind)
            nb = netbench(args.world, args.backend, args.bind)
        cells = []
        for size in SIZES:
            ratios[size].append(nb[size] / ref[size])
            cells.append(f"{size >> 10:>6} KiB {nb[size]:9.1f} / {ref[size]:9.1f}")
        print(f"  round {i + 1}: " + " | ".join(cells), flush=True)
    print(f"median ratio netbench / bare loop [90% interval] (spread), target <= {TARGET}")
    worst = 0.0
    for size in SIZES:
        ratio = statistics.median(ratios[size])
        low, high = median_interval(ratios[size])
        worst = max(worst, ratio)
        print(f"  {size >> 10:>6} KiB: {ratio:.3f} [{low:.3f}-{high:.3f}] "
              f"({min(ratios[size]):.3f}-{max(ratios[size]):.3f})")
    print("PASS" if worst <= TARGET else "MISS")
    return 0 if worst <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
