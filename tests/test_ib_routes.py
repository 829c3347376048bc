"""InfiniBand's paths as its subnet manager set them: the forwarding tables (dump_fts after
ibnetdiscover's output, one file) walked pair by pair, checked against ibtracert; a sweep over
them pins a slow uplink alone. The fixture is real output of opensm (ftree routing),
ibnetdiscover, dump_fts and ibtracert on an ibsim-simulated fabric (capture-ibsim.sh); the
live test runs those tools here, with another routing engine."""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess

import pytest
from conftest import ROOT

from netbench.analysis.adaptive import AdaptivePlanner, drive
from netbench.env import topology
from netbench.errors import UsageError
from netbench.sweep import simulate as sim

FIXTURES = ROOT / "tests" / "fixtures" / "topology"
FABRIC = FIXTURES / "ibsim-ftree-30.ib"
TRACED = FIXTURES / "ibsim-ftree-30-ibtracert.txt"
UMAD2SIM = "/usr/lib/x86_64-linux-gnu/umad2sim/libumad2sim.so"


def _traced(text: str) -> dict[tuple[str, str], tuple[str, ...]]:
    rows = (line.split() for line in text.splitlines() if line and not line.startswith("#"))
    return {(row[0], row[1]): tuple(row[2:]) for row in rows}


def test_every_pairs_path_is_the_one_ibtracert_walks():
    shape = topology.load(FABRIC)
    assert shape.routing == "dest" and shape.notes == [] and len(shape.hosts) == 30
    traced = _traced(TRACED.read_text())
    assert len(traced) == 30 * 29
    for (a, b), switches in traced.items():
        assert shape.path_to(shape.hosts[a], shape.hosts[b], b) == switches, (a, b)
    # The tables, not a guess: D-mod-K over the hosts' order picks other spines.
    shape.routes = {}
    assert sum(shape.path_to(shape.hosts[a], shape.hosts[b], b) != s
               for (a, b), s in traced.items()) > 100


def test_the_routes_are_kept_with_the_run():
    shape = topology.load(FABRIC)
    again = topology.from_json(shape.to_json())
    assert again.routing == "dest" and again.routes == shape.routes
    for a, b in list(_traced(TRACED.read_text()))[::17]:
        assert again.elements_pinned(a, b) == shape.elements_pinned(a, b)


@pytest.mark.parametrize("fault", ["link:leaf3--spine1", "link:spine2->leaf5"])
def test_a_slow_uplink_under_the_subnet_managers_routes_is_named_alone(fault):
    shape = topology.load(FABRIC)
    names = sorted(shape.hosts)
    fabric = sim.FabricSim(shape, faults={fault: 0.25}, noise=0.05, seed=3)
    planner = AdaptivePlanner(names, shape, seed=3)
    drive(planner, lambda pairs, number: fabric.measure(
        [(names[c], names[s]) for c, s in pairs], salt=number))
    verdict = planner.verdict()
    assert [s.elements for s in verdict.suspects] == [[fault]], verdict.suspects
    assert verdict.blamed_hosts == [] and len(planner.log) < 29   # all-pairs: 29 a way


def test_a_table_line_it_cannot_read_is_named(tmp_path):
    text = FABRIC.read_text().replace("0x0003 008 :", "0x0003 five :", 1)
    bad = tmp_path / "fabric.ib"
    bad.write_text(text)
    number = text.splitlines().index(next(line for line in text.splitlines()
                                          if "0x0003 five" in line)) + 1
    with pytest.raises(UsageError, match=rf"fabric.ib line {number}: .* forwarding table"):
        topology.load(bad)


def test_a_switch_without_its_table_leaves_its_pairs_without_a_path(tmp_path):
    text = FABRIC.read_text()
    blocks = re.split(r"(?m)^(?=Unicast lids)", text)
    kept = [b for b in blocks if "(spine1):" not in b]           # spine1's table lost
    assert len(kept) == len(blocks) - 1
    cut = tmp_path / "fabric.ib"
    cut.write_text("".join(kept))
    shape = topology.load(cut)
    assert any("lack 30 (switch, host) route(s)" in note for note in shape.notes), shape.notes
    through = [(a, b) for (a, b), s in _traced(TRACED.read_text()).items() if "spine1" in s]
    assert through and all(shape.elements_pinned(a, b) == {} for a, b in through)
    assert shape.elements_pinned("n0000", "n0001")            # one leaf: no spine needed


@pytest.mark.skipif(not (shutil.which("ibsim") and shutil.which("opensm")
                         and shutil.which("dump_fts") and os.path.exists(UMAD2SIM)),
                    reason="needs ibsim-utils, opensm and infiniband-diags (make sysdeps)")
def test_live_opensm_tables_read_back_match_ibtracert(tmp_path):
    """opensm's minhop engine on a fabric ibsim simulates: the file the user writes with
    ibnetdiscover and dump_fts gives the path ibtracert walks, pair by pair."""
    script = FIXTURES / "capture-ibsim.sh"
    run = subprocess.run([str(script), str(tmp_path), "4", "3", "4", "minhop"],
                         capture_output=True, text=True, timeout=300)
    try:
        assert run.returncode == 0, run.stderr + (tmp_path / "opensm.out").read_text()
        shape = topology.load(tmp_path / "fabric.ib")
        assert shape.routing == "dest" and len(shape.hosts) == 16 and shape.notes == []
        lids = {m.group(1): m.group(2) for m in re.finditer(
            r'"H-[0-9a-f]+"\[1\]\([0-9a-f]+\)\s+#\s+"(\S+)" lid (\d+)',
            (tmp_path / "fabric.ib").read_text())}
        rng = random.Random(0)
        pairs = [tuple(rng.sample(sorted(lids), 2)) for _ in range(24)]
        env = dict(os.environ, LD_PRELOAD=UMAD2SIM)
        for a, b in pairs:
            out = subprocess.run(["ibtracert", lids[a], lids[b]], capture_output=True,
                                 text=True, timeout=30, env=env).stdout
            switches = tuple(re.findall(r'switch port \{[^}]*\}\[\d+\] lid [\d-]+ "(\S+)"',
                                        out))
            assert switches and shape.path_to(shape.hosts[a], shape.hosts[b], b) == switches
    finally:
        pid = (tmp_path / "ibsim.pid")
        if pid.exists():
            os.kill(int(pid.read_text()), signal.SIGTERM)
