"""netbench: one tool and one data model for interconnect benchmarks."""

from typing import Any

__version__ = "0.1.0"


def load(path: str = "results", run_ids: Any = None, params: bool = True) -> Any:
    """The result store as a tidy pandas DataFrame (see ``netbench.store.load``)."""
    from netbench.store import load as _load

    return _load(path, run_ids, params)
