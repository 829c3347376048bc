"""netbench: one tool and one data model for interconnect benchmarks."""

import json
from typing import Any

__version__ = "0.1.0"


def load(path: str = "results", run_ids: Any = None, params: bool = True) -> Any:
    """The result store as a tidy pandas DataFrame (see ``netbench.store.load``), the traits
    of cases stored before they carried them filled in from the installed benchmarks."""
    from netbench import registry
    from netbench.store import load as _load

    rows = _load(path, run_ids, params, registry.stored_traits)
    if params:
        _whole_params_as_int64(rows)
    return rows


def _whole_params_as_int64(rows: Any) -> None:
    """Whole-number params (msg_size, iterations) as Int64, like the ``msg_size`` column:
    rows of a benchmark without the param hold it missing, which alone would make pandas
    store it as float64. Decided from the stored JSON, so a float param stays float."""
    import pandas as pd

    for source, prefix in (("params", "param_"), ("resolved", "resolved_")):
        if source not in rows:
            continue
        parsed = {text: json.loads(text or "{}") for text in set(rows[source].dropna())}
        for column in [c for c in rows.columns if c.startswith(prefix)]:
            key = column[len(prefix):]
            kinds = {type(p[key]) for p in parsed.values() if p.get(key) is not None}
            if kinds == {int}:
                rows[column] = pd.array(
                    [parsed[t].get(key) if isinstance(t, str) else None
                     for t in rows[source]], dtype="Int64")
