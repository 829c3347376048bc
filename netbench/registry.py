"""Benchmarks are found through the ``netbench.benchmarks`` entry-point group.

Built-ins register exactly like third-party plugins (see pyproject.toml), so a plugin is one
module and one entry-point line. A plugin that fails to import is reported, not fatal.
"""

from __future__ import annotations

from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path

from netbench.api import Benchmark
from netbench.errors import UsageError

GROUP = "netbench.benchmarks"


def _source_tree_entry_points() -> list[EntryPoint]:
    """netbench's own entry points read from pyproject.toml, when running from a checkout that
    was never installed (e.g. /usr/bin/python3 with PYTHONPATH in the soft-RoCE VM)."""
    import tomllib

    pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
    try:
        table = tomllib.loads(pyproject.read_text())["project"]["entry-points"][GROUP]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return []
    return [EntryPoint(name, value, GROUP) for name, value in table.items()]


def _entry_points() -> list[EntryPoint]:
    found = list(entry_points(group=GROUP))
    installed = any(ep.dist is not None and ep.dist.name == "netbench" for ep in found)
    return found if installed else found + _source_tree_entry_points()


@lru_cache(maxsize=1)
def _load() -> tuple[dict[str, Benchmark], dict[str, str]]:
    found: dict[str, Benchmark] = {}
    broken: dict[str, str] = {}
    for ep in _entry_points():
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
