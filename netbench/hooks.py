"""Extension hooks, found through the ``netbench.hooks`` entry-point group, as pytest-benchmark
lets a site extend machine info and the stored JSON.

A hook is any object (a module will do) with some of these callables:

    update_env(env: dict) -> None             add to every run's fingerprint, e.g. the switch
                                              port's firmware or the rack a host sits in
    case_finished(rows: list[dict]) -> None   each case's rows, once they are stored
    run_finished(rows: list[dict]) -> None    every row of the run, once the run is over

A hook that fails is reported (``netbench list`` and the run's fallback lines name it); it
never stops a run, and rows are stored before any hook sees them.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points
from typing import Any

GROUP = "netbench.hooks"


@lru_cache(maxsize=1)
def load() -> tuple[tuple[tuple[str, Any], ...], tuple[str, ...]]:
    """(name, hook) pairs, and one message per hook that failed to load."""
    hooks, broken = [], []
    for ep in entry_points(group=GROUP):
        try:
            hooks.append((ep.name, ep.load()))
        except Exception as exc:        # a broken hook must not break netbench
            broken.append(f"hook {ep.name} ({ep.value}) failed to load: "
                          f"{type(exc).__name__}: {exc}")
    return tuple(hooks), tuple(broken)


def call(method: str, *args: Any) -> list[str]:
    """Call ``method`` on every hook that has it; returns what went wrong, one line each
    (hooks that failed to load are ``load()[1]``)."""
    errors = []
    for name, hook in load()[0]:
        fn = getattr(hook, method, None)
        if fn is None:
            continue
        try:
            fn(*args)
        except Exception as exc:
            errors.append(f"hook {name}.{method} failed: {type(exc).__name__}: {exc}")
    return errors
