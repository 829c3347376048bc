"""How a case is named wherever it is shown: the benchmark and the params that tell it apart
from the others shown beside it (msg_size always, as nccl-tests and perftest print it), in the
units people write (64K). One naming for the console, accept's JUnit, the dashboard and the
export, so a case reads the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from netbench.api import format_size


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
