"""Topology files written as an attacker would (issue 37): each is refused with the file and
line, or read, within a bounded time and memory; none is a traceback, a hang or a
MemoryError. The times in the docstrings are what each took before it was bounded."""

from __future__ import annotations

import pytest

from netbench.env import topology
from netbench.env.topology import MAX_NAMES, expand_hostlist, load
from netbench.errors import UsageError

pytestmark = pytest.mark.timeout(60)


def _file(tmp_path, text: str, name: str = "topo"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_blank_lines_before_the_first_line_are_read_line_by_line(tmp_path):
    """40 KB of blank lines took 21.6 s to tell the format (two multi-line ``^\\s*``)."""
    path = _file(tmp_path, "\n" * 40_000 + "   \n" * 10_000 + "SwitchName=s0 Nodes=h[0-3]\n")
    assert sorted(load(path).hosts) == ["h0", "h1", "h2", "h3"]
    with pytest.raises(UsageError, match="not a format netbench reads"):
        load(_file(tmp_path, "\n" * 400_000 + "x", "blank"))


@pytest.mark.parametrize("text", [
    "SwitchName=s0 Nodes=n[0-999][0-999][0-999]\n",
    "SwitchName=s0 Nodes=n[0-999999]\nSwitchName=s1 Nodes=m[0-999999]\n",
    "SwitchName=s0 Nodes=n[0000000001-0999999999]\n",
    '[switch.s0]\nhosts = "n[0-999][0-999][0-999]"\n',
    '[switch.s0]\nhosts = ["n[000-999][000-999]", "m[000-999][000-999]"]\n',
])
def test_a_hostlist_is_counted_before_it_is_expanded(tmp_path, text):
    """``Nodes=n[0-999][0-999][0-999]`` grew to a MemoryError; so did zero-padded TOML."""
    with pytest.raises(UsageError, match=f"at most {MAX_NAMES:,} in all|at most 9 digits"):
        load(_file(tmp_path, text))


def test_hostlists_as_slurm_writes_them_still_expand():
    assert expand_hostlist("rack[1-2]-n[01-02],x") == ["rack1-n01", "rack1-n02", "rack2-n01",
                                                        "rack2-n02", "x"]
    assert len(expand_hostlist("n[0-999999]")) == MAX_NAMES
    for bad in ("n[1-2", "n[a-b]", "n[1-2]]", "n[1[2]]", "n[" + "9" * 5000 + "]", "n[²]"):
        with pytest.raises(ValueError):
            expand_hostlist(bad)


def test_a_long_chain_of_switches_is_checked_and_routed_without_recursion(tmp_path):
    """A 16k-line switch chain took 26.8 s (a walk from every link); a 1,500-switch chain was
    a RecursionError in the shortest paths, after a real sweep had been stored."""
    n = 16_000
    lines = [f"SwitchName=s{i} Switches=s{i + 1}" for i in range(n - 1)]
    lines += [f"SwitchName=s{n - 1} Nodes=b", "SwitchName=top Switches=s0", "SwitchName=x"]
    topo = load(_file(tmp_path, "\n".join(lines) + "\nSwitchName=s0a Nodes=a\n"))
    assert len(topo.switches) == n + 3
    chain = topology.Topology(source="chain")
    for i in range(1_499):
        chain.add_trunk(f"s{i}", f"s{i + 1}")
    chain.add_host("a", "s0")
    chain.add_host("b", "s1499")
    adj = chain.neighbours()
    paths = topology._shortest_paths(adj, "s0", "s1499", topology._distances(adj, "s1499"))
    assert len(paths) == 1 and len(paths[0]) == 1_500


def test_a_cycle_is_still_named_with_its_line(tmp_path):
    text = "SwitchName=a Switches=b\nSwitchName=b Switches=c\nSwitchName=c Switches=a\n"
    with pytest.raises(UsageError, match="line 3: switches form a cycle"):
        load(_file(tmp_path, text))


IB = ('Switch\t36 "S-0002c90300000001"\t\t# "leaf1" enhanced port 0 lid 1 lmc 0\n'
      '[1]\t"H-0002c90300000101"[1](2c90300000102)\t\t# "h1 mlx5_0" lid 5 4xEDR\n\n'
      'Ca\t1 "H-0002c90300000101"\t\t# "h1 mlx5_0"\n'
      '[1](2c90300000102)\t"S-0002c90300000001"[1]\t\t# lid 5 lmc 0 "leaf1" lid 1 4xEDR\n')


@pytest.mark.parametrize("attack, where", [
    ('[1]\t"H-0002c90300000101"[' + "9" * 5000 + ']\t\t# "h1" lid 5 4xEDR', "line 2"),
    ('[1]\t"H-0002c90300000101"[1]\t\t# "h1" lid ' + "7" * 5000 + " 4xEDR", "line 2"),
    ('[1]\t"H-0002c90300000101"[1]\t\t# ' + '"' * 32_000 + " lid 5 4xEDR", "line 2"),
    ('[1]\t"H-0002c90300000101"[1]\t\t# "' + "x" * 5000 + '" lid 5 4xEDR',
     "line 2: longer than 4096"),
])
def test_ibnetdiscover_numbers_and_quotes_are_bounded(tmp_path, attack, where):
    """Ports or LIDs of 5,000 digits were a ValueError traceback; 32,000 quotes on a port line
    took 19.8 s (a backtracking pattern)."""
    lines = IB.splitlines()
    lines[1] = attack
    with pytest.raises(UsageError, match=where):
        load(_file(tmp_path, "\n".join(lines) + "\n"))
    assert sorted(load(_file(tmp_path, IB, "good")).hosts) == ["h1"]


def test_forwarding_tables_of_many_switches_cost_what_the_file_holds(tmp_path):
    """A 1.9 MB ibnetdiscover with forwarding tables had cost 905 MB: a list of every
    (switch, remote host) to count the routes missing."""
    import tracemalloc

    n = 3_000
    text = [f'Switch\t36 "S-{i + 1:016x}"\t\t# "sw{i}" enhanced port 0 lid {i + 1} lmc 0\n'
            f'[1]\t"H-{0x100000 + i:016x}"[1]\t\t# "h{i} mlx5_0" lid {10_000 + i} 4xEDR\n'
            for i in range(n)]
    text += [f"Unicast lids [0x0-0x1] of switch Lid {i + 1} guid 0x{i + 1:016x} (sw{i}):\n"
             "  Lid  Out   Destination\n        Port     Info\n"
             f"0x{(10_000 + i):04x} 001 : (Channel Adapter portguid 0x1: 'h{i} mlx5_0')\n"
             "1 valid lids dumped\n" for i in range(n)]
    path = _file(tmp_path, "".join(text))
    tracemalloc.start()
    try:
        topo = load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(topo.hosts) == n and any("lack" in note for note in topo.notes)
    assert peak < 40 * path.stat().st_size, peak       # was switches x hosts


def test_an_lldp_directory_is_bounded_in_total_as_each_file_is(tmp_path):
    """Ten 15 MB files had cost 3.6 GB: each file was capped, the total was not."""
    folder = tmp_path / "lldp"
    folder.mkdir()
    for i in range(5):
        with open(folder / f"n{i}.json", "wb") as f:
            f.truncate(15 << 20)                     # sparse: the size is what is refused
    with pytest.raises(UsageError, match=r"lldp: its .json files hold 75 MiB, more than 64"):
        load(folder)
