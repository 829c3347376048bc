#!/usr/bin/env python3
"""The instrument's cost without timing noise: user-space instructions per operation of netbench
and of the reference tool, counted by valgrind (callgrind), side by side.

    python bench/instructions_per_op.py [--only tcp_rr,...] [--scale 1] [--out DIR]
                                        [--rdma-device DEV --rdma-addr IP [--rdma-gid 1]]

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

With --rdma-device DEV --rdma-addr IP (the soft-RoCE VM runs it, tools/softroce/in-vm.sh; a host
with a NIC the same), the RDMA points instead, each beside perftest with the same message size,
depth, signalling, QPs and chains: rdma_write_lat_2, rdma_read_lat_2, rdma_send_lat_2 (one
operation a round trip, or one READ), rdma_write_rate_64 and rdma_write_bw_4k (one WRITE), the
64 B rate over 4 and 16 QPs and in chains of 16 (post_list): the compiled plane, judged;
rdma_write_lat_2_pyverbs and rdma_write_rate_64_pyverbs through the pyverbs plane, shown.
netbench runs loopback (both ends in one process: both counted; its loops reap send
completions lazily there, perftest's client one post at a time), and only its data path is
counted (the RDMA section below says why); perftest's server and client whole. A point whose
reference cannot be counted fails: nothing judged it. --only that names no point exits 2.
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


def by_object(path: Path) -> dict[str, int]:
    """Self instructions per shared object (the program, libibverbs, the rxe provider, libc,
    ...) in one callgrind file: every cost line under the object it belongs to, except the
    line after ``calls=``, which is the callee's inclusive cost (counted where it is spent)."""
    names: dict[str, str] = {}
    out: dict[str, int] = {}
    current, after_call = "?", False

    def name(ref: str) -> str:
        ref = ref.strip()
        if ref.startswith("("):
            key, _, text = ref.partition(")")
            if text.strip():
                names[key] = text.strip()
            return names.get(key, ref)
        return ref

    for line in path.read_text(errors="replace").splitlines():
        if not line:
            continue
        head = line[0]
        if head.isdigit() or head in "+-*":
            if after_call:
                after_call = False
                continue
            fields = line.split()
            if len(fields) > 1:
                out[current] = out.get(current, 0) + int(fields[1])
        elif line.startswith("ob="):
            current = name(line[3:])
        elif line.startswith("cob="):
            name(line[4:])             # defines a name later lines may refer to
        elif line.startswith("calls="):
            after_call = True
    return out


def objects_in(files: list[Path]) -> dict[str, int]:
    """by_object summed over files, keyed by the object's file name."""
    total: dict[str, int] = {}
    for path in files:
        for obj, count in by_object(path).items():
            key = Path(obj).name
            total[key] = total.get(key, 0) + count
    return total


def counted(cmd: list[str], work: Path, server: list[str] | None = None,
            port: int | None = None, stop_server: bool = True,
            objects: dict[str, int] | None = None) -> tuple[int, str]:
    """``cmd`` (and ``server`` first, listening on ``port``) under callgrind: every process's
    instructions summed, and the client's output; ``objects`` gets them per shared object."""
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
            said = [ln for ln in (proc.stdout + proc.stderr).splitlines()
                    if ln.strip() and not ln.startswith("==")] or ["no output"]
            raise PointFailed(f"{Path(cmd[0]).name} exited {proc.returncode}: {said[-1][:200]}")
        if srv is not None:
            if stop_server:
                srv.send_signal(signal.SIGINT)     # sockperf dumps its counts on SIGINT
            srv.wait(timeout=120)
            srv = None
        # Every process's file, its instructions by shared object: they add up to callgrind's
        # totals: line (what was collected, where summary: reads 0 with instrumentation
        # switched on late), so one reading gives both the total and the split.
        files = list(out.glob("cg.*"))
        per_object = objects_in(files)
        total = sum(per_object.values())
        if not files or not total:
            raise PointFailed(f"callgrind wrote no count in {out}")
        if objects is not None:
            objects.update(per_object)
        return total, proc.stdout
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


# --- RDMA, where a device is (the soft-RoCE VM runs it: tools/softroce/in-vm.sh) ----------------
# netbench's runs all happen in one process under valgrind (an interpreter starting under valgrind
# in the emulated VM takes over a minute): it runs each (point, size) through netbench's own CLI
# entry, then asks callgrind to dump what it counted since the last dump, labelled. With
# --instr-atstart=no only the compiled plane's C loops are counted (they switch instrumentation on
# for themselves): the data path, every operation's work; the Python around them runs once a
# run, and the slope would cancel it anyway. A pyverbs point instruments its whole run instead
# (its per-operation work is Python). perftest's server and client are each counted whole.
PERFTEST_PORT = 18515
PERFTEST_BW = {"tx_depth": 128, "cq_mod": 100}    # perftest's defaults (-t, -Q), netbench's too
# (point, unit of one operation, netbench benchmark, params, sizes, perftest tool, its args)
RDMA_POINTS = [
    ("rdma_write_lat_2", "round trip of 2 B", "rdma.write_lat", {"msg_size": 2},
     (1000, 10000), "ib_write_lat", ["-s", "2"]),
    ("rdma_read_lat_2", "RDMA READ of 2 B", "rdma.read_lat", {"msg_size": 2},
     (1000, 10000), "ib_read_lat", ["-s", "2"]),
    ("rdma_send_lat_2", "round trip of 2 B", "rdma.send_lat", {"msg_size": 2},
     (1000, 10000), "ib_send_lat", ["-s", "2"]),
    ("rdma_write_rate_64", "64 B RDMA WRITE", "rdma.write_bw", {"msg_size": 64, **PERFTEST_BW},
     (2000, 20000), "ib_write_bw", ["-s", "64"]),
    ("rdma_write_bw_4k", "4 KiB RDMA WRITE", "rdma.write_bw", {"msg_size": 4096, **PERFTEST_BW},
     (2000, 20000), "ib_write_bw", ["-s", "4096"]),
    ("rdma_write_rate_64_qps4", "64 B RDMA WRITE, 4 QPs", "rdma.write_bw",
     {"msg_size": 64, "qps": 4, **PERFTEST_BW}, (1000, 10000), "ib_write_bw",
     ["-s", "64", "-q", "4"]),
    ("rdma_write_rate_64_qps16", "64 B RDMA WRITE, 16 QPs", "rdma.write_bw",
     {"msg_size": 64, "qps": 16, **PERFTEST_BW}, (250, 2500), "ib_write_bw",
     ["-s", "64", "-q", "16"]),
    # Four threads at each end, each its own QP and CQ: each thread's loop alone costs what
    # one thread's does (perftest has no threads: its one process is the reference per op).
    ("rdma_write_rate_64_threads4", "64 B RDMA WRITE, 4 threads", "rdma.write_bw",
     {"msg_size": 64, "threads": 4, **PERFTEST_BW}, (1000, 10000), "ib_write_bw", ["-s", "64"]),
    # perftest signals once a chain with a post list (-Q must divide -l), and wants iterations
    # a multiple of the chain: the same here (rdma_jobs rounds the sizes).
    ("rdma_write_rate_64_post16", "64 B RDMA WRITE, chains of 16", "rdma.write_bw",
     {"msg_size": 64, "post_list": 16, "tx_depth": 128, "cq_mod": 16}, (2000, 20000),
     "ib_write_bw", ["-s", "64", "-l", "16", "-Q", "16"]),
    ("rdma_write_lat_2_pyverbs", "round trip of 2 B", "rdma.write_lat", {"msg_size": 2},
     (200, 1000), "ib_write_lat", ["-s", "2"]),
    ("rdma_write_rate_64_pyverbs", "64 B RDMA WRITE", "rdma.write_bw",
     {"msg_size": 64, **PERFTEST_BW}, (400, 2000), "ib_write_bw", ["-s", "64"]),
    ("rdma_read_lat_2_pyverbs", "RDMA READ of 2 B", "rdma.read_lat", {"msg_size": 2},
     (200, 1000), "ib_read_lat", ["-s", "2"]),
    ("rdma_send_lat_2_pyverbs", "round trip of 2 B", "rdma.send_lat", {"msg_size": 2},
     (200, 1000), "ib_send_lat", ["-s", "2"]),
    ("rdma_write_bw_4k_pyverbs", "4 KiB RDMA WRITE", "rdma.write_bw",
     {"msg_size": 4096, **PERFTEST_BW}, (400, 2000), "ib_write_bw", ["-s", "4096"]),
]


def rdma_jobs(points: list[tuple], scale: float, device: str, gid: int,
              work: Path) -> list[dict]:
    """What the counted netbench process runs: each point at its two sizes, loopback (both
    ends in this one process, so both are counted), into a JSON-lines file per run."""
    jobs = []
    for name, _unit, bench, params, sizes, _tool, _args in points:
        plane = "pyverbs" if name.endswith("_pyverbs") else "compiled"
        chain = int(params.get("post_list", 1))
        counts = [max(1, round(s * scale / chain)) * chain for s in sizes]
        # A whole-run point's first run pays first use (lazy imports, the interpreter's
        # specialising) that its second would not: a run before them, counted and ignored.
        for n in ([counts[0]] if plane == "pyverbs" else []) + counts:
            warmup = plane == "pyverbs" and not any(j["point"] == name for j in jobs)
            rows = work / f"nb-{name}-{n}{'-warm-up' if warmup else ''}.jsonl"
            argv = ["run", bench, "--no-counters", "--jsonl", str(rows),
                    "-p", f"device={device}", "-p", f"gid_index={gid}",
                    "-p", f"iterations={n}", "-p", "warmup=0",
                    "-p", f"data_plane={plane}"]
            for key, value in params.items():
                argv += ["-p", f"{key}={value}"]
            streams = int(params.get("qps", 1)) * int(params.get("threads", 1))
            jobs.append({"label": f"{'warm-up ' if warmup else ''}{name} {n}", "point": name,
                         "n": n, "ops": n * streams, "argv": argv,
                         "rows": str(rows), "whole": plane == "pyverbs", "plane": plane,
                         "warmup": warmup})
    return jobs


def rdma_child(spec: Path) -> int:
    """Inside valgrind: run the jobs, dumping callgrind's count after each."""
    from netbench.cli import main as netbench_main
    try:
        from netbench.benchmarks.rdma import _verbsloop as vl
    except ImportError as exc:
        print(f"instructions_per_op: the compiled RDMA plane is not built here ({exc}): a "
              "compiler and libibverbs-dev, then `make setup`", file=sys.stderr)
        return 3
    if not vl.COUNTABLE:
        print("instructions_per_op: this build of the RDMA loops has no callgrind requests "
              "(valgrind's callgrind.h was missing when it was built: install valgrind, then "
              "`make setup`)", file=sys.stderr)
        return 3
    for job in json.loads(spec.read_text()):
        if job["whole"]:
            vl.count_instrument(True)
        try:
            rc = netbench_main(job["argv"])
        except SystemExit as exc:      # argparse's way of refusing
            rc = exc.code if isinstance(exc.code, int) else 2
        except Exception as exc:       # one run's failure must not lose the others' counts
            print(f"instructions_per_op: {job['label']}: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            rc = "internal"
        if job["whole"]:
            vl.count_instrument(False)
        vl.count_dump(job["label"] if rc == 0 else f"{job['label']} failed {rc}")
    return 0


TRIGGER = "desc: Trigger: Client Request: "


def dumps(directory: Path) -> dict[str, tuple[int, Path]]:
    """label -> (instructions, file) of each labelled dump callgrind wrote in ``directory``."""
    out = {}
    for path in directory.glob("cg.*"):
        label, total = None, None
        for line in path.read_text(errors="replace").splitlines():
            if line.startswith(TRIGGER):
                label = line[len(TRIGGER):].strip()
            elif line.startswith("totals:"):
                total = int(line.split()[1])
        if label is not None and total is not None:
            out[label] = (total, path)
    return out


def job_failure(job: dict, counts: dict[str, tuple[int, Path]]) -> str | None:
    """Why a counted netbench run cannot be used, or None."""
    if job["label"] not in counts:
        failed = [k for k in counts if k.startswith(job["label"] + " failed")]
        code = failed[0].rsplit(" ", 1)[1] if failed else ""
        if code == "internal":
            return "netbench raised (said above)"
        return (f"netbench exited {code}" if failed else
                "no count for it (the counted process stopped before it)")
    try:
        rows = [json.loads(line) for line in Path(job["rows"]).read_text().splitlines()
                if line.strip()]
    except OSError as exc:
        return f"its rows are unreadable: {exc}"
    bad = [r for r in rows if r.get("status") != "ok"]
    if bad or not rows:
        return f"netbench: {bad[0].get('reason') if bad else 'no rows'}"
    resolved = json.loads(rows[0].get("resolved") or "{}")
    if resolved.get("data_plane", job["plane"]) != job["plane"]:
        return f"data_plane={job['plane']} ran as {resolved['data_plane']}"
    return None


def count_netbench_rdma(jobs: list[dict], work: Path,
                        timeout: float | None = None) -> dict[str, tuple[int, Path]]:
    """Every job's count. The compiled plane's jobs run in one process where only the loops'
    own thread collects (--collect-atstart=no: the runner's other threads wake with time);
    the pyverbs plane's in another, instrumented whole around each run."""
    counts: dict[str, tuple[int, Path]] = {}
    for whole in (False, True):
        mine = [j for j in jobs if j["whole"] == whole]
        if not mine:
            continue
        out = Path(tempfile.mkdtemp(prefix="cg-rdma-", dir=work))
        spec = work / f"rdma-jobs-{int(whole)}.json"
        spec.write_text(json.dumps(mine))
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               *([] if whole else ["--collect-atstart=no"]),
               f"--callgrind-out-file={out}/cg.%p", sys.executable,
               str(Path(__file__).resolve()), "--rdma-child", str(spec)]
        limit = timeout or RUN_TIMEOUT * (1 + len(mine) / 2)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=limit)
        except subprocess.TimeoutExpired:
            raise PointFailed(f"the counted netbench process took over {limit:.0f} s") \
                from None
        if proc.returncode != 0:
            said = [ln for ln in proc.stderr.splitlines()
                    if ln.strip() and not ln.startswith("==")] or ["no output"]
            raise PointFailed(f"the counted netbench process exited {proc.returncode}: "
                              f"{said[-1][:300]}")
        for line in proc.stderr.splitlines():      # a run that failed says why
            if line.startswith("instructions_per_op: "):
                print(line, flush=True)
        counts.update(dumps(out))
    return counts


def perftest_run(tool: str, args: list[str], device: str, gid: int, addr: str,
                 per_size: dict[int, dict[str, int]]) -> Callable[[int, Path], tuple[int, float]]:
    """A perftest point's run (-n is per QP, as netbench's iterations); ``per_size`` gets each
    size's counts per shared object. -F: run whatever the CPU's frequency driver (an emulated
    CPU has none that perftest trusts, and its bandwidth tools refuse)."""
    qps = int(args[args.index("-q") + 1]) if "-q" in args else 1
    def run(n: int, work: Path) -> tuple[int, float]:
        if not shutil.which(tool):
            raise PointFailed(f"{tool} is not installed (Debian: perftest)")
        common = [tool, "-d", device, "-x", str(gid), *args, "-n", str(n), "-F",
                  "-p", str(PERFTEST_PORT)]
        per_size[n] = {}
        count, _ = counted([*common, addr], work, server=common, port=PERFTEST_PORT,
                           stop_server=False, objects=per_size[n])
        return count, float(n * qps)
    return run


def share(small: dict[str, int], large: dict[str, int], ops: float) -> dict[str, float]:
    """Instructions per operation by where they run: the verbs libraries (libibverbs and the
    provider, lib<driver>-rdmav*.so: the same for every tool on this device), libc and the
    loader, and the tool's own code (its program, its extension, its interpreter)."""
    out = {"verbs": 0.0, "libc": 0.0, "own": 0.0}
    for obj in set(small) | set(large):
        per_op = (large.get(obj, 0) - small.get(obj, 0)) / ops
        kind = ("verbs" if obj.startswith("libibverbs") or "-rdmav" in obj else
                "libc" if obj.startswith(("libc.", "ld-linux")) else "own")
        out[kind] += per_op
    return out


def count_rdma_points(args: argparse.Namespace, work: Path, run_id: str, when: datetime,
                      rows: list[dict], failed: list[str]) -> None:
    points = [p for p in RDMA_POINTS if selected(p[0], args.only, [q[0] for q in RDMA_POINTS])]
    jobs = rdma_jobs(points, args.scale, args.rdma_device, args.rdma_gid, work)
    try:
        counts = count_netbench_rdma(jobs, work, args.timeout)
    except PointFailed as exc:
        for name, *_ in points:
            print(f"{name} failed: netbench: {exc}", flush=True)
            failed.append(name)
        return
    for name, unit, bench, params, _sizes, tool, tool_args in points:
        small, large = [j for j in jobs if j["point"] == name and not j["warmup"]]
        why = job_failure(small, counts) or job_failure(large, counts)
        if why is None and (counts[large["label"]][0] <= counts[small["label"]][0]):
            why = (f"counts did not grow with the operations: {small['n']} ops "
                   f"{counts[small['label']][0]:,} instructions, {large['n']} ops "
                   f"{counts[large['label']][0]:,}")
        if why is not None:
            print(f"{name} failed: netbench: {why}", flush=True)
            failed.append(name)
            continue
        ops = large["ops"] - small["ops"]
        mine = (counts[large["label"]][0] - counts[small["label"]][0]) / ops
        mine_by = share(objects_in([counts[small["label"]][1]]),
                        objects_in([counts[large["label"]][1]]), ops)
        plane = small["plane"]
        rows.append(row(run_id, when, bench, {**params, "data_plane": plane}, mine, unit,
                        "instructions", transport="rdma", device=args.rdma_device))
        # perftest's fixed part moves by ~2 M instructions between runs (it waits for its
        # peer by polling): its two sizes stay at least 1,000 and 10,000 operations apart at
        # scale 1 even where netbench's are smaller (an instrumented interpreter is slow).
        sizes = (max(small["n"], round(1000 * args.scale)),
                 max(large["n"], round(10000 * args.scale)))
        per_size: dict[int, dict[str, int]] = {}
        try:
            theirs, _ = slope(perftest_run(tool, tool_args, args.rdma_device, args.rdma_gid,
                                           args.rdma_addr, per_size), sizes, 1.0, work)
        except PointFailed as exc:
            print(f"{name} netbench {mine:,.0f} {tool} unavailable ({exc})", flush=True)
            failed.append(name)
            continue
        rows.append(row(run_id, when, f"ref.{tool}", {"point": name}, theirs, unit,
                        "instructions", transport="rdma", device=args.rdma_device))
        judge(args, name, plane == "compiled", mine, tool, theirs, unit,
              (small["ops"], large["ops"]), failed)
        # perftest is one process, one thread: its operations a size are size x QPs.
        theirs_by = share(per_size[sizes[0]], per_size[sizes[1]],
                          (sizes[1] - sizes[0]) * int(params.get("qps", 1)))
        print("  " + "; ".join(f"{kind} netbench {mine_by[kind]:,.0f} {tool} "
                               f"{theirs_by[kind]:,.0f}" for kind in mine_by), flush=True)


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
        unit_note: str, label: str, transport: str = "tcp", device: str = "lo") -> dict:
    from netbench.store import COLUMNS, SCHEMA_VERSION
    out = {name: None for name, _ in COLUMNS}
    family, _, op = bench.partition(".")
    out.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, started_at=when,
               host=socket.gethostname(), benchmark=bench, family=family, op=op,
               transport=transport, device=device, metric="instr_per_op", value=value,
               unit="instructions/op", unit_note=unit_note, better="lower", status="ok",
               case_index=0, n_samples=1, samples=[value],
               params=json.dumps({**params, "counted": "callgrind slope, user space"},
                                 sort_keys=True, separators=(",", ":")))
    return out


def selected(name: str, only: list[str], names: list[str]) -> bool:
    """--only: a token that is a point's whole name selects that point alone; any other token
    selects every point whose name has it."""
    return not only or any(o == name or (o not in names and o in name) for o in only)


def judge(args: argparse.Namespace, name: str, judged: bool, mine: float, tool: str,
          theirs: float, unit: str, ops: tuple[float, float], failed: list[str]) -> None:
    ratio = mine / theirs
    missed = judged and ratio > args.target
    failed += [name] if missed else []
    print(f"{name} netbench {mine:,.0f} {tool} {theirs:,.0f} ratio {ratio:.2f}"
          f"  (instructions a {unit}; netbench's runs {ops[0]:g} and {ops[1]:g} ops"
          f"{'; over the target ' + format(args.target, '.2f') if missed else ''}"
          f"{'' if judged else '; shown, not judged'})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="",
                    help="comma-separated: a point's whole name selects it alone; any other "
                         "text, every point whose name has it")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every run's size (fewer operations: faster, coarser)")
    ap.add_argument("--target", type=float, default=1.10,
                    help="most netbench may count per operation, x the tool's (compiled "
                         "points; the python and pyverbs points are shown, not judged)")
    ap.add_argument("--rdma-device", default="",
                    help="count the RDMA points on this device (with --rdma-addr) instead "
                         "of the TCP ones")
    ap.add_argument("--rdma-addr", default="", help="the device's IP address (perftest's)")
    ap.add_argument("--rdma-gid", type=int, default=int(os.environ.get("NETBENCH_GID", "1")),
                    help="GID index, both tools (perftest -x)")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds for the counted netbench process (RDMA; default grows with "
                         "the runs)")
    ap.add_argument("--rdma-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, default=REPO / "results" / "instructions")
    args = ap.parse_args()
    if args.rdma_child:
        return rdma_child(args.rdma_child)
    args.only = [o for o in args.only.split(",") if o]
    if not shutil.which("valgrind"):
        print("instructions_per_op: valgrind is not installed: `apt-get install valgrind` "
              "(as root; `make instructions` installs it)", file=sys.stderr)
        return 2
    if args.scale <= 0:
        print(f"instructions_per_op: --scale {args.scale}: must be > 0", file=sys.stderr)
        return 2
    names = [p[0] for p in (RDMA_POINTS if args.rdma_device else POINTS)]
    if not any(selected(n, args.only, names) for n in names):
        print(f"instructions_per_op: --only {','.join(args.only)} names no point; the points: "
              f"{', '.join(names)}", file=sys.stderr)
        return 2
    if bool(args.rdma_device) != bool(args.rdma_addr):
        print("instructions_per_op: --rdma-device and --rdma-addr go together",
              file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="nb-instr-"))
    try:
        return count_points(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def count_points(args: argparse.Namespace, work: Path) -> int:
    run_id = uuid.uuid4().hex[:12]      # a run id as netbench makes them (import checks it)
    when = datetime.now(UTC)
    rows: list[dict] = []
    failed: list[str] = []
    if args.rdma_device:
        count_rdma_points(args, work, run_id, when, rows, failed)
    for name, unit, nb_run, nb_sizes, tool, tool_run, tool_sizes in \
            ([] if args.rdma_device else POINTS):
        if not selected(name, args.only, [p[0] for p in POINTS]):
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
        judge(args, name, not name.endswith("_python"), mine, tool, theirs, unit,
              (seen[0][1], seen[1][1]), failed)
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
