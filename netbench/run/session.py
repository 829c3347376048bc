"""A run's session around the runner, shared by `netbench run` and `netbench fabric`: the
plan from a target, the store this process writes to, the environment the run is stored with,
the resume of an interrupted run and the command line that continues one, and the signals
that stop a run as Ctrl-C does.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from netbench.env.launch import LaunchInfo, collective_env
from netbench.env.probe import probe
from netbench.errors import UsageError
from netbench.fingerprint import Fingerprint, Launcher
from netbench.run.runner import (
    Resume,
    RunEvents,
    Runner,
    RunResult,
    Stopped,
    plan_fingerprint,
    prepare_resume,
)
from netbench.run.suite import (  # noqa: F401  (soaked: the CLI plans a soak here)
    Plan,
    load_suite,
    parse_cli_params,
    plan_single,
    repeated,
    soaked,
)
from netbench.store import JsonlStore, NullStore
from netbench.store.protocol import ReadableStore, Store
from netbench.textfile import printable as shown  # a run id given on the command line


def plan_target(target: str, param_items: Sequence[str], timeout: float | None,
                repeat: int | None = None) -> Plan:
    """The plan of a suite file, or of one benchmark with its ``-p KEY=VALUE`` params.
    ``repeat`` (--repeat) replaces a suite's own repeat, never multiplies it."""
    params = parse_cli_params(list(param_items))
    if repeat is not None and not 1 <= repeat <= 1000:
        raise UsageError(f"--repeat {repeat}: a whole number 1..1000 (each case runs that "
                         "many times, interleaved)")
    if target.endswith(".toml") or Path(target).is_file():
        if params:
            raise UsageError("-p applies to a single benchmark; set params in the suite file")
        return load_suite(target, timeout, repeat)
    plan = plan_single(target, params, timeout)
    return plan if repeat is None else repeated(plan, repeat)


def choose_store(writes: bool, jsonl: str | None, results: str,
                 parquet: Callable[[str], Any]) -> Any:
    """Where this process's rows go: nowhere where it does not write (a rank other than 0:
    rank 0 stores a launched run), JSON lines with --jsonl, else the Parquet store that
    ``parquet`` opens on ``results``. The caller opens that one: the CLI's reads files of
    older versions with the installed benchmarks' traits."""
    if not writes:
        return NullStore()
    return JsonlStore(jsonl) if jsonl else parquet(results)


def run_env(sysfs_root: str | None, launched: LaunchInfo | None,
            no_counters: bool = False) -> dict[str, Any]:
    """The fingerprint every row of the run is stored with: the probe's, the collective
    libraries' settings, under a launcher this rank's place in the job, and --no-counters
    (kept: the run read none)."""
    env = probe(sysfs_root)
    if no_counters:
        env.update(no_counters=True)
    env.update(collective_env=collective_env())
    if launched:
        env.update(launcher=Launcher(name=launched.launcher, rank=launched.rank,
                                     world_size=launched.world_size, job=launched.job_id()))
    return env


def resume_run(store: ReadableStore, run_id: str, plan: Plan, env: Mapping[str, Any],
               label: str | None, *,
               parquet: bool) -> tuple[Resume, str]:
    """``--resume run_id``: what is left of it, and its own label (a resumed run keeps it).
    Only a Parquet store written by this process can be continued (``parquet``: not
    --jsonl, not a rank other than 0); a complete run is a usage error."""
    if not parquet:
        raise UsageError("--resume continues a run in the Parquet store (not with "
                         "--jsonl, and from rank 0 under a launcher)")
    refuse_a_complete_run(store, run_id, plan)
    resume = prepare_resume(store, run_id, plan, Fingerprint(env).host, label)
    index = store.runs()
    return resume, str(index[index["run_id"] == run_id]["label"].iloc[0] or "")


def measure(plan: Plan, store: Store, env: dict[str, Any], resume: Resume | None, *,
            label: str, peer: str | None, events: RunEvents,
            every: float = 0.0) -> RunResult:
    """Run the plan, SIGTERM and SIGHUP stopping it as Ctrl-C does; ``every``: seconds
    between a case's interval lines (0: none)."""
    if not every >= 0:
        raise UsageError(f"--interval {every:g}: seconds between a case's lines, 0 or more "
                         "(0: none)")
    runner = Runner(store, env, label=label, peer=peer, reporter=events)
    runner.every = every
    with stop_on_signals():
        result = runner.run(plan, resume)
    if hasattr(store, "stored") and result.path:
        result.stored = store.stored(result.path)
    return result


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While a run measures, SIGTERM (a job scheduler, `kill`) and SIGHUP (a closed
    terminal) stop it as Ctrl-C does: the case in flight is cancelled, the finished rows
    kept and the run left resumable, instead of the process dying mid-write."""

    def stop(signum: int, frame: Any) -> None:
        raise Stopped(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def resume_command(run_id: str, target: str, param_items: Sequence[str], *, results: str,
                   repeat: int | None, timeout: float | None, peer: str | None,
                   sysfs_root: str | None, no_counters: bool = False,
                   soak: tuple[str, str] | None = None) -> str:
    """The command that continues this run: the same target, params and options that shape
    the plan or reach the same store and peer, then --resume (``results`` left out where it
    is the CLI's default). ``soak``: a burn-in's --duration and --window, as given."""
    words = ["netbench", "soak" if soak else "run", target]
    if soak:
        words += ["--duration", soak[0], "--window", soak[1]]
    for param in param_items:
        words += ["-p", param]
    for flag, value in (("--results", None if results == "results" else results),
                        ("--repeat", repeat), ("--timeout", timeout),
                        ("--peer", peer), ("--sysfs-root", sysfs_root)):
        if value is not None:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if no_counters:         # the rest of the run reads what its start read
        words.append("--no-counters")
    return shlex.join([*words, "--resume", run_id])


def refuse_a_complete_run(store: ReadableStore, run_id: str, plan: Plan) -> None:
    """``--resume`` of a run holding every planned case (it finished, or a reader finished a
    killed writer's compaction) names no run to resume: a usage error (exit 2) that says
    where the run is, not a failure of the run (exit 1)."""
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


def per_device(plan: Plan, env: Mapping[str, Any]) -> Plan:
    """A node check's plan: each case that names no RDMA ``device`` once per RDMA device the
    probe found, each with a ``gpu`` index once per GPU (a NIC or a GPU of eight is checked,
    not only the first)."""
    from dataclasses import replace

    fp = Fingerprint(env)
    rdma = [d.name for d in fp.rdma_devices]
    cases = []
    for planned in plan.cases:
        params = planned.case.params
        if params.get("device") == "" and rdma:
            values = [("device", name) for name in rdma]
        elif params.get("gpu") == 0 and len(fp.gpus) > 1:
            values = [("gpu", index) for index in range(len(fp.gpus))]
        else:
            values = []
        cases += [replace(planned, case=replace(planned.case, params={**params, key: value}))
                  for key, value in values] or [planned]
    return replace(plan, cases=cases)
