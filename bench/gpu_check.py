#!/usr/bin/env python3
"""Every GPU check in one go, each figure beside its reference, for short GPU-machine slots.

    python bench/gpu_check.py [--out DIR]          (make gpu-check)

Runs from a plain checkout too (PYTHONPATH=. python3 bench/gpu_check.py): netbench finds its
benchmarks in pyproject.toml when it is not installed. In order, each step bounded in time and
none stopping the others:
- Probe: the fingerprint as `netbench probe` prints it (GPUs, PCIe paths); with --out, the
  sysfs tree as `netbench probe --capture` takes it, packed into DIR/sysfs-capture.tar.gz, and
  every stored row into DIR/gpu-check.jsonl.
- Feed: gpu.h2d / gpu.d2h (pinned, 64 MiB and 256 MiB) vs nvbandwidth's
  host_to_device_memcpy_ce / device_to_host_memcpy_ce where nvbandwidth is on PATH, otherwise
  vs a minimal torch loop of queued copies timed with CUDA events; target ratio >= 0.95.
  Then pageable H2D, gpu.d2d, gpu.bidir and gpu.loader_feed (and the loader alone).
- NCCL: with >= 2 GPUs, coll.* on all of them vs a bare torch.distributed loop
  (bench/coll_vs_torch.py) and nccl-tests' all_reduce_perf where it is on PATH; with one GPU,
  the NCCL path under torchrun with one rank (results checked; busbw is 0 by definition).
- Link: the GPU's PCIe path read from sysfs at rest and again while a long H2D stream runs,
  beside nvidia-smi's own link fields (nvidia-smi --query-gpu), so the probe's reading is
  checked against the driver's; with --out, `nvidia-smi -q` and `topo -m` are kept.
- RDMA from GPU memory: rdma.write_bw mem=gpu where pyverbs and an RDMA device exist.
- Suites: suites/gpu-acceptance.toml and suites/ci.toml run and judged (`netbench accept`),
  their Parquet results packed into DIR/results.tar.gz for `netbench report` elsewhere; then
  H2D/D2H swept over 4K..1G.
Prints what it skipped and why. 140 s on one H200; --budget stops starting new
steps once that many seconds have gone, and rows are written after every step.
Exit 1 when a check that ran missed its target or failed; 0 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

SIZES = ["1M", "16M", "256M"]
FEED_SIZES = [64 << 20, 256 << 20]
ROOT = Path(__file__).resolve().parent.parent
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p), "CI": "true"}
ALL_ROWS: list[dict] = []


def netbench_rows(args: list[str], timeout: float = 120, launcher: list[str] | None = None
                  ) -> list[dict]:
    """Stored rows of one `netbench run` (also when a case failed: the rows say why)."""
    with tempfile.TemporaryDirectory() as results:
        cmd = (launcher or [sys.executable, "-m"]) + ["netbench", "run", *args, "--json",
                                                      "--results", results]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  env=ENV, cwd=ROOT)
        except subprocess.TimeoutExpired:
            print(f"  {' '.join(args)}: no answer within {timeout:g} s")
            return []
    try:
        rows = json.loads(proc.stdout)
    except ValueError:
        print(f"  {' '.join(args)}: exit {proc.returncode}: {proc.stderr.strip()[-800:]}")
        return []
    ALL_ROWS.extend(rows)
    return rows


def shown(rows: list[dict]) -> str:
    """Each case's figures, prefixed by the params that differ between the cases."""
    cases: dict[int, list[dict]] = {}
    for r in rows:
        cases.setdefault(r["case_index"], []).append(r)
    params = {i: json.loads(rs[0]["params"] or "{}") for i, rs in cases.items()}
    varying = sorted({k for p in params.values() for k, v in p.items()
                      if any(q.get(k) != v for q in params.values())})
    parts = []
    for i, case in cases.items():
        ok = ", ".join(f"{r['metric']} {r['value']:.4g} {r['unit']}" for r in case
                       if r["status"] == "ok")
        figures = ok or f"{case[0]['status']}: {case[0]['reason']}"
        label = " ".join(f"{k}={params[i].get(k)}" for k in varying)
        parts.append(f"[{label}] {figures}" if label else figures)
    return "; ".join(parts) or "no rows"


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


def check_probe(out: Path | None) -> bool:
    proc = subprocess.run([sys.executable, "-m", "netbench", "probe"], capture_output=True,
                          text=True, timeout=120, env=ENV, cwd=ROOT)
    print(proc.stdout.rstrip() or proc.stderr.strip()[-800:])
    if out is not None:
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "netbench", "probe", "--capture",
                            f"{tmp}/sysfs"], capture_output=True, text=True, timeout=300,
                           env=ENV, cwd=ROOT)
            with tarfile.open(out / "sysfs-capture.tar.gz", "w:gz") as tar:
                tar.add(f"{tmp}/sysfs", arcname="sysfs")
        print(f"  sysfs capture -> {out / 'sysfs-capture.tar.gz'}")
    return proc.returncode != 0


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
                print(f"  gpu.{op} {size >> 20} MiB: {shown(rows)}")
                missed = True
                continue
            ref = reference.get(op) or torch_copy_gbps(torch, op == "h2d", size, 40)
            ratio = values["bw"] / ref
            missed |= ratio < 0.95
            eff = values.get("link_efficiency")
            print(f"  {op} {size >> 20:>4} MiB  {values['bw']:7.2f}  {source} {ref:7.2f}  "
                  f"ratio {ratio:.3f}  link efficiency "
                  f"{f'{eff:.2f}' if eff is not None else 'n/a (' + rows[0]['reason'] + ')'}")
    for args in (["gpu.h2d", "-p", "host_mem=pageable"], ["gpu.d2h", "-p", "host_mem=pageable"],
                 ["gpu.d2d"], ["gpu.bidir"], ["gpu.loader_feed", "-p", "workers=2,4,8,14"],
                 ["gpu.loader_feed", "-p", "device=cpu"]):
        rows = netbench_rows(args)
        print(f"  {' '.join(args):<34} {shown(rows)}")
        missed |= not rows or any(r["status"] == "failed" for r in rows)
    return missed


def check_nccl(torch, gpus: int) -> bool:
    missed = False
    if gpus < 2:
        print("NCCL path with one GPU: torchrun, one rank (busbw is 0 by definition; the run "
              "checks every result)")
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1",
                    "--master_port=29551", "-m"]
        for op in ("all_reduce", "all_gather", "broadcast", "reduce_scatter"):
            rows = netbench_rows([f"coll.{op}", "-p", "backend=nccl", "-p", "msg_size=1M,64M",
                                  "-p", "iterations=20"], launcher=torchrun)
            print(f"  coll.{op:<15} {shown(rows)}")
            missed |= not rows or any(r["status"] != "ok" for r in rows)
        return missed
    rows = netbench_rows(["coll.all_reduce", "-p", f"world_size={gpus}", "-p", "backend=nccl",
                          "-p", "msg_size=" + ",".join(SIZES), "-p", "iterations=50"], 600)
    ours = {r["msg_size"]: r["value"] for r in rows if r["metric"] == "busbw"}
    ref = nccl_tests_busbw(gpus)
    print("coll.all_reduce busbw (GB/s): netbench vs nccl-tests all_reduce_perf")
    for size, value in sorted(ours.items()):
        other = ref.get(size)
        ratio = f"{value / other:.3f}" if other else "n/a (nccl-tests not found)"
        print(f"  {size >> 20:>5} MiB  {value:8.2f}  {other or float('nan'):8.2f}  {ratio}")
        missed |= bool(other and value / other < 0.95)
    for op in ("all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "send_recv"):
        rows = netbench_rows([f"coll.{op}", "-p", f"world_size={gpus}", "-p", "backend=nccl",
                              "-p", "msg_size=64M", "-p", "iterations=20"])
        print(f"  coll.{op:<15} {shown(rows)}")
        missed |= not rows or any(r["status"] == "failed" for r in rows)
    proc = subprocess.run([sys.executable, "bench/coll_vs_torch.py", "--backend", "nccl",
                           "--world", str(gpus), "--rounds", "3"], text=True, timeout=900,
                          env=ENV, cwd=ROOT)
    return missed or proc.returncode != 0


SMI_FIELDS = ("pci.bus_id", "pcie.link.gen.current", "pcie.link.gen.max",
              "pcie.link.width.current", "pcie.link.width.max")


def smi_link() -> list[dict[str, str]]:
    """nvidia-smi's view of each GPU's link (structured query, no scraping of -q)."""
    exe = shutil.which("nvidia-smi")
    if not exe:
        return []
    out = subprocess.run([exe, f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=30).stdout
    return [dict(zip(SMI_FIELDS, (c.strip() for c in line.split(","))))
            for line in out.splitlines() if line.count(",") == len(SMI_FIELDS) - 1]


def hop_states(address: str, sysfs: Path = Path("/sys")) -> list[str]:
    """The path's summary and each hop from the GPU up, read now, as `netbench probe` says it."""
    from netbench.env.linkpath import hop_line, walk
    path = walk(sysfs, address)
    if path is None:
        return [f"{address}: not under /sys/bus/pci/devices"]
    return [path.summary(), *(hop_line(hop) for hop in path.as_dict()["hops"])]


def check_link(torch, out: Path | None) -> bool:
    """The GPU's link at rest and under a long H2D stream, from sysfs and from nvidia-smi."""
    from netbench.benchmarks.gpu_feed import pci_address
    if out is not None and shutil.which("nvidia-smi"):
        with open(out / "nvidia-smi.txt", "w") as f:
            for args in (["-q"], ["topo", "-m"]):
                f.write(subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                                       timeout=60).stdout + "\n")
    address = pci_address(torch, torch.device("cuda", 0))
    print(f"cuda:0 at {address}; at rest:")
    for line in hop_states(address):
        print(f"  {line}")
    print(f"  nvidia-smi: {smi_link()}")
    size = 256 << 20
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    for _ in range(400):                     # ~2 s at Gen5 x16: long enough to read the link
        dev.copy_(host, non_blocking=True)
    time.sleep(0.3)
    busy = hop_states(address), smi_link()
    torch.cuda.synchronize()
    print("under load (H2D stream running):")
    for line in busy[0]:
        print(f"  {line}")
    print(f"  nvidia-smi: {busy[1]}")
    rows = netbench_rows(["gpu.h2d", "-p", "msg_size=256M", "-p", "iterations=100"])
    print(f"  gpu.h2d 256M x100: {shown(rows)}; note: {rows[0]['reason'] if rows else '-'}")
    return not rows or rows[0]["status"] != "ok"


def check_suites(out: Path | None) -> bool:
    """The GPU acceptance suite and the CI suite run for real on a GPU host, then judged."""
    results = Path(tempfile.mkdtemp(prefix="gpu-check-results-"))
    missed = False
    for suite in ("suites/gpu-acceptance.toml", "suites/ci.toml"):
        proc = subprocess.run([sys.executable, "-m", "netbench", "run", suite, "--results",
                               str(results), "--timeout", "60"], capture_output=True, text=True,
                              timeout=240, env=ENV, cwd=ROOT)
        print(f"$ netbench run {suite}  (exit {proc.returncode})")
        print("\n".join(proc.stdout.rstrip().splitlines()[-25:]))
        if proc.returncode:
            print(proc.stderr.strip()[-1500:])
        missed |= proc.returncode != 0
    proc = subprocess.run([sys.executable, "-m", "netbench", "accept",
                           "suites/gpu-acceptance.toml", "--results", str(results)],
                          capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)
    print("$ netbench accept suites/gpu-acceptance.toml")
    print(proc.stdout.rstrip() or proc.stderr.strip()[-800:])
    missed |= proc.returncode != 0
    if out is not None:
        with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
            tar.add(results, arcname="results")
        print(f"  results -> {out / 'results.tar.gz'}")
    return missed


def check_sweep() -> bool:
    """H2D and D2H over 4K..1G (the dashboard's curve); per size, bandwidth only."""
    from netbench.api import format_size
    missed = False
    for op in ("h2d", "d2h"):
        rows = netbench_rows([f"gpu.{op}", "-p", "msg_size=4K..1G:x4", "-p", "iterations=20"])
        curve = [f"{format_size(r['msg_size'])} {r['value']:.1f}" for r in rows
                 if r["status"] == "ok" and r["metric"] == "bw"]
        print(f"  gpu.{op} GB/s: {', '.join(curve) or shown(rows)}")
        missed |= not curve
    return missed


def check_rdma_gpu() -> bool:
    if importlib.util.find_spec("pyverbs") is None:
        print("rdma.write_bw mem=gpu: skipped: pyverbs is not importable here")
        return False
    rows = netbench_rows(["rdma.write_bw", "-p", "mem=gpu", "-p", "msg_size=64K,1M", "-p",
                          "validate=true"])
    print(f"rdma.write_bw mem=gpu: {shown(rows)}")
    return any(r["status"] == "failed" for r in rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the sysfs capture and rows here")
    parser.add_argument("--budget", type=float, default=420,
                        help="seconds after which no new step starts (default 420)")
    args = parser.parse_args()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    try:
        import torch
    except ImportError:
        print("skipped: torch is not installed")
        return 0
    if not torch.cuda.is_available():
        print("skipped: no CUDA device; nothing to check here")
        return 0
    gpus = torch.cuda.device_count()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
    print(f"{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, NCCL {nccl}")
    missed = {}
    began = time.monotonic()
    steps = (("probe", lambda: check_probe(args.out)), ("feed", lambda: check_feed(torch)),
             ("link", lambda: check_link(torch, args.out)),
             ("nccl", lambda: check_nccl(torch, gpus)), ("rdma", check_rdma_gpu),
             ("suites", lambda: check_suites(args.out)), ("sweep", check_sweep))
    for name, step in steps:
        if time.monotonic() - began > args.budget:
            print(f"[{name}: not started: the {args.budget:g} s budget is spent]")
            missed[name] = True
            continue
        start = time.monotonic()
        try:
            missed[name] = step()
        except Exception as exc:       # one broken step must not hide the others' figures
            print(f"{name}: {type(exc).__name__}: {exc}")
            missed[name] = True
        print(f"[{name}: {'MISS' if missed[name] else 'ok'} in {time.monotonic() - start:.0f} s]",
              flush=True)
        if args.out:                   # after every step: a run cut short keeps what it had
            with open(args.out / "gpu-check.jsonl", "w") as f:
                for row in ALL_ROWS:
                    f.write(json.dumps(row, default=str) + "\n")
    bad = [name for name, miss in missed.items() if miss]
    print("MISS: " + ", ".join(bad) if bad else "PASS")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
