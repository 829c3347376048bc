"""What the dashboard shows, chosen here, once: its views (a comparison, a run, each label,
newest first), each with its rows, what its newest run skipped, the trend of its labels and
its fabric sweep judged. ``report/dashboard.py`` draws what it is handed and reads no store.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from netbench.analysis.expectations import reached_safely
from netbench.analysis.selection import kept_passes, kept_topology, newest_of_each, resolve
from netbench.errors import NetbenchError, UsageError
from netbench.store.protocol import ReadableStore

MAX_VIEWS = 8           # the picker's labels, newest first (each is a page of charts)
TREND_RUNS = 30


@dataclass
class View:
    kind: str                     # "compare", "run" or "label"
    name: Any                     # the run id or the label as stored (None: no label)
    title: str
    rows: Any                     # each benchmark from the latest run that measured it
    runs: list[str]
    latest: Any = None            # the label's newest run's rows (what it skipped)
    base: Any = None              # a comparison's baseline rows
    verdicts: Sequence[Any] = ()  # a comparison's (analysis.compare.MetricVerdict)
    trend: Any = None             # analysis.history.History of the view's labels, or None
    matrix: Any = None            # its fabric sweep judged (analysis.fabric.Matrix), or None
    base_matrix: Any = None       # the baseline's
    labels: list[str] = field(default_factory=list)
    soaks: list[Any] = field(default_factory=list)   # its burn-ins (analysis.soak.SoakCase)
    # Its cases against what their hardware reaches (analysis.expectations.Reached), and the
    # error that kept them from being judged.
    reached: list[Any] = field(default_factory=list)
    reached_error: str = ""


@dataclass
class Views:
    views: list[View]
    chosen: int                   # the view shown first


def fabric_matrix(rows: Any, topology: Any = None, index: Any = None) -> Any:
    """The rows' fabric sweep judged (the case with the most pairs), if they hold one; of a
    fabric burn-in (``index`` says which runs are), the pass that flags the most (else the
    last), never every pass pooled: a trunk slow for 2 passes of 12 is not averaged away."""
    from netbench.analysis.fabric import analyse, pass_frames

    if rows is None or rows.empty or "peer" not in rows:
        return None
    pairs = rows["host"].fillna("").astype(str) + "->" + rows["peer"].fillna("").astype(str)
    if pairs.nunique() < 3:
        return None
    passes = kept_passes(index, rows["run_id"].unique()) if index is not None \
        and "run_id" in rows else {}
    matrices = [m for _, part in pass_frames(rows, passes)
                for m in analyse(part, topology=topology)
                if m.cells is not None and len(m.cells) > 2]
    if not matrices:
        return None
    flags = [len(m.suspects) + len(m.faulty_hosts) + len(m.failed) for m in matrices]
    chosen = max(range(len(matrices)), key=lambda i: (flags[i], i) if passes
                 else (len(matrices[i].cells), 0))
    return matrices[chosen]


def _topology(index: Any, run_ids: Sequence[str]) -> Any:
    """The fabric's shape kept with these runs (a sweep given --topology), else None: the
    heatmap's verdicts then localize on the elements the sweep was told of."""
    try:
        return kept_topology(index, run_ids)
    except UsageError:
        return None           # unreadable, or several: judged on the inferred shape


def _trend(store: ReadableStore, labels: Sequence[Any]) -> Any:
    """The headline metric of every benchmark over the newest runs of these labels only
    (None: no trend): a view never shows another label's runs."""
    from netbench.analysis.history import build

    try:
        h = build(store, labels=list(labels), last=TREND_RUNS, headline_only=True)
    except NetbenchError:
        return None
    h.series = sorted(h.series, key=lambda s: -len(s.steps))[:12]
    return h


def _labels_of(index: Any, run_ids: Sequence[str]) -> list[Any]:
    """The stored labels (as stored: None stays None) of these runs."""
    return list(dict.fromkeys(index.loc[index["run_id"].isin(list(run_ids)), "label"]))


def soaks_of(index: Any, rows: Any, topology: Any = None) -> list[Any]:
    """The burn-ins among these rows' runs (``netbench soak``, as the store's index says),
    each case's windows judged; a fabric burn-in's (``netbench fabric --soak``) passes as
    its windows."""
    from netbench.analysis.fabric import burn_in_timeline
    from netbench.analysis.soak import judge

    if "soak" not in index or rows.empty:
        return []
    soaked = set(index.loc[index["soak"].fillna("").astype(bool), "run_id"])
    cases = [case for run in dict.fromkeys(rows["run_id"]) if run in soaked
             for case in judge(rows[rows["run_id"] == run])]
    for run, passes in kept_passes(index, rows["run_id"].unique()).items():
        timeline = burn_in_timeline(rows[rows["run_id"].astype(str) == run], passes, topology)
        if timeline is not None:
            cases.append(timeline)
    return cases


def _view(kind: str, name: Any, title: str, rows: Any, runs: list[str], *, latest: Any = None,
          base: Any = None, verdicts: Sequence[Any] = (), trend: Any = None,
          topology: Any = None, index: Any = None) -> View:
    return View(kind, name, title, rows, runs, latest, base, verdicts, trend,
                fabric_matrix(rows, topology, index),
                fabric_matrix(base) if base is not None else None,
                sorted({str(x) or "(no label)" for x in rows["label"].fillna("")}),
                soaks_of(index, rows, topology) if index is not None else [],
                *reached_safely(rows, [], None))


def dashboard_views(store: ReadableStore, run: str | None = None, label: str | None = None,
                    baseline: Any = None, candidate: Any = None,
                    verdicts: Sequence[Any] = ()) -> Views:
    """The comparison (with ``baseline`` and ``candidate``, Selections, and their verdicts),
    else the run asked for, else the label asked for, else the label of the latest run that
    measured something, shown first; then each other label, newest first."""
    index = store.runs()
    if index.empty:
        raise NetbenchError(f"the store {store.directory} is empty: nothing to draw; run "
                            "`netbench run` first")
    views: list[View] = []
    chosen: int | None = None
    if baseline is not None and candidate is not None:
        both = _labels_of(index, [*baseline.run_ids, *candidate.run_ids])
        views.append(_view("compare", "", f"{candidate.what} vs {baseline.what}",
                           candidate.rows, candidate.run_ids, base=baseline.rows,
                           verdicts=verdicts, trend=_trend(store, both), index=index))
        chosen = 0
    if run:
        if not (index["run_id"] == run).any():
            raise NetbenchError(f"no run {run!r} in the store")
        sel = resolve(store, run)
        views.append(_view("run", run, f"run {run}", sel.rows, sel.run_ids,
                           trend=_trend(store, _labels_of(index, [run])),
                           topology=_topology(index, sel.run_ids), index=index))
        chosen = len(views) - 1 if chosen is None else chosen
    labels = list(dict.fromkeys(index["label"].fillna("")[::-1]))       # newest first
    if label is not None and label not in labels:
        raise UsageError(f"--label {label!r} names no run; labels there: "
                         f"{', '.join(x for x in labels if x) or 'none'}")
    if chosen is None and label is None:
        measured = index[index["ok"] > 0]
        label = (measured if not measured.empty else index)["label"].fillna("").iloc[-1]
    first = {"label": len(views)} if chosen is None else {}
    seen: set[Any] = set()
    for name in ([label] if label is not None else []) + labels:
        if name in seen or len(views) >= MAX_VIEWS + 2:
            continue
        seen.add(name)
        every = index[index["label"].fillna("") == name]
        measured = every[every["ok"] > 0]
        rows = newest_of_each(store, measured if not measured.empty else every)
        newest = store.read([every["run_id"].iloc[-1]])      # what the label's last run skipped
        runs = list(dict.fromkeys(rows["run_id"]))
        views.append(_view("label", name,
                           f"label '{name}'" if name else "runs without a label", rows, runs,
                           latest=newest,
                           trend=_trend(store, list(dict.fromkeys(every["label"]))),
                           topology=_topology(index, runs), index=index))
    return Views(views, first.get("label", chosen or 0))
