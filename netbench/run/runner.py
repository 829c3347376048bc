"""Run: each planned case with a timeout, progress, fallbacks, and a row per metric stored.

Every case runs in a worker thread while the main thread watches the clock and Ctrl-C: a
timeout or an interrupt sets ``ctx.cancelled`` and fires the benchmark's cancel callbacks
(which shut its sockets down), so a blocked benchmark returns promptly. The run's Parquet file
is rewritten after every case, so whatever happens next, finished rows are kept.
"""

from __future__ import annotations

import errno
import json
import os
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from netbench import hooks
from netbench.api import Benchmark, Case, ClientSession, Measurement, RunSetup, format_size
from netbench.env import counters, hostload
from netbench.env.probe import probe
from netbench.errors import NetbenchError, SkipCase, UsageError
from netbench.fingerprint import Fingerprint
from netbench.run import peer as peer_mod
from netbench.run.suite import Plan, PlannedCase
from netbench.store import SCHEMA_VERSION, clean_value, params_json, thin
from netbench.store.protocol import ReadableStore, Store
from netbench.store.schema import MAX_FILE_SAMPLES, MAX_STORED_SAMPLES

CONNECT_TIMEOUT = 10.0   # at most, to reach the peer and hear its hello
CANCEL_GRACE = 10.0   # after a timeout fires, how long a benchmark gets to unwind


class _CaseContext:
    """What one case's ``run`` sees: the env, the peer, cancellation, progress."""

    def __init__(self, env: Mapping[str, Any], peer: str | None,
                 connect: Callable[[float], ClientSession], deadline: float,
                 progress: Callable[[float], None], shared: dict[str, Any],
                 trace: bool = False, every: float = 0.0,
                 on_interval: Callable[..., None] | None = None, soak: bool = False) -> None:
        self.env = env
        self.peer = peer
        self.shared = shared
        self.trace = trace
        self.soak = soak
        self.every = every
        self._on_interval = on_interval
        self.cancelled = threading.Event()
        self._connect = connect
        self._deadline = deadline
        self._progress = progress
        self._cancel_callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    def connect(self) -> ClientSession:
        if self.cancelled.is_set():
            raise NetbenchError("case cancelled")
        # Connecting and the hello count against the case's timeout, not a fixed 10 s.
        session = self._connect(max(min(CONNECT_TIMEOUT, self.remaining()), 0.1))
        self.on_cancel(session.channel.close)
        return session

    def remaining(self) -> float:
        return self._deadline - time.monotonic()

    def on_cancel(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._cancel_callbacks.append(callback)
            fire_now = self.cancelled.is_set()
        if fire_now:
            callback()

    def progress(self, fraction: float) -> None:
        self._progress(fraction)

    def interval(self, start: float, end: float,
                 values: Mapping[str, tuple[float, str]]) -> None:
        if self._on_interval is not None and self.every > 0:
            self._on_interval(start, end, values)

    def cancel(self) -> None:
        with self._lock:
            self.cancelled.set()
            callbacks = list(self._cancel_callbacks)
        for callback in callbacks:
            try:
                callback()
            except Exception:
                pass


class RunEvents(Protocol):
    """What the runner tells whoever presents a run (the CLI's console reporter); running
    never imports presentation, so the presenter is handed in."""

    def start_run(self, run_id: str, suite: str, n_cases: int, label: str) -> None: ...

    def start_case(self, index: int, case: Case, description: str | None = None) -> None: ...

    def progress(self, fraction: float) -> None: ...

    def interval(self, start: float, end: float,
                 values: Mapping[str, tuple[float, str]]) -> None: ...

    def end_case(self, index: int, planned: Any, rows: Any) -> None: ...


class SilentEvents:
    """The default: a run that nobody watches."""

    def start_run(self, run_id: str, suite: str, n_cases: int, label: str) -> None:
        pass

    def start_case(self, index: int, case: Case, description: str | None = None) -> None:
        pass

    def progress(self, fraction: float) -> None:
        pass

    def interval(self, start: float, end: float,
                 values: Mapping[str, tuple[float, str]]) -> None:
        pass

    def end_case(self, index: int, planned: Any, rows: Any) -> None:
        pass


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread by the CLI's handler so that a run ended by
    a job scheduler or a closed terminal stops as Ctrl-C does: rows kept, resumable."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name


SOAK_GIVE_UP = 3     # windows in a row that fail before a soak stops (resumable)


@dataclass
class RunResult:
    run_id: str
    path: Path | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False
    stopped_by: str = ""                     # SIGINT, SIGTERM or SIGHUP when interrupted
    cut_off: tuple[int, str] | None = None   # the case in flight then (index, description)
    fallbacks: list[str] = field(default_factory=list)
    # What the run's file holds once it ended (a part that turned unreadable is not in it):
    # (rows, cases by status), or None where its store cannot say (JSON lines, no store).
    stored: tuple[int, dict[str, int]] | None = None
    tally: dict[str, int] = field(default_factory=dict)   # cases by status, as they ended
    gave_up: str = ""      # why it stopped before its end (a soak's far end gone, disk full)
    uncompacted: str = ""  # why its parts were not compacted into its file (disk full), said

    def count(self, status: str) -> int:
        keys = {(r["case_index"]) for r in self.rows if r["status"] == status}
        return len(keys)


SOAK_MIN_SAMPLES = 8    # samples a soak's window keeps of each metric however long the soak


def soak_sample_limit(windows: int, metrics: int) -> int:
    """The samples a soak's window keeps of each metric, evenly thinned (its figures are
    computed from all of them first, n_samples stays true): a finished soak is one file, and
    a file beyond MAX_FILE_SAMPLES is one no reader takes, so a day of 1 s windows of tcp.rr
    (every round trip a sample) keeps 11 a window, a short soak all of them."""
    budget = MAX_FILE_SAMPLES // 2 // max(windows * metrics, 1)
    return max(SOAK_MIN_SAMPLES, min(MAX_STORED_SAMPLES, budget))


def store_failure(exc: BaseException, directory: Path) -> str:
    """Why rows could not be stored, in a line: a full disk (or quota) as such, naming the
    results directory; the store's own words otherwise."""
    text = str(exc)
    for code in (errno.ENOSPC, errno.EDQUOT):
        told = (getattr(exc, "errno", None), getattr(exc.__context__, "errno", None))
        if code in told or os.strerror(code).lower() in text.lower():
            return f"{os.strerror(code).lower()} in the results directory {directory}"
    return f"the results directory {directory} cannot be written: {text}"


def plan_fingerprint(plan: Plan) -> str:
    """What a run set out to measure, case by case (benchmark and params, in order): a
    resumed run must be the same plan, or its case indices would mean other cases."""
    import hashlib

    if plan.soak is not None:      # its windows, as the soak's cases and rounds say
        one = [[p.case.benchmark, params_json(p.case.params)] for p in plan.cases.cases]
        return hashlib.sha256(json.dumps([plan.suite, one, "soak", plan.soak.window,
                                          plan.soak.rounds]).encode()).hexdigest()[:16]
    cases = [[p.case.benchmark, params_json(p.case.params)] for p in plan.cases]
    return hashlib.sha256(json.dumps([plan.suite, cases]).encode()).hexdigest()[:16]


def _shown(key: str, value: Any, sizes: set[str]) -> str:
    return format_size(value) if key in sizes and isinstance(value, int) else json.dumps(value)


def plan_difference(rows: Any, suite: str, plan: Plan) -> str:
    """What differs between a stored run's cases and ``plan``, named: the suite, the first
    stored case whose benchmark or params are not the plan's, or the cases beyond those the
    run stored. Params stored before they were kept apart from what ``auto`` resolved to may
    hold more than the plan: only the planned keys are compared."""
    if suite != plan.suite:
        return f"the run's suite is {suite!r}, this is {plan.suite!r}"
    stored = {int(i): (b, p) for i, b, p in zip(rows["case_index"], rows["benchmark"],
                                                 rows["params"]) if i == i}
    for index in sorted(stored):
        bench, text = stored[index]
        if index >= len(plan.cases):
            return (f"the run has case {index + 1} ({bench}), this plan has "
                    f"{len(plan.cases)} case(s)")
        planned = plan.cases[index]
        if planned.case.benchmark != bench:
            return f"case {index + 1} was {bench}, now {planned.case.benchmark}"
        was = json.loads(text or "{}")
        now = json.loads(params_json(planned.case.params))
        sizes = {p.name for p in planned.bench.params if p.kind == "size"}
        # Files from before the split stored a size planned as 0 (auto) as what it became.
        now = {k: v for k, v in now.items() if not (k in sizes and v == 0 and was.get(k))}
        changed = [f"{k} was {_shown(k, was.get(k), sizes)}, now {_shown(k, v, sizes)}"
                   for k, v in sorted(now.items()) if was.get(k) != v]
        if changed:
            return f"case {index + 1} ({bench}): " + "; ".join(changed[:3])
    return (f"the {len(stored)} case(s) it stored are the same; cases after them differ "
            f"(this plan has {len(plan.cases)})")


@dataclass
class Resume:
    """An earlier run to continue (``netbench run --resume``): its id and start, the cases it
    finished (kept, not run again), and the record of this resume for its fingerprint."""

    run_id: str
    started_at: datetime
    done: set[int]
    path: Path
    record: dict[str, Any]


def prepare_resume(store: Store, run_id: str, plan: Plan, host: str | None,
                   label: str | None) -> Resume:
    """Check that ``run_id`` can be continued with ``plan`` on this host, and say what is
    left: the cases without rows, or whose rows say they were interrupted."""
    if not isinstance(store, ReadableStore):
        raise NetbenchError("--resume needs the Parquet store (not --jsonl)")
    store.check_writable()
    index = store.runs()
    match = index[index["run_id"] == run_id] if not index.empty else index
    if match.empty:
        known = ", ".join(f"{r} ({s})" for r, s in zip(index["run_id"].tail(5),
                                                       index["state"].tail(5)))
        raise UsageError(f"--resume {run_id}: no such run in {store.directory}"
                         + (f"; the newest: {known}" if known else ""))
    run = match.iloc[0]
    if run["state"] == "running":
        raise NetbenchError(f"--resume {run_id}: a live process is still writing it "
                            f"({run['path']}); wait for it to end")
    try:
        rows = store.read([run_id], ["case_index", "status", "reason", "started_at",
                                     "benchmark", "params"])
    except Exception as exc:     # noqa: BLE001 - a corrupt run is a user-facing error
        raise NetbenchError(f"--resume {run_id}: its rows cannot be read ({exc})") from None
    if run["plan"] and run["plan"] != plan_fingerprint(plan):
        raise UsageError(f"--resume {run_id}: the suite changed since that run started ("
                         f"{plan_difference(rows, run['suite'], plan)}): resume with the same "
                         "suite and params, or start a new run")
    if run["host"] and host and run["host"] != host:
        raise NetbenchError(f"--resume {run_id}: it ran on {run['host']}, this is {host}; "
                            "a run's rows must come from one host")
    if label and label != (run["label"] or ""):
        raise UsageError(f"--resume {run_id}: its label is {run['label']!r}; leave --label "
                         "out (the resumed run keeps its own)")
    if rows.empty:
        raise NetbenchError(f"--resume {run_id}: {run['path']} holds no readable rows "
                            "(corrupt?); start a new run")
    done = {int(c) for c, reason in zip(rows["case_index"], rows["reason"])
            if reason != "interrupted by the user"}
    # Every case may be in already (the writer died before it compacted them): resuming then
    # runs nothing and compacts the parts, so the run ends finished, not interrupted forever.
    left = [i for i in range(len(plan.cases)) if i not in done]
    path = store.file_of(run["path"])
    record = {"at": datetime.now(UTC).isoformat(), "host": host, "redone": left,
              "kept": len(done)}
    return Resume(run_id, rows["started_at"].iloc[0].to_pydatetime(), done, path, record)


def _timed(rows: list[dict[str, Any]], began: float, load: Any,
           meter: hostload.Meter) -> None:
    """Each row of a case: how long the case took, harness included, and how busy the host
    was outside netbench meanwhile (netbench.env.hostload)."""
    seconds, busy = time.monotonic() - began, meter.finish(load)
    for row in rows:
        row["case_seconds"] = seconds
        row.update(busy)


FAR_COUNTERS_TIMEOUT = 5.0   # seconds to reach the far end and read its counters


class Runner:
    def __init__(self, store: Store, env: Mapping[str, Any], label: str = "",
                 peer: str | None = None, reporter: RunEvents | None = None) -> None:
        self.store, self.env, self.label, self.peer = store, env, label, peer
        self.trace = False        # trace each data connection's routers (fabric --trace)
        self._soaking = False     # the plan is a soak: its invocations are windows (Context.soak)
        self.sample_limit = MAX_STORED_SAMPLES   # a soak's windows keep fewer (soak_sample_limit)
        self._last_counted: counters.Snapshot | None = None   # the last case's end's
        self.every = 0.0          # seconds between a case's interval lines (run --interval)
        # Steer traced connections through these switches (each as its addresses): a
        # fabric sweep's pair meant to load one link.
        self.steer: tuple[frozenset[str], ...] = ()
        # Read the NIC's and kernel's counters around each case (--no-counters: not).
        self.count = not Fingerprint(env).no_counters
        self._said: set[str] = set()
        self._far_unread: set[str] = set()    # peers that could not say their counters
        self.reporter = reporter or SilentEvents()
        self._loopback: peer_mod.ServerProcess | None = None
        self._shared: dict[str, Any] = {}
        self._loopback_error = "no --peer given and no loopback server running"
        self._case_fallbacks: list[str] = []
        self._load = hostload.Meter()

    # --- peers ---

    def _connect(self, timeout: float = CONNECT_TIMEOUT) -> ClientSession:
        if self.peer:
            session = peer_mod.connect(self.peer, timeout)
            session.steer = self.steer
            return session
        if self._loopback is None:
            raise NetbenchError(self._loopback_error)
        return peer_mod.connect(self._loopback.address, timeout)

    def _start_loopback(self) -> None:
        """(Re)start the loopback server, from the main thread, so it never inherits a case's
        CPU pinning; one that cannot start leaves the peer cases its error."""
        if self._loopback is not None:
            self._loopback.stop()
            self._loopback = None
        try:
            self._loopback = peer_mod.ServerProcess()
        except NetbenchError as exc:
            self._loopback_error = str(exc)

    # --- the run ---

    def run(self, plan: Plan, resume: Resume | None = None) -> RunResult:
        self.store.check_writable()
        if resume is not None:
            started, run_id, path = resume.started_at, resume.run_id, resume.path
            self.env = Fingerprint(self.env).with_resume(resume.record)
        else:
            started = datetime.now(UTC)
            run_id = uuid.uuid4().hex[:12]      # under a launcher only rank 0 stores rows
            path = self.store.path_for(run_id, started.isoformat())
        result = RunResult(run_id, path)
        self._soaking = plan.soak is not None
        self.sample_limit = soak_sample_limit(len(plan.cases), max(
            (len(c.bench.metrics) for c in getattr(plan.cases, "cases", ())), default=1)) \
            if plan.soak else MAX_STORED_SAMPLES
        result.fallbacks.extend(Fingerprint(self.env).hook_errors)
        setups = self._prepare(plan, result)
        base = self.base(run_id, started, plan.suite)
        loopback = any(p.bench.needs_peer for p in plan.cases) and not self.peer
        if loopback:
            self._start_loopback()
            result.fallbacks.append("no --peer given: peer benchmarks ran against a loopback "
                                    "netbench server on this host (127.0.0.1); they measure "
                                    "the host's TCP stack, not a NIC")
        self.reporter.start_run(run_id, plan.suite, len(plan.cases), self.label)
        extra = {"netbench_plan": plan_fingerprint(plan)}
        kept = self.counters_kept()
        if kept is not None:        # what is read around each case: a 0 later is a 0
            extra["netbench_counters"] = kept
        if plan.soak is not None:   # a burn-in: the dashboard draws its timeline
            extra["netbench_soak"] = json.dumps({"duration": plan.soak.duration,
                                                 "window": plan.soak.window,
                                                 "rounds": plan.soak.rounds})
        if plan.thresholds:         # the suite's: compare, history and report judge by them
            extra["netbench_thresholds"] = json.dumps(plan.thresholds, sort_keys=True)
        if resumes := Fingerprint(self.env).resumes:
            extra["netbench_resumes"] = json.dumps(resumes, default=str)
        writer = self.store.open_run(path, extra)
        in_flight: tuple[int, str] | None = None
        this_round: set[int] = set()
        failing = 0                 # a soak's windows failed in a row
        try:
            for index, planned in enumerate(plan.cases):
                if resume is not None and index in resume.done:
                    continue                # finished before the interruption: kept
                if plan.soak is None and id(planned) in this_round:
                    # A repeat's round begins (a suite's cases again): a fresh loopback
                    # server, so where the scheduler put the far end (and what its process
                    # kept) is drawn again a repeat, not held for the whole run. Held, it
                    # moved a stream's CPU figures between runs while the repeats inside
                    # each agreed (cpu_server 122% in one run's three, 74-83% in the next's):
                    # a repeat must be an invocation of everything that drifts.
                    this_round.clear()
                    if loopback:
                        self._start_loopback()
                if plan.soak is None:
                    this_round.add(id(planned))
                description = planned.bench.describe(planned.case)
                in_flight = (index, description)
                self.reporter.start_case(index, planned.case, description)
                rows = self.measure(index, planned, base)
                result.fallbacks.extend(self._case_fallbacks)
                self._case_fallbacks.clear()
                try:
                    writer.append(rows)
                except (NetbenchError, OSError) as exc:
                    # The disk filled (or the store went): stop as when a soak gives up,
                    # every case stored before kept, this one said and run again on resume.
                    result.gave_up = store_failure(exc, path.parent) + (
                        f"; window {index + 1} was not stored" if plan.soak else "")
                    result.interrupted, result.cut_off = True, in_flight
                    break
                in_flight = None
                # A soak's rows are in its file as each window ends; kept here, a day of
                # windows would grow without bound: only the newest window is.
                if plan.soak is None:
                    result.rows.extend(rows)
                else:
                    result.rows = list(rows)
                status = rows[0]["status"] if rows else "failed"
                result.tally[status] = result.tally.get(status, 0) + 1
                self.reporter.end_case(index, planned, rows)
                result.fallbacks.extend(hooks.call("case_finished", rows))
                failing = failing + 1 if status == "failed" else 0
                if plan.soak is not None and failing >= SOAK_GIVE_UP:
                    # The far end died (or the device went): stop, every window kept, as
                    # Ctrl-C does, rather than fail window after window for hours.
                    result.gave_up = (f"{failing} windows in a row failed, the last: "
                                      f"{rows[0]['reason'] if rows else '?'}")
                    result.interrupted = True
                    break
        except KeyboardInterrupt as exc:
            # Ctrl-C, SIGTERM or SIGHUP (Stopped): the case in flight was cancelled and is not
            # stored (half a measurement is no result, and no failure either), and the run
            # stays in parts, so `netbench runs` lists it as interrupted, as after kill -9.
            result.interrupted = True
            result.stopped_by = getattr(exc, "name", "SIGINT")
            result.cut_off = in_flight
        finally:
            result.fallbacks.extend(self.close_shared())
            if self._loopback is not None:
                self._loopback.stop()
            for family, setup in reversed(setups):
                try:
                    if setup.close is not None:
                        setup.close()
                except Exception as exc:   # an undo that fails must not lose the rows
                    result.fallbacks.append(f"undoing the {family} set-up failed: {exc}")
            # A resumed run whose file was already compacted is compacted again: parts beside
            # a finished file would be swept as a dead compaction's.
            compact = not result.interrupted or path.exists()
            try:
                unfinished = writer.close(compact)
                if not compact:
                    result.path = unfinished     # None: no case was stored, no run to resume
            except (NetbenchError, OSError) as exc:
                # Every stored case stays in the parts, read as they are; the store's next
                # reader with space compacts them (COMPACTING, left behind, tells it to).
                result.uncompacted = (f"compacting its parts into {path.name} failed: "
                                      f"{store_failure(exc, path.parent)}")
                result.path = getattr(writer, "parts", path)
        result.fallbacks.extend(hooks.call("run_finished", result.rows))
        return result

    def _counters(self) -> counters.Snapshot | None:
        """The NIC's and the kernel's counters now (None: --no-counters); what cannot be
        read is said once a run."""
        if not self.count:
            return None
        snap = counters.snapshot(Fingerprint(self.env).sysfs_root or "/sys")
        self._say_once(snap.notes)
        return snap

    def counters_kept(self) -> str | None:
        """What the run's footer keeps of the counters read around its cases
        (``netbench_counters``: the names, compact whatever the interface count, and why some
        cannot be read); None with --no-counters."""
        snap = self._counters()
        if snap is None:
            return None
        return json.dumps({"names": sorted({k.rsplit("/", 1)[-1] for k in snap.values}),
                           "notes": snap.notes[:20]})

    def take_notes(self) -> list[str]:
        """What the cases measured since the last call had to say (each once a run), for a
        caller that runs cases itself (a fabric sweep's rounds)."""
        notes, self._case_fallbacks = self._case_fallbacks, []
        return notes

    def _far_counters(self, wait: float = FAR_COUNTERS_TIMEOUT) -> counters.Snapshot | None:
        """The far end's counters, as its ``netbench serve`` (or fabric rank) reads them,
        within ``wait`` seconds for each of connecting and reading; None where it cannot say
        (an older netbench, gone, silent): said once a run."""
        if not self.count:
            return None
        try:
            session = self._connect(wait)
            try:
                snap = session.counters(wait)
            finally:
                session.close()
        except NetbenchError as exc:
            self._far_unread.add(str(self.peer))
            self._say_once([f"the far end's counters were not read ({exc}): not asked "
                            f"again this run; its cases' rows say {counters.FAR_UNREAD}"])
            return None
        self._say_once([f"far end: {note}" for note in snap.notes])
        return snap

    def _counted(self, rows: list[dict[str, Any]],
                 before: tuple[counters.Snapshot | None, counters.Snapshot | None],
                 after: tuple[counters.Snapshot | None, counters.Snapshot | None],
                 far_wanted: bool = False) -> None:
        """Each row of a case: what its counters grew by while it ran, this end's and the
        far end's (``far/...``; ``far/unread`` where it was wanted and not read)."""
        if before[0] is None or after[0] is None:
            return
        grown, notes = counters.delta(before[0], after[0])
        if self._last_counted is not None:     # gone since the last case ended
            notes = counters.vanished_between(self._last_counted, before[0]) + notes
        self._last_counted = after[0]
        if before[1] is not None and after[1] is not None:
            far, far_notes = counters.delta(before[1], after[1])
            grown.update({f"far/{k}": v for k, v in far.items()})
            notes += [f"far end: {n}" for n in far_notes]
        elif far_wanted:
            grown[counters.FAR_UNREAD] = 1      # "not read", never "read, nothing grew"
        self._say_once(notes)
        text = json.dumps(grown, sort_keys=True)
        for row in rows:
            row["counters"] = text

    def _say_once(self, notes: list[str]) -> None:
        for note in notes:
            if note not in self._said:
                self._said.add(note)
                self._case_fallbacks.append(f"counters: {note}")

    def base(self, run_id: str, started: datetime, suite: str) -> dict[str, Any]:
        """What every row of this host's part of the run carries: the run and the fingerprint."""
        env = Fingerprint(self.env)
        return {
            "schema_version": SCHEMA_VERSION, "run_id": run_id, "label": self.label,
            "started_at": started, "host": env.host, "suite": suite,
            "env_kernel": env.kernel, "env_os": env.os, "env_cpu": env.cpu_model,
            "env_json": json.dumps(self.env, sort_keys=True, default=str),
            **{f"env_{k}": env.versions.get(k)
               for k in ("netbench", "python", "torch", "nccl", "rdma_core")},
        }

    def measure(self, index: int, planned: PlannedCase,
                base: Mapping[str, Any]) -> list[dict[str, Any]]:
        """One case, run as ``run`` runs it (availability, timeout, errors as rows), its rows
        timed and returned, not stored: for a caller that stores elsewhere (a fabric sweep)."""
        case_base = {**base, "case_started_at": datetime.now(UTC)}
        # The far end's too, where the case talks to one and will run (a skipped case asks
        # nobody), unless it could not say before (an older server, gone: asked once a run).
        wanted = (self.count and self.peer is not None and planned.bench.has_far_end
                  and not planned.bench.available_for(planned.case, self.env))
        # Its wait is a share of the case's timeout: --timeout bounds a run against a silent
        # peer, whose counters cannot come either.
        wait = min(FAR_COUNTERS_TIMEOUT, planned.timeout / 4)
        far = wanted and self.peer not in self._far_unread
        before = self._counters(), self._far_counters(wait) if far else None
        began, load = time.monotonic(), self._load.start()
        rows = self._run_case(index, planned, case_base)
        ended = time.monotonic()
        _timed(rows, began, load, self._load)   # when it ran, how long, how busy
        far = far and self.peer not in self._far_unread     # not asked again once silent
        local = self._counters()
        if far:
            # The far end shares one read for COUNTER_INTERVAL: asked sooner after a short
            # case, it could answer with the read made before the case (a delta of nothing).
            time.sleep(max(0.0, ended + peer_mod.COUNTER_INTERVAL - time.monotonic()))
        after = local, self._far_counters(wait) if far else None
        self._counted(rows, before, after, wanted)
        return rows

    def close_shared(self) -> list[str]:
        """Tear down what cases kept for the run (spawned ranks, ...); the failures, said."""
        problems = []
        for name, resource in self._shared.items():
            closer = getattr(resource, "close", None)
            try:
                if closer is not None:
                    closer()
            except Exception as exc:  # a teardown failure must not lose the rows
                problems.append(f"closing {name} failed: {exc}")
        self._shared.clear()
        return problems

    def _prepare(self, plan: Plan, result: RunResult) -> list[tuple[str, RunSetup]]:
        """Each family in the plan sets up what the suite's options ask of it (once, by its
        first benchmark); the runner only applies the outcome."""
        setups: list[tuple[str, RunSetup]] = []
        if not plan.options:
            return setups
        seen = set()
        for planned in getattr(plan.cases, "cases", plan.cases):    # a soak's: one round
            family = planned.bench.family
            if family in seen:
                continue
            seen.add(family)
            setup = planned.bench.prepare_run(plan.options, self.env)
            if setup is None:
                continue
            setups.append((family, setup))
            self.env = {**self.env, **setup.env}
            if setup.reprobe:    # keep what the CLI added (launcher, collective env)
                self.env = {**self.env, **probe(Fingerprint(self.env).sysfs_root)}
            if setup.fallback:
                result.fallbacks.append(setup.fallback)
        return setups

    def _run_case(self, index: int, planned: PlannedCase,
                  base: Mapping[str, Any]) -> list[dict[str, Any]]:
        bench, case = planned.bench, planned.case
        reason = bench.available_for(case, self.env)
        if reason:
            return self.status_rows(index, planned, base, "skipped", reason)
        ctx = _CaseContext(self.env, self.peer, self._connect,
                           time.monotonic() + planned.timeout, self.reporter.progress,
                           self._shared, self.trace, self.every,
                           getattr(self.reporter, "interval", None), self._soaking)
        outcome: dict[str, Any] = {}

        def work() -> None:
            try:
                outcome["measurement"] = bench.run(case, ctx)
            except SkipCase as exc:
                outcome["skip"] = str(exc)
            except NetbenchError as exc:
                outcome["error"] = str(exc)
            except Exception as exc:  # a plugin bug: keep the run going, say where it broke
                frame = traceback.extract_tb(exc.__traceback__)[-1]
                outcome["error"] = (f"internal error in {bench.name}: {type(exc).__name__}: "
                                    f"{exc} ({Path(frame.filename).name}:{frame.lineno})")

        worker = threading.Thread(target=work, name=f"case-{index}", daemon=True)
        worker.start()
        deadline = time.monotonic() + planned.timeout
        try:
            # Short joins: a Ctrl-C the kernel hands to another thread is only acted on when the
            # main thread wakes, so it must wake often, not once at the case's timeout.
            while worker.is_alive() and time.monotonic() < deadline:
                worker.join(min(0.2, max(deadline - time.monotonic(), 0.0)))
        except KeyboardInterrupt:
            ctx.cancel()
            worker.join(CANCEL_GRACE)
            raise
        if worker.is_alive():
            ctx.cancel()
            worker.join(CANCEL_GRACE)
            return self.status_rows(index, planned, base, "failed",
                                     f"timed out after {planned.timeout:g} s")
        if "skip" in outcome:
            return self.status_rows(index, planned, base, "skipped", outcome["skip"])
        if "error" in outcome:
            return self.status_rows(index, planned, base, "failed", outcome["error"])
        return self._metric_rows(index, planned, base, outcome["measurement"])

    def _common(self, index: int, bench: Benchmark, case: Case, base: Mapping[str, Any],
                measured: Measurement | None = None) -> dict[str, Any]:
        m, env = measured or Measurement({}), Fingerprint(self.env)
        peer = self.peer if self.peer else ("loopback" if bench.needs_peer else None)
        return {
            **base, "peer": peer, "case_index": index, "benchmark": bench.name,
            "family": bench.family, "op": bench.op,
            "transport": m.transport or bench.transport, "device": m.device,
            "msg_size": case.msg_size, "params": params_json(case.params), "resolved": "{}",
            "env_nic": env.nic_summary(m.device),
            "env_rdma_device": env.rdma_summary(m.device),
            "env_gpu": env.gpu_summary(m.pci_address),
            "route": json.dumps(m.routes) if m.routes is not None else None,
            "placement": m.placement or None,
            **self._traits(bench, case, measured),
        }

    def _traits(self, bench: Benchmark, case: Case,
                measured: Measurement | None) -> dict[str, Any]:
        """The case's declared traits as row columns. A plugin whose ``traits`` fails still
        gets its rows stored, with the defaults, and the run says why once."""
        try:
            traits = bench.traits(case, measured)
        except Exception as exc:    # a plugin's bug must not lose the case's figures
            self._case_fallbacks.append(f"{bench.name}.traits() failed, defaults stored: "
                                        f"{type(exc).__name__}: {exc}")
            traits = Benchmark.traits(bench, case, measured)
        return traits.as_row()

    def status_rows(self, index: int, planned: PlannedCase, base: Mapping[str, Any],
                    status: str, reason: str) -> list[dict[str, Any]]:
        """The one row of a case that was skipped or failed, with the reason."""
        return [{**self._common(index, planned.bench, planned.case, base), "metric": None,
                 "value": None, "unit": None, "better": None, "n_samples": None,
                 "samples": None, "status": status, "reason": reason}]

    def _metric_rows(self, index: int, planned: PlannedCase, base: Mapping[str, Any],
                     m: Measurement) -> list[dict[str, Any]]:
        bench = planned.bench
        declared = {metric.name for metric in bench.metrics}
        undeclared = set(m.values) - declared
        if undeclared:
            return self.status_rows(index, planned, base, "failed",
                                     f"{bench.name} reported undeclared metrics: "
                                     f"{', '.join(sorted(undeclared))}")
        common = self._common(index, bench, planned.case, base, m)
        if m.peer:
            common["peer"] = m.peer
        if m.resolved:
            # The params stay as planned (the case's identity, what compare matches on);
            # what ``auto`` became on this machine is kept beside them.
            common["resolved"] = params_json(m.resolved)
            if isinstance(m.resolved.get("msg_size"), int):   # msg_size=0 (auto) became this
                common["msg_size"] = m.resolved["msg_size"]
        if m.fallback:
            self._case_fallbacks.append(m.fallback)
        default_n = max((len(s) for s in m.samples.values()), default=None)
        rows = []
        for metric in bench.metrics:
            if metric.name not in m.values:
                continue
            samples = m.samples.get(metric.name)
            # A statistic of another metric's samples rests on that metric's count.
            summarised = m.samples.get(metric.of_samples) if metric.of_samples else None
            counted = (len(samples) if samples is not None else len(summarised)
                       if summarised is not None else default_n)
            rows.append({
                **common, "metric": metric.name, "value": clean_value(m.values[metric.name]),
                "unit": metric.unit, "better": metric.better,
                "statistic": metric.statistic or None,
                "per_metric": metric.per or None,
                "cost": 1 if metric.cost or metric.per else None,
                "n_samples": counted,
                "samples": thin(samples, self.sample_limit) if samples is not None
                else None,
                "status": "ok", "reason": m.note or None,
            })
        return rows
