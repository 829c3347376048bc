#!/usr/bin/python3
"""netbench's RDMA figures beside perftest's, on the same device in the same VM boot.

    crosscheck.py DEVICE ADDR OUT_DIR

Runs ib_write_bw (64 KiB and 1 MiB) and ib_write_lat (2 B) server+client, and netbench's
rdma.write_bw / rdma.write_lat through `netbench serve` + `--peer` (two processes, as perftest
runs), alternating, and prints each pair and its ratio. On an emulated device (rxe under TCG)
the numbers are noisy and slow; the ratio shows both tools see the device the same way. Exits
non-zero only when a tool fails, never on a ratio. Standard library only: Python is ~50x slower
in the VM.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = [sys.executable, "-m", "netbench"]


def wait_port(host: str, port: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection((host, port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {host}:{port}")


def listening(port: int) -> bool:
    out = subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout
    return f":{port} " in out


def perftest(tool: str, device: str, addr: str, size: int, iters: int) -> dict[str, float]:
    args = [tool, "-d", device, "-x", "1", "-s", str(size), "-n", str(iters), "-F"]
    if tool.endswith("_bw"):
        args.append("--report_gbits")
    server = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        while not listening(18515):            # perftest's out-of-band port
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"{tool} server did not start")
            time.sleep(0.2)
        client = subprocess.run([*args, addr], capture_output=True, text=True, timeout=300)
    finally:
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
    if client.returncode != 0:
        raise RuntimeError(f"{tool} failed: {client.stdout[-500:]} {client.stderr[-500:]}")
    # The result line: "#bytes #iterations ..." header, then one line of numbers.
    lines = [ln.split() for ln in client.stdout.splitlines()
             if re.match(r"^\s*\d+\s+\d+\s+[\d.]+", ln)]
    if not lines:
        raise RuntimeError(f"{tool}: no result line in its output")
    fields = [float(x) for x in lines[-1]]
    if tool.endswith("_bw"):    # bytes iterations bw_peak bw_avg msg_rate
        return {"bw_peak": fields[2], "bw_avg": fields[3], "msg_rate": fields[4]}
    # bytes iterations t_min t_max t_typical t_avg t_stdev p99 p99.9
    return {"lat_min": fields[2], "lat_max": fields[3], "lat_p50": fields[4],
            "lat_avg": fields[5], "lat_p99": fields[7]}


def netbench(benchmark: str, addr: str, size: int, iters: int, out: Path) -> dict[str, float]:
    rows = out / f"crosscheck-{benchmark}-{size}.jsonl"
    proc = subprocess.run([*PY, "run", benchmark, "--peer", f"{addr}:5301", "-p",
                           f"msg_size={size}", "-p", f"iterations={iters}", "--jsonl", str(rows),
                           "--label", "softroce-crosscheck"], capture_output=True, text=True,
                          timeout=600, cwd=REPO)
    if proc.returncode != 0:
        raise RuntimeError(f"netbench {benchmark} failed: {proc.stderr[-800:]}")
    values = {}
    for line in rows.read_text().splitlines():
        row = json.loads(line)
        if row["status"] == "ok":
            values[row["metric"]] = row["value"]
    return values


def main() -> int:
    device, addr, out = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    server = subprocess.Popen([*PY, "serve", "--bind", addr, "--port", "5301", "--quiet"],
                              cwd=REPO, stdout=subprocess.DEVNULL)
    failures = 0
    try:
        wait_port(addr, 5301)
        checks = [("rdma.write_bw", "ib_write_bw", 65536, 300, "bw_avg", "Gbit/s"),
                  ("rdma.write_bw", "ib_write_bw", 1 << 20, 40, "bw_avg", "Gbit/s"),
                  ("rdma.write_lat", "ib_write_lat", 2, 500, "lat_p50", "us")]
        print(f"cross-check on {device} (emulated: functional, not performance)")
        for bench, tool, size, iters, metric, unit in checks:
            try:
                ref = perftest(tool, device, addr, size, iters)[metric]
                nb = netbench(bench, addr, size, iters, out)[metric]
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"  {bench} {size} B: FAILED: {exc}")
                failures += 1
                continue
            print(f"  {bench:<15} {size:>8} B  netbench {metric} {nb:9.3f} {unit}   "
                  f"{tool} {ref:9.3f} {unit}   ratio {nb / ref:.2f}")
    finally:
        server.terminate()
        server.wait(30)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
