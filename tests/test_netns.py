"""tcp.stream across two real network namespaces joined by a veth pair shaped with tc tbf.

The goodput netbench reports must sit between 0.90 and 1.0 of the configured rate: TCP/IP
headers cost ~3-4% of the wire rate at MTU 1500, and goodput can never exceed the shaper.
"""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from netbench.peer import ServerProcess

RATE_MBIT = 200


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, timeout=20)


@pytest.fixture
def shaped_pair():
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root (run the tests as root, as CI does)")
    if not shutil.which("ip") or not shutil.which("tc"):
        pytest.skip("needs iproute2 (ip, tc): apt-get install iproute2")
    tag = f"{os.getpid() % 100000}"
    a, b = f"nbA{tag}", f"nbB{tag}"
    va, vb = f"nbva{tag}", f"nbvb{tag}"
    try:
        _sh("ip", "netns", "add", a)
        _sh("ip", "netns", "add", b)
    except subprocess.CalledProcessError as exc:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        pytest.skip(f"cannot create network namespaces here: {exc.stderr.decode().strip()}")
    try:
        _sh("ip", "link", "add", va, "type", "veth", "peer", "name", vb)
        _sh("ip", "link", "set", va, "netns", a)
        _sh("ip", "link", "set", vb, "netns", b)
        for ns, dev, addr in ((a, va, "10.203.0.1/24"), (b, vb, "10.203.0.2/24")):
            _sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            # burst must hold a whole GSO super-packet (64 KiB) or tbf drops it
            _sh("tc", "-n", ns, "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                f"{RATE_MBIT}mbit", "burst", "256kb", "latency", "100ms")
        yield a, b, va
    finally:
        subprocess.run(["ip", "netns", "del", a], capture_output=True)
        subprocess.run(["ip", "netns", "del", b], capture_output=True)


@pytest.mark.root
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_goodput_matches_tbf_rate(shaped_pair, tmp_path, direction):
    ns_a, ns_b, dev_a = shaped_pair
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))
    try:
        proc = subprocess.run(
            ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "run",
             "tcp.stream", "--peer", server.address, "-p", "duration=3", "-p", "warmup=1",
             "-p", f"direction={direction}", "--results", str(tmp_path), "--json"],
            capture_output=True, text=True, timeout=120, cwd=ROOT)
    finally:
        server.stop()
    assert proc.returncode == 0, proc.stderr
    rows = {r["metric"]: r for r in json.loads(proc.stdout)}
    goodput_mbit = rows["goodput"]["value"] * 1000
    ratio = goodput_mbit / RATE_MBIT
    print(f"{direction}: goodput {goodput_mbit:.1f} Mbit/s through tbf {RATE_MBIT} Mbit/s "
          f"= {ratio:.3f}")
    assert 0.90 <= ratio <= 1.0
    assert rows["goodput"]["device"] == dev_a
    assert rows["goodput"]["peer"] == server.address


def _reshape(ns: str, dev: str, mbit: int) -> None:
    _sh("tc", "-n", ns, "qdisc", "change", "dev", dev, "root", "tbf", "rate", f"{mbit}mbit",
        "burst", "256kb", "latency", "100ms")


def _stream_run(ns_a: str, server: ServerProcess, results, label: str) -> None:
    proc = subprocess.run(
        ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "run", "tcp.stream",
         "--peer", server.address, "-p", "duration=3", "-p", "warmup=1", "-p",
         "interval=0.1", "--label", label, "--results", str(results)],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.root
def test_compare_calls_a_shaped_20_percent_drop_a_goodput_regression(shaped_pair, tmp_path):
    """Known answers for the gate: the same path re-shaped 20% lower between two runs is a
    goodput regression (exit 1), the reverse an improvement (exit 0), and nothing else is
    called regressed (CPU figures carry no samples: inconclusive, not regressed)."""
    ns_a, ns_b, _ = shaped_pair
    results = tmp_path / "r"
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))
    try:
        _stream_run(ns_a, server, results, "fast")
        for ns in (ns_a, ns_b):
            dev = next(line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
                ["ip", "-n", ns, "-o", "link"], capture_output=True, text=True).stdout
                .splitlines() if "nbv" in line)
            _reshape(ns, dev, int(RATE_MBIT * 0.8))
        _stream_run(ns_a, server, results, "slow")
    finally:
        server.stop()
    down = subprocess.run([sys.executable, "-m", "netbench", "compare", "fast", "slow",
                           "--results", str(results), "--json"],
                          capture_output=True, text=True, cwd=ROOT)
    assert down.returncode == 1, down.stdout + down.stderr
    verdicts = {v["metric"]: v for v in json.loads(down.stdout)["verdicts"]}
    assert verdicts["goodput"]["verdict"] == "regressed"
    assert verdicts["goodput"]["change"] == pytest.approx(-0.2, abs=0.05)
    regressed = {m for m, v in verdicts.items() if v["verdict"] == "regressed"}
    assert regressed <= {"goodput", "goodput_fwd"}, regressed
    up = subprocess.run([sys.executable, "-m", "netbench", "compare", "slow", "fast",
                         "--results", str(results), "--json"],
                        capture_output=True, text=True, cwd=ROOT)
    assert up.returncode == 0, up.stdout
    verdicts = {v["metric"]: v for v in json.loads(up.stdout)["verdicts"]}
    assert verdicts["goodput"]["verdict"] == "improved"
