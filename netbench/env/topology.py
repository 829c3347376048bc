"""The fabric's shape: hosts, switches and the links between them, and the elements each pair's
traffic crosses.

A fabric verdict must name what is broken, and faults live in links and switches: a slow
trunk between two leaves makes every pair across it slow, and judged host by host it blames
every host behind it. With the shape known, each pair maps onto the elements on its path (its
hosts' NICs, their access links, the switches and the links between them) and
``netbench.analysis.localize`` names the fewest elements that explain the slow pairs.

Where the shape comes from (``load``, the format told by the file):
- Slurm's ``topology.conf`` (the tree plugin: ``SwitchName=s0 Nodes=tux[0-3]``,
  ``SwitchName=s2 Switches=s[0-1]``), what AI clusters already keep;
- a netbench TOML: ``[switch.NAME]`` tables with ``hosts`` (a list or a Slurm hostlist) and
  ``switches`` (the switches it links to), optional ``[link."A--B"] capacity = "100G"``;
- none: ``infer`` groups hosts by the pairs that ran fast between them (hosts behind one
  switch reach each other at speed; a slow cut between groups is a link between switches),
  and says it was inferred.

Paths are the shortest ones between two hosts; where there are several of equal length
(ECMP), a pair may have taken any of them, and ``Paths`` says which share of them cross each
element: a verdict that rests on such pairs is over a path set, and says so.
"""

from __future__ import annotations

import re
import tomllib
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netbench.errors import UsageError

MAX_PATHS = 64            # equal-cost paths kept per switch pair (a fat-tree's spines)
MAX_FILE = 16 << 20       # a topology file larger than this is refused, unread
FORMATS = ("slurm topology.conf", "netbench TOML")


def expand_hostlist(text: str) -> list[str]:
    """A Slurm hostlist as Slurm writes it: ``tux[0-3,7]``, ``rack[1-2]-n[01-02]``,
    ``a,b[1-2]`` (ranges keep their zero padding)."""
    out: list[str] = []
    for item in _split_top(text.strip()):
        if item:
            out += _expand_one(item)
    return out


def _split_top(text: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"hostlist {text!r}: ']' without '['")
        elif ch == "," and depth == 0:
            items.append(text[start:i].strip())
            start = i + 1
    if depth:
        raise ValueError(f"hostlist {text!r}: '[' without ']'")
    items.append(text[start:].strip())
    return items


def _expand_one(item: str) -> list[str]:
    m = re.search(r"\[([^\]]*)\]", item)
    if not m:
        return [item]
    head, tail = item[:m.start()], item[m.end():]
    values: list[str] = []
    for part in m.group(1).split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            raise ValueError(f"hostlist {item!r}: {part!r} is not a number or a range")
        if not hi:
            values.append(lo)
            continue
        if int(hi) < int(lo) or int(hi) - int(lo) > 1_000_000:
            raise ValueError(f"hostlist {item!r}: range {part!r} runs backwards or too far")
        width = len(lo) if lo.startswith("0") else 0
        values += [str(n).zfill(width) for n in range(int(lo), int(hi) + 1)]
    return [head + v + rest for v in values for rest in _expand_one(tail)]


def link_name(a: str, b: str) -> str:
    return "--".join(sorted((a, b)))


@dataclass
class Topology:
    """Hosts, switches and links (undirected, with an optional capacity in Gbit/s). Elements
    are named ``host:NAME`` (its NIC), ``link:A--B`` and ``switch:NAME``."""

    hosts: dict[str, str] = field(default_factory=dict)         # host -> its switch
    switches: set[str] = field(default_factory=set)
    trunks: set[tuple[str, str]] = field(default_factory=set)   # switch pairs, sorted
    capacity: dict[str, float] = field(default_factory=dict)    # link name -> Gbit/s
    source: str = ""                                            # where the shape came from
    inferred: bool = False
    notes: list[str] = field(default_factory=list)              # what the source showed amiss
    # How a pair's traffic picks among equal-cost paths: "ecmp" (a hash of the flow, which
    # nobody outside the switch knows: a verdict is over the path set) or "dest" (by the
    # destination, as InfiniBand's subnet manager routes a fat-tree: the path is known).
    routing: str = "ecmp"
    _paths: dict[tuple[str, str], list[tuple[str, ...]]] = field(default_factory=dict,
                                                                  repr=False)
    _adjacency: dict[str, list[str]] | None = field(default=None, repr=False)
    _cores: dict[tuple[str, str, bool], dict[str, float] | None] = field(default_factory=dict,
                                                                         repr=False)
    _rank: dict[str, int] | None = field(default=None, repr=False)

    def add_host(self, host: str, switch: str) -> None:
        if host in self.hosts and self.hosts[host] != switch:
            raise UsageError(f"topology: host {host} is on two switches "
                             f"({self.hosts[host]} and {switch})")
        self.switches.add(switch)
        self.hosts[host] = switch
        self._cores, self._rank = {}, None

    def add_trunk(self, a: str, b: str) -> None:
        if a == b:
            raise UsageError(f"topology: switch {a} is linked to itself")
        self.switches |= {a, b}
        self.trunks.add((min(a, b), max(a, b)))
        self._adjacency, self._paths, self._cores = None, {}, {}

    def neighbours(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {s: [] for s in self.switches}
        for a, b in sorted(self.trunks):
            out[a].append(b)
            out[b].append(a)
        return out

    def switch_paths(self, a: str, b: str) -> list[tuple[str, ...]]:
        """Every shortest switch path from ``a`` to ``b`` (at most MAX_PATHS), cached."""
        key = (a, b)
        if key not in self._paths:
            if self._adjacency is None:
                self._adjacency = self.neighbours()
            self._paths[key] = _shortest_paths(self._adjacency, a, b)
        return self._paths[key]

    def host_key(self, endpoint: str) -> str | None:
        """The topology's name for an endpoint: itself (a NIC named ``host/dev``), else its
        host; None where the topology has neither."""
        if endpoint in self.hosts:
            return endpoint
        host = host_of(endpoint)
        return host if host in self.hosts else None

    def elements(self, src: str, dst: str, directed: bool = False) -> dict[str, float]:
        """The elements a src -> dst pair's traffic crosses, each with the share of the
        pair's equal-cost paths that cross it (1.0: every path). ``directed`` adds each
        element's direction of the data: ``host:A:send``, ``host:B:recv``, ``link:x->y`` (a
        shaper or a bad transceiver slows one way only). Empty when the topology does not
        hold both ends or no path joins them."""
        a, b = self.host_key(src), self.host_key(dst)
        if a is None or b is None:
            return {}
        sa, sb = self.hosts[a], self.hosts[b]
        core = self.core(sa, sb, directed)
        if core is None:
            return {}
        out = dict(core)
        out.update(dict.fromkeys(self.end_elements(a, "send", directed), 1.0))
        out.update(dict.fromkeys(self.end_elements(b, "recv", directed), 1.0))
        return out

    def end_elements(self, host: str, way: str, directed: bool = False) -> list[str]:
        """The elements of one end of a pair: the host's NIC and its access link (and, when
        ``directed``, their direction: ``way`` is "send" for the client, "recv" for the
        server). ``host`` as the topology names it (host_key)."""
        switch = self.hosts[host]
        out = [f"host:{host}", f"link:{link_name(host, switch)}"]
        if directed:
            out += [f"host:{host}:{way}",
                    f"link:{host}->{switch}" if way == "send" else f"link:{switch}->{host}"]
        return out

    def core(self, sa: str, sb: str, directed: bool = False) -> dict[str, float] | None:
        """The switches and trunks between two switches, with their path shares (cached:
        a fabric has far fewer switch pairs than host pairs)."""
        key = (sa, sb, directed)
        cached = self._cores.get(key)
        if cached is not None or key in self._cores:
            return cached
        paths = self.switch_paths(sa, sb)
        if not paths:
            self._cores[key] = None
            return None
        out: dict[str, float] = {}
        share = 1.0 / len(paths)
        for path in paths:
            for i, switch in enumerate(path):
                name = f"switch:{switch}"
                out[name] = out.get(name, 0.0) + share
                if i:
                    name = f"link:{link_name(path[i - 1], switch)}"
                    out[name] = out.get(name, 0.0) + share
                    if directed:
                        name = f"link:{path[i - 1]}->{switch}"
                        out[name] = out.get(name, 0.0) + share
        self._cores[key] = {k: min(v, 1.0) for k, v in out.items()}
        return self._cores[key]

    def route_of(self, endpoint: str) -> int:
        """Under ``routing = "dest"``, the index that picks a destination's path among the
        equal-cost ones (its place among the hosts, as D-mod-K routes by LID)."""
        if self._rank is None:
            self._rank = {h: i for i, h in enumerate(sorted(self.hosts))}
        return self._rank.get(self.host_key(endpoint) or "", 0)

    def path_to(self, sa: str, sb: str, endpoint: str) -> tuple[str, ...] | None:
        """The switch path a destination-routed pair takes from ``sa`` to ``sb`` toward
        ``endpoint`` (None: no path)."""
        paths = self.switch_paths(sa, sb)
        return paths[self.route_of(endpoint) % len(paths)] if paths else None

    def elements_pinned(self, src: str, dst: str) -> dict[str, float]:
        """``elements(src, dst, directed=True)`` on the one path the destination's route
        takes (every share 1.0); {} where the topology lacks an end or a path."""
        a, b = self.host_key(src), self.host_key(dst)
        if a is None or b is None:
            return {}
        core = self.core_pinned(self.hosts[a], self.hosts[b], dst, True)
        if core is None:
            return {}
        out = dict.fromkeys(self.end_elements(a, "send", True), 1.0)
        out.update(dict.fromkeys(self.end_elements(b, "recv", True), 1.0))
        out.update(core)
        return out

    def core_pinned(self, sa: str, sb: str, endpoint: str,
                    directed: bool = False) -> dict[str, float] | None:
        """``core`` on the one path toward a destination-routed ``endpoint``."""
        path = self.path_to(sa, sb, endpoint)
        if path is None:
            return None
        out: dict[str, float] = {}
        for i, switch in enumerate(path):
            out[f"switch:{switch}"] = 1.0
            if i:
                out[f"link:{link_name(path[i - 1], switch)}"] = 1.0
                if directed:
                    out[f"link:{path[i - 1]}->{switch}"] = 1.0
        return out

    def check_hosts(self, endpoints: Iterable[str]) -> list[str]:
        """Warnings for a sweep's endpoints against the topology: hosts it lacks, hosts it
        has that the sweep did not measure (the verdicts go on with what is known)."""
        names = {host_of(e) for e in endpoints}
        missing = sorted(names - set(self.hosts))
        unmeasured = sorted(set(self.hosts) - names)
        out = []
        if missing:
            out.append(f"topology ({self.source}) lacks {len(missing)} host(s) of the sweep: "
                       f"{', '.join(missing[:10])}{' ...' if len(missing) > 10 else ''}; "
                       "their pairs are judged without a path")
        if unmeasured:
            out.append(f"topology ({self.source}) has {len(unmeasured)} host(s) the sweep did "
                       f"not measure: {', '.join(unmeasured[:10])}"
                       f"{' ...' if len(unmeasured) > 10 else ''}")
        lone = sorted(s for s in self.switches
                      if s not in set(self.hosts.values()) and not any(s in t for t in
                                                                         self.trunks))
        if lone:
            out.append(f"topology ({self.source}): switch(es) with no links: "
                       f"{', '.join(lone[:10])}")
        return out + [f"topology ({self.source}): {note}" for note in self.notes]


def host_of(endpoint: str) -> str:
    """An endpoint's host: ``h0`` of ``h0/mlx5_1`` (a rank per NIC)."""
    return endpoint.split("/", 1)[0]


def _shortest_paths(adj: Mapping[str, Sequence[str]], a: str, b: str) -> list[tuple[str, ...]]:
    if a == b:
        return [(a,)]
    if a not in adj or b not in adj:
        return []
    dist = {a: 0}
    order = deque([a])
    while order:
        node = order.popleft()
        if node == b:
            break
        for nxt in adj[node]:
            if nxt not in dist:
                dist[nxt] = dist[node] + 1
                order.append(nxt)
    if b not in dist:
        return []
    # Walk back from b along edges that step one closer to a, at most MAX_PATHS paths.
    paths: list[tuple[str, ...]] = []

    def back(node: str, tail: tuple[str, ...]) -> None:
        if len(paths) >= MAX_PATHS:
            return
        if node == a:
            paths.append((a, *tail))
            return
        for prev in adj[node]:
            if dist.get(prev) == dist[node] - 1:
                back(prev, (node, *tail))

    back(b, ())
    return paths


# --- loading -------------------------------------------------------------------------------------

def load(path: str | Path) -> Topology:
    """A topology file, its format told by its content (see the module's docstring)."""
    path = Path(path)
    try:
        if not path.is_file():
            raise UsageError(f"topology {path}: not a regular file")
        if path.stat().st_size > MAX_FILE:
            raise UsageError(f"topology {path}: larger than {MAX_FILE >> 20} MiB")
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"topology {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"topology {path}: not UTF-8 text") from None
    if re.search(r"(?im)^\s*SwitchName\s*=", text):
        return parse_slurm(text, str(path))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"topology {path}: not a format netbench reads (accepted: "
                         f"{', '.join(FORMATS)}); as TOML: {exc}") from None
    return parse_toml(data, str(path))


def parse_slurm(text: str, source: str = "topology.conf") -> Topology:
    """Slurm's topology.conf, tree plugin: one ``SwitchName=`` line per switch, with
    ``Nodes=`` (hosts) and/or ``Switches=`` (its children); ``#`` comments; other keys
    (``LinkSpeed=``) kept where netbench uses them."""
    topo = Topology(source=f"{source} (slurm)")
    children: list[tuple[str, str, int]] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields: dict[str, str] = {}
        for token in line.split():
            key, sep, value = token.partition("=")
            if not sep:
                raise UsageError(f"topology {source} line {number}: {token!r} is not KEY=VALUE")
            fields[key.lower()] = value
        name = fields.get("switchname")
        if not name:
            raise UsageError(f"topology {source} line {number}: no SwitchName= (the tree "
                             "plugin's lines each name a switch)")
        topo.switches.add(name)
        try:
            for host in expand_hostlist(fields.get("nodes", "")):
                topo.add_host(host, name)
            for child in expand_hostlist(fields.get("switches", "")):
                children.append((name, child, number))
        except ValueError as exc:
            raise UsageError(f"topology {source} line {number}: {exc}") from None
        speed = fields.get("linkspeed")
        if speed:
            topo.capacity[f"switch:{name}"] = float(speed) if _number(speed) else 0.0
    for parent, child, number in children:
        if child not in topo.switches:
            raise UsageError(f"topology {source} line {number}: switch {parent} lists "
                             f"{child}, which no SwitchName= line defines")
        topo.add_trunk(parent, child)
    _check_tree(children, source)
    return topo


def parse_toml(data: Mapping[str, Any], source: str = "topology.toml") -> Topology:
    topo = Topology(source=f"{source} (netbench)")
    switches = data.get("switch")
    if not isinstance(switches, dict) or not switches:
        raise UsageError(f"topology {source}: no [switch.NAME] tables (accepted formats: "
                         f"{', '.join(FORMATS)})")
    for name, table in switches.items():
        if not isinstance(table, dict):
            raise UsageError(f"topology {source}: switch.{name} must be a table")
        topo.switches.add(str(name))
        unknown = sorted(set(table) - {"hosts", "switches"})
        if unknown:
            raise UsageError(f"topology {source}: switch.{name}: unknown key(s) "
                             f"{', '.join(unknown)} (accepted: hosts, switches)")
        try:
            for host in _names(table.get("hosts", [])):
                topo.add_host(host, str(name))
            linked = _names(table.get("switches", []))
        except (ValueError, TypeError) as exc:
            raise UsageError(f"topology {source}: switch.{name}: {exc}") from None
        for other in linked:
            if other not in switches:
                raise UsageError(f"topology {source}: switch.{name} links to {other}, "
                                 "which has no [switch.NAME] table")
            topo.add_trunk(str(name), other)
    for name, table in (data.get("link") or {}).items():
        a, sep, b = str(name).partition("--")
        if not sep or not isinstance(table, dict):
            raise UsageError(f"topology {source}: link {name!r}: name it \"A--B\" with a "
                             "table (capacity = \"100G\")")
        try:
            topo.capacity[f"link:{link_name(a, b)}"] = _gbits(table.get("capacity"))
        except ValueError as exc:
            raise UsageError(f"topology {source}: link {name}: {exc}") from None
    return topo


def _names(value: Any) -> list[str]:
    if isinstance(value, str):
        return expand_hostlist(value)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return [h for v in value for h in expand_hostlist(v)]
    raise TypeError("a list of names or a Slurm hostlist string")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _gbits(value: Any) -> float:
    if isinstance(value, int | float) and value > 0:
        return float(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([GMT]?)(bit/s|b|bps)?\s*", str(value or ""), re.I)
    if not m or not _number(m.group(1)) or float(m.group(1)) <= 0:
        raise ValueError(f"capacity {value!r}: a rate such as \"100G\" or 100 (Gbit/s)")
    scale = {"": 1.0, "G": 1.0, "M": 1e-3, "T": 1e3}[m.group(2).upper()]
    return float(m.group(1)) * scale


def _check_tree(children: Sequence[tuple[str, str, int]], source: str) -> None:
    """A Slurm tree has no cycles: a switch that is its own ancestor is a topology the tree
    plugin does not describe (say so rather than route over it silently)."""
    kids: dict[str, set[str]] = {}
    for parent, child, _ in children:
        kids.setdefault(parent, set()).add(child)
    for parent, child, number in children:
        seen, todo = set(), [child]
        while todo:
            node = todo.pop()
            if node == parent:
                raise UsageError(f"topology {source} line {number}: switches form a cycle "
                                 f"through {parent} and {child} (the tree plugin describes a "
                                 "tree)")
            if node not in seen:
                seen.add(node)
                todo += kids.get(node, ())


# --- inferred ------------------------------------------------------------------------------------

def infer(pairs: Iterable[tuple[str, str, bool]]) -> Topology:
    """A shape from the data alone: ``pairs`` are (client, server, fast), endpoints as the
    sweep names them (a rank per NIC is its own endpoint). Endpoints joined by fast pairs
    are behind one (inferred) switch; the groups are joined by one inferred core,
    so a slow cut between two groups reads as their switches' uplinks. A host whose every
    pair is slow stands alone: its own NIC. Said to be inferred wherever it is named."""
    import numpy as np
    import pandas as pd

    frame = pd.DataFrame(list(pairs), columns=["c", "s", "fast"])
    names, codes = np.unique(np.concatenate([frame["c"].to_numpy(dtype=object),
                                             frame["s"].to_numpy(dtype=object)]).astype(str),
                             return_inverse=True)
    a, b = codes[:len(frame)], codes[len(frame):]
    # Two endpoints are behind one switch when every pair measured between them, either
    # way, ran fast: a fault that slows one direction only still splits them.
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    key = lo.astype(np.int64) * len(names) + hi
    fast = frame["fast"].to_numpy(dtype=bool)
    slow_keys = np.unique(key[~fast])
    joined = fast & ~np.isin(key, slow_keys)
    lo, hi = lo[joined], hi[joined]
    # Connected components by label propagation (numpy: a million pairs in well under 1 s).
    label = np.arange(len(names))
    while True:
        before = label.copy()
        low = np.minimum(label[lo], label[hi])
        np.minimum.at(label, lo, low)
        np.minimum.at(label, hi, low)
        label = label[label]
        if np.array_equal(label, before):
            break
    groups: dict[int, list[str]] = {}
    for name, group in zip(names.tolist(), label.tolist()):
        groups.setdefault(group, []).append(name)
    topo = Topology(source="inferred from the pairs that ran fast", inferred=True)
    named = sorted((sorted(g) for g in groups.values()), key=lambda g: g[0])
    for number, members in enumerate(named):
        switch = f"group{number}({members[0]}{'..' + members[-1] if len(members) > 1 else ''})"
        for host in members:
            topo.add_host(host, switch)
        if len(named) > 1:
            topo.add_trunk(switch, "core(inferred)")
    return topo
