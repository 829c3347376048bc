"""What a machine reads: compare's, history's and the fabric's verdicts as JSON, accept's as
JUnit XML. Analysis hands over its records (verdicts, a History, matrices, outcomes); only
the words and the layout are made here, as report/console.py makes the text."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree

from netbench.api import json_safe
from netbench.textfile import printable, write_atomic

if TYPE_CHECKING:
    from netbench.analysis.accept import Outcome, Spec
    from netbench.analysis.compare import Comparison
    from netbench.analysis.fabric import Matrix
    from netbench.analysis.history import History


def reached_json(reached: Any, error: str = "") -> dict[str, Any]:
    """Each case against its published figure (``analysis.expectations.Reached``)."""
    return {"error": error or None,
            "cases": [{"benchmark": r.benchmark, "metric": r.metric, "params": r.params,
                       "value": r.value, "unit": r.unit, "share": r.share,
                       "figure": None if r.entry is None else {
                           "name": r.entry.name, "value": r.entry.figure,
                           "unit": r.entry.unit, "better": r.entry.better,
                           "source": r.entry.source, "origin": r.entry.origin},
                       "why": r.why or None} for r in reached]}


def health_json(findings: Any, acted: str = "", notes: Any = ()) -> str:
    """`netbench healthcheck --json`: each check, the verdict and what was done in Slurm."""
    return json.dumps(json_safe({
        "healthy": all(f.ok for f in findings),
        "checks": [{"check": f.check, "ok": f.ok, "applies": f.applies, "what": f.what}
                   for f in findings],
        "notes": list(notes), "slurm": acted or None}), indent=2)


def compare_json(done: Comparison) -> str:
    """Verdicts (lost cases first), environment changes, the runs chosen, error counters quiet
    before and grown now (analysis.counter_news), cases only the candidate measured (new) and
    cases only the baseline measured that no candidate run was asked to run (not asked), and
    the thresholds that judged with their source."""
    verdicts, changes, failed, news, new, unasked = (done.verdicts, done.changes, done.failed,
                                                     done.news, done.new, done.unasked)
    thresholds = (done.thresholds, done.source)
    sides = {"baseline": done.baseline, "candidate": done.candidate}
    chosen = {name: {"what": sel.what, "run_ids": sel.run_ids,
                     "left_out": [{"run_id": r, "why": w} for r, w in sel.left_out]}
              for name, sel in sides.items()}
    return json.dumps(json_safe({"selection": chosen,
                                 "verdicts": [asdict(v) for v in verdicts],
                                 "failed_cases": [{"side": s, "benchmark": b, "params": p,
                                                   "reason": r} for s, b, p, r in failed],
                                 "environment_changes": [{"what": k, "baseline": a,
                                                          "candidate": b}
                                                         for k, a, b in changes],
                                 "counter_news": [asdict(n) for n in news],
                                 "new_cases": [{"benchmark": b, "params": p}
                                               for b, p in new],
                                 "not_asked_cases": [{"benchmark": b, "params": p}
                                                     for b, p in unasked],
                                 "published": reached_json(done.reached, done.reached_error),
                                 "thresholds": {"values": dict(thresholds[0]),
                                                "source": thresholds[1] or "default 5%"}}),
                      indent=2, allow_nan=False)


def history_json(history: History) -> str:
    def when(t: Any) -> str:
        return t.isoformat() if hasattr(t, "isoformat") else str(t)

    return json.dumps(json_safe({
        "runs": [{**r, "started_at": when(r["started_at"]),
                  "changes": [{"what": k, "before": a, "after": b} for k, a, b in r["changes"]],
                  "news": [vars(n) for n in r.get("news", [])]}
                 for r in history.runs],
        "series": [{"benchmark": s.benchmark, "params": json.loads(s.params or "{}"),
                    "metric": s.metric, "unit": s.unit, "better": s.better,
                    "steps": [{**vars(step), "started_at": when(step.started_at)}
                              for step in s.steps],
                    "change_points": [{**vars(c), "started_at": when(c.started_at)}
                                      for c in s.change_points]} for s in history.series],
        "lost_cases": [asdict(v) for v in history.lost],
        "single_run_cases": [{"benchmark": b, "metric": m, "run_id": r}
                             for b, m, r in history.single],
        "left_out": [{"run_id": r, "why": w} for r, w in history.left_out]}),
        indent=1, allow_nan=False)


def fabric_json(matrices: Sequence[Matrix]) -> list[Mapping[str, Any]]:
    return [{"benchmark": m.benchmark, "params": json.loads(m.params or "{}"),
             "metric": m.metric, "unit": m.unit, "median": m.median,
             "endpoints": m.endpoints,
             "faulty_hosts": [{"host": h.name, "role": h.role, "slow": h.slow,
                               "pairs": h.pairs} for h in m.faulty_hosts],
             "slow_links": [{"client": c.client, "server": c.server, "ratio": c.ratio}
                            for c in m.slow_links],
             "suspects": [{"elements": s.elements, "kind": s.kind, "slow": s.slow,
                           "pairs": s.pairs, "median_through": s.median_through,
                           "median_avoiding": s.median_avoiding, "pinned": s.pinned,
                           "of_healthy": s.of_healthy, "deficit": s.deficit, "p": s.p,
                           "or_else": s.or_else,
                           "text": s.text(m.unit, m.localization.inferred, m.roles)}
                          for s in m.suspects],
             "healthy": m.localization.reference if m.localization else None,
             # The shortfall below healthy a pair read slow at, and why (noise or fixed).
             "slow_below": m.localization.cut if m.localization else None,
             "slow_because": m.localization.cut_from if m.localization else "",
             "topology": m.localization.topology if m.localization else "",
             # Each element's evidence, where the shape was given (inferred groups: none).
             "elements": [{"element": e.element, "pairs": e.pairs, "pinned": e.pinned,
                           "slow": e.slow, "failed": e.failed, "median": e.median,
                           "median_avoiding": e.median_avoiding} for e in m.elements]
             if m.topology is not None and not m.topology.inferred else [],
             "notes": m.notes,
             # Pairs whose cases grew error counters, and the elements that explain them.
             "errors": [{"client": c, "server": s, "counters": grown}
                        for (c, s), grown in sorted(m.errors.items())],
             "error_suspects": [{"elements": s.elements, "pairs": s.pairs, "with_errors": s.slow}
                                for s in (m.error_localization.suspects
                                          if m.error_localization else [])],
             "failed": [{"client": c.client, "server": c.server, "reason": c.reason}
                        for c in m.failed],
             # A traced sweep's pair has a cell per switch path it took ("a>b>c").
             "cells": [{"client": c.client, "server": c.server, "value": c.value,
                        "ratio": c.ratio, "slow": c.slow, "cause": c.cause,
                        "of_line": of_line, "path": path or None}
                       for c, of_line, path in zip(m.all_cells(), m.cells["of_line"].map(
                           lambda x: None if x != x else float(x)), m.cells["path"])]}
            for m in matrices]


def accept_junit(spec: Spec, outcomes: list[Outcome], path: str | Path) -> None:
    """The console's words (case names, units) as JUnit XML. Every text is ``printable``: a
    control character is no legal XML 1.0, and CI shows these texts on a terminal."""
    name = printable(spec.name)
    suite = ElementTree.Element("testsuite", name=name, tests=str(len(outcomes)),
                                failures=str(sum(not o.passed for o in outcomes)))
    for outcome in outcomes:
        case = ElementTree.SubElement(suite, "testcase", classname=name,
                                      name=printable(outcome.check.name))
        if outcome.passed and outcome.unjudged:      # nothing to judge by: said, no pass
            ElementTree.SubElement(case, "skipped", message=printable(outcome.unjudged))
        if not outcome.passed:
            failure = ElementTree.SubElement(case, "failure",
                                             message=printable(outcome.message))
            failure.text = printable(f"expected {outcome.expected}; "
                                     + (f"measured {outcome.measured_text()}"
                                        if outcome.measured else "nothing measured"))
    # Atomic, a regular file only (a FIFO named by --junit hung the gate), never through a
    # link another user planted.
    write_atomic(Path(path), lambda tmp: ElementTree.ElementTree(suite).write(
        tmp, encoding="unicode", xml_declaration=True))


def runs_json(index: Any) -> str:
    """`netbench runs --json`: the store's index, one object a run (a fabric's kept shape a
    flag, not megabytes)."""
    out = index.drop(columns=["path"]).assign(
        started_at=index["started_at"].map(lambda t: t.isoformat()),
        topology=index["topology"].map(bool))
    return json.dumps(json_safe(out.to_dict("records")), indent=1, allow_nan=False)


def soak_json(cases: Sequence[Any], run_id: str) -> str:
    """`netbench soak --json`: each case's burn-in (``analysis.soak.SoakCase``): its windows
    against the reference, every dip with the counters that grew in it, the errors per hour,
    and the timeline (window start, value, share of the reference)."""
    def when(t: Any) -> str:
        return t.isoformat() if hasattr(t, "isoformat") else str(t)

    return json.dumps(json_safe({"run_id": run_id, "cases": [{
        "benchmark": c.benchmark, "params": json.loads(c.params or "{}"), "metric": c.metric,
        "unit": c.unit, "better": c.better, "reference": c.reference,
        "reference_from": c.reference_from, "windows": c.windows, "seconds": c.seconds,
        "lowest": c.lowest, "p1": c.p1, "median": c.median, "failed": c.failed,
        "dips": [{"start": when(d.start), "seconds": d.seconds, "windows": d.windows,
                  "depth": d.depth, "events": d.events} for d in c.dips],
        "link_events": c.link_events, "errors": c.errors, "namespace_counters": c.namespace,
        "errors_per_hour": c.errors_per_hour,
        "timeline": [[when(t), v, s] for t, v, s in c.timeline]} for c in cases]}),
        indent=1, allow_nan=False)
