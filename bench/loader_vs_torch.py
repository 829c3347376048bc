#!/usr/bin/env python3
"""gpu.loader_feed against a bare torch DataLoader loop, side by side, alternating rounds.

    python bench/loader_vs_torch.py [--device cpu|cuda] [--workers 2] [--rounds 5]

The bare loop is what a user would write: a dataset returning fresh sample tensors, a
DataLoader, `.to(device, non_blocking=True)` per batch, one synchronize at the end, wall time
around it. Prints samples/s of both and the ratio per round and as a median (target: within
5%, i.e. netbench's harness costs the feed nothing measurable). device=cpu measures the loader
pipeline alone, so it runs on any machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

SHAPE = (3, 224, 224)


class Samples:
    """Fresh uint8 samples, copied from a small pool (the same work netbench's dataset does)."""

    def __init__(self, length: int) -> None:
        self.length, self.pool = length, None

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int):
        import torch

        if self.pool is None:
            self.pool = [torch.randint(0, 255, SHAPE, dtype=torch.uint8) for _ in range(16)]
        return self.pool[index % 16].clone()


def bare_loop(device: str, workers: int, batch: int, warmup: int, batches: int) -> float:
    import torch

    dev = torch.device(device)
    loader = torch.utils.data.DataLoader(Samples((warmup + batches) * batch), batch_size=batch,
                                         num_workers=workers, pin_memory=dev.type == "cuda")
    it = iter(loader)

    def feed(n: int) -> None:
        for _ in range(n):
            x = next(it)
            if dev.type == "cuda":
                x.to(dev, non_blocking=True)
        if dev.type == "cuda":
            torch.cuda.synchronize()

    feed(warmup)
    t0 = time.perf_counter()
    feed(batches)
    return batches * batch / (time.perf_counter() - t0)


def bare_process(device: str, workers: int, batch: int, warmup: int, batches: int) -> float:
    """The bare loop in a fresh process, as netbench runs, so neither inherits the other's
    warm state."""
    proc = subprocess.run([sys.executable, __file__, "--bare", "--device", device, "--workers",
                           str(workers), "--batch", str(batch), "--warmup", str(warmup),
                           "--batches", str(batches)], capture_output=True, text=True,
                          timeout=600)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-1500:])
    return float(proc.stdout.split()[-1])


def netbench_loop(device: str, workers: int, batch: int, warmup: int, batches: int) -> float:
    with tempfile.TemporaryDirectory() as results:
        proc = subprocess.run(
            [sys.executable, "-m", "netbench", "run", "gpu.loader_feed", "-p", f"device={device}",
             "-p", f"workers={workers}", "-p", f"batch_size={batch}", "-p", f"warmup={warmup}",
             "-p", f"batches={batches}", "--json", "--results", results],
            capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr[-1500:])
    rows = json.loads(proc.stdout)
    return next(r["value"] for r in rows if r["metric"] == "samples_per_s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--batches", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    shape = (args.device, args.workers, args.batch, args.warmup, args.batches)
    if args.bare:
        print(bare_loop(*shape))
        return 0
    ratios = []
    print(f"gpu.loader_feed vs a bare DataLoader loop: device={args.device} workers="
          f"{args.workers} batch={args.batch} x {'x'.join(map(str, SHAPE))} uint8")
    for i in range(args.rounds):
        # Alternate which goes first: this machine is shared and noisy.
        if i % 2:
            ours, bare = netbench_loop(*shape), bare_process(*shape)
        else:
            bare, ours = bare_process(*shape), netbench_loop(*shape)
        ratios.append(ours / bare)
        print(f"  round {i + 1}: netbench {ours:9.0f} samples/s  bare {bare:9.0f} samples/s  "
              f"ratio {ours / bare:.3f}")
    print(f"median ratio {statistics.median(ratios):.3f} (target >= 0.95)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
