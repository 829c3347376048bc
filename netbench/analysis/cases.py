"""What a stored case is, read from its rows alone (never from today's plugin code): how it
is named wherever it is shown (the benchmark and the params that tell it apart from the others
beside it, msg_size always, in the units people write: 64K), its headline metric, what each of
its two ends does with the data, and the link rate it ran on. One reading for the console,
accept and its JUnit, the fabric verdicts, the dashboard and the export.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from netbench.api import format_size
from netbench.fingerprint import Fingerprint
from netbench.store import params_of


def param_text(key: str, value: Any) -> str:
    """A param value as people write it (msg_size as 64K)."""
    return format_size(value) if key == "msg_size" and isinstance(value, int) else str(value)


def case_text(params: str, keys: Iterable[str] | None = None) -> str:
    """``k=v`` for the params that name a case (``keys``; all of them without)."""
    p = json.loads(params or "{}")
    wanted = None if keys is None else set(keys)
    return " ".join(f"{k}={param_text(k, p[k])}" for k in sorted(p)
                    if wanted is None or k in wanted)


def case_names(cases: Sequence[tuple[str, str]]) -> list[str]:
    """Short case names for (benchmark, params) pairs: the benchmark and the params that
    differ between its cases here (msg_size always), as nccl-tests and perftest print them."""
    seen: dict[str, dict[str, set[str]]] = {}
    for bench, params in cases:
        for key, value in json.loads(params or "{}").items():
            seen.setdefault(bench, {}).setdefault(key, set()).add(json.dumps(value))
    keys = {b: {k for k, v in per.items() if len(v) > 1 or k == "msg_size"}
            for b, per in seen.items()}
    return [" ".join(filter(None, [bench, case_text(params, keys.get(bench, set()))]))
            for bench, params in cases]


def _stored(value: Any) -> str | None:
    """A text column's value, None where missing (None or NaN in a frame)."""
    return value if isinstance(value, str) and value else None


def headline_of(rows: Any) -> str | None:
    """The metric a case's rows are summed up by: as its benchmark declared it when the run
    was stored; in files written before that, the case's first metric (metrics are stored in
    declared order, and the first was the headline where none was declared). ``rows``: a
    frame of one case's (or one benchmark's) rows."""
    if rows is None or len(rows) == 0:
        return None
    if "headline" in rows:
        named = [h for h in rows["headline"].tolist() if _stored(h)]
        if named:
            return str(named[0])
    metrics = [m for m in rows["metric"].tolist() if _stored(m)]
    return str(metrics[0]) if metrics else None


def is_headline(rows: Any) -> Any:
    """A boolean Series: which of ``rows`` (a frame) are their case's headline metric, each
    case (run and case index) read as ``headline_of`` reads it."""
    import pandas as pd

    if rows is None or len(rows) == 0:
        return pd.Series([], dtype=bool)
    named = rows["headline"] if "headline" in rows else pd.Series(None, index=rows.index,
                                                                   dtype=object)
    first = rows.dropna(subset=["metric"]).groupby(["run_id", "case_index"], sort=False)[
        "metric"].transform("first")
    wanted = named.where(named.map(lambda h: bool(_stored(h))), first.reindex(rows.index))
    return rows["metric"].notna() & (rows["metric"] == wanted)


def headlines(rows: Any) -> dict[str, str]:
    """Each benchmark's headline metric among ``rows`` (a frame), as its rows say."""
    if rows is None or len(rows) == 0:
        return {}
    out = {str(b): headline_of(g) for b, g in rows.groupby("benchmark", sort=False)}
    return {b: h for b, h in out.items() if h}


def flow_of(row: Mapping[str, Any]) -> str:
    """Which way a case's data went (``netbench.api.Flow``), as stored; for rows from before
    it was stored, what the params say (bidirectional, direction), else forward."""
    stored = _stored(row.get("flow"))
    if stored:
        return stored
    p = params_of(row.get("params"))
    if p.get("bidirectional") is True or p.get("direction") == "both":
        return "both"
    return "reverse" if p.get("direction") == "reverse" else "forward"


def roles(flow: str, better: str) -> tuple[str, str]:
    """What the client and the server of a pair do with the data, to name a host's role in
    a verdict truly: a slow RDMA READ client is slow receiving, not sending. Latency and
    both-ways runs move data both ways: the roles are just client and server."""
    if better == "lower" or flow == "both":
        return "client", "server"
    if flow == "reverse":
        return "receiving", "sending"
    return "sending", "receiving"


def probed_line_rate(row: Mapping[str, Any]) -> float | None:
    """Gbit/s of the link the row was measured on, from the run's fingerprint."""
    return Fingerprint(row.get("env_json")).line_rate_gbps(str(row.get("device") or ""))


