"""The fabric's shape from what the fabric reports: ibnetdiscover (InfiniBand) and lldpd's
LLDP neighbours (Ethernet, RoCE), each told by its content. The fixtures are real output: a
public capture of a 2-tier EDR fat-tree (one cable trained at 4xDDR), ibnetdiscover's man
page example, and lldpd 1.0.16 in network namespaces (tests/fixtures/topology/README.md)."""

from __future__ import annotations

import json
import shutil

import pytest
from conftest import ROOT

from netbench.env import topology
from netbench.errors import UsageError

FIXTURES = ROOT / "tests" / "fixtures" / "topology"
FAT_TREE = FIXTURES / "ibnetdiscover-edr-fattree.txt"
LLDP_DIR = FIXTURES / "lldp-leaf-spine"
SPINES = ("S-ec0d9a0300ec81e0", "S-ec0d9a0300ec8200")
LEAVES = ("S-ec0d9a0300ec8240", "S-ec0d9a0300ec8480", "S-ec0d9a0300f548c0",
          "S-ec0d9a0300f548e0")
DDR_NOTE = ("link S-ec0d9a0300ec8200--S-ec0d9a0300ec8480: 1 of 6 cables at 4xDDR (20 Gbit/s) "
            "against 4xEDR")


def test_an_edr_fat_tree_from_ibnetdiscover():
    fabric = topology.load(FAT_TREE)
    assert fabric.source.endswith("(ibnetdiscover)") and not fabric.inferred
    assert fabric.switches == set(SPINES + LEAVES)
    assert fabric.trunks == {(s, leaf) for s in SPINES for leaf in LEAVES}
    # Hosts from their CAs' descriptions; gpu021 and node040 are seen from the switch only.
    assert len(fabric.hosts) == 14
    assert fabric.hosts["node018"] == fabric.hosts["gpu001"] == "S-ec0d9a0300ec8240"
    assert fabric.hosts["gpu021"] == "S-ec0d9a0300f548e0"
    assert fabric.hosts["controller"] == fabric.hosts["node040"] == "S-ec0d9a0300f548c0"
    # Six cables a leaf-spine pair, each counted once (listed from both ends): 6 x 4xEDR.
    assert fabric.capacity["link:S-ec0d9a0300ec81e0--S-ec0d9a0300ec8240"] == 600.0
    assert fabric.capacity["link:S-ec0d9a0300ec8200--S-ec0d9a0300ec8480"] == 520.0  # 5x100 + 20
    assert fabric.capacity["link:S-ec0d9a0300ec8240--node018"] == 100.0
    assert fabric.notes == [DDR_NOTE]
    assert f"topology ({fabric.source}): {DDR_NOTE}" in fabric.check_hosts(fabric.hosts)


def test_a_path_across_leaves_is_the_ecmp_set_through_both_spines():
    fabric = topology.load(FAT_TREE)
    shares = fabric.elements("node018", "node038/mlx5_0")     # a rank per NIC: its host
    for spine in SPINES:
        assert shares[f"switch:{spine}"] == 0.5
        assert shares[f"link:{topology.link_name(spine, 'S-ec0d9a0300ec8240')}"] == 0.5
        assert shares[f"link:{topology.link_name(spine, 'S-ec0d9a0300f548c0')}"] == 0.5
    assert shares["switch:S-ec0d9a0300ec8240"] == shares["switch:S-ec0d9a0300f548c0"] == 1.0
    assert shares["host:node018"] == shares["link:S-ec0d9a0300f548c0--node038"] == 1.0
    assert "switch:S-ec0d9a0300ec8480" not in shares


def test_the_man_page_example_old_voltaire_format():
    """Spaces for tabs, a Non-Chassis Nodes heading, CAs with the firmware's description (no
    host in it: named by GUID, and said), a CA with both ports on one switch (one access link
    of two cables) and a trunk of a 4x and a 1x cable."""
    fabric = topology.load(FIXTURES / "ibnetdiscover-manpage.txt")
    assert fabric.trunks == {("S-0008f10400410015", "S-005442ba00003080")}
    assert fabric.hosts == {"H-0008f10403960558": "S-005442ba00003080",
                            "H-0008f10403961354": "S-005442ba00003080",
                            "H-0008f10403960984": "S-0008f10400410015",
                            "H-005442b100004900": "S-0008f10400410015"}
    assert fabric.capacity["link:S-0008f10400410015--S-005442ba00003080"] == 12.5
    assert fabric.capacity["link:H-0008f10403960558--S-005442ba00003080"] == 12.5
    assert fabric.notes[0].startswith("4 CA(s) whose NodeDescription names no host")
    assert fabric.notes[1:] == [
        "link S-0008f10400410015--S-005442ba00003080: 1 of 2 cables at 1xSDR (2.5 Gbit/s) "
        "against 4xSDR",
        "link H-0008f10403960558--S-005442ba00003080: 1 of 2 cables at 1xSDR (2.5 Gbit/s) "
        "against 4xSDR"]


def _switch(guid: str, desc: str, ports: list[str]) -> list[str]:
    return [f"switchguid=0x{guid}({guid})",
            f'Switch\t40 "S-{guid}"\t\t# "{desc}" enhanced port 0 lid 1 lmc 0', *ports]


def test_switch_names_rails_and_a_host_below_the_fabrics_rate(tmp_path):
    """NDR names (MF0;NAME:MODEL), a director's ASICs sharing NAME (NAME/unit), a host with a
    NIC on each of two leaves (rails: host/dev) and one host trained at 4xHDR."""
    a, b, c1, c2 = "1" * 16, "2" * 16, "3" * 16, "4" * 16
    lines = _switch(a, "MF0;leaf-a:MQM9700/U1", [
        f'[1]\t"H-{"a" * 16}"[1]({"a" * 16}) \t\t# "gpu01 mlx5_0" lid 10 4xNDR',
        f'[2]\t"H-{"b" * 16}"[1]({"b" * 16}) \t\t# "gpu02 mlx5_0" lid 11 4xNDR',
        f'[3]\t"H-{"d" * 16}"[1]({"d" * 16}) \t\t# "gpu03 mlx5_0" lid 13 4xHDR',
        f'[31]\t"S-{c1}"[1]\t\t# "MF0;core:MQM9790/S01/U1" lid 3 4xNDR',
        f'[32]\t"S-{c2}"[1]\t\t# "MF0;core:MQM9790/S02/U1" lid 4 4xNDR'])
    lines += _switch(b, "MF0;leaf-b:MQM9700/U1", [
        f'[1]\t"H-{"c" * 16}"[1]({"c" * 16}) \t\t# "gpu01 mlx5_1" lid 12 4xNDR',
        f'[31]\t"S-{c1}"[2]\t\t# "MF0;core:MQM9790/S01/U1" lid 3 4xNDR',
        f'[32]\t"S-{c2}"[2]\t\t# "MF0;core:MQM9790/S02/U1" lid 4 4xNDR'])
    path = tmp_path / "fabric.txt"
    path.write_text("\n".join(lines) + "\n")
    fabric = topology.load(path)
    assert fabric.switches == {"leaf-a", "leaf-b", "core/S01/U1", "core/S02/U1"}
    assert fabric.hosts == {"gpu01/mlx5_0": "leaf-a", "gpu01/mlx5_1": "leaf-b",
                            "gpu02": "leaf-a", "gpu03": "leaf-a"}
    assert fabric.host_key("gpu01/mlx5_1") == "gpu01/mlx5_1"
    assert fabric.capacity["link:core/S01/U1--leaf-a"] == 400.0
    assert fabric.notes == ["link gpu03--leaf-a: its cable at 4xHDR (200 Gbit/s) against the "
                            "fabric's 4xNDR (host links)"]


def test_lldp_from_lldpd_a_directory_of_node_outputs():
    # The captures hold both of lldpd's -f json shapes: a lone interface as a dict, several
    # as a list of one-key dicts.
    assert isinstance(json.loads((LLDP_DIR / "h1.json").read_text())["lldp"]["interface"],
                      dict)
    assert isinstance(json.loads((LLDP_DIR / "leaf1.json").read_text())["lldp"]["interface"],
                      list)
    fabric = topology.load(LLDP_DIR)
    assert fabric.source.endswith("(lldp)")
    assert fabric.switches == {"leaf1", "leaf2", "spine"}            # Bridge on; Router on
    assert fabric.trunks == {("leaf1", "spine"), ("leaf2", "spine")}  # two cables: one trunk
    assert fabric.hosts == {"h1": "leaf1", "h2": "leaf1", "h3/eth0": "leaf2", "h3/eth1": "leaf1"}
    assert fabric.capacity == {}                # veths send no MAU type: no rate to read
    lonely, spine = fabric.notes
    assert lonely.startswith("node lonely (") and "lonely.json): no LLDP neighbours" in lonely
    assert spine.startswith("node spine: read as a switch (its neighbours see Router enabled)")
    assert set(fabric.elements("h1", "h3/eth0")) == {
        "host:h1", "link:h1--leaf1", "switch:leaf1", "link:leaf1--spine", "switch:spine",
        "link:leaf2--spine", "switch:leaf2", "link:h3/eth0--leaf2", "host:h3/eth0"}


def test_lldp_management_addresses_name_a_traced_flows_hops():
    """Each neighbour's advertised addresses (one string, a list, json0's [{"value"}]) map
    back to its name: a trace's ICMP answers become a switch path, kept with the run."""
    fabric = topology.load(LLDP_DIR)
    one = topology.load(FIXTURES / "lldp-leaf-spine-json0.json")
    assert fabric.addresses and fabric.addresses == one.addresses
    leaf1 = next(a for a, n in fabric.addresses.items() if n == "leaf1")
    spine = next(a for a, n in fabric.addresses.items() if n == "spine")
    leaf2 = next(a for a, n in fabric.addresses.items() if n == "leaf2")
    assert fabric.path_of([leaf1, spine, leaf2], "h1", "h3/eth0") == ("leaf1", "spine", "leaf2")
    assert fabric.path_of([leaf1, leaf1, spine, leaf2], "h1", "h3/eth0") == (
        "leaf1", "spine", "leaf2")                     # two answers from one router: one hop
    # An unanswered hop that one switch alone fits is that switch: here the one spine, or
    # either end's own leaf (a rate-limited router's null in a CI run's trace).
    assert fabric.path_of([leaf1, None, leaf2], "h1", "h3/eth0") == ("leaf1", "spine", "leaf2")
    assert fabric.path_of([leaf1, spine, None], "h1", "h3/eth0") == ("leaf1", "spine", "leaf2")
    assert fabric.path_of([None, spine, leaf2], "h1", "h3/eth0") == ("leaf1", "spine", "leaf2")
    assert fabric.path_of([None, None, None], "h1", "h3/eth0") is None   # nothing answered
    # Two spines: which one an unanswered middle hop was is what the trace was for.
    two = topology.Topology(hosts={"a": "l1", "b": "l2"}, switches={"l1", "l2", "s1", "s2"},
                            trunks={("l1", "s1"), ("l1", "s2"), ("l2", "s1"), ("l2", "s2")},
                            addresses={"10.0.0.1": "l1", "10.0.0.2": "l2", "10.0.1.1": "s1"})
    assert two.path_of(["10.0.0.1", None, "10.0.0.2"], "a", "b") is None
    assert two.path_of(["10.0.0.1", "10.0.1.1", None], "a", "b") == ("l1", "s1", "l2")
    assert fabric.path_of([leaf1, "192.0.2.9", leaf2], "h1", "h3/eth0") is None  # unknown
    assert fabric.path_of([leaf2, spine, leaf1], "h1", "h3/eth0") is None    # wrong ends
    assert topology.from_json(fabric.to_json()).addresses == fabric.addresses


def test_lldp_json0_in_one_file_reads_the_same():
    one = topology.load(FIXTURES / "lldp-leaf-spine-json0.json")
    many = topology.load(LLDP_DIR)
    assert (one.hosts, one.trunks, one.switches) == (many.hosts, many.trunks, many.switches)
    assert "key 'lonely'" in one.notes[0]
    alone = topology.load(LLDP_DIR / "h1.json")           # one node's output: named by its file
    assert alone.hosts == {"h1": "leaf1"} and alone.trunks == set()


def test_lldp_rates_from_the_mau_type_and_a_slow_cable(tmp_path):
    """lldpd says a port's speed as its MAU type (dot3); the veths of the capture send none,
    so this copy gives each port lldpd's strings: one leaf-spine cable at 1 Gbit/s."""
    shutil.copytree(LLDP_DIR, tmp_path / "fabric")
    for path in (tmp_path / "fabric").glob("*.json"):
        doc = json.loads(path.read_text())
        raw = doc["lldp"].get("interface", [])
        for item in [raw] if isinstance(raw, dict) else raw:
            for iface, body in item.items():
                slow = (path.stem, iface) in (("leaf1", "swp52"), ("spine", "swp2"))
                body["port"]["auto-negotiation"] = {
                    "supported": False, "enabled": False,
                    "current": "1000BaseTFD - Four-pair Category 5 UTP, full duplex mode" if slow
                    else "10GigBaseCX4 - X copper over 8 pair 100-Ohm balanced cable"}
        path.write_text(json.dumps(doc))
    fabric = topology.load(tmp_path / "fabric")
    assert fabric.capacity["link:leaf1--spine"] == 11.0
    assert fabric.capacity["link:leaf2--spine"] == fabric.capacity["link:h1--leaf1"] == 10.0
    assert ("link leaf1--spine: 1 of 2 cables at 1000BaseTFD (1 Gbit/s) against 10GigBaseCX4"
            in fabric.notes)


def _lldp_doc(name: str, caps: object) -> dict:
    return {"lldp": {"interface": {"eth0": {"chassis": {name: {"capability": caps}},
                                            "port": {"descr": "swp1"}}}}}


def test_an_unread_capability_shape_is_a_note_not_a_switch(tmp_path):
    path = tmp_path / "fabric.json"
    path.write_text(json.dumps({"h1": _lldp_doc("sw1", "Bridge"),
                                "h2": _lldp_doc("sw1", [{"type": "Bridge", "enabled": True}])}))
    fabric = topology.load(path)
    assert fabric.hosts == {"h1": "sw1", "h2": "sw1"}      # h2's view names sw1 a switch
    (note,) = fabric.notes
    assert note.startswith("node h1, eth0: neighbour sw1's capabilities not read (Bridge;")


IB_HEAD = 'Switch\t36 "S-ec0d9a0300ec8240"\t\t# "SwitchIB Mellanox Technologies" base port 0\n'


@pytest.mark.parametrize("name, text, needle", [
    ("ib.txt", '[1]\t"S-1"[1]\t\t# "x" lid 1 4xEDR\n' + IB_HEAD, "line 1: a port line before"),
    ("ib.txt", IB_HEAD + "[1]\tgarbage\n", "line 2: a port line netbench does not read"),
    ("ib.txt", IB_HEAD + "hello there\n", "line 2: 'hello there' is not a line of it"),
    ("ib.txt", IB_HEAD, "no links (accepted: ibnetdiscover's"),
    ("lldp.json", '{"h1": {"lldp": {}\n', "line 2: not JSON"),
    ("lldp.json", '{"h1": {"foo": 1}}', "key 'h1': no \"lldp\" key"),
    ("lldp.json", '{"lldp": "x"}', "\"lldp\" is a str, not lldpcli's object"),
    ("lldp.json", '{"h1": {"lldp": {"interface": {"eth0": {"port": {}}}}}}',
     "key 'h1': lldp.interface[0]: not an interface with a neighbour's chassis"),
    ("lldp.json", '{"h1": {"lldp": {}}}', "no node has LLDP neighbours"),
    ("lldp.json", "{}", "an empty or non-object JSON"),
])
def test_a_bad_ibnetdiscover_or_lldp_file_is_one_clear_error(tmp_path, name, text, needle):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(UsageError) as err:
        topology.load(path)
    assert needle in str(err.value) and str(path) in str(err.value), str(err.value)


def test_a_bad_lldp_directory_names_the_file(tmp_path):
    with pytest.raises(UsageError, match="no <node>.json files"):
        topology.load(tmp_path)
    shutil.copytree(LLDP_DIR, tmp_path / "fabric")
    (tmp_path / "fabric" / "h2.json").write_text('{"lldp": {"interface": [}}')
    with pytest.raises(UsageError) as err:
        topology.load(tmp_path / "fabric")
    assert f"{tmp_path / 'fabric' / 'h2.json'} line 1: not JSON" in str(err.value)


def test_slurm_and_toml_read_as_before():
    tree = topology.load(FIXTURES / "two-leaves.conf")
    assert tree.source.endswith("(slurm)") and tree.notes == []
    assert len(tree.hosts) == 8 and tree.trunks == {("core", "leafA"), ("core", "leafB")}
    fabric = topology.load(FIXTURES / "leaf-spine.toml")
    assert fabric.source.endswith("(netbench)") and fabric.notes == []
    assert fabric.capacity == {"link:leaf1--spine1": 10.0}
    assert all(not n.startswith("topology (") or "lacks" in n or "did not" in n
               for n in fabric.check_hosts(["h1"]))
    assert "ibnetdiscover output" in topology.FORMATS and len(topology.FORMATS) == 4


def test_a_stored_route_names_a_path_only_when_it_is_one_connections():
    fabric = topology.load(LLDP_DIR)
    at = {n: a for a, n in fabric.addresses.items()}
    one = json.dumps([[at["leaf1"], at["spine"], at["leaf2"]]])
    assert fabric.path_of_route(one, "h1", "h3/eth0") == ("leaf1", "spine", "leaf2")
    two = json.dumps([[at["leaf1"], at["spine"], at["leaf2"]]] * 2)
    for bad in (two, "[", "null", json.dumps([[1, 2]]), None, json.dumps({"a": 1})):
        assert fabric.path_of_route(bad, "h1", "h3/eth0") is None, bad


def test_a_rate_beyond_any_cable_reads_as_none_and_the_planner_always_ends(tmp_path):
    """An LLDP MAU type of 400 digits ("999...GbaseCR4") is no rate; a topology file's
    capacity = inf (or 1e400, nan) is one clear error; and max-min sharing over a capacity
    that is no finite number ends (it spun forever: rank 0 killed at 60 s)."""
    import time

    from netbench.env.sharing import max_min_fair

    shutil.copytree(LLDP_DIR, tmp_path / "fabric")
    for path in (tmp_path / "fabric").glob("*.json"):
        doc = json.loads(path.read_text())
        raw = doc["lldp"].get("interface", [])
        for item in [raw] if isinstance(raw, dict) else raw:
            for body in item.values():
                body["port"]["auto-negotiation"] = {
                    "supported": False, "enabled": False, "current": "9" * 400 + "GbaseCR4"}
        path.write_text(json.dumps(doc))
    fabric = topology.load(tmp_path / "fabric")
    assert all(0 < c <= topology.MAX_GBITS for c in fabric.capacity.values()), fabric.capacity
    for bad in ("inf", "1e400", "nan", "-5"):
        spec = tmp_path / f"t{bad}.toml"
        spec.write_text('[switch.leaf1]\nhosts = ["h1"]\nswitches = ["spine"]\n'
                        '[switch.leaf2]\nhosts = ["h2"]\nswitches = ["spine"]\n'
                        '[switch.spine]\nswitches = ["leaf1", "leaf2"]\n'
                        f'[link."leaf1--spine"]\ncapacity = {bad}\n')
        with pytest.raises(UsageError, match="capacity"):
            topology.load(spec)
    started = time.monotonic()
    for odd in (float("inf"), float("nan"), 0.0, -1.0):
        rates = max_min_fair([[("a", "b")], [("a", "b"), ("b", "c")]],
                             lambda hop, odd=odd: odd if hop == ("a", "b") else 10.0)
        assert len(rates) == 2
    assert time.monotonic() - started < 5
