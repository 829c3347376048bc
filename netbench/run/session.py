"""A run's session around the runner, shared by `netbench run` and `netbench fabric`: the
plan from a target, the store this process writes to, the environment the run is stored with,
the resume of an interrupted run and the command line that continues one, and the signals
that stop a run as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from netbench.errors import UsageError
from netbench.textfile import printable as shown  # a run id given on the command line

if TYPE_CHECKING:
    import argparse


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While a run measures, SIGTERM (a job scheduler, `kill`) and SIGHUP (a closed
    terminal) stop it as Ctrl-C does: the case in flight is cancelled, the finished rows
    kept and the run left resumable, instead of the process dying mid-write."""
    from netbench.run.runner import Stopped

    def stop(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def resume_command(args: argparse.Namespace, run_id: str) -> str:
    """The command that continues this run: the same target, params and options that shape
    the plan or reach the same store and peer, then --resume."""
    words = ["netbench", "run", args.target]
    for param in args.param or []:
        words += ["-p", param]
    for flag, value in (("--results", None if args.results == "results" else args.results),
                        ("--repeat", args.repeat), ("--timeout", args.timeout),
                        ("--peer", args.peer), ("--sysfs-root", args.sysfs_root)):
        if value is not None:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join([*words, "--resume", run_id])


def refuse_a_complete_run(store: Any, run_id: str, plan: Any) -> None:
    """``--resume`` of a run holding every planned case (it finished, or a reader finished a
    killed writer's compaction) names no run to resume: a usage error (exit 2) that says
    where the run is, not a failure of the run (exit 1)."""
    from netbench.run.runner import plan_fingerprint
    store.check_writable()                  # a killed compaction is finished first
    index = store.runs()
    match = index[index["run_id"] == run_id] if not index.empty else index
    if match.empty:
        return                              # prepare_resume names what is wrong
    run = match.iloc[0]
    if run["state"] != "finished" or (run["plan"] and run["plan"] != plan_fingerprint(plan)) \
            or run["ok"] + run["skipped"] + run["failed"] < len(plan.cases):
        return
    raise UsageError(f"--resume {shown(run_id)}: nothing to resume: run "
                     f"{shown(run_id)} is complete ({run['ok']} ok, {run['skipped']} "
                     f"skipped, {run['failed']} failed cases in {run['path']}); to measure "
                     "again, run without --resume")
