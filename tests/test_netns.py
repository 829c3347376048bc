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

from netbench.run.peer import ServerProcess

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


def _veths(*namespaces: str) -> list[tuple[str, str]]:
    """(namespace, its veth end) for each namespace the shaped_pair fixture made."""
    return [(ns, next(line.split(":")[1].strip().split("@")[0] for line in subprocess.run(
        ["ip", "-n", ns, "-o", "link"], capture_output=True, text=True).stdout.splitlines()
        if "nbv" in line)) for ns in namespaces]


def _regression_suite(tmp_path):
    """suites/driver-regression.toml's own settings for tcp.stream: its [suite] (repeat),
    its tcp.stream cases and its [thresholds], nothing else (the rest needs RDMA or torch)."""
    import tomllib

    data = tomllib.loads((ROOT / "suites" / "driver-regression.toml").read_text())
    lines = ["[suite]"] + [f"{k} = {json.dumps(v)}" for k, v in data["suite"].items()]
    for case in data["case"]:
        if case["benchmark"] == "tcp.stream":
            lines += ["[[case]]"] + [f"{k} = {json.dumps(v)}" for k, v in case.items()]
    lines += ["[thresholds]"] + [f"{json.dumps(k)} = {json.dumps(v)}"
                                 for k, v in data["thresholds"].items()]
    path = tmp_path / "regression-tcp.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _suite_run(ns_a: str, server: ServerProcess, suite, results, label: str) -> None:
    proc = subprocess.run(
        ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "run", str(suite),
         "--peer", server.address, "--label", label, "--results", str(results)],
        capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.root
def test_the_regression_suite_catches_a_5_percent_slower_link_and_nothing_else(
        shaped_pair, tmp_path):
    """Known answer 2, under load: tcp.stream through a veth shaped with tbf at 200, then
    190, then 180 Mbit/s (rates the shaper decides, not a CPU shared with the hog: at 1000
    Mbit/s one CI run read a -5% step as -11% in two cases and -1% in two), one run each of
    the regression suite's own settings (its interleaved repeats are the invocations), a CPU
    hog pinned to one core through all of them (a busy shared runner): -5% and -10% are
    goodput regressions (exit 1), nothing else regressed; the other way round, improvements
    (exit 0)."""
    ns_a, ns_b, _ = shaped_pair
    results, suite = tmp_path / "r", _regression_suite(tmp_path)
    devices = _veths(ns_a, ns_b)
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))
    hog = subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {0})\n"
                            "while True:\n    pass\n"])
    try:
        for mbit in (200, 190, 180):
            for ns, dev in devices:
                _reshape(ns, dev, mbit)
            _suite_run(ns_a, server, suite, results, f"tbf{mbit}")
    finally:
        hog.kill()
        hog.wait()
        server.stop()

    def compare(a: str, b: str) -> tuple[int, dict]:
        proc = subprocess.run([sys.executable, "-m", "netbench", "compare", a, b, "--results",
                               str(results), "--thresholds", str(suite), "--json"],
                              capture_output=True, text=True, cwd=ROOT)
        verdicts = {}
        for v in json.loads(proc.stdout)["verdicts"]:
            verdicts.setdefault(v["metric"], []).append(v)
        print(a, "->", b, [(v["params"], round(v["change"], 4), v["verdict"], v["p_adjusted"])
                           for v in verdicts["goodput"]])
        return proc.returncode, verdicts

    for slower, drop in (("tbf190", 0.05), ("tbf180", 0.10)):
        rc, verdicts = compare("tbf200", slower)
        assert rc == 1
        goodput = verdicts["goodput"]
        caught = [v for v in goodput if v["verdict"] == "regressed"]
        # On a quiet machine every case reads the shaped rate and is caught; on a saturated
        # one a single stream can fall short of the shaper in some invocations (0.68-0.94 of
        # it, measured with both cores busy): such a case is noisy (or disturbed, where other
        # work came and went), never improved, and the multi-stream cases, which keep the
        # link full, are caught regardless.
        assert all(v["change"] == pytest.approx(-drop, abs=0.02) for v in caught), caught
        assert all(v["verdict"] in ("regressed", "noisy", "disturbed") for v in goodput), goodput
        assert caught, goodput
        # Nothing else regressed. A shaped stream's CPU figures follow the rate (a client's
        # share of a core went +25% on a link 11% faster): where the work moved beyond the
        # threshold they are judged per Gbit/s of goodput, the cost of the work, and a CPU
        # per Gbit/s may rise on a slower link (fixed costs spread over fewer bits): said,
        # with the figure, never an absolute share called regressed for doing more work.
        regressed = {m for m, vs in verdicts.items() for v in vs if v["verdict"] == "regressed"}
        assert regressed - {"goodput", "goodput_fwd", "goodput_rev"} <= {
            "cpu_per_gbit", "cpu_client", "cpu_server"}, regressed
        print("regressed beside goodput:", [(m, round(v["change"], 3), v["per"]) for m, vs in
                                            verdicts.items() for v in vs
                                            if v["verdict"] == "regressed"
                                            and m.startswith("cpu_")])
        rc, verdicts = compare(slower, "tbf200")
        flagged = {m for m, vs in verdicts.items() for v in vs if v["verdict"] == "regressed"}
        assert not flagged and rc == 0, flagged
        assert all(v["verdict"] in ("improved", "noisy", "disturbed")
                   for v in verdicts["goodput"])
        assert any(v["verdict"] == "improved" for v in verdicts["goodput"]), verdicts["goodput"]


@pytest.mark.root
def test_the_stores_history_of_a_real_link_is_the_noise_model(shaped_pair, tmp_path):
    """Known answer 3 with real runs: eight nightly-like runs of one tcp.stream case through a
    veth shaped at 200 Mbit/s, then one candidate run with nothing changed (no regression),
    then one on the link shaped to 190 Mbit/s: regressed, the history named as the evidence.
    One run a side, no repeats: the history is all the evidence there is."""
    ns_a, ns_b, _ = shaped_pair
    results = tmp_path / "r"
    devices = _veths(ns_a, ns_b)
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))

    def run(label: str) -> str:
        proc = subprocess.run(
            ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "run",
             "tcp.stream", "--peer", server.address, "-p", "msg_size=1M", "-p", "streams=4",
             "-p", "duration=1.5", "-p", "warmup=0.5", "--label", label, "--results",
             str(results), "--json"], capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)[0]["run_id"]

    try:
        for ns, dev in devices:
            _reshape(ns, dev, 200)
        nightly = [run("nightly") for _ in range(8)]
        same = run("candidate-same")
        for ns, dev in devices:
            _reshape(ns, dev, 190)
        slower = run("candidate-slower")
    finally:
        server.stop()

    def goodput(candidate: str) -> tuple[int, dict]:
        # The regression suite's threshold (3%): a tbf step of -5% reads -4.99% here.
        proc = subprocess.run([sys.executable, "-m", "netbench", "compare", nightly[-1],
                               candidate, "--results", str(results), "--threshold",
                               "goodput=3%", "--json"],
                              capture_output=True, text=True, cwd=ROOT)
        (v,) = [v for v in json.loads(proc.stdout)["verdicts"] if v["metric"] == "goodput"]
        print(candidate, v["change"], v["verdict"], v["evidence"], v["p_adjusted"])
        return proc.returncode, v

    rc, v = goodput(same)
    assert rc == 0 and v["verdict"] in ("unchanged", "noisy") and v["evidence"] == "history"
    rc, v = goodput(slower)
    assert rc == 1 and v["verdict"] == "regressed", v
    # The noise model: the other seven nightly runs and the unchanged candidate, all earlier.
    assert v["evidence"] == "history" and v["history_runs"] == 8
    assert v["change"] == pytest.approx(-0.05, abs=0.015)
