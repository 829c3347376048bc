"""How concurrent flows share the links they cross: max-min fairness, the share long TCP or
RDMA flows settle to on a common bottleneck. The simulator's model of a round, and the
planner's expectation of what a traced flow should read beside the round's others.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Hop = tuple[str, str]


def max_min_fair(flows: Sequence[Sequence[Hop]],
                 capacity_of: Callable[[Hop], float]) -> list[float]:
    """Progressive filling: raise every unfrozen flow equally until a hop is full, freeze the
    flows through it, repeat."""
    users: dict[Hop, list[int]] = {}
    for f, hops in enumerate(flows):
        for hop in hops:
            users.setdefault(hop, []).append(f)
    left = {hop: capacity_of(hop) for hop in users}
    active = {hop: len(fs) for hop, fs in users.items()}
    rate = [0.0] * len(flows)
    frozen = [False] * len(flows)
    while True:
        live = [hop for hop, n in active.items() if n]
        if not live:
            return rate
        step = min(left[hop] / active[hop] for hop in live)
        for hop in live:
            left[hop] -= step * active[hop]
        for f in range(len(flows)):
            if not frozen[f]:
                rate[f] += step
        full = [hop for hop in live if left[hop] <= 1e-9 * max(1.0, capacity_of(hop))]
        for hop in full:
            for f in users[hop]:
                if not frozen[f]:
                    frozen[f] = True
                    for other in flows[f]:
                        active[other] -= 1
