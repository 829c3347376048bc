#!/usr/bin/env python3
"""Every GPU check in one go, for short GPU-machine slots: each ok, MISS or NOT CHECKED.

    python bench/gpu_check.py [--out DIR] [--allow-unchecked NAME,...]     (make gpu-check)

Runs from a plain checkout too (PYTHONPATH=. python3 bench/gpu_check.py): netbench finds its
benchmarks in pyproject.toml when it is not installed. Every check ends as one of
  ok           it ran and passed: its figure beside its reference, or, where no independent
               reference exists, its rows ran clean (the line says "no independent reference")
  MISS         it ran and missed its target, or its netbench rows failed
  NOT CHECKED  it could not run here, and why (no torch, no CUDA, a skipped row's reason,
               no nvbandwidth / nccl-tests / nvidia-smi / RDMA device, one GPU, budget spent)
and the last line counts them: `gpu-check: 3 ok, 0 missed, 2 not checked`. A skipped row
never passes. Exit 0 only when every check ran and passed; 1 when any missed; 2 when none
missed but some could not be checked (named on stderr too). `--allow-unchecked feed.*,nccl.*`
accepts those named (fnmatch patterns) as unchecked: exit 0 then, if some check ran and none
missed, and the last line says how many were accepted.

The checks, in order, each step bounded in time and none stopping the others:
- probe.gpus: `netbench probe` finds every GPU torch sees (with --out: the sysfs capture in
  DIR/sysfs-capture.tar.gz, every stored row in DIR/gpu-check.jsonl).
- feed.h2d.* / feed.d2h.* (pinned, 64 and 256 MiB): netbench vs an independent reference,
  ratio within 0.95..1.10. netbench times copy_ between CUDA events behind a hold kernel; the
  reference is nvbandwidth's host_to_device_memcpy_ce / device_to_host_memcpy_ce (GPU 0's
  column) where it is on PATH, otherwise the same bytes copied on a stream of its own with no
  hold kernel and no events, timed by the host's clock (perf_counter around the queued copies
  and a synchronize): the driver's copy path is shared, the timing is not. Then pageable
  H2D/D2H, d2d, bidir, the loader feeding the GPU and the loader alone (rows must run clean;
  no independent reference).
- link.*: the GPU's own link read from sysfs under a long H2D stream vs nvidia-smi's
  pcie.link.gen/width.current (the driver's view); with --out, `nvidia-smi -q`, `topo -m`.
- nccl.*: with 2+ GPUs, coll.all_reduce busbw vs nccl-tests' all_reduce_perf (ratio within
  0.95..1.10, NOT CHECKED without it), vs a bare torch.distributed loop
  (bench/coll_vs_torch.py), and every collective over NCCL; with one GPU, the collectives
  under a one-rank torchrun (every result checked; busbw is 0 by definition).
- rdma.write_bw_gpu: rdma.write_bw mem=gpu (GPUDirect RDMA) where pyverbs and an RDMA device
  exist.
- suite.*: suites/gpu-acceptance.toml run and judged (`netbench accept`), suites/ci.toml run
  (its gpu and coll rows must run); with --out, their Parquet in DIR/results.tar.gz.
- sweep.*: H2D and D2H over 4K..1G.
140 s on one H200; --budget stops starting new steps once that many seconds have gone (the
rest are NOT CHECKED), and rows are written after every step.
"""

from __future__ import annotations

import argparse
import fnmatch
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
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))             # a plain checkout: netbench without installing it
SIZES = ["1M", "16M", "256M"]
FEED_SIZES = [64 << 20, 256 << 20]
FEED_ITERATIONS = 40
# netbench / reference: below, netbench reads low; above, it reads high (it may be timing
# less than the copies, which is what an independent reference is there to catch).
BAND = (0.95, 1.10)
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p), "CI": "true"}
ALL_ROWS: list[dict] = []
OK, MISS, UNCHECKED = "ok", "MISS", "NOT CHECKED"
ONE_GPU_OPS = ("all_reduce", "all_gather", "broadcast", "reduce_scatter", "reduce", "all_to_all")
OPS = (*ONE_GPU_OPS, "send_recv")
NVB_TESTS = {"h2d": "host_to_device_memcpy_ce", "d2h": "device_to_host_memcpy_ce"}

# Every check, by step: all of them end in the summary, run or not, so none can go missing.
PLAN: dict[str, tuple[str, ...]] = {
    "probe": ("probe.gpus",),
    "feed": (*(f"feed.{op}.{size >> 20}M" for op in ("h2d", "d2h") for size in FEED_SIZES),
             "feed.h2d.pageable", "feed.d2h.pageable", "feed.d2d", "feed.bidir", "feed.loader",
             "feed.loader_alone"),
    "link": ("link.vs_nvidia_smi", "link.h2d_stream"),
    "nccl": ("nccl.all_reduce_vs_nccl_tests", "nccl.vs_torch_loop",
             *(f"nccl.{op}" for op in OPS)),
    "rdma": ("rdma.write_bw_gpu",),
    "suites": ("suite.gpu_acceptance", "suite.ci"),
    "sweep": ("sweep.h2d", "sweep.d2h"),
}


@dataclass
class Check:
    name: str
    outcome: str                 # OK, MISS or UNCHECKED
    detail: str                  # the figure beside its reference, or why not

    def line(self) -> str:
        return f"{self.outcome:<11}  {self.name}: {self.detail}"


class Report:
    """The checks as they are decided, and the summary that decides the exit code."""

    def __init__(self, allowed: list[str] | None = None) -> None:
        self.checks: dict[str, Check] = {}
        self.allowed = allowed or []

    def add(self, name: str, outcome: str, detail: str, echo: bool = True) -> None:
        self.checks[name] = Check(name, outcome, detail)
        if echo:
            print(self.checks[name].line(), flush=True)

    def rest(self, step: str, outcome: str, detail: str, echo: bool = True) -> None:
        """Every check of ``step`` not decided yet."""
        for name in PLAN[step]:
            if name not in self.checks:
                self.add(name, outcome, detail, echo)

    def accepted(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, p) for p in self.allowed)

    def exit_code(self) -> int:
        """1 for any miss; else 2 while a check was not run and not accepted, or when none
        ran at all (accepting everything cannot make a run that checked nothing pass)."""
        outcomes = [c.outcome for c in self.checks.values()]
        if MISS in outcomes:
            return 1
        if OK not in outcomes or any(c.outcome == UNCHECKED and not self.accepted(c.name)
                                     for c in self.checks.values()):
            return 2
        return 0

    def summary(self) -> str:
        """The final line: how many of each, and how many unchecked were accepted."""
        count = {o: sum(c.outcome == o for c in self.checks.values())
                 for o in (OK, MISS, UNCHECKED)}
        line = f"gpu-check: {count[OK]} ok, {count[MISS]} missed, {count[UNCHECKED]} not checked"
        taken = sum(c.outcome == UNCHECKED and self.accepted(c.name)
                    for c in self.checks.values())
        return line + (f" ({taken} accepted by --allow-unchecked)" if taken else "")

    def finish(self) -> int:
        """Every check and its outcome on stdout, the unchecked ones on stderr as well, then
        the counts; returns the exit code."""
        order = [n for names in PLAN.values() for n in names]
        checks = sorted(self.checks.values(),
                        key=lambda c: order.index(c.name) if c.name in order else len(order))
        print("\n== gpu-check summary ==")
        for check in checks:
            print(check.line())
        sys.stdout.flush()
        unchecked = [c for c in checks if c.outcome == UNCHECKED]
        for check in unchecked:
            note = " (accepted)" if self.accepted(check.name) else ""
            print(f"gpu-check: NOT CHECKED{note} {check.name}: {check.detail}", file=sys.stderr)
        for pattern in self.allowed:
            if not any(fnmatch.fnmatchcase(n, pattern) for n in order):
                print(f"gpu-check: --allow-unchecked {pattern!r} names no check", file=sys.stderr)
        sys.stderr.flush()
        print(self.summary(), flush=True)
        return self.exit_code()


# --- judging rows ----------------------------------------------------------------------------

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
                       if r["status"] == "ok" and r["value"] is not None)
        figures = ok or f"{case[0]['status']}: {case[0]['reason']}"
        label = " ".join(f"{k}={params[i].get(k)}" for k in varying)
        parts.append(f"[{label}] {figures}" if label else figures)
    return "; ".join(parts) or "no rows"


def judge_rows(rows: list[dict]) -> tuple[str, str]:
    """A check on netbench rows: a failed case is a MISS; a skipped one leaves the check NOT
    CHECKED with the row's own reason (a skip measured nothing, so it never passes); ok only
    when every case ran."""
    if not rows:
        return MISS, "no rows: netbench gave no answer (its output is above)"
    cases: dict[int, dict] = {}
    for r in rows:
        cases.setdefault(r["case_index"], r)
    failed = [r for r in cases.values() if r["status"] not in ("ok", "skipped")]
    if failed:
        return MISS, (f"{len(failed)} of {len(cases)} case(s) {failed[0]['status']}: "
                      f"{failed[0]['reason'] or 'no reason given'}")
    skipped = [r for r in cases.values() if r["status"] == "skipped"]
    if skipped:
        reasons = list(dict.fromkeys(r["reason"] or "no reason given" for r in skipped))
        return UNCHECKED, (f"{len(skipped)} of {len(cases)} case(s) skipped: "
                           + "; ".join(reasons))
    return OK, shown(rows)


def ran_clean(rows: list[dict]) -> tuple[str, str]:
    """judge_rows for a check with no independent reference, which the ok line says."""
    outcome, detail = judge_rows(rows)
    return outcome, detail + ("; ran clean, no independent reference" if outcome == OK else "")


@dataclass
class Reference:
    gbps: float | None
    method: str                  # what measured it, named in the line
    why_none: str = ""


def judge_reference(rows: list[dict], ref: Reference, metric: str = "bw") -> tuple[str, str]:
    """netbench's figure beside an independent one: ok inside BAND, a MISS outside it."""
    outcome, detail = judge_rows(rows)
    if outcome != OK:
        return outcome, detail
    values = {r["metric"]: r["value"] for r in rows if r["status"] == "ok"}
    if values.get(metric) is None:
        return MISS, f"no {metric} figure in the rows: {shown(rows)}"
    ours = values[metric]
    eff = values.get("link_efficiency")
    link = f"link efficiency {eff:.2f}" if eff is not None else \
        f"link efficiency n/a ({rows[0]['reason'] or 'no bound'})"
    if ref.gbps is None or ref.gbps <= 0:
        return UNCHECKED, (f"netbench {ours:.2f} GB/s, {link}; no independent reference "
                           f"({ref.why_none or 'it gave no figure'})")
    ratio = ours / ref.gbps
    lo, hi = BAND
    text = (f"netbench {ours:.2f} GB/s vs {ref.gbps:.2f} GB/s by {ref.method}, ratio "
            f"{ratio:.3f}")
    if ratio < lo:
        return MISS, f"{text} < {lo} (netbench reads low); {link}"
    if ratio > hi:
        return MISS, f"{text} > {hi} (netbench reads high); {link}"
    return OK, f"{text} (target {lo}..{hi}); {link}"


# --- running netbench and the reference tools ----------------------------------------------

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


def wall_clock_copy_gbps(torch: Any, to_device: bool, size: int, iterations: int) -> float:
    """The fallback reference, timed unlike gpu.h2d/d2h (CUDA events behind a hold kernel on
    the current stream): a stream of its own, no hold kernel, no events; the host's clock
    around queuing the copies and waiting for the last. Launch gaps count here, which at
    64 MiB a copy is well under 1%."""
    host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(size, dtype=torch.uint8, device="cuda")
    src, dst = (host, dev) if to_device else (dev, host)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        for _ in range(3):
            dst.copy_(src, non_blocking=True)
        stream.synchronize()
        start = time.perf_counter()
        for _ in range(iterations):
            dst.copy_(src, non_blocking=True)
        stream.synchronize()
        seconds = time.perf_counter() - start
    return size * iterations / (seconds * 1e9)


def parse_nvbandwidth(text: str, gpu: int = 0) -> dict[str, float]:
    """GPU ``gpu``'s column of each memcpy_ce matrix nvbandwidth printed: 'h2d'/'d2h' -> GB/s.
    Not the SUM line: that adds up every GPU's copies, run one GPU at a time."""
    found: dict[str, float] = {}
    test, columns, lines = "", None, text.splitlines()
    for i, line in enumerate(lines):
        running = re.match(r"\s*Running (\w+)\.", line)
        if running:
            test, columns = running.group(1), None
        elif "bandwidth (GB/s)" in line and i + 2 < len(lines):
            columns = lines[i + 1].split()
            row = lines[i + 2].split()
            if str(gpu) in columns and len(row) == len(columns) + 1:
                value = row[1 + columns.index(str(gpu))]
                if re.fullmatch(r"\d+(\.\d+)?", value):
                    op = next((k for k, t in NVB_TESTS.items() if t == test), None)
                    if op:
                        found[op] = float(value)
    return found


def nvbandwidth_gbps(size: int) -> tuple[dict[str, float], str]:
    """nvbandwidth's H2D and D2H for GPU 0, and why there are none if so."""
    exe = shutil.which("nvbandwidth")
    if not exe:
        return {}, "nvbandwidth is not on PATH"
    try:
        proc = subprocess.run([exe, "-t", *NVB_TESTS.values(), "-b", str(size >> 20)],
                              capture_output=True, text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as exc:   # the reference broke, not netbench
        return {}, f"nvbandwidth did not answer: {exc}"
    found = parse_nvbandwidth(proc.stdout)
    why = "" if found else (f"nvbandwidth gave no figure (exit {proc.returncode}: "
                            f"{(proc.stderr or proc.stdout).strip()[-300:]})")
    return found, why


def parse_all_reduce_perf(text: str) -> dict[int, float]:
    """all_reduce_perf's out-of-place busbw (GB/s) per size in bytes."""
    figures = {}
    for line in text.splitlines():
        cols = line.split()
        if len(cols) > 8 and re.fullmatch(r"\d+", cols[0]):
            # columns: size count type redop root time algbw busbw ...
            try:
                figures[int(cols[0])] = float(cols[7])
            except ValueError:
                continue
    return figures


def nccl_tests_busbw(gpus: int) -> tuple[dict[int, float], str]:
    exe = shutil.which("all_reduce_perf")
    if not exe:
        return {}, "nccl-tests' all_reduce_perf is not on PATH"
    try:
        proc = subprocess.run([exe, "-b", "1M", "-e", "256M", "-f", "16", "-g", str(gpus)],
                              capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {}, f"all_reduce_perf did not answer: {exc}"
    figures = parse_all_reduce_perf(proc.stdout)
    return figures, "" if figures else (f"all_reduce_perf gave no figure (exit "
                                        f"{proc.returncode}: {proc.stderr.strip()[-300:]})")


def rdma_devices(sysfs: Path = Path("/sys")) -> list[str]:
    folder = sysfs / "class" / "infiniband"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def also_missing(name: str) -> list[str]:
    """What a check needs or uses besides a CUDA GPU that this host lacks (named even where
    there is no GPU, so one reading says everything to install)."""
    missing = []
    if re.fullmatch(r"feed\.(h2d|d2h)\.\d+M", name) and not shutil.which("nvbandwidth"):
        missing.append("nvbandwidth is not on PATH (the reference would be the host-clock copy)")
    if name == "nccl.all_reduce_vs_nccl_tests" and not shutil.which("all_reduce_perf"):
        missing.append("nccl-tests' all_reduce_perf is not on PATH")
    if name == "link.vs_nvidia_smi" and not shutil.which("nvidia-smi"):
        missing.append("nvidia-smi is not on PATH")
    if name == "rdma.write_bw_gpu":
        if importlib.util.find_spec("pyverbs") is None:
            missing.append("pyverbs is not importable (Debian python3-pyverbs)")
        if not rdma_devices():
            missing.append("no RDMA device under /sys/class/infiniband")
    return missing


# --- the steps ---------------------------------------------------------------------------------

def check_probe(report: Report, torch: Any, out: Path | None) -> None:
    from netbench.benchmarks.gpu_feed import pci_address
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
    proc = subprocess.run([sys.executable, "-m", "netbench", "probe", "--json"],
                          capture_output=True, text=True, timeout=120, env=ENV, cwd=ROOT)
    try:
        found = {g.get("pci_address") for g in json.loads(proc.stdout).get("gpus", [])}
    except ValueError:
        report.add("probe.gpus", MISS, f"probe --json: exit {proc.returncode}: "
                                       f"{proc.stderr.strip()[-300:]}")
        return
    # torch's view is the reference: the CUDA driver's, not the PCI bus the probe reads
    seen = [pci_address(torch, torch.device("cuda", i)) for i in range(torch.cuda.device_count())]
    lost = [a or "?" for a in seen if a not in found]
    detail = (f"probe found {len(found)} GPU(s); torch sees {len(seen)} at "
              f"{', '.join(map(str, seen))}")
    report.add("probe.gpus", MISS if lost else OK,
               detail + (f"; not in the probe: {', '.join(lost)}" if lost else ""))


def check_feed(report: Report, torch: Any) -> None:
    """H2D and D2H against an independent reference; the rest of the family must run."""
    for size in FEED_SIZES:
        nvb, why = nvbandwidth_gbps(size)
        for op in ("h2d", "d2h"):
            rows = netbench_rows([f"gpu.{op}", "-p", f"msg_size={size}", "-p",
                                  f"iterations={FEED_ITERATIONS}"])
            if op in nvb:
                ref = Reference(nvb[op], f"nvbandwidth {NVB_TESTS[op]} (GPU 0)")
            elif judge_rows(rows)[0] != OK:
                ref = Reference(None, "", "netbench's rows did not run")
            else:
                no_nvb = why or f"nvbandwidth gave no {op} figure"
                try:
                    ref = Reference(wall_clock_copy_gbps(torch, op == "h2d", size,
                                                         FEED_ITERATIONS),
                                    f"own-stream copy_ x{FEED_ITERATIONS} timed by the host "
                                    f"clock, no events ({no_nvb})")
                except Exception as exc:          # say why, and leave the check unchecked
                    ref = Reference(None, "", f"{no_nvb}; the host-clock copy failed: "
                                              f"{type(exc).__name__}: {exc}")
            report.add(f"feed.{op}.{size >> 20}M", *judge_reference(rows, ref))
    for name, args in (("feed.h2d.pageable", ["gpu.h2d", "-p", "host_mem=pageable"]),
                       ("feed.d2h.pageable", ["gpu.d2h", "-p", "host_mem=pageable"]),
                       ("feed.d2d", ["gpu.d2d"]), ("feed.bidir", ["gpu.bidir"]),
                       ("feed.loader", ["gpu.loader_feed", "-p", "workers=2,4,8,14"]),
                       ("feed.loader_alone", ["gpu.loader_feed", "-p", "device=cpu"])):
        report.add(name, *ran_clean(netbench_rows(args)))


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


def judge_link(address: str, speed: float | None, width: int | None,
               smi: list[dict[str, str]]) -> tuple[str, str]:
    """The GPU's own link as sysfs reads it beside nvidia-smi's current generation and width."""
    from netbench.env.linkpath import GENERATION
    mine = next((s for s in smi if s["pci.bus_id"].lower()[-12:] == address.lower()), None)
    if mine is None:
        return UNCHECKED, f"nvidia-smi lists no GPU at {address} ({smi or 'no answer'})"
    gen, lanes = GENERATION.get(speed or 0), width
    theirs = (mine["pcie.link.gen.current"], mine["pcie.link.width.current"])
    if gen is None or lanes is None or not all(t.isdigit() for t in theirs):
        return UNCHECKED, f"a link field is unknown: sysfs Gen{gen} x{lanes}, nvidia-smi {theirs}"
    text = f"sysfs Gen{gen} x{lanes}, nvidia-smi Gen{theirs[0]} x{theirs[1]}"
    return (OK, text + " (agree)") if (str(gen), str(lanes)) == theirs else (MISS, text)


def hop_states(address: str, sysfs: Path = Path("/sys")) -> tuple[list[str], Any]:
    """The path's summary and each hop from the GPU up, read now, and the path itself."""
    from netbench.env.linkpath import hop_line, walk
    path = walk(sysfs, address)
    if path is None:
        return [f"{address}: not under /sys/bus/pci/devices"], None
    return [path.summary(), *(hop_line(hop) for hop in path.as_dict()["hops"])], path


def check_link(report: Report, torch: Any, out: Path | None) -> None:
    """The GPU's link at rest and under a long H2D stream, from sysfs and from nvidia-smi."""
    from netbench.benchmarks.gpu_feed import pci_address
    if out is not None and shutil.which("nvidia-smi"):
        with open(out / "nvidia-smi.txt", "w") as f:
            for args in (["-q"], ["topo", "-m"]):
                f.write(subprocess.run(["nvidia-smi", *args], capture_output=True, text=True,
                                       timeout=60).stdout + "\n")
    address = pci_address(torch, torch.device("cuda", 0))
    if address is None:
        report.add("link.vs_nvidia_smi", UNCHECKED, "torch does not report cuda:0's PCI address")
    else:
        print(f"cuda:0 at {address}; at rest:")
        for line in hop_states(address)[0]:
            print(f"  {line}")
        print(f"  nvidia-smi: {smi_link()}")
        size = 256 << 20
        host = torch.empty(size, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(size, dtype=torch.uint8, device="cuda")
        for _ in range(400):                 # ~2 s at Gen5 x16: long enough to read the link
            dev.copy_(host, non_blocking=True)
        time.sleep(0.3)
        (lines, path), smi = hop_states(address), smi_link()
        torch.cuda.synchronize()
        print("under load (H2D stream running):")
        for line in lines:
            print(f"  {line}")
        print(f"  nvidia-smi: {smi}")
        missing = also_missing("link.vs_nvidia_smi")
        if missing:
            report.add("link.vs_nvidia_smi", UNCHECKED, "; ".join(missing))
        elif path is None or not path.hops:
            report.add("link.vs_nvidia_smi", UNCHECKED, f"{address}: no sysfs path")
        else:
            report.add("link.vs_nvidia_smi",
                       *judge_link(address, path.hops[0].speed, path.hops[0].width, smi))
    rows = netbench_rows(["gpu.h2d", "-p", "msg_size=256M", "-p", "iterations=100"])
    outcome, detail = ran_clean(rows)
    note = rows[0]["reason"] if rows and rows[0]["status"] == "ok" else ""
    report.add("link.h2d_stream", outcome, detail + (f"; note: {note}" if note else ""))


def check_nccl(report: Report, torch: Any, gpus: int) -> None:
    if gpus < 2:
        report.add("nccl.all_reduce_vs_nccl_tests", UNCHECKED, "; ".join(
            ["one GPU: busbw is 0 by definition, nothing to compare (needs 2+ GPUs)",
             *also_missing("nccl.all_reduce_vs_nccl_tests")]))
        report.add("nccl.vs_torch_loop", UNCHECKED, "one GPU: needs 2+ GPUs")
        report.add("nccl.send_recv", UNCHECKED, "one GPU: send_recv needs a second rank")
        print("NCCL path with one GPU: torchrun, one rank (the run checks every result)")
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=1",
                    "--master_port=29551", "-m"]
        for op in ONE_GPU_OPS:
            rows = netbench_rows([f"coll.{op}", "-p", "backend=nccl", "-p", "msg_size=1M,64M",
                                  "-p", "iterations=20"], launcher=torchrun)
            report.add(f"nccl.{op}", *ran_clean(rows))
        return
    rows = netbench_rows(["coll.all_reduce", "-p", f"world_size={gpus}", "-p", "backend=nccl",
                          "-p", "msg_size=" + ",".join(SIZES), "-p", "iterations=50"], 600)
    report.add("nccl.all_reduce", *ran_clean(rows))
    report.add("nccl.all_reduce_vs_nccl_tests", *judge_all_reduce(rows, *nccl_tests_busbw(gpus)))
    for op in OPS[1:]:
        rows = netbench_rows([f"coll.{op}", "-p", f"world_size={gpus}", "-p", "backend=nccl",
                              "-p", "msg_size=64M", "-p", "iterations=20"])
        report.add(f"nccl.{op}", *ran_clean(rows))
    proc = subprocess.run([sys.executable, "bench/coll_vs_torch.py", "--backend", "nccl",
                           "--world", str(gpus), "--rounds", "3"], text=True, timeout=900,
                          env=ENV, cwd=ROOT)
    report.add("nccl.vs_torch_loop", OK if proc.returncode == 0 else MISS,
               "bench/coll_vs_torch.py: netbench / a bare torch.distributed loop (same NCCL, "
               f"its own loop and timing) <= 1.02 at every size: exit {proc.returncode}")


def judge_all_reduce(rows: list[dict], ref: dict[int, float], why: str) -> tuple[str, str]:
    """busbw per size beside all_reduce_perf's: any size outside BAND misses; a size either
    side lacks leaves the check unchecked (a comparison that cannot miss is none)."""
    from netbench.api import format_size
    outcome, detail = judge_rows(rows)
    if outcome != OK:
        return outcome, detail
    ours = {r["msg_size"]: r["value"] for r in rows if r["metric"] == "busbw"}
    if not ref:
        return UNCHECKED, f"{why}; netbench busbw {_gbps(ours)}"
    lo, hi = BAND
    parts, missed, lacking = [], False, []
    for size, value in sorted(ours.items()):
        other = ref.get(size)
        if not other:
            lacking.append(format_size(size))
            continue
        ratio = value / other
        missed |= not lo <= ratio <= hi
        parts.append(f"{format_size(size)} {value:.2f} vs {other:.2f} GB/s ratio {ratio:.3f}")
    text = "netbench vs all_reduce_perf busbw: " + ("; ".join(parts) or "no common size")
    if missed:
        return MISS, f"{text} (target {lo}..{hi})"
    if lacking or not parts:
        return UNCHECKED, f"{text}; all_reduce_perf has no figure at {', '.join(lacking)}"
    return OK, f"{text} (target {lo}..{hi})"


def _gbps(values: dict[int, float]) -> str:
    from netbench.api import format_size
    return ", ".join(f"{format_size(s)} {v:.2f} GB/s" for s, v in sorted(values.items())) \
        or "none"


def check_rdma_gpu(report: Report) -> None:
    missing = also_missing("rdma.write_bw_gpu")
    if missing:
        report.add("rdma.write_bw_gpu", UNCHECKED, "; ".join(missing))
        return
    rows = netbench_rows(["rdma.write_bw", "-p", "mem=gpu", "-p", "msg_size=64K,1M", "-p",
                          "validate=true"])
    report.add("rdma.write_bw_gpu", *ran_clean(rows))


def suite_rows(suite: str, results: Path) -> tuple[list[dict], str]:
    """A suite's rows, and the tail of what it said."""
    proc = subprocess.run([sys.executable, "-m", "netbench", "run", suite, "--json",
                           "--results", str(results), "--timeout", "60"], capture_output=True,
                          text=True, timeout=240, env=ENV, cwd=ROOT)
    print(f"$ netbench run {suite}  (exit {proc.returncode})")
    print("\n".join(proc.stderr.rstrip().splitlines()[-25:]))
    try:
        rows = json.loads(proc.stdout)
    except ValueError:
        return [], f"exit {proc.returncode}"
    ALL_ROWS.extend(rows)
    return rows, ""


def check_suites(report: Report, out: Path | None) -> None:
    """The GPU acceptance suite judged by `netbench accept`; the CI suite's gpu and coll rows
    must run on a GPU host (its other families' skips are no GPU check)."""
    results = Path(tempfile.mkdtemp(prefix="gpu-check-results-"))
    rows, _ = suite_rows("suites/gpu-acceptance.toml", results)
    outcome, detail = judge_rows(rows)
    if outcome == OK:
        proc = subprocess.run([sys.executable, "-m", "netbench", "accept",
                               "suites/gpu-acceptance.toml", "--results", str(results)],
                              capture_output=True, text=True, timeout=60, env=ENV, cwd=ROOT)
        print("$ netbench accept suites/gpu-acceptance.toml")
        print(proc.stdout.rstrip() or proc.stderr.strip()[-800:])
        last = (proc.stdout.strip().splitlines() or ["no output"])[-1]
        outcome, detail = (OK if proc.returncode == 0 else MISS), f"netbench accept: {last}"
    report.add("suite.gpu_acceptance", outcome, detail)
    rows, _ = suite_rows("suites/ci.toml", results)
    gpu_rows = [r for r in rows if r["family"] in ("gpu", "coll")]
    other = [r for r in rows if r["family"] not in ("gpu", "coll")]
    failed = [r for r in other if r["status"] == "failed"]
    if failed:
        report.add("suite.ci", MISS, f"{failed[0]['benchmark']} failed: {failed[0]['reason']}")
    elif not gpu_rows:
        report.add("suite.ci", MISS, f"no gpu or coll rows ({len(rows)} rows in all)")
    else:
        outcome, detail = judge_rows(gpu_rows)
        if outcome == OK:            # a whole suite's figures are too many for one line
            detail = f"{len({r['case_index'] for r in gpu_rows})} case(s) ran"
        others = len({r["case_index"] for r in other if r["status"] == "skipped"})
        report.add("suite.ci", outcome, f"gpu and coll cases: {detail}" + (
            f"; {others} case(s) of other families skipped (not GPU checks)" if others else ""))
    if out is not None:
        with tarfile.open(out / "results.tar.gz", "w:gz") as tar:
            tar.add(results, arcname="results")
        print(f"  results -> {out / 'results.tar.gz'}")


def check_sweep(report: Report) -> None:
    """H2D and D2H over 4K..1G (the dashboard's curve); per size, bandwidth only."""
    from netbench.api import format_size
    for op in ("h2d", "d2h"):
        rows = netbench_rows([f"gpu.{op}", "-p", "msg_size=4K..1G:x4", "-p", "iterations=20"])
        outcome, detail = ran_clean(rows)
        curve = [f"{format_size(r['msg_size'])} {r['value']:.1f}" for r in rows
                 if r["status"] == "ok" and r["metric"] == "bw"]
        if outcome == OK:
            detail = f"GB/s {', '.join(curve)}; ran clean, no independent reference"
        report.add(f"sweep.{op}", outcome, detail)


# --- main ----------------------------------------------------------------------------------------

def cuda_here() -> tuple[Any, str, str]:
    """(torch, '', '') where a CUDA device is usable, else (None, why in short, why in
    netbench's own words: the reason its gpu.* rows carry), without importing torch where its
    presence and build settle it."""
    from netbench.benchmarks import gpu_feed
    from netbench.errors import NetbenchError
    if importlib.util.find_spec("torch") is None:
        return None, "no torch", gpu_feed.TORCH_HINT
    build = gpu_feed.torch_build()
    if build is not None and not build[1]:
        # a stand-in GPU list: the build alone decides here, torch the devices below
        return None, f"torch {build[0]} without CUDA (a CPU-only build)", \
            gpu_feed.gpu_available({"gpus": ["asked of torch"]}) or ""
    try:
        torch, _ = gpu_feed._cuda(0)
    except NetbenchError as exc:
        return None, "torch sees no CUDA device", str(exc)
    return torch, "", ""


def tools_line() -> str:
    """Which reference tools this host has, for the head of the output."""
    parts = [f"{tool}: {'found' if shutil.which(tool) else 'not on PATH'}"
             for tool in ("nvbandwidth", "all_reduce_perf", "nvidia-smi")]
    parts.append("pyverbs: " + ("found" if importlib.util.find_spec("pyverbs") else "missing"))
    parts.append("RDMA devices: " + (", ".join(rdma_devices()) or "none"))
    return "references here: " + "; ".join(parts)


def run_steps(report: Report, torch: Any, out: Path | None, budget: float) -> None:
    gpus = torch.cuda.device_count()
    nccl = ".".join(map(str, torch.cuda.nccl.version())) if hasattr(torch.cuda, "nccl") else "?"
    print(f"{gpus} x {torch.cuda.get_device_name(0)}, torch {torch.__version__}, NCCL {nccl}")
    steps: dict[str, Callable[[], None]] = {
        "probe": lambda: check_probe(report, torch, out),
        "feed": lambda: check_feed(report, torch),
        "link": lambda: check_link(report, torch, out),
        "nccl": lambda: check_nccl(report, torch, gpus),
        "rdma": lambda: check_rdma_gpu(report),
        "suites": lambda: check_suites(report, out),
        "sweep": lambda: check_sweep(report)}
    began = time.monotonic()
    for name, step in steps.items():
        if time.monotonic() - began > budget:
            report.rest(name, UNCHECKED, f"not started: the {budget:g} s budget was spent")
            continue
        print(f"\n[{name}]", flush=True)
        start = time.monotonic()
        try:
            step()
        except Exception as exc:       # one broken step must not hide the others' figures
            report.add(f"{name}.step", MISS, f"stopped by {type(exc).__name__}: {exc}")
            report.rest(name, UNCHECKED, f"not run: the {name} step stopped (see {name}.step)")
        print(f"[{name}: {time.monotonic() - start:.0f} s]", flush=True)
        if out:                        # after every step: a run cut short keeps what it had
            with open(out / "gpu-check.jsonl", "w") as f:
                for row in ALL_ROWS:
                    f.write(json.dumps(row, default=str) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the sysfs capture and rows here")
    parser.add_argument("--budget", type=float, default=420,
                        help="seconds after which no new step starts (default 420)")
    parser.add_argument("--allow-unchecked", default="", metavar="NAME,...",
                        help="checks (fnmatch patterns: 'nccl.*') accepted as not checked: "
                             "exit 0 when nothing missed and only these were not checked")
    args = parser.parse_args(argv)
    report = Report([p.strip() for p in args.allow_unchecked.split(",") if p.strip()])
    print(tools_line())
    torch, why, in_full = cuda_here()
    if torch is None:
        # Nothing below can run; each check still ends with its reason (and what else it
        # would need), so an all-skipped host can never read as a pass.
        print(f"gpu-check: no GPU check can run here: {in_full}", file=sys.stderr, flush=True)
        for names in PLAN.values():
            for name in names:
                report.add(name, UNCHECKED, "; ".join([why, *also_missing(name)]),
                           echo=False)
        return report.finish()
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
    run_steps(report, torch, args.out, args.budget)
    return report.finish()


if __name__ == "__main__":
    sys.exit(main())
