"""Benchmarks are found through the ``netbench.benchmarks`` entry-point group.

Built-ins register exactly like third-party plugins (see pyproject.toml), so a plugin is one
module and one entry-point line. A plugin that fails to import is reported, not fatal.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import entry_points

from netbench.api import Benchmark
from netbench.errors import UsageError

GROUP = "netbench.benchmarks"


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Benchmark], dict[str, str]]:
    found: dict[str, Benchmark] = {}
    broken: dict[str, str] = {}
    for ep in entry_points(group=GROUP):
        try:
            cls = ep.load()
            bench = cls()
        except Exception as exc:  # a broken plugin must not break `netbench list`
            broken[ep.name] = f"{ep.value}: {type(exc).__name__}: {exc}"
            continue
        if not isinstance(bench, Benchmark) or bench.name != ep.name:
            broken[ep.name] = f"{ep.value} is not a Benchmark named {ep.name!r}"
            continue
        found[ep.name] = bench
    return dict(sorted(found.items())), broken


def all_benchmarks() -> dict[str, Benchmark]:
    return _load()[0]


def broken_plugins() -> dict[str, str]:
    return _load()[1]


def get(name: str) -> Benchmark:
    benchmarks, broken = _load()
    if name in benchmarks:
        return benchmarks[name]
    if name in broken:
        raise UsageError(f"benchmark {name!r} failed to load: {broken[name]}")
    if not benchmarks:
        raise UsageError("no benchmarks are registered: is netbench installed "
                         "(pip install -e .)?")
    raise UsageError(f"unknown benchmark {name!r}; known: {', '.join(benchmarks)}")
