"""How long a plan's cases will take, from how long they took before: each case's median
``case_seconds`` over the store's recent runs of it on this host (what it measured, warm-up,
set-up and all). A case never timed here is unknown, never guessed from its params; the ETA
of a running suite stands in for those with the mean of the cases finished so far."""

from __future__ import annotations

import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from netbench.fingerprint import Fingerprint
from netbench.store import ResultStore, params_json

RECENT_RUNS = 20     # the store's newest runs read for the estimate (bounded at any size)


def case_seconds(results: str | Path, plan: Any,
                 env: Mapping[str, Any]) -> list[float | None]:
    """Each planned case's median seconds in the ``RECENT_RUNS`` newest runs on this host
    (``env``'s) of the store in ``results``, or None where none of them ran it (or there is
    no store). Never raises: a store that cannot be read estimates nothing."""
    host = Fingerprint(env).host
    try:
        if not Path(results).is_dir():
            return [None] * len(plan.cases)
        store = ResultStore(Path(results))
        store.cache = False            # an estimate leaves nothing in the store
        index = store.runs()
        if host is not None and len(index):
            index = index[index["host"] == host]
        if not len(index):
            return [None] * len(plan.cases)
        recent = list(index["run_id"].tail(RECENT_RUNS))
        benches = sorted({p.case.benchmark for p in plan.cases})
        rows = store.read(recent, ["run_id", "case_index", "benchmark", "params",
                                   "case_seconds", "status"], where={"benchmark": benches})
    except Exception:      # noqa: BLE001 - an estimate is a courtesy, never a failure
        return [None] * len(plan.cases)
    rows = rows[(rows["status"] == "ok") & rows["case_seconds"].notna()]
    rows = rows.drop_duplicates(["run_id", "case_index"])
    took: dict[tuple[str, str], list[float]] = {}
    for bench, params, seconds in zip(rows["benchmark"], rows["params"], rows["case_seconds"]):
        took.setdefault((str(bench), str(params)), []).append(float(seconds))
    return [statistics.median(took[key]) if key in took else None
            for key in ((p.case.benchmark, params_json(p.case.params)) for p in plan.cases)]
