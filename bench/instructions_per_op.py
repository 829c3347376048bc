#!/usr/bin/env python3
"""The instrument's cost without timing noise: user-space instructions per operation of netbench
and of the reference tool, counted by valgrind (callgrind), side by side.

    python bench/instructions_per_op.py [--only tcp_rr] [--scale 1] [--out DIR]

Each figure is the slope between two runs of the same command that differ only in how many
operations they do: (instructions at the larger count - at the smaller) / (operations -
operations), every process of the command counted (the client and its server; --trace-children),
so start-up (the interpreter, imports, connection) cancels, and what is left is what one more
operation costs in user space. Counts do not depend on the machine's load (a busy host moves a
timing, not a count), so the ratio can be judged tightly. Kernel work (the TCP stack, the
copies) is not counted: it is the same for both tools, and the instrument's own share is the
question. One line a point:

    <point> netbench <instr/op> <tool> <instr/op> ratio <r>

Points, on this host's loopback:
- tcp_rr_64: tcp.rr, 64 B a way, netbench's compiled loop (data_plane=compiled) beside
  ``sockperf ping-pong --tcp -m 64``; one operation is one round trip, both ends counted;
- tcp_rr_64_python: the same through the Python loop (data_plane=python): why the compiled
  one exists;
- tcp_stream_128k: tcp.stream with 128 KiB send() calls beside ``iperf3 -l 128K``; one
  operation is 128 KiB moved, sender and receiver counted.
sockperf and tcp.stream run for a time (neither counts operations itself), so their
operations are what they report they did: sockperf's SentMessages, the bytes tcp.stream's
receiver counted. Rows (metric ``instr_per_op``, lower is better; the tool's as ``ref.<tool>``)
go to OUT/instructions.jsonl, for `netbench import`. Exit 1 when a point's counts did not grow
with its operations (a loop that did not run) or netbench is over --target x the tool's.
RDMA points (in the soft-RoCE VM) are not in this version: see docs/instructions.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

VALGRIND = ["valgrind", "--tool=callgrind", "--trace-children=yes"]
# Deterministic for Python: dict and set layouts (and so the work of every lookup) follow the
# hash seed, which differs per process unless fixed.
ENV = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
RUN_TIMEOUT = 900.0        # seconds for one counted command (an interpreter under callgrind)


class PointFailed(Exception):
    """This point cannot be counted here (a tool missing or failing): said, others go on."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def listening(port: int) -> bool:
    """Whether a socket listens on ``port`` (the kernel's table: connecting to find out would
    be the one client of ``iperf3 -s -1``, and work counted in the server)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 3 and fields[3] == "0A" and \
                    int(fields[1].rsplit(":", 1)[1], 16) == port:
                return True
    return False


def wait_listening(port: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    """Until something listens on port (a server under valgrind starts slowly)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise PointFailed(f"the server exited ({proc.returncode}) before listening")
        if listening(port):
            return
        time.sleep(0.3)
    raise PointFailed(f"nothing listened on port {port} within {timeout:.0f} s")


def instructions(directory: Path) -> int:
    """The instructions callgrind counted in every process whose file is in ``directory``:
    its ``totals:`` line (what was collected; with --instr-atstart=no and the RDMA loops
    switching instrumentation on, ``summary:`` reads 0), else ``summary:``."""
    total = 0
    files = list(directory.glob("cg.*"))
    for path in files:
        found = {}
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                key, _, value = line.partition(":")
                found[key] = int(value.split()[0])
        total += found.get("totals", found.get("summary", 0))
    if not files or not total:
        raise PointFailed(f"callgrind wrote no count in {directory}")
    return total


def counted(cmd: list[str], work: Path, server: list[str] | None = None,
            port: int | None = None, stop_server: bool = True) -> tuple[int, str]:
    """``cmd`` (and ``server`` first, listening on ``port``) under callgrind: every process's
    instructions summed, and the client's output."""
    out = Path(tempfile.mkdtemp(prefix="cg-", dir=work))
    grind = [*VALGRIND, f"--callgrind-out-file={out}/cg.%p"]
    srv = None
    try:
        if server:
            srv = subprocess.Popen([*grind, *server], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, env=ENV)
            wait_listening(port or 0, srv)
        proc = subprocess.run([*grind, *cmd], capture_output=True, text=True, env=ENV,
                              timeout=RUN_TIMEOUT)
        if proc.returncode != 0:
            tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise PointFailed(f"{Path(cmd[0]).name} exited {proc.returncode}: {tail[:200]}")
        if srv is not None:
            if stop_server:
                srv.send_signal(signal.SIGINT)     # sockperf dumps its counts on SIGINT
            srv.wait(timeout=120)
            srv = None
        return instructions(out), proc.stdout
    except subprocess.TimeoutExpired as exc:
        raise PointFailed(f"{Path(cmd[0]).name} took over {exc.timeout:.0f} s under "
                          "valgrind") from None
    finally:
        if srv is not None:
            srv.kill()
            srv.wait()


def netbench_cmd(bench: str, params: dict[str, object], results: Path) -> list[str]:
    """As a user runs it, into a store of its own (read back afterwards, outside the count:
    --json would print every sample, work a user's run does not do)."""
    cmd = [sys.executable, "-m", "netbench", "run", bench, "--no-counters",
           "--results", str(results)]
    for key, value in params.items():
        cmd += ["-p", f"{key}={value}"]
    return cmd


def ok_rows(results: Path) -> list[dict]:
    from netbench.store import ResultStore
    rows = ResultStore(results).read().to_dict("records")
    bad = [r for r in rows if r.get("status") != "ok"]
    if bad or not rows:
        raise PointFailed(f"netbench: {bad[0].get('reason') if bad else 'no rows'}")
    return rows


# --- the points: each returns (instructions, operations) for a size knob ------------------------

def nb_rr(plane: str) -> Callable[[int, Path], tuple[int, float]]:
    def run(n: int, work: Path) -> tuple[int, float]:
        results = Path(tempfile.mkdtemp(prefix="results-", dir=work))
        count, _ = counted(netbench_cmd("tcp.rr", {"msg_size": 64, "iterations": n,
                                                   "warmup": 0, "data_plane": plane}, results),
                           work)
        rows = ok_rows(results)
        resolved = json.loads(rows[0].get("resolved") or "{}")
        if resolved.get("data_plane", plane) != plane:
            raise PointFailed(f"data_plane={plane} ran as {resolved['data_plane']}")
        return count, float(n)
    return run


def sockperf_rr(seconds: int, work: Path) -> tuple[int, float]:
    if not shutil.which("sockperf"):
        raise PointFailed("sockperf is not installed (Debian: sockperf)")
    port = free_port()
    count, out = counted(["sockperf", "ping-pong", "-i", "127.0.0.1", "-p", str(port), "--tcp",
                          "-m", "64", "-t", str(seconds)], work,
                         server=["sockperf", "server", "-i", "127.0.0.1", "-p", str(port),
                                 "--tcp"], port=port)
    found = re.search(r"Total Run\].*?SentMessages=(\d+)", out)
    if not found:
        raise PointFailed("sockperf printed no SentMessages")
    return count, float(found.group(1))


def nb_stream(seconds: int, work: Path) -> tuple[int, float]:
    results = Path(tempfile.mkdtemp(prefix="results-", dir=work))
    count, _ = counted(netbench_cmd("tcp.stream", {"msg_size": "128K", "duration": seconds,
                                                   "warmup": 0}, results), work)
    rows = {r["metric"]: r for r in ok_rows(results)}
    if "goodput" not in rows:
        raise PointFailed("tcp.stream stored no goodput")
    # The receiver's rate over its window times the duration: within one sampling interval
    # (0.1 s) of the bytes it counted, the same bias at both sizes.
    moved = rows["goodput"]["value"] * 1e9 / 8 * seconds
    return count, moved / (128 << 10)


def iperf3_stream(megabytes: int, work: Path) -> tuple[int, float]:
    if not shutil.which("iperf3"):
        raise PointFailed("iperf3 is not installed (Debian: iperf3)")
    port = free_port()
    count, _ = counted(["iperf3", "-c", "127.0.0.1", "-p", str(port), "-l", "128K", "-n",
                        f"{megabytes}M"], work,
                       server=["iperf3", "-s", "-1", "-B", "127.0.0.1", "-p", str(port)],
                       port=port, stop_server=False)
    return count, megabytes * (1 << 20) / (128 << 10)


# (point, unit of one operation, netbench's run and its two sizes, the tool, its run and sizes)
POINTS = [
    ("tcp_rr_64", "round trip of 64 B", nb_rr("compiled"), (2000, 20000),
     "sockperf", sockperf_rr, (1, 4)),
    ("tcp_rr_64_python", "round trip of 64 B", nb_rr("python"), (1000, 6000),
     "sockperf", sockperf_rr, (1, 4)),
    ("tcp_stream_128k", "128 KiB moved", nb_stream, (1, 3),
     "iperf3", iperf3_stream, (256, 1024)),
]
BENCH = {"tcp_rr_64": ("tcp.rr", {"msg_size": 64, "data_plane": "compiled"}),
         "tcp_rr_64_python": ("tcp.rr", {"msg_size": 64, "data_plane": "python"}),
         "tcp_stream_128k": ("tcp.stream", {"msg_size": 131072})}


def slope(run: Callable[[int, Path], tuple[int, float]], sizes: tuple[int, int], scale: float,
          work: Path) -> tuple[float, tuple[tuple[int, float], tuple[int, float]]]:
    """Instructions per operation between the two sizes; PointFailed where the counts or the
    operations did not grow (a loop that did not run), never a division by zero."""
    small, large = (max(1, round(s * scale)) for s in sizes)
    a, b = run(small, work), run(large, work)
    if b[1] <= a[1] or b[0] <= a[0]:
        raise PointFailed(f"counts did not grow with the operations: {a[1]:g} ops "
                          f"{a[0]:,} instructions, {b[1]:g} ops {b[0]:,}")
    return (b[0] - a[0]) / (b[1] - a[1]), (a, b)


def row(run_id: str, when: datetime, bench: str, params: dict, value: float,
        unit_note: str, label: str) -> dict:
    from netbench.store import COLUMNS, SCHEMA_VERSION
    out = {name: None for name, _ in COLUMNS}
    family, _, op = bench.partition(".")
    out.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, started_at=when,
               host=socket.gethostname(), benchmark=bench, family=family, op=op,
               transport="tcp", device="lo", metric="instr_per_op", value=value,
               unit="instructions/op", unit_note=unit_note, better="lower", status="ok",
               case_index=0, n_samples=1, samples=[value],
               params=json.dumps({**params, "counted": "callgrind slope, user space"},
                                 sort_keys=True, separators=(",", ":")))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="", help="points whose name has this")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every run's size (fewer operations: faster, coarser)")
    ap.add_argument("--target", type=float, default=1.10,
                    help="most netbench may count per operation, x the tool's (compiled "
                         "points; the python point is shown, not judged)")
    ap.add_argument("--out", type=Path, default=REPO / "results" / "instructions")
    args = ap.parse_args()
    if not shutil.which("valgrind"):
        print("instructions_per_op: valgrind is not installed: `apt-get install valgrind` "
              "(as root; `make instructions` installs it)", file=sys.stderr)
        return 2
    if args.scale <= 0:
        print(f"instructions_per_op: --scale {args.scale}: must be > 0", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="nb-instr-"))
    try:
        return count_points(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def count_points(args: argparse.Namespace, work: Path) -> int:
    run_id = f"instr-{uuid.uuid4().hex[:8]}"
    when = datetime.now(UTC)
    rows, failed = [], []
    for name, unit, nb_run, nb_sizes, tool, tool_run, tool_sizes in POINTS:
        if args.only and args.only not in name:
            continue
        try:
            mine, seen = slope(nb_run, nb_sizes, args.scale, work)
        except PointFailed as exc:
            print(f"{name} failed: netbench: {exc}", flush=True)
            failed.append(name)
            continue
        bench, params = BENCH[name]
        rows.append(row(run_id, when, bench, params, mine, unit, "instructions"))
        try:
            theirs, _ = slope(tool_run, tool_sizes, args.scale, work)
        except PointFailed as exc:
            print(f"{name} netbench {mine:,.0f} {tool} unavailable ({exc})", flush=True)
            continue
        rows.append(row(run_id, when, f"ref.{tool}", {"point": name}, theirs, unit,
                        "instructions"))
        ratio = mine / theirs
        judged = not name.endswith("_python")
        missed = judged and ratio > args.target
        failed += [name] if missed else []
        print(f"{name} netbench {mine:,.0f} {tool} {theirs:,.0f} ratio {ratio:.2f}"
              f"  (instructions a {unit}; netbench's runs {seen[0][1]:g} and {seen[1][1]:g} "
              f"ops{'; over the target ' + format(args.target, '.2f') if missed else ''})",
              flush=True)
    if rows:
        from netbench.store import JsonlStore
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "instructions.jsonl"
        JsonlStore(path).write_run(path, rows)
        print(f"rows: {path} (netbench import {path})")
    if failed:
        print(f"instructions_per_op: {', '.join(failed)} failed or over the target")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
