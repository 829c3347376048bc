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
