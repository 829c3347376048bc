"""Benchmarks are found through the ``netbench.benchmarks`` entry-point group.

Built-ins register exactly like third-party plugins (see pyproject.toml), so a plugin is one
module and one entry-point line. A plugin that fails to import is reported, not fatal.
"""

from __future__ import annotations

from dataclasses import fields
from functools import lru_cache
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

from netbench.api import Benchmark, Case, Measurement, Traits
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


def catalog() -> dict[str, tuple[str, ...]]:
    """Each installed benchmark's metric names: what a user's file (thresholds, an acceptance
    spec) may name. Analysis is handed this, never the registry."""
    return {name: tuple(m.name for m in b.metrics) for name, b in all_benchmarks().items()}


def metric_units() -> dict[str, dict[str, str]]:
    """Each installed benchmark's metrics and their units: what a table of published figures
    (analysis.expectations) is checked against."""
    return {name: {m.name: m.unit for m in b.metrics} for name, b in all_benchmarks().items()}


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


TRAITS = tuple(f.name for f in fields(Traits))      # the row columns that store them


def stored_traits(rows: Any) -> Any:
    """``rows`` (a frame read from the store) with the traits of every case stored before
    cases carried them (no ``headline``) filled in from what its benchmark declares now
    (``Benchmark.traits`` over the stored params, the defaults beneath them), so analysis and
    reports read old and new files alike and never ask the registry themselves. Rows of a
    benchmark no longer installed, or stored with their traits, are left as they are. The
    CLI hands this to ``ResultStore`` as its upgrade."""
    import pandas as pd

    rows = _declared_statistics(_declared_params(rows))
    if not {"benchmark", "params", "metric"} <= set(rows.columns) or not any(
            t in rows for t in TRAITS):
        return rows                      # a narrow read that asked for no trait
    old = rows["headline"].isna() if "headline" in rows else pd.Series(True, rows.index)
    if not old.any():
        return rows
    rows = rows.copy()
    for column in TRAITS:
        if column not in rows:
            rows[column] = None
        if column != "op_bytes" and column != "bus_factor":
            rows[column] = rows[column].astype(object)
    # A latency case counted its iterations in its headline's samples.
    counted = rows["n_samples"] if "n_samples" in rows else pd.Series(None, index=rows.index)
    if {"run_id", "case_index"} <= set(rows.columns):
        counted = counted.groupby([rows["run_id"], rows["case_index"]],
                                  dropna=False).transform("max")
    resolved = rows["resolved"] if "resolved" in rows else pd.Series(None, index=rows.index)
    measured = rows["status"] == "ok" if "status" in rows else rows["metric"].notna()
    keys = list(zip(rows["benchmark"], rows["params"], resolved, measured, counted))
    found: dict[Any, dict[str, Any] | None] = {}
    for i in rows.index[old.to_numpy()]:
        key = keys[rows.index.get_loc(i)]
        if key not in found:
            found[key] = _declared(*key)
        if found[key]:
            for column, value in found[key].items():
                rows.at[i, column] = value
    return rows


# Metric declarations rows carry as columns, for files written before they did.
_METRIC_COLUMNS = (("statistic", "statistic"), ("per_metric", "per"), ("cost", "cost"))


def _declared_statistics(rows: Any) -> Any:
    """Rows stored before each carried its metric's ``statistic`` (or ``per``), given what
    the installed benchmark declares of that metric (a metric it no longer declares stays
    unknown)."""
    if not {"benchmark", "metric"} <= set(rows.columns):
        return rows
    copied = False
    for column, field_name in _METRIC_COLUMNS:
        if column not in rows:
            continue
        missing = rows[column].isna() & rows["metric"].notna()
        if not missing.any():
            continue
        declared = {(name, m.name): 1 if field_name == "cost" else getattr(m, field_name)
                    for name, b in all_benchmarks().items() for m in b.metrics
                    if getattr(m, field_name) or (field_name == "cost" and m.per)}
        filled = [declared.get((b, m)) for b, m in zip(rows.loc[missing, "benchmark"],
                                                       rows.loc[missing, "metric"])]
        if not any(filled):
            continue
        if not copied:
            rows, copied = rows.copy(), True
        rows[column] = rows[column].astype(object)
        rows.loc[missing, column] = filled
    return rows


def _declared_params(rows: Any) -> Any:
    """Rows stored before their benchmark declared a param (coll.*'s ``duration``, added for
    soaks) with that param at its default: the case ran as the default runs it, and is the
    same case as one stored since (else every baseline of it would read as lost after an
    upgrade). A row's own params are never changed, only the missing ones added."""
    if not {"benchmark", "params"} <= set(rows.columns) or rows.empty:
        return rows
    from netbench.store import params_json, params_of

    defaults = {name: {p.name: p.default for p in b.params}
                for name, b in all_benchmarks().items()}
    cache: dict[tuple[Any, Any], Any] = {}

    def completed(name: Any, params: Any) -> Any:
        key = (name, params)
        if key not in cache:
            declared = defaults.get(str(name))
            stored = params_of(params)
            missing = {k: v for k, v in (declared or {}).items() if k not in stored}
            # A row with no params at all (a skipped suite-level row) stays as it was.
            cache[key] = params_json({**missing, **stored}) if stored and missing else params
        return cache[key]

    filled = [completed(b, p) for b, p in zip(rows["benchmark"], rows["params"])]
    if all(a is b for a, b in zip(filled, rows["params"])):
        return rows
    return rows.assign(params=filled)


def _declared(name: Any, params: Any, resolved: Any, measured: bool,
              counted: Any) -> dict[str, Any] | None:
    """One stored case's traits as its installed benchmark declares them, as row values."""
    from netbench.store import params_of

    bench = all_benchmarks().get(str(name))
    if bench is None:
        return None
    planned = {p.name: p.default for p in bench.params} | params_of(params)
    n = int(counted) if measured and counted == counted and counted is not None else 0
    m = Measurement({}, {bench.headline or "": range(n)} if n else {},
                    resolved=params_of(resolved)) if measured else None
    try:
        return bench.traits(Case(bench.name, planned), m).as_row()
    except Exception:           # a plugin that cannot say: the rows stay as stored
        return None
