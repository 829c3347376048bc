"""Error counters that were quiet in the baseline and grew in the candidate: after a driver or
firmware update, the first symbol error, link-down or out-of-sequence packet is news whatever
the bandwidth says.

Each case's rows carry what its counters grew by (netbench.env.counters, the ``counters``
column). Per case (benchmark and params) and per error counter name, summed over the objects
that have it (``rx_errors`` of every interface, ``symbol_error`` of every port, this end's and
the far end's), the most it grew in any one invocation: where every baseline invocation read
0 and a candidate invocation read more, that is news. The kernel's TCP counters count the whole
network namespace (any other traffic's retransmits too): news, but not a failed gate; the
NIC's and the driver's are a failed gate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from netbench.env.counters import is_error, netns_wide


@dataclass
class CounterNews:
    benchmark: str
    params: str
    name: str                   # the counter, summed over its objects
    baseline: int               # the most it grew in one baseline invocation (0)
    candidate: int              # the most it grew in one candidate invocation
    where: list[str] = field(default_factory=list)   # the counters that grew, whole
    gated: bool = True          # a NIC's or driver's (fails compare); False: netns-wide TCP


def _grown(rows: Any) -> dict[tuple[str, str], dict[str, tuple[int, set[str]]]]:
    """(benchmark, params) -> error name -> (the most it grew in one invocation, where);
    only cases whose counters were read."""
    out: dict[tuple[str, str], dict[str, tuple[int, set[str]]]] = {}
    if rows is None or len(rows) == 0 or "counters" not in rows:
        return out
    seen = set()
    for bench, params, text, run, host, index in zip(
            rows["benchmark"], rows["params"], rows["counters"], rows["run_id"], rows["host"],
            rows["case_index"]):
        if (run, host, index) in seen or not isinstance(text, str):
            continue
        seen.add((run, host, index))
        try:
            deltas = json.loads(text)
        except ValueError:
            continue
        if not isinstance(deltas, Mapping):
            continue
        case = out.setdefault((str(bench), str(params)), {})
        sums: dict[str, tuple[int, set[str]]] = {}
        for key, value in deltas.items():
            if is_error(str(key)) and isinstance(value, int) and value > 0:
                name = str(key).rsplit("/", 1)[-1]
                total, where = sums.get(name, (0, set()))
                sums[name] = (total + value, where | {str(key)})
        for name, (total, where) in sums.items():
            most, places = case.get(name, (0, set()))
            case[name] = (max(most, total), places | where)
    return out


def counter_news(base: Any, cand: Any) -> list[CounterNews]:
    """The error counters every baseline invocation of a case kept at 0 and a candidate
    invocation grew, case by case (cases both sides read counters for)."""
    before, after = _grown(base), _grown(cand)
    news = []
    for case in sorted(set(before) & set(after)):
        for name, (most, where) in sorted(after[case].items()):
            if before[case].get(name, (0, set()))[0] == 0:
                news.append(CounterNews(case[0], case[1], name, 0, most, sorted(where),
                                        not all(netns_wide(w) for w in where)))
    return news
