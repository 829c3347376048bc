"""The fabric's shape in (Slurm topology.conf, netbench TOML, inferred), and the verdict it
makes possible: the element that is broken named, the healthy hosts beside it not blamed.
Pairs come from the flow simulator (netbench.sweep.simulate): no test machine has the fabric."""

from __future__ import annotations

import itertools

import pytest
from conftest import ROOT

from netbench.analysis.localize import Pair, localize
from netbench.env import topology
from netbench.errors import UsageError
from netbench.sweep import simulate

FIXTURES = ROOT / "tests" / "fixtures" / "topology"


def _all_pairs(sim, hosts, k=1):
    """Every ordered pair, ``k`` at a time (k=1: nothing shared but the fault)."""
    ordered = list(itertools.permutations(sorted(hosts), 2))
    out = []
    for i in range(0, len(ordered), k):
        chunk = ordered[i:i + k]
        out += [Pair(c, s, v) for (c, s), v in zip(chunk, sim.measure(chunk))]
    return out


def test_hostlists_as_slurm_writes_them():
    assert topology.expand_hostlist("tux[0-2,7],login1") == ["tux0", "tux1", "tux2", "tux7",
                                                             "login1"]
    assert topology.expand_hostlist("gpu[007-009]") == ["gpu007", "gpu008", "gpu009"]
    assert topology.expand_hostlist("r[1-2]-n[01-02]") == ["r1-n01", "r1-n02", "r2-n01",
                                                           "r2-n02"]
    for bad in ("tux[0-", "tux[a-b]", "tux]", "tux[5-1]"):
        with pytest.raises(ValueError):
            topology.expand_hostlist(bad)


def test_slurm_topology_conf_and_toml_load_by_content():
    tree = topology.load(FIXTURES / "two-leaves.conf")
    assert tree.hosts["leafA-h3"] == "leafA" and ("core", "leafB") in tree.trunks
    assert set(tree.elements("leafA-h0", "leafB-h1")) == {
        "host:leafA-h0", "host:leafB-h1", "link:leafA--leafA-h0", "link:leafB--leafB-h1",
        "switch:leafA", "switch:core", "switch:leafB", "link:core--leafA", "link:core--leafB"}
    fabric = topology.load(FIXTURES / "leaf-spine.toml")
    assert fabric.capacity["link:leaf1--spine1"] == 10.0
    shares = fabric.elements("h1", "h5")
    assert shares["switch:spine1"] == shares["link:leaf1--spine2"] == 0.5      # ECMP
    assert shares["switch:leaf1"] == 1.0 and "switch:leaf2" not in shares


@pytest.mark.parametrize("text, needle", [
    ("SwitchName=s0 Nodes=a[0-\n", "line 1"),
    ("SwitchName=s0 Switches=s9\n", "which no SwitchName= line defines"),
    ("SwitchName=s0 Switches=s1\nSwitchName=s1 Switches=s0\n", "cycle"),
    ("Nodes=a0\nSwitchName=s0\n", "line 1: no SwitchName="),
    ("[switch.a]\nhosts = 5\n", "a list of names"),
    ("[switch.a]\nswitches = [\"b\"]\n", "b, which has no [switch.NAME] table"),
    ("[switch.a]\nports = 4\n", "unknown key(s) ports"),
    ("hello = 1\n", "accepted formats"),
    ("<xml/>", "not a format netbench reads"),
])
def test_a_bad_topology_file_is_one_clear_error(tmp_path, text, needle):
    path = tmp_path / "topo"
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        topology.load(path)
    assert needle in str(err.value) and str(path) in str(err.value)


def test_hosts_the_sweep_lacks_or_the_topology_lacks_are_named():
    tree = topology.load(FIXTURES / "two-leaves.conf")
    notes = tree.check_hosts(["leafA-h0", "leafA-h1/mlx5_0", "stranger"])
    assert any("lacks 1 host(s) of the sweep: stranger" in n for n in notes)
    assert any("has 6 host(s) the sweep did not measure" in n for n in notes)


def test_a_slow_trunk_is_named_and_no_host_blamed_inferred_or_given():
    """The bug this guards: a trunk between two leaves shaped to 0.12 of 8.5 Gbit/s made the
    host-by-host verdict blame 7 healthy hosts (every host is slow with 4 of its 7 peers), and
    the fabric's median (0.198) sat among the slow pairs."""
    shape = simulate.two_leaves(4)
    sim = simulate.FabricSim(shape, capacity=8.5, faults={"link:leafA--leafB": 0.12 / 8.5})
    pairs = _all_pairs(sim, shape.hosts)
    inferred = localize(pairs)
    assert inferred.inferred and inferred.blamed_hosts == [] and not inferred.unexplained
    assert inferred.reference > 8 and inferred.slow == 32
    (suspect,) = inferred.suspects
    assert "PATH between group0(leafA-h0..leafA-h3) and group1(leafB-h0..leafB-h3)" in \
        suspect.text(inferred=True)
    given = localize(pairs, shape)
    assert given.blamed_hosts == [] and [s.elements for s in given.suspects] == [
        ["link:leafA--leafB"]]
    assert given.suspects[0].slow == given.suspects[0].pairs == 32


def test_a_slow_host_is_named_with_the_link_it_cannot_be_told_from():
    shape = simulate.two_leaves(4)
    sim = simulate.FabricSim(shape, capacity=8.5, faults={"host:leafB-h2": 0.3}, seed=2)
    pairs = _all_pairs(sim, shape.hosts)
    for shape_given in (None, shape):
        loc = localize(pairs, shape_given)
        assert loc.blamed_hosts == ["leafB-h2"] and len(loc.suspects) == 1
    assert localize(pairs, shape).suspects[0].elements == ["host:leafB-h2",
                                                           "link:leafB--leafB-h2"]


def test_an_uplink_under_ecmp_is_named_over_its_path_set():
    shape = simulate.fat_tree(leaves=4, hosts_per_leaf=4, spines=2)
    sim = simulate.FabricSim(shape, faults={"link:leaf1--spine0": 0.3}, seed=3)
    loc = localize(_all_pairs(sim, shape.hosts), shape)
    (suspect,) = loc.suspects
    assert suspect.elements == ["link:leaf1--spine0", "link:leaf1--spine1"]
    assert not suspect.pinned and "ECMP" in suspect.text() and loc.blamed_hosts == []


def test_nothing_broken_names_nothing():
    shape = simulate.fat_tree(leaves=3, hosts_per_leaf=3, spines=2)
    for seed in range(5):
        sim = simulate.FabricSim(shape, seed=seed)
        loc = localize(_all_pairs(sim, shape.hosts), shape)
        assert loc.suspects == [] and loc.slow == 0


def test_max_min_fairness_shares_a_link():
    shape = simulate.two_leaves(2)
    sim = simulate.FabricSim(shape, capacity=10.0, noise=0.0)
    # Two flows across the one trunk share it; a flow within a leaf has its links alone.
    rates = sim.measure([("leafA-h0", "leafB-h0"), ("leafA-h1", "leafB-h1")])
    assert rates == pytest.approx([5.0, 5.0])
    assert sim.measure([("leafA-h0", "leafA-h1")]) == pytest.approx([10.0])


@pytest.mark.parametrize("given", [False, True])
def test_a_one_way_fault_is_named_with_its_direction(given):
    """A shaped egress (tc tbf on one host's NIC; the VM's known answer) slows that host's
    sending only: its receiving pairs are fast, and it is named sending, not as a NIC."""
    shape = simulate.fat_tree(leaves=2, hosts_per_leaf=3, spines=1)
    sim = simulate.FabricSim(shape, faults={"host:l1h2:send": 0.2}, seed=4)
    loc = localize(_all_pairs(sim, shape.hosts), shape if given else None)
    (suspect,) = loc.suspects
    assert suspect.host == ("l1h2", "send") and loc.blamed_hosts == ["l1h2"]
    assert suspect.slow == suspect.pairs == 5 and "HOST l1h2 sending" in suspect.text()
    trunk = simulate.FabricSim(shape, faults={"link:leaf0->spine0": 0.2}, seed=5)
    loc = localize(_all_pairs(trunk, shape.hosts), shape if given else None)
    assert loc.blamed_hosts == [] and len(loc.suspects) == 1, [s.elements for s in loc.suspects]
    if given:
        assert loc.suspects[0].elements[0] == "link:leaf0->spine0"
    else:
        assert "(one way)" in loc.suspects[0].text(inferred=True)


def test_a_shape_kept_with_a_run_reads_back_the_same():
    from netbench.env.topology import from_json, load

    shape = load(ROOT / "tests" / "fixtures" / "topology" / "two-leaves.conf")
    shape.routing = "dest"
    again = from_json(shape.to_json())
    assert again.hosts == shape.hosts and again.trunks == shape.trunks
    assert again.routing == "dest" and again.source == shape.source
    assert again.elements("leafA-h0", "leafB-h1") == shape.elements("leafA-h0", "leafB-h1")
    for bad in ("", "[]", '{"source": "x"}', '{"source": "x", "hosts": {}, "trunks": [1]}',
                '{"source": "x", "hosts": {}, "trunks": [], "routing": "rip"}'):
        with pytest.raises(UsageError, match="kept with the run"):
            from_json(bad)


def test_a_traced_pair_is_judged_on_the_path_its_flow_took():
    """Under ECMP a pair's path is a set; a pair whose flow was traced crosses the path the
    tracer saw, so a slow uplink is named alone. A trace the topology cannot join (a hop
    it lacks, the wrong ends) is set aside: that pair is judged on its path set."""
    shape = simulate.fat_tree(leaves=4, hosts_per_leaf=4, spines=4, routing="ecmp")
    sim = simulate.FabricSim(shape, faults={"link:leaf0--spine1": 0.25}, noise=0.0)
    pairs = []
    for salt in range(6):
        cross = [(c, s) for c, s in itertools.permutations(sorted(shape.hosts), 2)
                 if shape.hosts[c] != shape.hosts[s]][salt::6]
        sim.salt = salt                     # new flows: new hashes
        for (c, s), path in zip(cross, sim.paths(cross)):
            pairs.append(Pair(c, s, sim.measure([(c, s)])[0], path))
    traced = localize(pairs, shape)
    assert [s.elements for s in traced.suspects] == [["link:leaf0--spine1"]]
    assert traced.suspects[0].pinned
    untraced = localize([Pair(p.client, p.server, p.value) for p in pairs], shape)
    assert [s.elements for s in untraced.suspects] != [["link:leaf0--spine1"]]
    bogus = [Pair(p.client, p.server, p.value, ("leaf9", "spine1")) for p in pairs]
    assert [s.elements for s in localize(bogus, shape).suspects] == \
        [s.elements for s in untraced.suspects]



def _leaf_to_leaf(slow: tuple[str, ...], seed: int = 4) -> list[Pair]:
    """Three leaves of four hosts, two spines, ECMP: every pair within a leaf, and from leaf0
    to leaf1, leaf0 to leaf2 and leaf1 to leaf2; those between the leaves named in ``slow``
    ("02": leaf0 to leaf2) about half at 0.85 (the flows hashed onto a faulty link), +-3%
    noise on every pair."""
    import random

    rng = random.Random(seed)
    out = []
    for c, s in itertools.permutations(sorted(simulate.fat_tree(3, 4, 2).hosts), 2):
        between = c[1] + s[1]
        if c[1] != s[1] and between not in ("01", "02", "12"):
            continue
        share = 0.85 if between in slow and rng.random() < 0.5 else 1.0
        out.append(Pair(c, s, 100 * share * (1 + rng.uniform(-0.03, 0.03))))
    return out


@pytest.mark.parametrize("judged", [{}, {"min_deficit": None, "threshold": 0.1}],
                         ids=["by-readings", "by-flags"])
@pytest.mark.parametrize("seed", [1, 3])
def test_slow_pairs_that_name_two_elements_equally_name_both_and_a_pair_that_tells_decides(
        judged, seed):
    """Leaf0 to leaf2 slow, leaf0 to leaf1 and leaf1 to leaf2 healthy: leaf0's uplinks and
    leaf2's downlinks explain the readings equally well, so the verdict holds both (the
    likelier, the other "or else"), never one silently; once leaf0's pairs to leaf1 read
    slow too, leaf0's uplinks alone. Judged by the readings (the noise known) or by the
    slow flags (a fixed cut) alike."""
    shape = simulate.fat_tree(leaves=3, hosts_per_leaf=4, spines=2)
    leaf0 = ["link:leaf0--spine0", "link:leaf0--spine1", "link:leaf0->spine0",
             "link:leaf0->spine1"]
    leaf2 = ["link:leaf2--spine0", "link:leaf2--spine1", "link:spine0->leaf2",
             "link:spine1->leaf2"]
    (suspect,) = localize(_leaf_to_leaf(("02",), seed), shape, **judged).suspects
    assert sorted([suspect.elements, suspect.or_else]) == [leaf0, leaf2], suspect
    assert "or else" in suspect.text() and "more readings decide" in suspect.text()
    (suspect,) = localize(_leaf_to_leaf(("01", "02"), seed), shape, **judged).suspects
    assert (suspect.elements, suspect.or_else) == (leaf0, []), suspect
    assert "or else" not in suspect.text()


def test_an_elements_nodes_are_read_from_its_name_in_every_form() -> None:
    from netbench.env.topology import element_nodes

    assert element_nodes("link:leaf1--spine2") == ("leaf1", "spine2")
    assert element_nodes("link:spine2->leaf1") == ("spine2", "leaf1")
    assert element_nodes("switch:leaf1") == ("leaf1",)
    assert element_nodes("host:node7:send") == ("node7",)
    assert element_nodes("host:node7") == ("node7",)
