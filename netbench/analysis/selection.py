"""Which stored runs a command judges: one rule for compare, accept, report and history.

A reference names runs, and the rule is the same wherever one is given:

- a **run id** is that run, even when nothing in it measured (it was asked for by name; the
  description says so);
- a **label** is every run with that label that measured something: runs whose cases all
  failed or were skipped are left out and named, never pooled silently; except as a
  comparison's candidate, where such a run is the news (its cases are lost) and is chosen;
- a **results directory** is the same over the runs stored there;
- **nothing** (accept, report) is the latest run that measured something (of the benchmarks
  wanted, where a command wants some), with the runs after it that did not named.

Several runs of a label are pooled: compare and history treat them as repeats, accept judges
every row of every one. Each command prints ``Selection.describe()``: the run ids a side
resolved to, and what was left out and why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from netbench.errors import NetbenchError, UsageError
from netbench.store.protocol import ReadableStore


@dataclass
class Selection:
    rows: Any                                   # DataFrame of the chosen runs' rows
    run_ids: list[str]
    what: str                                   # "label 'nightly'", "run 1a2b", "latest run"
    left_out: list[tuple[str, str]] = field(default_factory=list)    # (run id, why)

    def describe(self) -> str:
        n = len(self.run_ids)
        text = f"{self.what} -> {'run' if n == 1 else f'{n} runs'} {', '.join(self.run_ids)}"
        if self.left_out:
            text += "; left out " + ", ".join(f"{r} ({why})" for r, why in self.left_out)
        return text


def _measured(run: Any, benchmarks: Iterable[str] | None) -> bool:
    """Did this run (a row of the store's index) measure anything (of these benchmarks)?"""
    if benchmarks is None:
        return int(run["ok"]) > 0
    return bool(set(benchmarks) & set(run["ok_benchmarks"]))


def _why_not(run: Any, benchmarks: Iterable[str] | None) -> str:
    if benchmarks is not None and not set(benchmarks) & set(run["benchmarks"]):
        return "did not run " + ", ".join(sorted(benchmarks))
    parts = [f"{int(run[k])} {k}" for k in ("failed", "skipped") if int(run[k])]
    return "nothing measured: " + (", ".join(parts) or "no cases")


def _index(store: ReadableStore, suite: str | None = None) -> Any:
    index = store.runs()
    if index.empty:
        raise NetbenchError(f"no results in the store {store.directory}: run `netbench run` "
                            "first")
    if suite is not None and (index["suite"] == suite).any():
        index = index[index["suite"] == suite].reset_index(drop=True)
    return index


def _read(store: ReadableStore, run_ids: list[str], columns: list[str] | None) -> Any:
    rows = store.read(run_ids, columns)
    if rows.empty:
        raise NetbenchError(f"run {', '.join(run_ids)}: no readable rows (corrupt or truncated "
                            "file?); choose another run")
    return rows


def _pooled(store: ReadableStore, index: Any, what: str, benchmarks: Iterable[str] | None,
            columns: list[str] | None, keep_unmeasured: bool = False) -> Selection:
    wanted = [r for _, r in index.iterrows() if keep_unmeasured or _measured(r, benchmarks)]
    left = [(r["run_id"], _why_not(r, benchmarks)) for _, r in index.iterrows()
            if not keep_unmeasured and not _measured(r, benchmarks)]
    if not wanted:
        raise NetbenchError(f"{what}: no run measured anything; " + "; ".join(
            f"{r}: {why}" for r, why in left[-5:]))
    ids = [r["run_id"] for r in wanted]
    return Selection(_read(store, ids, columns), ids, what, left)


def resolve(store: ReadableStore, ref: str | None, benchmarks: Iterable[str] | None = None,
            columns: list[str] | None = None, keep_unmeasured: bool = False,
            suite: str | None = None) -> Selection:
    """The runs ``ref`` names, by the rule above (``benchmarks``: what "measured" means).
    ``keep_unmeasured``: a label's or directory's runs that measured nothing are chosen too
    (a comparison's candidate: its skipped and failed cases are the news, lost cases).
    ``suite``: with no ``ref``, the latest of that suite's runs, where the store has any
    (accept prefers its spec's suite)."""
    from netbench.store import ResultStore

    if ref is None:
        index = _index(store, suite)
        usable = [i for i, (_, r) in enumerate(index.iterrows()) if _measured(r, benchmarks)]
        if not usable:
            # Nothing measured anywhere: judge the latest run that tried, saying so (its
            # checks then fail with the skip or failure reason, rather than no answer).
            tried = [r for _, r in index.iterrows()
                     if benchmarks is None or set(benchmarks) & set(r["benchmarks"])]
            if not tried:
                raise NetbenchError("no stored run ran " + ", ".join(sorted(benchmarks or [])))
            pick = tried[-1]
            return Selection(_read(store, [pick["run_id"]], columns), [pick["run_id"]],
                             "latest run (no stored run measured "
                             + (", ".join(sorted(benchmarks)) if benchmarks else "anything")
                             + ")", [(pick["run_id"], "chosen anyway: "
                                      + _why_not(pick, benchmarks))])
        pick = index.iloc[usable[-1]]
        later = [(r["run_id"], _why_not(r, benchmarks))
                 for _, r in index.iloc[usable[-1] + 1:].iterrows()]
        return Selection(_read(store, [pick["run_id"]], columns), [pick["run_id"]],
                         "latest run that measured "
                         + (", ".join(sorted(benchmarks)) if benchmarks else "something"),
                         later)
    path = Path(ref)
    if path.is_dir():
        inside = ResultStore(path, store.upgrade)
        return _pooled(inside, _index(inside), f"directory {ref}", benchmarks, columns,
                       keep_unmeasured)
    index = _index(store)
    if (index["run_id"] == ref).any():
        run = index[index["run_id"] == ref].iloc[0]
        note = [] if _measured(run, benchmarks) else [(ref, "asked for by id, though "
                                                       + _why_not(run, benchmarks))]
        return Selection(_read(store, [ref], columns), [ref], f"run {ref}", note)
    by_label = index[index["label"] == ref]
    if not by_label.empty:
        return _pooled(store, by_label, f"label {ref!r}", benchmarks, columns,
                       keep_unmeasured)
    labels = sorted({str(x) for x in index["label"] if x})
    raise UsageError(f"{ref!r} is not a results directory, run id or label in "
                     f"{store.directory}; labels there: {', '.join(labels[:20]) or 'none'}")


def series_runs(store: ReadableStore, labels: Sequence[str] = (),
                benchmarks: Sequence[str] = (), hosts: Sequence[str] = (),
                last: int | None = None) -> tuple[Any, Any, list[tuple[str, str]]]:
    """A history's runs: the store's index of these labels' runs on these hosts, the runs of
    it that measured the benchmarks wanted (the ``last`` newest), and the runs passed over
    among those the chosen span covers, with why (not the whole store's past)."""
    index = _index(store)
    known = set(index["label"])
    for label in labels:
        if label not in known:
            raise UsageError(f"label {label!r} names no run in {store.directory}; labels there: "
                             f"{', '.join(sorted(str(x) for x in known if x)) or 'none'}")
    if labels:
        index = index[index["label"].isin(labels)]
    if hosts:
        index = index[index["host"].isin(hosts)]
    wanted = set(benchmarks) or None
    measured = [bool((wanted or set(b)) & set(b)) for b in index["ok_benchmarks"]]
    usable = index[measured]
    if last is not None:
        usable = usable.tail(last)
    since = usable["started_at"].iloc[0] if not usable.empty else None
    left_out = [(r, "nothing measured" if not ok else "did not measure "
                 + ", ".join(sorted(wanted or [])))
                for r, ok, m, t in zip(index["run_id"], index["ok_benchmarks"], measured,
                                       index["started_at"])
                if not m and (since is None or t >= since)]
    return index, usable, left_out


def latest_per_benchmark(index: Any) -> dict[str, str]:
    """benchmark -> the latest of these runs (rows of the store's index, oldest first) that
    measured it (that only skipped it, if none did)."""
    measured: dict[str, str] = {}
    tried: dict[str, str] = {}
    for _, run in index.iterrows():                      # oldest first: later runs win
        for bench in run["benchmarks"]:
            tried[bench] = run["run_id"]
            if bench in run["ok_benchmarks"]:
                measured[bench] = run["run_id"]
    return {**tried, **measured}


def newest_of_each(store: ReadableStore, index: Any) -> Any:
    """The rows of each benchmark from the latest of these runs that measured it (that tried
    it, if none did): a label's page in the dashboard."""
    import pandas as pd

    picks = latest_per_benchmark(index)
    frame = store.read(sorted(set(picks.values())))
    # A row mask, also where no row was readable (an empty list would pick no columns).
    keep = [picks.get(b) == r for b, r in zip(frame["benchmark"], frame["run_id"])]
    return frame.loc[pd.Series(keep, index=frame.index, dtype=bool)]


def kept_passes(index: Any, run_ids: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """Each fabric burn-in's passes among these runs (``netbench fabric --soak`` keeps each
    pass's first case_index in its footer), by run id; a run that is none, or whose footer
    says nothing readable of them, is not there (judged as one sweep)."""
    import json

    if "fabric" not in index:
        return {}
    out = {}
    kept = index.loc[index["run_id"].isin(list(run_ids)), ["run_id", "fabric"]]
    for run, text in zip(kept["run_id"], kept["fabric"]):
        try:
            passes = json.loads(text)["soak"]["passes"] if isinstance(text, str) and text \
                else None
        except (ValueError, TypeError, KeyError, RecursionError):
            passes = None
        if isinstance(passes, list) and passes and all(
                isinstance(p, dict) and isinstance(p.get("case_index"), int) for p in passes):
            out[str(run)] = passes
    return out


def kept_topology(index: Any, run_ids: Iterable[str]) -> Any:
    """The fabric's shape kept with these runs (a sweep given ``--topology`` stores it in its
    footer; the store's index carries it), else None. UsageError where it cannot be read, or
    where the runs kept different shapes (pooled rows need one)."""
    from netbench.env.topology import from_json

    wanted = list(run_ids)
    if "topology" not in index:
        return None
    kept = index.loc[index["run_id"].isin(wanted), ["run_id", "topology"]]
    texts = {str(t): str(r) for r, t in zip(kept["run_id"], kept["topology"])
             if isinstance(t, str) and t}
    if len(texts) > 1:
        raise UsageError(f"runs {', '.join(sorted(texts.values()))} kept different topologies: "
                         "judge one run at a time (--run ID)")
    if not texts:
        return None
    ((text, run),) = texts.items()
    try:
        return from_json(text)
    except UsageError as exc:
        raise UsageError(f"run {run}: {exc}") from None
