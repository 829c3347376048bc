"""`netbench healthcheck`: a node's quick check, judged, and what it does in a real Slurm
(the one-node cluster `make slurm` starts; CI starts it before the tests): a failing check
drains the node with its reason, a passing one resumes only a node netbench drained and never
touches one an admin drained for another reason; Slurm out of reach drains nothing and the
check keeps its own exit code."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, assert_clean_error, netbench
from test_expectations import _ndr_tree
from test_slurm import slurm_node  # noqa: F401  (the fixture: the cluster, or skip/fail)

SPEC = ('[suite]\nname = "hc"\n\n[healthcheck]\n{expect}\n\n'
        '[[case]]\nbenchmark = "mem.copy"\nmsg_size = "1M"\niterations = 3\n\n'
        '[[check]]\nname = "host memory copies"\nbenchmark = "mem.copy"\nmetric = "bw"\n'
        'min = 0.001\n')


def _spec(tmp_path: Path, expect: str, name: str = "hc.toml") -> Path:
    path = tmp_path / name
    path.write_text(SPEC.format(expect=expect))
    return path


def _node(name: str) -> tuple[str, str]:
    text = subprocess.run(["scontrol", "show", "node", name, "--oneliner"], capture_output=True,
                          text=True, timeout=15).stdout
    state = text.split("State=", 1)[1].split()[0]
    reason = text.split(" Reason=", 1)[1].rsplit(" [", 1)[0] if " Reason=" in text else ""
    return state, reason


def _set(node: str, *args: str) -> None:
    subprocess.run(["scontrol", "update", f"NodeName={node}", *args], check=True,
                   capture_output=True, timeout=15)


def test_a_node_check_judges_ports_and_the_counters_grown_since_the_last_check(tmp_path):
    """A captured tree with a ConnectX-7 port (test_expectations' NDR tree) and its counters:
    the first check records them, a link_downed grown by two fails the next, naming the port;
    a port gone DOWN fails the port check with what it expected."""
    tree = _ndr_tree(tmp_path)
    port = tree / "devices/pci0000:00/0000:00:07.0/infiniband/mlx5_0/ports/1"
    (port / "counters").mkdir()
    for name in ("link_downed", "symbol_error"):
        (port / "counters" / name).write_text("0\n")
    spec = _spec(tmp_path, 'rdma_ports = 1\nrate_gbps = 400\nlink_width = "4X"\n'
                           'link_layer = "InfiniBand"\n'
                           'since_last = { link_downed = 0, symbol_error = 0 }')
    args = ("healthcheck", str(spec), "--results", str(tmp_path / "r"), "--sysfs-root",
            str(tree))
    first = netbench(*args)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "PASS  rdma ports: 1 RDMA port(s) active at 400 Gb/sec" in first.stdout
    assert "first check here: counters recorded" in first.stdout
    assert "netbench healthcheck: PASS (3 checks)" in first.stdout
    (port / "counters" / "link_downed").write_text("2\n")
    second = netbench(*args)
    assert second.returncode == 1, second.stdout
    assert ("netbench healthcheck: FAIL: counters since the last check: link_downed +2 since "
            "the last check (mlx5_0/1), allowed 0") in second.stdout, second.stdout
    # It keeps failing until someone looks (the grown counters are not the new reference),
    # and the node is not measured meanwhile: its verdict is known.
    third = netbench(*args, "--json")
    assert third.returncode == 1 and json.loads(third.stdout)["healthy"] is False
    assert "not measured: the node fails what it must show already" in third.stdout
    (tmp_path / "r" / "_healthcheck_counters.json").unlink()      # looked at: start afresh
    assert netbench(*args).returncode == 0
    # A driver reload resets the counters: what they read now grew since, from 0.
    assert netbench(*args).returncode == 0
    (port / "counters" / "link_downed").write_text("1\n")
    assert netbench(*args).returncode == 1
    (tmp_path / "r" / "_healthcheck_counters.json").write_text(json.dumps(
        {"counters": {"rdma/mlx5_0/1/link_downed": 9, "rdma/mlx5_0/1/symbol_error": 0}}))
    reset = netbench(*args)
    assert reset.returncode == 1 and "link_downed +1 since the last check" in reset.stdout \
        and "1 counter(s) reset since: counted from 0" in reset.stdout, reset.stdout
    (tmp_path / "r" / "_healthcheck_counters.json").unlink()
    assert netbench(*args).returncode == 0
    (port / "rate").write_text("200 Gb/sec (2X NDR)\n")        # trained on half its lanes
    narrow = netbench(*args)
    assert narrow.returncode == 1 and ("mlx5_0 port 1: rate 200 Gb/sec (2X NDR), expected 400 "
                                       "Gb/sec; mlx5_0 port 1: width 2X (200 Gb/sec (2X NDR)), "
                                       "expected 4X") in narrow.stdout, narrow.stdout
    (port / "state").write_text("1: DOWN\n")
    down = netbench(*args)
    assert down.returncode == 1
    assert ("FAIL: rdma ports: 0 of 1 RDMA ports active (1 found); mlx5_0 port 1: state DOWN, "
            "expected ACTIVE") in down.stdout, down.stdout
    # Each measurement was stored as a run, as any run is.
    assert len(list((tmp_path / "r").glob("2*.parquet"))) >= 4


@pytest.fixture
def nic_down():
    """A veth pair whose one end is down: the interface a node check expects up."""
    if os.geteuid() != 0 or not shutil.which("ip"):
        pytest.skip("an interface made and taken down needs root and iproute2 (as CI runs)")
    tag = os.getpid() % 100000
    up, down = f"nbhc{tag}a", f"nbhc{tag}b"
    subprocess.run(["ip", "link", "add", up, "type", "veth", "peer", "name", down], check=True)
    try:
        subprocess.run(["ip", "link", "set", up, "up"], check=True)
        yield up
    finally:
        subprocess.run(["ip", "link", "del", up], capture_output=True)


def test_in_a_real_slurm_a_failing_check_drains_its_node_and_an_admins_drain_stays(
        slurm_node, nic_down, tmp_path):  # noqa: F811
    """A NIC down fails the check and drains the node with that reason; the same check
    passing resumes it (netbench drained it); a node an admin drained stays drained through
    a passing check."""
    failing = _spec(tmp_path, f'netdevs = ["{nic_down}"]', "failing.toml")
    passing = _spec(tmp_path, 'netdevs = ["lo"]', "passing.toml")
    results = str(tmp_path / "r")
    assert _node(slurm_node)[0].startswith(("IDLE", "MIXED", "ALLOCATED"))
    try:
        drained = netbench("healthcheck", str(failing), "--results", results, "--drain",
                           "--node", slurm_node)
        assert drained.returncode == 1, drained.stdout + drained.stderr
        reason = f"netbench: interface {nic_down}: operstate"
        assert f"slurm: drained {slurm_node}: {reason}" in drained.stdout, drained.stdout
        state, said = _node(slurm_node)
        assert "DRAIN" in state and said.startswith(reason) and "expected up" in said, said
        resumed = netbench("healthcheck", str(passing), "--results", results, "--drain",
                           "--node", slurm_node)
        assert resumed.returncode == 0, resumed.stdout
        assert f"slurm: resumed {slurm_node} (netbench had drained it" in resumed.stdout
        assert "DRAIN" not in _node(slurm_node)[0]
        _set(slurm_node, "State=DRAIN", "Reason=admin: memory test")
        kept = netbench("healthcheck", str(passing), "--results", results, "--drain",
                        "--node", slurm_node)
        assert kept.returncode == 0
        # The state as Slurm says it: a loaded CI runner's slurmd may miss a ping, and the
        # node reads IDLE+DRAIN+NOT_RESPONDING for a while.
        assert re.search(rf"slurm: {slurm_node} stays IDLE\+DRAIN[+A-Z_]* \(admin: memory "
                         r"test: not netbench's\)", kept.stdout), kept.stdout
        again = netbench("healthcheck", str(failing), "--results", results, "--drain",
                         "--node", slurm_node)
        assert again.returncode == 1 and re.search(
            r"is IDLE\+DRAIN[+A-Z_]* already \(admin: memory test\): left as it is",
            again.stdout), again.stdout
        assert _node(slurm_node)[1] == "admin: memory test"
        unknown = netbench("healthcheck", str(failing), "--results", results, "--drain",
                           "--node", "no-such-node")
        assert unknown.returncode == 1 and "no-such-node" in unknown.stdout \
            and "nothing drained" in unknown.stdout and not unknown.stderr, unknown.stdout
    finally:
        _set(slurm_node, "State=RESUME")
    assert "DRAIN" not in _node(slurm_node)[0]


def test_without_scontrol_a_failing_check_says_so_drains_nothing_and_keeps_its_code(
        tmp_path):
    spec = _spec(tmp_path, 'netdevs = ["no-such-nic0"]')
    env = {**os.environ, "PATH": str(Path(os.__file__).parent)}     # no scontrol on it
    done = subprocess.run([sys.executable, "-m", "netbench", "healthcheck",
                           str(spec), "--results", str(tmp_path / "r"), "--drain"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "interface no-such-nic0: not found" in done.stdout
    assert "slurm: scontrol is not installed" in done.stdout and "nothing drained" \
        in done.stdout


@pytest.mark.parametrize("expect, needle", [
    ("gpu_count = 0", "[healthcheck] gpu_count = 0: a positive number"),
    ("rate = 400", "[healthcheck] unknown key 'rate'; accepted: rdma_names, rdma_ports"),
    ('since_last = { link_downed = -1 }', "[healthcheck] since_last: counter name = the growth"),
    ('netdevs = "eth0"', "[healthcheck] netdevs = 'eth0': a list")])
def test_a_bad_healthcheck_table_is_refused_naming_the_file_and_key(tmp_path, expect, needle):
    spec = _spec(tmp_path, expect)
    assert_clean_error(netbench("healthcheck", str(spec), "--results", str(tmp_path / "r")),
                       f"{spec}: {needle}")


def test_an_unreadable_state_file_is_said_and_the_counters_recorded_afresh(tmp_path):
    spec = _spec(tmp_path, 'since_last = { carrier_changes = 1000000 }')
    results = tmp_path / "r"
    results.mkdir()
    (results / "_healthcheck_counters.json").write_text("{not json")
    done = netbench("healthcheck", str(spec), "--results", str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "_healthcheck_counters.json: unreadable" in done.stdout
    assert json.loads((results / "_healthcheck_counters.json").read_text())["counters"]


def test_with_the_controller_down_a_failing_check_says_so_and_drains_nothing(tmp_path):
    """slurm.conf pointing scontrol at a controller port nothing listens on (the controller
    down, as scontrol sees it): the check's own failure and exit code stand, bounded."""
    conf = Path("/etc/slurm/slurm.conf")
    if not shutil.which("scontrol") or not conf.is_file():
        pytest.skip("needs scontrol and a slurm.conf (make slurm)")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]       # closed again when the check runs
    text = "\n".join(line for line in conf.read_text().splitlines()
                     if not line.startswith("SlurmctldPort"))
    (tmp_path / "slurm.conf").write_text(f"{text}\nSlurmctldPort={dead}\n")
    spec = _spec(tmp_path, 'netdevs = ["no-such-nic0"]')
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "netbench", "healthcheck", str(spec),
                           "--results", str(tmp_path / "r"), "--drain"], capture_output=True,
                          text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Unable to contact slurm controller" in done.stdout and "nothing drained" \
        in done.stdout, done.stdout
    assert time.monotonic() - started < 60


def test_a_failed_case_fails_its_check_and_a_required_benchmark_skipped_fails(tmp_path):
    """One case of two failing (a timeout) fails the check though the other measured; a
    benchmark the node must run (must_run) skipped for want of its hardware fails, where
    otherwise it would not apply."""
    spec = tmp_path / "mixed.toml"
    spec.write_text('[suite]\nname = "hc"\n\n[healthcheck]\nmust_run = ["gpu.h2d"]\n\n'
                    '[[case]]\nbenchmark = "mem.copy"\nmsg_size = ["1M", "256M"]\n'
                    'iterations = 3\ntimeout = 0.05\n\n'
                    '[[case]]\nbenchmark = "gpu.h2d"\nmsg_size = "1M"\n\n'
                    '[[check]]\nname = "copies"\nbenchmark = "mem.copy"\nmetric = "bw"\n'
                    'min = 0.001\n\n[[check]]\nname = "gpu copies"\nbenchmark = "gpu.h2d"\n'
                    'metric = "bw"\nmin = 0.001\n')
    done = netbench("healthcheck", str(spec), "--results", str(tmp_path / "r"))
    assert done.returncode == 1, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert any(line.startswith("  FAIL  copies: ") and "case(s) failed" in line
               for line in lines), done.stdout
    assert any(line.startswith("  FAIL  gpu copies: skipped, and this node must run gpu.h2d")
               for line in lines), done.stdout


def test_check_names_given_twice_are_refused(tmp_path):
    spec = _spec(tmp_path, "")
    spec.write_text(spec.read_text() + spec.read_text().split("\n\n", 3)[-1])
    assert_clean_error(netbench("healthcheck", str(spec), "--results", str(tmp_path / "r")),
                       "[[check]] name 'host memory copies' is given twice")


FAKE_SCONTROL = """#!/bin/sh
# A stand-in scontrol: a node in the state the test sets, every update logged.
if [ "$1" = show ]; then
  printf 'NodeName=%s Arch=x86_64 State=%s ThreadsPerCore=1 ' "$3" "$FAKE_STATE"
  echo "Reason=$FAKE_REASON [root@2026-12-06T07:00:00] Comment=(null)"
else
  echo "$@" >> "$FAKE_LOG"
fi
"""


@pytest.mark.parametrize("state, reason, failing, want", [
    ("DOWN+DRAIN", "netbench: link down", False, "stays DOWN+DRAIN"),   # no RESUME of a DOWN
    ("DOWN", "admin: PSU", True, "is DOWN already (admin: PSU): left as it is"),
    ("IDLE+DRAIN+MAINT", "netbench: x", False, "stays IDLE+DRAIN+MAINT"),
    ("IDLE+DRAIN", "netbench: link down", False, "resumed n1"),
    ("MIXED", "", True, "drained n1: netbench: interface"),
    # A missed ping (a loaded node) is not an admin's state: the check still acts.
    ("IDLE+NOT_RESPONDING", "", True, "drained n1: netbench: interface"),
    ("IDLE+DRAIN+NOT_RESPONDING", "netbench: link down", False, "resumed n1")])
def test_a_check_acts_only_on_a_node_in_service_and_never_on_an_admins_state(
        tmp_path, state, reason, failing, want):
    """scontrol stood in by a script (the real one would change this machine's node): a
    DOWN, FAILed or MAINT node, or one with an admin's reason, is never resumed nor drained
    over; only a node netbench drained, in service, is resumed."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL)
    (bin_dir / "scontrol").chmod(0o755)
    log = tmp_path / "updates.log"
    spec = _spec(tmp_path, f'netdevs = ["{"no-such-nic0" if failing else "lo"}"]')
    done = subprocess.run([sys.executable, "-m", "netbench", "healthcheck", str(spec),
                           "--results", str(tmp_path / "r"), "--drain", "--node", "n1"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT,
                          env={**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
                               "FAKE_STATE": state, "FAKE_REASON": reason,
                               "FAKE_LOG": str(log)})
    assert done.returncode == (1 if failing else 0), done.stdout + done.stderr
    assert want in done.stdout, done.stdout
    updates = log.read_text() if log.exists() else ""
    acted = want.startswith(("resumed", "drained"))
    assert bool(updates) == acted, updates
    if want.startswith("resumed"):
        assert updates.strip() == "update NodeName=n1 State=RESUME"


def test_a_host_list_for_a_node_is_refused_and_nothing_is_done(tmp_path):
    spec = _spec(tmp_path, 'netdevs = ["lo"]')
    done = netbench("healthcheck", str(spec), "--results", str(tmp_path / "r"), "--drain",
                    "--node", "n[01-64]")
    assert done.returncode == 0 and "node name 'n[01-64]': one node's name" in done.stdout \
        and "nothing resumed" in done.stdout, done.stdout


def test_only_the_named_rdma_devices_are_judged(tmp_path):
    """A front-end NIC beside the fabric's (here the NDR port judged, an uncabled second port
    of another device left out by rdma_names)."""
    tree = _ndr_tree(tmp_path)
    other = tree / "devices/pci0000:00/0000:00:07.0/infiniband/mlx5_9"
    (other / "ports" / "1").mkdir(parents=True)
    for name, text in {"rate": "25 Gb/sec (1X EDR)", "link_layer": "Ethernet",
                       "state": "1: DOWN", "phys_state": "3: Disabled"}.items():
        (other / "ports" / "1" / name).write_text(text + "\n")
    (tree / "class" / "infiniband" / "mlx5_9").symlink_to(
        "../../devices/pci0000:00/0000:00:07.0/infiniband/mlx5_9")
    every = _spec(tmp_path, 'rdma_ports = 1\nrate_gbps = 400', "every.toml")
    named = _spec(tmp_path, 'rdma_names = ["mlx5_0"]\nrdma_ports = 1\nrate_gbps = 400',
                  "named.toml")
    args = ("--results", str(tmp_path / "r"), "--sysfs-root", str(tree))
    judged_all = netbench("healthcheck", str(every), *args)
    assert judged_all.returncode == 1 and "mlx5_9 port 1: state DOWN" in judged_all.stdout
    judged_named = netbench("healthcheck", str(named), *args)
    assert judged_named.returncode == 0, judged_named.stdout


def test_a_second_check_waits_for_the_first_and_a_spec_may_measure_nothing(tmp_path):
    """Two checks of one node (HealthCheckProgram and a prolog) never measure at once: one
    holding the lock keeps the next waiting until it lets go. A spec of [healthcheck] alone
    judges the node and measures nothing."""
    import fcntl
    import threading

    results = tmp_path / "r"
    results.mkdir()
    spec = tmp_path / "node.toml"
    spec.write_text('[healthcheck]\nnetdevs = ["lo"]\n')
    fd = os.open(results / "_healthcheck.lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(1.5, os.close, (fd,)).start()
    started = time.monotonic()
    done = netbench("healthcheck", str(spec), "--results", str(results))
    assert done.returncode == 0, done.stdout + done.stderr
    assert time.monotonic() - started >= 1.4
    assert "netbench healthcheck: PASS (1 checks)" in done.stdout
    assert not list(results.glob("2*.parquet"))
