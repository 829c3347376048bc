"""`netbench healthcheck`: a node's quick check, judged, and what it does in a real Slurm
(the one-node cluster `make slurm` starts; CI starts it before the tests): a failing check
drains the node with its reason, a passing one resumes only a node netbench drained and never
touches one an admin drained for another reason; Slurm out of reach drains nothing and the
check keeps its own exit code."""

from __future__ import annotations

import json
import os
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
    third = netbench(*args, "--json")                # nothing grew since the second
    assert third.returncode == 0 and json.loads(third.stdout)["healthy"] is True
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
    # Its measurement was stored as a run, as any run is.
    assert len(list((tmp_path / "r").glob("2*.parquet"))) == 5


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
        assert (f"slurm: {slurm_node} stays drained (admin: memory test: not netbench's)"
                in kept.stdout), kept.stdout
        again = netbench("healthcheck", str(failing), "--results", results, "--drain",
                         "--node", slurm_node)
        assert again.returncode == 1 and "is drained already (admin: memory test)" \
            in again.stdout, again.stdout
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
    ("rate = 400", "[healthcheck] unknown key 'rate'; accepted: rdma_ports, rate_gbps"),
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
