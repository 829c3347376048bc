"""A flow-level fabric simulator: what a round of concurrent pairs would read on a fabric of
given shape, with faults and noise, for the localization to be tested against (at 16,384
hosts no test machine has the fabric).

Links carry both directions apart, each at its capacity (Gbit/s); a host's NIC is a link to
its switch. The pairs of a round share the links they cross by max-min fairness (progressive
filling: every flow grows until a link it crosses is full); under ECMP each pair's traffic
takes one of its equal-cost paths, chosen by a hash of the pair (as a switch hashes a flow's
5-tuple: the same pair the same way every time, a new flow another way), which the analysis
never sees (unless the sweep traces its flows: ``paths`` says what a tracer would). A fault
scales an element's capacity: a host's NIC, a link, or a switch (every link through it),
both ways, or one way (``host:X:send``, ``host:X:recv``, ``link:a->b``). Noise is
multiplicative: uniform within +-``noise``, or (``noise_shape="normal"``) normal with the
same standard deviation (``noise / sqrt(3)``), whose tails reach past it as a real link's do.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Mapping, Sequence

from netbench.env.sharing import max_min_fair
from netbench.env.topology import Topology, link_name
from netbench.env.tracepath import STEER_TRIES

NOISE_SHAPES = ("uniform", "normal")


class FabricSim:
    def __init__(self, topology: Topology, capacity: float = 100.0,
                 faults: Mapping[str, float] | None = None, noise: float = 0.05,
                 seed: int = 0, salt: int = 0, noise_shape: str = "uniform") -> None:
        if noise_shape not in NOISE_SHAPES:
            raise ValueError(f"noise_shape {noise_shape!r}: one of {', '.join(NOISE_SHAPES)}")
        self.topology, self.capacity, self.noise = topology, capacity, noise
        self.noise_shape = noise_shape
        self.faults = dict(faults or {})
        self.rng = random.Random(seed)
        self.salt = salt          # a new salt is a new set of flows (new ECMP choices)

    def _path(self, client: str, server: str,
              via: Sequence[str] = ()) -> list[tuple[str, str]]:
        """The directed hops of the pair's flow: host -> switch ... switch -> host. ``via``:
        switches a steered flow should cross; as a steering client does, up to STEER_TRIES
        source ports (hashes) are tried, and the first that crosses them all is taken (else
        the first port's path)."""
        topo = self.topology
        a, b = topo.hosts[client], topo.hosts[server]
        paths = topo.switch_paths(a, b)
        if not paths:
            raise ValueError(f"no path from {client} to {server}")
        if topo.routing == "dest":               # routed by destination: the known path
            pick = topo.route_index(a, b, server)
            if pick < 0:
                raise ValueError(f"no route from {client} to {server}")
        else:
            tries = STEER_TRIES if via else 1
            picks = [zlib.crc32(f"{client}>{server}#{self.salt}"
                                f"{f'#{k}' if k else ''}".encode()) % len(paths)
                     for k in range(tries)]
            pick = next((p for p in picks if set(via) <= set(paths[p])), picks[0])
        nodes = [client, *paths[pick], server]
        return list(zip(nodes, nodes[1:]))

    def _hop_capacity(self, hop: tuple[str, str]) -> float:
        a, b = hop
        cap = self.topology.capacity.get(f"link:{link_name(a, b)}", self.capacity)
        faults = self.faults
        factor = faults.get(f"link:{link_name(a, b)}", 1.0) * faults.get(f"link:{a}->{b}", 1.0)
        for end in hop:
            factor *= faults.get(f"host:{end}", 1.0) * faults.get(f"switch:{end}", 1.0)
        # One way only: a host's egress shaped (tc tbf), a receive path that drops.
        factor *= faults.get(f"host:{a}:send", 1.0) * faults.get(f"host:{b}:recv", 1.0)
        return cap * factor

    def paths(self, pairs: Sequence[tuple[str, str]],
              via: Sequence[Sequence[str]] = ()) -> list[tuple[str, ...]]:
        """The switches each pair's flow crosses under the current salt: what a tracer with
        the flow's own 5-tuple reports (Paris traceroute's rule: the probes hash as the data
        does)."""
        return [tuple(hop[1] for hop in self._path(c, s, w)[:-1])
                for (c, s), w in zip(pairs, via or [()] * len(pairs))]

    def measure(self, pairs: Sequence[tuple[str, str]], salt: int | None = None,
                via: Sequence[Sequence[str]] = ()) -> list[float]:
        """Each pair's goodput (Gbit/s) when the round's pairs all run at once; ``salt``: new
        flows (a new connection hashes onto a new ECMP path, as a real re-run does);
        ``via``: each pair's steering (see ``_path``)."""
        if salt is not None:
            self.salt = salt
        flows = [self._path(c, s, w) for (c, s), w in zip(pairs, via or [()] * len(pairs))]
        rates = max_min_fair(flows, self._hop_capacity)
        if self.noise_shape == "normal":
            sd = self.noise / math.sqrt(3)
            return [r * max(0.0, 1 + self.rng.gauss(0.0, sd)) for r in rates]
        return [r * (1 + self.rng.uniform(-self.noise, self.noise)) for r in rates]


# --- shapes ---------------------------------------------------------------------------------------

def two_leaves(hosts_per_leaf: int = 4) -> Topology:
    """Two leaf switches joined by one trunk (the netns known answer's shape)."""
    topo = Topology(source="two leaves (simulated)")
    for leaf in ("leafA", "leafB"):
        for i in range(hosts_per_leaf):
            topo.add_host(f"{leaf}-h{i}", leaf)
    topo.add_trunk("leafA", "leafB")
    return topo


def fat_tree(leaves: int, hosts_per_leaf: int, spines: int,
             routing: str = "ecmp") -> Topology:
    """A two-tier leaf-spine fat-tree: every leaf linked to every spine (ECMP across them, or
    routed by destination: ``routing``)."""
    topo = Topology(source=f"fat-tree {leaves} leaves x {hosts_per_leaf} hosts, {spines} spines "
                           "(simulated)", routing=routing)
    for leaf in range(leaves):
        for h in range(hosts_per_leaf):
            topo.add_host(f"l{leaf}h{h}", f"leaf{leaf}")
        for s in range(spines):
            topo.add_trunk(f"leaf{leaf}", f"spine{s}")
    return topo


def three_tier(pods: int, leaves_per_pod: int, hosts_per_leaf: int, aggs_per_pod: int,
               cores: int, routing: str = "ecmp") -> Topology:
    """A three-tier fat-tree: pods of leaves and aggregation switches (every leaf to every
    agg of its pod), agg i of every pod linked to the cores of plane i (cores / aggs each)."""
    topo = Topology(source=f"3-tier fat-tree {pods} pods x {leaves_per_pod} leaves x "
                           f"{hosts_per_leaf} hosts (simulated)", routing=routing)
    per_plane = max(cores // aggs_per_pod, 1)
    for p in range(pods):
        for leaf in range(leaves_per_pod):
            name = f"p{p}l{leaf}"
            for h in range(hosts_per_leaf):
                topo.add_host(f"{name}h{h}", name)
            for a in range(aggs_per_pod):
                topo.add_trunk(name, f"p{p}a{a}")
        for a in range(aggs_per_pod):
            for c in range(per_plane):
                topo.add_trunk(f"p{p}a{a}", f"core{a * per_plane + c}")
    return topo


def dragonfly(groups: int, routers: int, hosts_per_router: int) -> Topology:
    """A dragonfly: routers of a group all linked to each other, one global link between
    every two groups (spread over the groups' routers), minimal routing (the one shortest
    path: pinned)."""
    topo = Topology(source=f"dragonfly {groups} groups x {routers} routers x "
                           f"{hosts_per_router} hosts (simulated)", routing="dest")
    for g in range(groups):
        for r in range(routers):
            for h in range(hosts_per_router):
                topo.add_host(f"g{g}r{r}h{h}", f"g{g}r{r}")
            for other in range(r + 1, routers):
                topo.add_trunk(f"g{g}r{r}", f"g{g}r{other}")
    for g in range(groups):
        for other in range(g + 1, groups):
            # The global link of groups g and other leaves each from a router of its own,
            # turning round the group, so the global links spread over the routers.
            topo.add_trunk(f"g{g}r{(other - 1) % routers}", f"g{other}r{g % routers}")
    return topo
