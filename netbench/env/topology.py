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
- ``ibnetdiscover``'s output (InfiniBand): switches, hosts from their CAs' NodeDescriptions,
  every cable with its rate (4xEDR = 100 Gbit/s), parallel cables one trunk of their sum;
  followed by the subnet manager's forwarding tables (``dump_fts``, ``ibroute``; see
  ``netbench.env.ibroutes``), each pair's path is the one they set (``routing = "dest"``);
- LLDP as lldpd reports it (``lldpcli -f json show neighbors`` on every node; Ethernet,
  RoCE): a directory of ``<node>.json`` or one ``{"<node>": ...}`` file; nodes seen with
  Bridge or Router enabled are switches;
- none: ``infer`` groups hosts by the pairs that ran fast between them (hosts behind one
  switch reach each other at speed; a slow cut between groups is a link between switches),
  and says it was inferred.

What a measured source shows amiss (a cable trained below its bundle's rate, a node with no
neighbours) is kept in ``Topology.notes`` and said with ``check_hosts``' warnings.

Paths are the shortest ones between two hosts; where there are several of equal length
(ECMP), a pair may have taken any of them, and ``Paths`` says which share of them cross each
element: a verdict that rests on such pairs is over a path set, and says so.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections import Counter, deque
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netbench.env import ibroutes
from netbench.errors import UsageError

MAX_PATHS = 64            # equal-cost paths kept per switch pair (a fat-tree's spines)
MAX_FILE = 16 << 20       # a topology file larger than this is refused, unread
MAX_LLDP_TOTAL = 64 << 20  # an LLDP directory's files together (each ~1.2 KB a neighbour)
FORMATS = ("slurm topology.conf", "netbench TOML", "ibnetdiscover output",
           "lldpcli -f json show neighbors (a directory of <node>.json or one {node: output} "
           "file)")


MAX_NAMES = 1_000_000     # names a topology's hostlists may expand to, all together


def expand_hostlist(text: str, limit: int = MAX_NAMES) -> list[str]:
    """A Slurm hostlist as Slurm writes it: ``tux[0-3,7]``, ``rack[1-2]-n[01-02]``,
    ``a,b[1-2]`` (ranges keep their zero padding). Counted before it is expanded: more than
    ``limit`` names is a ValueError (``n[0-999][0-999][0-999]`` is a billion)."""
    groups = [_groups(item) for item in _split_top(text.strip()) if item]
    count = 0
    for pieces in groups:
        names = 1
        for piece in pieces:
            names *= len(piece) if isinstance(piece, list) else 1
            if count + names > limit:
                raise ValueError(f"hostlist {text[:60]!r}: more than {limit:,} names (a "
                                 f"topology's hostlists name at most {MAX_NAMES:,} in all)")
        count += names
    out: list[str] = []
    for pieces in groups:
        names = [""]
        for piece in pieces:
            names = ([n + v for n in names for v in piece] if isinstance(piece, list)
                     else [n + piece for n in names])
        out += names
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


def _groups(item: str) -> list[str | list[str]]:
    """``rack[1-2]-n[01-02]`` as its pieces: text, then each bracket's values (a list)."""
    pieces: list[str | list[str]] = []
    rest = item
    while True:
        start = rest.find("[")
        if start < 0:
            pieces.append(rest)
            return pieces
        end = rest.find("]", start)
        pieces += [rest[:start], _bracket(item, rest[start + 1:end])]
        rest = rest[end + 1:]


def _bracket(item: str, inside: str) -> list[str]:
    spans: list[tuple[str, str]] = []
    total = 0
    for part in inside.split(","):
        lo, _, hi = part.strip().partition("-")
        if not lo.isascii() or not lo.isdigit() or (hi and not (hi.isascii() and hi.isdigit())):
            raise ValueError(f"hostlist {item[:60]!r}: {part[:30]!r} is not a number or a range")
        if len(lo) > 9 or len(hi) > 9:
            raise ValueError(f"hostlist {item[:60]!r}: {part[:30]!r}: at most 9 digits")
        if hi and (int(hi) < int(lo) or int(hi) - int(lo) > MAX_NAMES):
            raise ValueError(f"hostlist {item[:60]!r}: range {part!r} runs backwards or too far")
        spans.append((lo, hi))
        total += int(hi) - int(lo) + 1 if hi else 1
        if total > MAX_NAMES:
            raise ValueError(f"hostlist {item[:60]!r}: more than {MAX_NAMES:,} names")
    values: list[str] = []
    for lo, hi in spans:
        width = len(lo) if lo.startswith("0") else 0
        values += [str(n).zfill(width) for n in range(int(lo), int(hi or lo) + 1)]
    return values


def link_name(a: str, b: str) -> str:
    return "--".join(sorted((a, b)))


def element_nodes(element: str) -> tuple[str, ...]:
    """The hosts and switches an element is made of: the one ``host:H`` (``host:H:way``) or
    ``switch:S`` names, or the two ends of ``link:A--B`` (``link:A->B``)."""
    kind, _, name = element.partition(":")
    if kind == "host":
        return (name.partition(":")[0],)
    if kind == "link":
        a, arrow, b = name.partition("->")
        if not arrow:
            a, _, b = name.partition("--")
        return (a, b)
    return (name,)


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
    # A node's addresses (its LLDP management addresses) -> its name: what a traced flow's
    # ICMP answers are mapped back to switches with.
    addresses: dict[str, str] = field(default_factory=dict)
    # How a pair's traffic picks among equal-cost paths: "ecmp" (a hash of the flow, which
    # nobody outside the switch knows: a verdict is over the path set) or "dest" (by the
    # destination, as InfiniBand's subnet manager routes a fat-tree: the path is known).
    routing: str = "ecmp"
    # The subnet manager's forwarding tables where they were read (``dump_fts``/``ibroute``
    # after ibnetdiscover's output): switch -> endpoint -> the switch it forwards toward
    # it; a destination-routed pair's path is walked through them, not guessed.
    routes: dict[str, dict[str, str]] = field(default_factory=dict)
    _walks: dict[tuple[str, str, str], int] = field(default_factory=dict, repr=False)
    _paths: dict[tuple[str, str], list[tuple[str, ...]]] = field(default_factory=dict,
                                                                  repr=False)
    _adjacency: dict[str, list[str]] | None = field(default=None, repr=False)
    _cores: dict[tuple[str, str, bool], dict[str, float] | None] = field(default_factory=dict,
                                                                         repr=False)
    _rank: dict[str, int] | None = field(default=None, repr=False)
    _toward: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    _pinned: dict[tuple[str, str, int, bool], dict[str, float] | None] = field(
        default_factory=dict, repr=False)
    _ends: dict[tuple[str, str, bool], list[str]] = field(default_factory=dict, repr=False)

    def add_host(self, host: str, switch: str) -> None:
        if host in self.hosts and self.hosts[host] != switch:
            raise UsageError(f"topology: host {host} is on two switches "
                             f"({self.hosts[host]} and {switch})")
        self.switches.add(switch)
        self.hosts[host] = switch
        self._cores, self._rank, self._pinned, self._ends, self._walks = {}, None, {}, {}, {}

    def add_trunk(self, a: str, b: str) -> None:
        if a == b:
            raise UsageError(f"topology: switch {a} is linked to itself")
        self.switches |= {a, b}
        self.trunks.add((min(a, b), max(a, b)))
        self._adjacency, self._paths, self._cores, self._pinned = None, {}, {}, {}
        self._walks = {}

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
                self._toward = {}
            if b not in self._toward:          # hops to b from every switch, once per b
                self._toward[b] = _distances(self._adjacency, b)
            self._paths[key] = _shortest_paths(self._adjacency, a, b, self._toward[b])
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
        server). ``host`` as the topology names it (host_key). Cached: a verdict over a
        million pairs asks for each host's ends once a role, not once a pair."""
        key = (host, way, directed)
        found = self._ends.get(key)
        if found is None:
            switch = self.hosts[host]
            found = [f"host:{host}", f"link:{link_name(host, switch)}"]
            if directed:
                found += [f"host:{host}:{way}",
                          f"link:{host}->{switch}" if way == "send" else f"link:{switch}->{host}"]
            self._ends[key] = found
        return list(found)

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
        """Under ``routing = "dest"`` without forwarding tables, the index that picks a
        destination's path among the equal-cost ones (its place among the hosts, as D-mod-K
        routes by LID)."""
        if self._rank is None:
            self._rank = {h: i for i, h in enumerate(sorted(self.hosts))}
        return self._rank.get(self.host_key(endpoint) or "", 0)

    def route_index(self, sa: str, sb: str, endpoint: str) -> int:
        """Under ``routing = "dest"``, which of ``switch_paths(sa, sb)`` a pair toward
        ``endpoint`` takes: the one its forwarding tables walk (a path longer than the
        shortest is added to the list), else D-mod-K's pick; -1 where none is known (no
        path, a table without the endpoint, a loop)."""
        paths = self.switch_paths(sa, sb)
        if not paths:
            return -1
        if not self.routes:
            return self.route_of(endpoint) % len(paths)
        host = self.host_key(endpoint) or ""
        key = (sa, sb, host)
        found = self._walks.get(key)
        if found is None:
            path = self._walk(sa, host)
            if path is None or path[-1] != sb:
                found = -1
            elif path in paths:
                found = paths.index(path)
            else:                     # off the shortest paths: still the one it takes
                paths.append(path)
                found = len(paths) - 1
                self._cores.pop((sa, sb, False), None)
                self._cores.pop((sa, sb, True), None)
            self._walks[key] = found
        return found

    def _walk(self, sa: str, host: str) -> tuple[str, ...] | None:
        """The switches the forwarding tables send ``host``'s traffic through from ``sa``."""
        target = self.hosts.get(host)
        node, path = sa, [sa]
        while node != target:
            node = self.routes.get(node, {}).get(host)        # type: ignore[assignment]
            if node is None or node in path:
                return None
            path.append(node)
        return tuple(path)

    def path_to(self, sa: str, sb: str, endpoint: str) -> tuple[str, ...] | None:
        """The switch path a destination-routed pair takes from ``sa`` to ``sb`` toward
        ``endpoint`` (None: no path known)."""
        k = self.route_index(sa, sb, endpoint)
        return self.switch_paths(sa, sb)[k] if k >= 0 else None

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
        """``core`` on the one path toward a destination-routed ``endpoint`` (cached by the
        path's index: the endpoints that route alike share it; read-only)."""
        k = self.route_index(sa, sb, endpoint)
        if k < 0:
            return None
        key = (sa, sb, k, directed)
        if key not in self._pinned:
            self._pinned[key] = core_along(self.switch_paths(sa, sb)[k], directed)
        return self._pinned[key]

    def elements_via(self, src: str, dst: str, path: Sequence[str]) -> dict[str, float]:
        """``elements(src, dst, directed=True)`` on the switch path a tracer saw the pair's
        flow take (every share 1.0); {} where the topology lacks an end, or the path does
        not join the ends' switches over the topology's links."""
        a, b = self.host_key(src), self.host_key(dst)
        if a is None or b is None or not self.joins(path, self.hosts[a], self.hosts[b]):
            return {}
        out = dict.fromkeys(self.end_elements(a, "send", True), 1.0)
        out.update(dict.fromkeys(self.end_elements(b, "recv", True), 1.0))
        out.update(core_along(path, True))
        return out

    def joins(self, path: Sequence[str], sa: str, sb: str) -> bool:
        """Does ``path`` run from switch ``sa`` to ``sb`` over links the topology has?"""
        return bool(path) and path[0] == sa and path[-1] == sb and all(
            (min(x, y), max(x, y)) in self.trunks for x, y in zip(path, path[1:]))

    def to_json(self) -> str:
        """The shape as JSON, to keep with a run (``from_json`` reads it back)."""
        import json

        return json.dumps({"hosts": self.hosts, "trunks": sorted(self.trunks),
                           "switches": sorted(self.switches), "capacity": self.capacity,
                           "source": self.source, "routing": self.routing,
                           "inferred": self.inferred, "notes": self.notes,
                           "addresses": self.addresses, "routes": _grouped(self.routes)},
                          sort_keys=True)

    def path_of_route(self, route: Any, src: str, dst: str) -> tuple[str, ...] | None:
        """``path_of`` a stored row's ``route`` (JSON: the routers of each of its data
        connections); None where it is not one connection's (several took several paths)."""
        import json

        try:
            hops = json.loads(route) if isinstance(route, str) else None
        except (ValueError, RecursionError):
            return None
        if not isinstance(hops, list) or len(hops) != 1 or not isinstance(hops[0], list) \
                or not all(h is None or isinstance(h, str) for h in hops[0]):
            return None
        return self.path_of(hops[0], src, dst)

    def path_of(self, hops: Sequence[str | None], src: str, dst: str) -> tuple[str, ...] | None:
        """The switch path a trace's hop addresses name, from the client's switch to the
        server's; None where a hop is unknown, unanswered where more than one switch could
        have been it, or the switches do not join the two ends over the topology's links (the
        flow is then judged on its path set). An unanswered hop one switch alone fits is that
        switch: the first is the client's own, the last the server's (a router rate-limiting
        its ICMP answers under load left a traced flow's last hop null in a CI run), one
        between two known switches the one switch linked to both."""
        a, b = self.host_key(src), self.host_key(dst)
        if a is None or b is None or not any(hops):      # no answer: no trace
            return None
        if any(h and h not in self.addresses for h in hops):
            return None
        names = [self.addresses.get(h) if h else None for h in hops]
        if names[0] is None:
            names[0] = self.hosts[a]
        if names[-1] is None:
            names[-1] = self.hosts[b]
        if None in names and self._adjacency is None:
            self._adjacency = self.neighbours()     # the same cache switch_paths reads
        around = self._adjacency or {}
        for i, name in enumerate(names):
            if name is None:
                before, after = names[i - 1], names[i + 1]
                fits = set(around.get(before or "", ())) & set(around.get(after or "", ()))
                if len(fits) != 1:
                    return None
                names[i] = fits.pop()
        path = tuple(n for i, n in enumerate(names) if not i or n != names[i - 1])
        return path if self.joins(path, self.hosts[a], self.hosts[b]) else None

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


def _grouped(routes: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, list[str]]]:
    """Forwarding tables kept compact: switch -> next switch -> the endpoints sent there."""
    out: dict[str, dict[str, list[str]]] = {}
    for switch, table in routes.items():
        toward: dict[str, list[str]] = {}
        for endpoint, nxt in sorted(table.items()):
            toward.setdefault(nxt, []).append(endpoint)
        out[switch] = toward
    return out


def core_along(path: Sequence[str], directed: bool = False) -> dict[str, float]:
    """The switches and links of one switch path, each with share 1.0 (and, ``directed``,
    each link's direction of travel)."""
    out: dict[str, float] = {}
    for i, switch in enumerate(path):
        out[f"switch:{switch}"] = 1.0
        if i:
            out[f"link:{link_name(path[i - 1], switch)}"] = 1.0
            if directed:
                out[f"link:{path[i - 1]}->{switch}"] = 1.0
    return out


def host_of(endpoint: str) -> str:
    """An endpoint's host: ``h0`` of ``h0/mlx5_1`` (a rank per NIC)."""
    return endpoint.split("/", 1)[0]


def _distances(adj: Mapping[str, Sequence[str]], b: str) -> dict[str, int]:
    """Hops from every switch to ``b`` (breadth first)."""
    dist = {b: 0}
    order = deque([b])
    while order:
        node = order.popleft()
        for nxt in adj.get(node, ()):
            if nxt not in dist:
                dist[nxt] = dist[node] + 1
                order.append(nxt)
    return dist


def _shortest_paths(adj: Mapping[str, Sequence[str]], a: str, b: str,
                    toward: Mapping[str, int]) -> list[tuple[str, ...]]:
    """Every shortest path from ``a`` to ``b`` (at most MAX_PATHS), walking forward along
    the hops that bring it one closer to ``b`` (``toward``: hops to b from each switch).
    The last hop is a set lookup, not a scan: a spine with 128 leaves is one check."""
    if a == b:
        return [(a,)]
    if a not in adj or b not in adj or a not in toward:
        return []
    linked = set(adj[b])
    paths: list[tuple[str, ...]] = []
    # Depth first with a stack of its own, in the neighbours' order: a 1,500-switch chain
    # was a RecursionError after a real sweep had been stored.
    stack: list[tuple[str, tuple[str, ...]]] = [(a, (a,))]
    while stack and len(paths) < MAX_PATHS:
        node, path = stack.pop()
        left = toward[node]
        if left == 1:
            if node in linked:
                paths.append((*path, b))
            continue
        stack += [(nxt, (*path, nxt)) for nxt in reversed(adj[node])
                  if toward.get(nxt) == left - 1]
    return paths


# --- loading -------------------------------------------------------------------------------------

def from_json(text: str) -> Topology:
    """A shape kept with a run (``Topology.to_json``); UsageError where it is not one."""
    import json

    try:
        data = json.loads(text)
        topo = Topology(source=str(data["source"]), routing=str(data.get("routing", "ecmp")),
                        inferred=bool(data.get("inferred", False)),
                        notes=[str(n) for n in data.get("notes", [])])
        for host, switch in dict(data["hosts"]).items():
            topo.add_host(str(host), str(switch))
        for a, b in data["trunks"]:
            topo.add_trunk(str(a), str(b))
        topo.switches |= {str(s) for s in data.get("switches", [])}
        topo.capacity = {str(k): _gbits(v) for k, v in dict(data.get("capacity", {})).items()}
        topo.addresses = {str(k): str(v) for k, v in dict(data.get("addresses", {})).items()}
        topo.routes = {str(switch): {str(e): str(nxt) for nxt, ends in dict(toward).items()
                                     for e in ends}
                       for switch, toward in dict(data.get("routes", {})).items()}
    except (ValueError, TypeError, KeyError, RecursionError) as exc:
        raise UsageError(f"the topology kept with the run is not readable ({exc})") from None
    if topo.routing not in ("ecmp", "dest"):
        raise UsageError(f"the topology kept with the run routes {topo.routing!r}")
    return topo


def load(path: str | Path) -> Topology:
    """A topology file, its format told by its content (see the module's docstring), or a
    directory of LLDP outputs (``<node>.json``)."""
    path = Path(path)
    if path.is_dir():
        return _load_lldp_dir(path)
    text = _read(path)
    if _a_line_starts(text, _SLURM_LINE):
        return parse_slurm(text, str(path))
    if _a_line_starts(text, _IB_NODE):
        return parse_ibnetdiscover(text, str(path))
    if text.lstrip().startswith("{"):            # TOML never starts so; lldpcli's JSON does
        return _load_lldp_file(text, path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"topology {path}: not a format netbench reads (accepted: "
                         f"{', '.join(FORMATS)}); as TOML: {exc}") from None
    return parse_toml(data, str(path))


_SLURM_LINE = re.compile(r"SwitchName\s*=", re.I)


def _a_line_starts(text: str, pattern: re.Pattern[str]) -> bool:
    r"""Does any line, leading blanks aside, start with ``pattern``? Line by line: a
    multi-line ``^\s*`` ran over every blank line from every line start (40 KB of blank
    lines took 21.6 s)."""
    return any(pattern.match(line.lstrip()) for line in text.splitlines())


def _read(path: Path) -> str:
    try:
        if not path.is_file():
            raise UsageError(f"topology {path}: not a regular file")
        if path.stat().st_size > MAX_FILE:
            raise UsageError(f"topology {path}: larger than {MAX_FILE >> 20} MiB")
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"topology {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise UsageError(f"topology {path}: not UTF-8 text") from None


def _json(text: str, path: Path) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise UsageError(f"topology {path} line {exc.lineno}: not JSON ({exc.msg}, column "
                         f"{exc.colno}; accepted: {LLDP_ACCEPTED})") from None
    except RecursionError:
        raise UsageError(f"topology {path}: JSON nested too deep") from None


def _load_lldp_dir(path: Path) -> Topology:
    try:
        files = sorted(p for p in path.iterdir()
                       if p.suffix == ".json" and not p.name.startswith(".") and p.is_file())
    except OSError as exc:
        raise UsageError(f"topology {path}: {exc.strerror or exc}") from None
    if not files:
        raise UsageError(f"topology {path}: a directory with no <node>.json files (accepted: "
                         f"{', '.join(FORMATS)})")
    try:
        total = sum(file.stat().st_size for file in files)
    except OSError as exc:
        raise UsageError(f"topology {path}: {exc.strerror or exc}") from None
    if total > MAX_LLDP_TOTAL:
        raise UsageError(f"topology {path}: its .json files hold {total >> 20} MiB, more than "
                         f"{MAX_LLDP_TOTAL >> 20} MiB (a 16,384-host fabric's outputs are about "
                         "20 MiB)")
    outputs = {file.stem: _json(_read(file), file) for file in files}
    return parse_lldp(outputs, str(path), {file.stem: str(file) for file in files})


def _load_lldp_file(text: str, path: Path) -> Topology:
    """``{"<node>": <show neighbors output>, ...}``, or one node's output (named by the file)."""
    data = _json(text, path)
    if not isinstance(data, dict) or not data:
        raise UsageError(f"topology {path}: an empty or non-object JSON (accepted: "
                         f"{LLDP_ACCEPTED})")
    lone = data.get("lldp")
    if "lldp" in data and not (isinstance(lone, dict) and "lldp" in lone):
        return parse_lldp({path.stem: data}, str(path), {path.stem: str(path)})
    return parse_lldp(data, str(path), {n: f"{path}: key {n!r}" for n in data})


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
            for host in expand_hostlist(fields.get("nodes", ""), _left(topo, children)):
                topo.add_host(host, name)
            for child in expand_hostlist(fields.get("switches", ""), _left(topo, children)):
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


def _left(topo: Topology, also: Sized = ()) -> int:
    """How many more names the file's hostlists may expand to (MAX_NAMES in all)."""
    return max(MAX_NAMES - len(topo.hosts) - len(topo.trunks) - len(also), 0)


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
            for host in _names(table.get("hosts", []), _left(topo)):
                topo.add_host(host, str(name))
            linked = _names(table.get("switches", []), _left(topo))
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


def _names(value: Any, limit: int = MAX_NAMES) -> list[str]:
    if isinstance(value, str):
        return expand_hostlist(value, limit)
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        if len(value) > limit:
            raise ValueError(f"more than {limit:,} names")
        out: list[str] = []
        for v in value:
            out += expand_hostlist(v, limit - len(out))
        return out
    raise TypeError("a list of names or a Slurm hostlist string")


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


MAX_GBITS = 1e6      # a link's rate at most (1 Pbit/s): beyond it no cable, a typo or an attack


def _gbits(value: Any) -> float:
    shown = repr(value)[:60]
    if isinstance(value, int | float) and not isinstance(value, bool):
        rate = float(value)
    else:
        m = re.fullmatch(r"\s*([0-9.]{1,32})\s*([GMT]?)(bit/s|b|bps)?\s*", str(value or "")[:64],
                         re.I)
        if not m or not _number(m.group(1)):
            raise ValueError(f"capacity {shown}: a rate such as \"100G\" or 100 (Gbit/s)")
        rate = float(m.group(1)) * {"": 1.0, "G": 1.0, "M": 1e-3, "T": 1e3}[m.group(2).upper()]
    # inf or NaN never saturates a link: the planner's max-min sharing had spun forever.
    if not (math.isfinite(rate) and 0 < rate <= MAX_GBITS):
        raise ValueError(f"capacity {shown}: a rate above 0 and at most {MAX_GBITS:g} Gbit/s "
                         "(\"100G\" or 100)")
    return rate


def _check_tree(children: Sequence[tuple[str, str, int]], source: str) -> None:
    """A Slurm tree has no cycles: a switch that is its own ancestor is a topology the tree
    plugin does not describe (say so rather than route over it silently). One depth-first
    pass, no recursion: a walk from every link had been quadratic (a 16k-switch chain, 27 s)."""
    kids: dict[str, list[tuple[str, int]]] = {}
    for parent, child, number in children:
        kids.setdefault(parent, []).append((child, number))
    state: dict[str, int] = {}        # 1: on the current path, 2: done
    for root in kids:
        if root in state:
            continue
        state[root] = 1
        stack = [(root, iter(kids.get(root, ())))]
        while stack:
            node, todo = stack[-1]
            step = next(todo, None)
            if step is None:
                state[node] = 2
                stack.pop()
                continue
            child, number = step
            if state.get(child) == 1:
                raise UsageError(f"topology {source} line {number}: switches form a cycle "
                                 f"through {node} and {child} (the tree plugin describes a "
                                 "tree)")
            if child not in state:
                state[child] = 1
                stack.append((child, iter(kids.get(child, ()))))


# --- measured shapes: ibnetdiscover (InfiniBand), LLDP (Ethernet, RoCE) -------------------------

# Gbit/s per lane of InfiniBand's speeds as ibnetdiscover names them (after the width, 4xEDR).
IB_LANE = {"SDR": 2.5, "DDR": 5.0, "QDR": 10.0, "FDR10": 10.0, "FDR": 14.0, "EDR": 25.0,
           "HDR": 50.0, "NDR": 100.0, "XDR": 200.0}
IB_ACCEPTED = ("ibnetdiscover's topology output: Switch/Ca/Rt lines, [port] lines under them, "
               "key=value lines and # comments")
LLDP_ACCEPTED = ("`lldpcli -f json show neighbors` output (or -f json0): a directory of "
                 "<node>.json files, one per node, or one file {\"<node>\": <output>, ...}")
_IB_NODE = re.compile(r'(Switch|Ca|Rt)\s+\d{1,5}\s+"([SHR]-[0-9a-fA-F]{1,16})"\s*'
                      r'(?:#\s*"(.*)")?')
# A port line, both sides' shapes: ``[13]\t"S-..."[19]\t\t# "desc" lid 21 4xEDR`` (a switch's)
# and ``[1](guid) \t"S-..."[36]\t\t# lid 83 lmc 0 "desc" lid 48 4xEDR`` (a CA's).
# Ports and LIDs of at most 5 digits (a LID is 16 bits), and no pattern that backtracks: the
# description is what lies between two quotes (32,000 quotes on a line had taken 19.8 s).
_IB_PORT = re.compile(r'\[(\d{1,5})\](?:\[ext \d{1,5}\])?(?:\([0-9a-fA-F]{1,16}\))?\s*'
                      r'"([SHR]-[0-9a-fA-F]{1,16})"\[(\d{1,5})\](?:\[ext \d{1,5}\])?\s*'
                      r'(?:\([0-9a-fA-F]{1,16}\))?\s*#[^"]*"([^"]*)"\s+lid\s+(\d{1,5})\s+(\S+)')
_IB_OWN_LID = re.compile(r"#\s*lid\s+(\d{1,5})\s+lmc\b")  # a CA's own, on its port lines
# A CA's NodeDescription as its firmware sets it names no host ("MT23108 InfiniHost Mellanox
# Technologies"); rdma-ndd sets "<hostname> <device>".
_FIRMWARE_DESC = re.compile(r"^MT\d+\b|Technologies\s*$")


@dataclass
class _Cable:
    """One cable as a source saw it: its ends (switch names or endpoints) and its rate."""
    a: str
    b: str
    rate: float | None          # Gbit/s; None: not said, or not read
    label: str                  # the rate as the source wrote it ("4xEDR"); "" where none


def parse_ibnetdiscover(text: str, source: str = "ibnetdiscover") -> Topology:
    """``ibnetdiscover``'s topology output. Switches are named by their Mellanox/NVIDIA
    description's NAME (``MF0;NAME:MODEL/U1``) or a one-word description (a node-name-map's)
    where that names one switch only, else by their ``S-<guid>``; hosts by their CAs'
    NodeDescription's first word (a host whose CAs sit on different switches: ``host/dev``
    each, so rails stay apart). Each cable counts once (ibnetdiscover lists it from both
    ends); parallel cables between two switches are one trunk whose capacity is their sum."""
    topo = Topology(source=f"{source} (ibnetdiscover)")
    heads: dict[str, str] = {}       # node id -> NodeDescription, from its own header
    told: dict[str, str] = {}        # node id -> NodeDescription, from its peers' port lines
    links: dict[frozenset[tuple[str, int]], tuple[float | None, str]] = {}
    loops: set[frozenset[tuple[str, int]]] = set()
    lids: dict[tuple[str, int], int] = {}        # (CA id, port) -> its LID
    cabled: dict[tuple[str, int], str] = {}      # (switch id, port) -> the node it reaches
    lines, tables = ibroutes.split(text, source)      # every line at most MAX_LINE long
    node: str | None = None
    for number, raw in lines:
        line = raw.strip()
        if (not line or line.startswith("#") or re.match(r"\w+=", line)
                or line == "Non-Chassis Nodes" or re.match(r"(Chassis \d|Hostname:)", line)):
            continue                 # ids, comments and -g's chassis headings: no links
        head = _IB_NODE.match(line)
        if head:
            node = head.group(2)
            heads[node] = head.group(3) or ""
            continue
        port = _IB_PORT.match(line)
        if not port or node is None:
            what = ("a port line before any Switch/Ca line" if port else
                    "a port line netbench does not read" if line.startswith("[") else
                    f"{line[:60]!r} is not a line of it")
            raise UsageError(f"topology {source} line {number}: {what} (accepted: "
                             f"{IB_ACCEPTED})")
        peer, label, mine = port.group(2), port.group(6), int(port.group(1))
        told.setdefault(peer, port.group(4))
        if node[0] == "S":
            cabled[node, mine] = peer
            if peer[0] == "H":
                lids[peer, int(port.group(3))] = int(port.group(5))
        own = _IB_OWN_LID.search(line)
        if node[0] == "H" and own:
            lids[node, mine] = int(own.group(1))
        key = frozenset({(node, int(port.group(1))), (peer, int(port.group(3)))})
        if peer == node:                 # a loopback plug or a cable between two own ports
            if key not in loops:
                topo.notes.append(f"line {number}: {node} port {port.group(1)} is cabled to "
                                  f"its own port {port.group(3)}; left out")
            loops.add(key)
            continue
        rate, had = _ib_rate(label), links.get(key)
        # Both ends report a cable; should they differ, it runs at the slower.
        if had is None or (rate is not None and (had[0] is None or rate < had[0])):
            links[key] = (rate, label)
    if not links:
        raise UsageError(f"topology {source}: no links (accepted: {IB_ACCEPTED})")
    descs = {**told, **heads}
    ids = set(descs) | {n for key in links for n, _ in key}
    names = _ib_switch_names({n: descs.get(n, "") for n in ids if n[0] != "H"})
    endpoint = _ib_endpoints(links, {n: descs.get(n, "") for n in ids if n[0] == "H"}, topo)
    cables = []
    for key, (rate, label) in links.items():
        (n1, p1), (n2, p2) = sorted(key)
        cables.append(_Cable(names.get(n1) or endpoint[n1, p1],
                             names.get(n2) or endpoint[n2, p2], rate, label))
    topo = _assemble(topo, cables, set(names.values()))
    if tables:
        _ib_routes(topo, tables, cabled, {lid: endpoint[key] for key, lid in lids.items()
                                          if key in endpoint}, names)
    return topo


def _ib_routes(topo: Topology, tables: Mapping[str, Mapping[int, int]],
               cabled: Mapping[tuple[str, int], str], by_lid: Mapping[int, str],
               names: Mapping[str, str]) -> None:
    """The forwarding tables onto the shape: each switch's next switch toward each endpoint
    (by the endpoint's LID and the cable on the port it leaves by), and the fabric routed by
    destination. What the tables lack or contradict is noted, never guessed."""
    unknown = sorted(set(tables) - set(names))
    for sid, table in tables.items():
        switch = names.get(sid)
        if switch is None:
            continue
        toward = topo.routes.setdefault(switch, {})
        for lid, port in table.items():
            endpoint = by_lid.get(lid)
            nxt = names.get(cabled.get((sid, port), ""))
            if endpoint is not None and nxt is not None and port:
                toward[endpoint] = nxt
    topo.routing = "dest"
    # Routes each switch lacks to the hosts on other switches, counted from the routes it has:
    # a list of every (switch, remote host) had cost 905 MB for a 1.9 MB file.
    at_switch = Counter(topo.hosts.values())
    missing = sum(len(topo.hosts) - at_switch[s]
                  - sum(topo.hosts.get(h, s) != s for h in topo.routes.get(s, {}))
                  for s in topo.switches)
    if unknown:
        topo.notes.append(f"forwarding tables of {len(unknown)} switch(es) ibnetdiscover did "
                          f"not list: {', '.join(unknown[:5])}; left out")
    if missing:
        topo.notes.append(f"the forwarding tables lack {missing} (switch, host) route(s) (a "
                          "switch with no table, an entry to an uncabled port): a pair "
                          "through one is judged without a path")


def _ib_rate(label: str) -> float | None:
    m = re.fullmatch(r"(\d+)x([A-Z0-9]+)", label)
    lane = IB_LANE.get(m.group(2)) if m else None
    return int(m.group(1)) * lane if m and lane else None


def _ib_switch_names(descs: Mapping[str, str]) -> dict[str, str]:
    """Switch id -> its name, each unique: NAME, then NAME/unit (a director's ASICs share
    NAME), then the id."""
    choices: dict[str, list[str]] = {}
    for sid, desc in descs.items():
        m = re.match(r"MF0;([^:\s]+):(\S*)", desc)
        if m:
            unit = m.group(2).partition("/")[2]
            choices[sid] = [m.group(1)] + ([f"{m.group(1)}/{unit}"] if unit else []) + [sid]
        else:
            choices[sid] = ([desc] if desc and not re.search(r"\s", desc) else []) + [sid]
    names: dict[str, str] = {}
    while choices:
        pick = {sid: c[0] for sid, c in choices.items()}
        count = Counter(pick.values())
        taken = set(names.values())
        for sid, name in pick.items():
            if (count[name] == 1 and name not in taken) or len(choices[sid]) == 1:
                names[sid] = name
        choices = {sid: c[1:] for sid, c in choices.items() if sid not in names}
    return names


def _ib_endpoints(links: Iterable[frozenset[tuple[str, int]]], descs: Mapping[str, str],
                  topo: Topology) -> dict[tuple[str, int], str]:
    """(CA id, port) -> its endpoint: the host, or ``host/dev`` where the host's CAs sit on
    different switches (``host/dev:port`` where one CA's ports do), or the CA's id where its
    description names no host (noted)."""
    reach: dict[str, set[str]] = {}              # CA id -> the switches its ports reach
    ports: set[tuple[str, int]] = set()
    for key in links:
        (n1, p1), (n2, p2) = sorted(key)
        for (ca, port), other in (((n1, p1), n2), ((n2, p2), n1)):
            if ca[0] == "H":
                ports.add((ca, port))
                reach.setdefault(ca, set())
                if other[0] != "H":
                    reach[ca].add(other)
    named = {ca: (words[0], "_".join(words[1:]))
             for ca, words in ((ca, descs.get(ca, "").split()) for ca in reach)
             if words and not _FIRMWARE_DESC.search(descs.get(ca, ""))}
    host_reach: dict[str, set[str]] = {}
    devs: Counter[tuple[str, str]] = Counter()
    for ca, (host, dev) in named.items():
        host_reach.setdefault(host, set()).update(reach[ca])
        devs[host, dev] += 1
    out = {}
    for ca, port in ports:
        if ca not in named:
            out[ca, port] = ca if len(reach[ca]) <= 1 else f"{ca}:{port}"
            continue
        host, dev = named[ca]
        dev = dev if dev and devs[host, dev] == 1 else ca
        out[ca, port] = (host if len(host_reach[host]) <= 1 else f"{host}/{dev}"
                         if len(reach[ca]) <= 1 else f"{host}/{dev}:{port}")
    anonymous = sorted(set(reach) - set(named))
    if anonymous:
        topo.notes.append(f"{len(anonymous)} CA(s) whose NodeDescription names no host (as "
                          f"\"{descs.get(anonymous[0], '')}\", the firmware's): named by GUID "
                          f"({', '.join(anonymous[:3])}{' ...' if len(anonymous) > 3 else ''})"
                          "; rdma-ndd sets \"<hostname> <device>\"")
    return out


@dataclass
class _Seen:
    """One neighbour as one node's ``lldpcli show neighbors`` saw it."""
    node: str                   # whose output
    iface: str                  # the node's interface
    peer: str                   # the neighbour's system name (its chassis id where it has none)
    caps: set[str] | None       # the capabilities the neighbour has enabled; None: not read
    port: str                   # the neighbour's port: its ifname where the id is one
    rate: float | None          # Gbit/s, from the neighbour's MAU type
    label: str                  # the MAU type ("100GbaseCR4"); "" where none
    addresses: list[str] = field(default_factory=list)   # its management addresses


def parse_lldp(outputs: Mapping[str, Any], source: str = "lldp",
               where: Mapping[str, str] | None = None) -> Topology:
    """Nodes' ``lldpcli -f json show neighbors`` outputs (node -> its parsed JSON, ``where``:
    node -> the file or key it came from, for errors). A node whose neighbours see it with
    Bridge or Router enabled is a switch, the rest hosts; a host's cables to a switch are
    its access link (a host on several switches: ``host/IFACE`` each), cables between two
    switches one trunk, capacity the sum of their MAU types' rates where all are known."""
    topo = Topology(source=f"{source} (lldp)")
    seen: list[_Seen] = []
    for node, doc in outputs.items():
        loc = (where or {}).get(node, f"{source}: key {node!r}")
        got = _lldp_seen(node, doc, loc, topo.notes)
        if not got:
            topo.notes.append(f"node {node} ({loc}): no LLDP neighbours (lldpd not running "
                              "there, or LLDP off on its links); left out")
        seen += got
    if not seen:
        raise UsageError(f"topology {source}: no node has LLDP neighbours (accepted: "
                         f"{LLDP_ACCEPTED})")
    # Neighbours advertise their system name, which may be the FQDN of a <short>.json file.
    short = {n.split(".")[0]: n for n in outputs}
    caps: dict[str, set[str]] = {}
    for s in seen:
        s.peer = s.peer if s.peer in outputs else short.get(s.peer.split(".")[0], s.peer)
        caps.setdefault(s.peer, set()).update(s.caps or ())
    switches = {n for n, c in caps.items() if c & {"Bridge", "Router"}}
    claims: dict[str, set[str]] = {}
    for s in seen:
        for address in s.addresses:
            claims.setdefault(address, set()).add(s.peer)
    shared = sorted(a for a, nodes in claims.items() if len(nodes) > 1)
    topo.addresses = {a: next(iter(n)) for a, n in claims.items() if len(n) == 1}
    if shared:       # an anycast loopback or a VRRP address names no one switch
        topo.notes.append(f"{len(shared)} address(es) advertised by more than one node "
                          f"({', '.join(shared[:3])}{' ...' if len(shared) > 3 else ''}): "
                          "a trace's hop there names nothing")
    for n in sorted(switches & set(outputs)):
        if not caps[n] & {"Bridge"}:
            topo.notes.append(f"node {n}: read as a switch (its neighbours see Router "
                              "enabled); a host with IP forwarding on (Docker, Kubernetes) "
                              "advertises the same")
    sides: dict[tuple[str, str], list[_Seen]] = {}
    for s in seen:
        sides.setdefault((s.node, s.peer), []).append(s)
    access: dict[str, list[tuple[str, str, _Seen]]] = {}   # host -> (switch, its iface, cable)
    cables: list[_Cable] = []
    for a, b in sorted({(min(k), max(k)) for k in sides}):
        if a == b:
            topo.notes.append(f"node {a}: sees itself over LLDP (a loop); left out")
            continue
        first, second = sides.get((a, b), []), sides.get((b, a), [])
        if a in switches:                        # the host's own view first: its iface names
            first, second = second, first
        if first and second and len(first) != len(second):
            topo.notes.append(f"link {link_name(a, b)}: {first[0].node} sees {len(first)} "
                              f"cable(s), {second[0].node} sees {len(second)}; the larger "
                              "count is kept")
        pick = second if len(second) > len(first) else first
        host = next((n for n in (a, b) if n not in switches), None)
        for s in pick:
            if host is not None and (a in switches or b in switches):
                switch = b if host == a else a
                access.setdefault(host, []).append(
                    (switch, s.iface if s.node == host else s.port, s))
            else:
                cables.append(_Cable(a, b, s.rate, s.label))
    for host, links in access.items():
        rails = len({switch for switch, _, _ in links}) > 1
        for switch, iface, s in links:
            cables.append(_Cable(f"{host}/{iface}" if rails else host, switch, s.rate, s.label))
    return _assemble(topo, cables, switches)


def _lldp_seen(node: str, doc: Any, where: str, notes: list[str]) -> list[_Seen]:
    """One node's neighbours, from either of lldpcli's JSON shapes: ``-f json`` (a lone
    interface is a dict, several a list of one-key dicts; a named chassis is keyed by its
    name) and ``-f json0`` (every value a list; names inside)."""
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    if lldp is None:
        raise UsageError(f"topology {where}: no \"lldp\" key (accepted: {LLDP_ACCEPTED})")
    entries: list[tuple[str | None, Any]] = []
    if isinstance(lldp, list):
        for block in lldp:
            entries += [(_text(e.get("name")) if isinstance(e, dict) else None, e)
                        for e in _list(block.get("interface") if isinstance(block, dict)
                                       else None)]
    elif isinstance(lldp, dict):
        raw = lldp.get("interface") or []
        for item in [raw] if isinstance(raw, dict) else _list(raw):
            entries += list(item.items()) if isinstance(item, dict) else [(None, item)]
    else:
        raise UsageError(f"topology {where}: \"lldp\" is a {type(lldp).__name__}, not "
                         f"lldpcli's object (accepted: {LLDP_ACCEPTED})")
    out = []
    for i, (iface, body) in enumerate(entries):
        key = f"lldp.interface[{i}]"
        chassis = _one(body.get("chassis")) if isinstance(body, dict) else None
        if not iface or not isinstance(body, dict) or not isinstance(chassis, dict):
            raise UsageError(f"topology {where}: {key}: not an interface with a neighbour's "
                             f"chassis (accepted: {LLDP_ACCEPTED})")
        peer, info = _lldp_chassis(chassis)
        if peer is None:
            raise UsageError(f"topology {where}: {key} ({iface}): the neighbour's chassis has "
                             "neither a name nor an id")
        caps = _lldp_caps(info.get("capability"))
        if caps is None:
            notes.append(f"node {node}, {iface}: neighbour {peer}'s capabilities not read "
                         f"({str(info.get('capability'))[:60]}; expected entries such as "
                         "{\"type\": \"Bridge\", \"enabled\": true}): not counted a switch by "
                         "this view")
        port = _one(body.get("port"))
        port = port if isinstance(port, dict) else {}
        pid = _one(port.get("id"))
        kind = _text(pid.get("type")) if isinstance(pid, dict) else None
        name = _text(pid) if kind == "ifname" else _text(port.get("descr")) or _text(pid)
        neg = _one(port.get("auto-negotiation"))
        rate, label = _mau_rate(_text(neg.get("current")) if isinstance(neg, dict) else None)
        addresses = [a for a in (_text(x) for x in _list(info.get("mgmt-ip"))) if a]
        out.append(_Seen(node, str(iface), peer, caps, name or "?", rate, label, addresses))
    return out


def _lldp_chassis(chassis: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
    """(the system name, the chassis' fields): ``-f json`` keys a named chassis by its name."""
    if len(chassis) == 1:
        name, info = next(iter(chassis.items()))
        if isinstance(info, dict) and not set(info) <= {"type", "value"}:
            return name, info
    return _text(chassis.get("name")) or _text(chassis.get("id")), chassis


def _lldp_caps(raw: Any) -> set[str] | None:
    """The enabled capabilities; None where the shape is not lldpcli's."""
    if raw is None:
        return None
    out = set()
    for item in raw if isinstance(raw, list) else [raw]:
        on = item.get("enabled") if isinstance(item, dict) else None
        if isinstance(on, str):
            on = {"on": True, "yes": True, "off": False, "no": False}.get(on.lower())
        if not isinstance(on, bool) or not isinstance(item.get("type"), str):
            return None
        if on:
            out.add(item["type"])
    return out


def _mau_rate(current: str | None) -> tuple[float | None, str]:
    """A MAU type's rate: ``100GbaseCR4 - ...`` 100, ``10GigBaseR`` 10, ``1000BaseTFD`` 1."""
    label = (current or "").split(" - ", 1)[0].strip()
    if label.lower() in ("", "unknown"):
        return None, ""
    m = re.match(r"(\d{1,7}(?:\.\d{1,6})?)\s*(G|Gig)?base", label, re.I)
    if not m:
        return None, label[:80]          # no rate read (a 400-digit one is none either)
    rate = float(m.group(1)) / (1.0 if m.group(2) else 1000.0)
    return (rate if 0 < rate <= MAX_GBITS else None), label


def _one(value: Any) -> Any:
    """json0 wraps every value in a list of one."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [] if value is None else [value]


def _text(value: Any) -> str | None:
    value = _one(value)
    if isinstance(value, dict):
        return _text(value.get("value"))
    return str(value) if isinstance(value, str | int | float) and value != "" else None


def _assemble(topo: Topology, cables: Iterable[_Cable], switches: set[str]) -> Topology:
    """Cables into hosts, trunks and capacities (a bundle's sum where every rate is known),
    noting each cable that trained below its bundle's or the fabric's most common rate."""
    topo.switches |= switches
    bundles: dict[tuple[str, str], list[_Cable]] = {}
    for cable in cables:
        bundles.setdefault((min(cable.a, cable.b), max(cable.a, cable.b)), []).append(cable)
    kept: dict[tuple[str, str], list[_Cable]] = {}
    for (a, b), group in sorted(bundles.items()):
        if a in switches and b in switches:
            topo.add_trunk(a, b)
        elif a in switches or b in switches:
            topo.add_host(*((b, a) if a in switches else (a, b)))
        else:
            topo.notes.append(f"link {link_name(a, b)}: joins two hosts, no switch between "
                              "them; left out")
            continue
        kept[a, b] = group
        if all(c.rate is not None for c in group):
            topo.capacity[f"link:{link_name(a, b)}"] = sum(c.rate or 0.0 for c in group)
    for trunks, kind in ((True, "links between switches"), (False, "host links")):
        _note_rates(topo, {k: g for k, g in kept.items()
                           if (k[0] in switches and k[1] in switches) == trunks}, kind)
    return topo


def _majority(cables: Sequence[_Cable]) -> tuple[float, str] | None:
    """The most common rate (a tie: the higher) and the label most cables at it carry."""
    rated = [c for c in cables if c.rate is not None]
    if not rated:
        return None
    count = Counter(c.rate for c in rated)
    rate = max(count, key=lambda r: (count[r], r or 0.0))
    label = Counter(c.label for c in rated if c.rate == rate).most_common(1)[0][0]
    return rate or 0.0, label


def _note_rates(topo: Topology, bundles: Mapping[tuple[str, str], list[_Cable]],
                kind: str) -> None:
    # Acceptance wants a cable that trained low named (one 4xDDR among six 4xEDR costs the
    # trunk 13%); against its bundle first, then a bundle that is slow as a whole against
    # the fabric's links of its kind.
    fabric = _majority([c for group in bundles.values() for c in group])
    for (a, b), group in sorted(bundles.items()):
        name = link_name(a, b)
        unread = sorted({c.label for c in group if c.rate is None and c.label})
        if unread:
            topo.notes.append(f"link {name}: rate {', '.join(unread)} not read; no capacity")
        own = _majority(group)
        if own is None or fabric is None:
            continue
        below = [c for c in group if c.rate is not None and c.rate < own[0]]
        behind = [c for c in group if c.rate == own[0]] if own[0] < fabric[0] else []
        for cables, against in ((below, own[1]), (behind, f"the fabric's {fabric[1]} ({kind})")):
            for label, n in sorted(Counter(c.label for c in cables).items()):
                rate = next(c.rate for c in cables if c.label == label)
                count = f"{n} of {len(group)} cables" if len(group) > 1 else "its cable"
                topo.notes.append(f"link {name}: {count} at {label} ({rate:g} Gbit/s) "
                                  f"against {against}")


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
