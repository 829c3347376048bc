"""A fabric sweep: every pair of endpoints measured, one netbench process per host (or per NIC)
under the job's launcher (srun, mpirun, torchrun, or anything that sets their environment).

Each rank serves the far end of the benchmarks (an in-process ``netbench serve`` on its fabric
address) and, when the schedule makes it a pair's client, runs the suite's cases against its
partner. The ranks meet through torch.distributed's TCPStore at the launcher's
MASTER_ADDR:MASTER_PORT (or ``--rendezvous``): each publishes who it is, every rank computes
the same schedule, and after each round the clients hand their rows to rank 0, which stores
the one run (every host's fingerprint in it) and says who did not report. A rank that dies
makes its pairs failed rows with the reason and the sweep goes on; a rank that never joins is
named when the join times out; every wait has a deadline.
"""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from netbench import registry
from netbench.env.launch import rendezvous_address
from netbench.errors import NetbenchError, UsageError
from netbench.fingerprint import Fingerprint
from netbench.run.peer import Server
from netbench.run.runner import Runner, plan_fingerprint
from netbench.run.suite import Plan, PlannedCase
from netbench.run.wire import parse_hostport
from netbench.store import RUN_ENV, NullStore, counters_of
from netbench.store.protocol import Store
from netbench.store.schema import MAX_FILE_ROWS
from netbench.store.schema import MAX_STORED_SAMPLES as MAX_RANK_SAMPLES
from netbench.sweep import schedule as sched

JOIN_TIMEOUT = 120.0      # seconds for every rank to join the rendezvous
# A burn-in starts no pass once it stored this many rows: its file stays one a reader takes
# (MAX_FILE_ROWS), and it says so.
SOAK_ROWS = MAX_FILE_ROWS // 2
SOAK_SAMPLES = 1000       # samples a burn-in's pair keeps of each metric a round (thinned)
SOAK_WHY = 64             # a burn-in's newest rounds whose reasons its footer keeps
ROUND_SLACK = 30.0        # beyond a round's case timeouts, before a silent rank is declared gone
POLL = 0.05
CHECK_CHUNK = 1024        # keys asked about in one round trip while waiting
SHOWN = 10                # ranks or hosts an error lists before "and N more"


@dataclass(frozen=True)
class Endpoint:
    rank: int
    host: str
    device: str
    addr: str
    port: int
    name: str = ""          # host, or host/device where a host has several ranks


@dataclass
class SweepResult:
    run_id: str
    endpoints: list[Endpoint]
    schedule: sched.Schedule
    rows: list[dict[str, Any]] = field(default_factory=list)   # rank 0's: the whole sweep
    gone: dict[int, str] = field(default_factory=dict)          # rank -> why it left
    facts: dict[str, Any] = field(default_factory=dict)         # rank 0's netbench_fabric


def local_address(toward: str, wait: float = 0.0) -> str:
    """The address this host uses to reach ``toward`` (no packet is sent): the fabric
    address to serve on when none is given. A name that does not resolve yet is asked again
    for up to ``wait`` seconds (a Kubernetes headless Service publishes a pod's name as the
    pod comes up)."""
    deadline = time.monotonic() + wait
    while True:
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect((toward, 9))
                return str(s.getsockname()[0])
        except socket.gaierror as exc:
            if time.monotonic() >= deadline:
                raise UsageError(f"cannot resolve the rendezvous {toward} (waited {wait:g} "
                                 f"s): {exc.strerror or exc}; give --bind ADDR") from None
            time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))
        except OSError as exc:
            raise UsageError(f"cannot find this host's address toward the rendezvous {toward}: "
                             f"{exc.strerror or exc}; give --bind ADDR") from None


def name_endpoints(joined: Sequence[Endpoint]) -> list[Endpoint]:
    """Endpoint names: the host, or host/device on hosts with several ranks (one per NIC).
    Two ranks claiming the same host and device are an error that names them."""
    seen: dict[tuple[str, str], int] = {}
    for e in joined:
        key = (e.host, e.device)
        if key in seen:
            raise UsageError(f"ranks {seen[key]} and {e.rank} both claim host {e.host!r}"
                             + (f" device {e.device!r}" if e.device else "")
                             + ": each rank must be its own host (or its own NIC, named with "
                             "--device); set distinct hostnames")
        seen[key] = e.rank
    per_host: dict[str, int] = {}
    for e in joined:
        per_host[e.host] = per_host.get(e.host, 0) + 1
    return [Endpoint(e.rank, e.host, e.device, e.addr, e.port,
                     f"{e.host}/{e.device}" if per_host[e.host] > 1 else e.host)
            for e in joined]


def check_plan(plan: Plan, direction: str, device: str = "") -> Plan:
    """Every case must have a far end; with ``bidirectional`` the case runs both ways at once,
    through the benchmark's own param for it. A rank's ``device`` (its NIC, on a host that
    runs one rank per NIC) is the default of every case's own ``device`` param."""
    cases = []
    for p in plan.cases:
        if not p.bench.has_far_end:
            raise UsageError(f"{p.bench.name} has no far end: a fabric sweep runs benchmarks "
                             "measured between two hosts (tcp.*, rdma.*)")
        names = {q.name: q for q in p.bench.params}
        extra: dict[str, Any] = {}
        if direction == "bidirectional":
            if "bidirectional" in names:
                extra["bidirectional"] = True
            elif "direction" in names and "both" in (names["direction"].choices or ()):
                extra["direction"] = "both"
            else:
                raise UsageError(f"{p.bench.name} has no bidirectional mode; use --direction "
                                 "each")
        if device and "device" in names and not p.case.params.get("device"):
            extra["device"] = device
        if extra:
            p = PlannedCase(type(p.case)(p.case.benchmark, {**p.case.params, **extra}),
                            p.bench, p.timeout)
        cases.append(p)
    return Plan(plan.suite, cases, plan.options)


STORES = ("auto", "torch", "builtin")


def _torch_store() -> Any:
    try:
        from torch.distributed import TCPStore
    except ImportError:
        return None
    return TCPStore


class Rendezvous:
    """torch.distributed's TCPStore (or, without torch, netbench.sweep.kvstore's), with deadlines
    that name who is missing."""

    def __init__(self, host: str, port: int, rank: int, world: int, timeout: float,
                 kind: str = "auto") -> None:
        tcpstore = _torch_store() if kind in ("auto", "torch") else None
        if kind == "torch" and tcpstore is None:
            raise UsageError("--rendezvous-store torch needs torch: `pip install torch==2.13.0`"
                             " (the CPU build is enough), or use builtin")
        try:
            if tcpstore is not None:
                self.store = tcpstore(host, port, world, rank == 0,
                                      timedelta(seconds=timeout), wait_for_workers=False)
            else:
                from netbench.sweep.kvstore import KVClient
                self.store = KVClient(host, port, world, rank == 0, timeout)
        except NetbenchError:
            raise
        except Exception as exc:
            raise NetbenchError(f"rank {rank}: cannot reach the rendezvous {host}:{port} "
                                f"within {timeout:g} s: {str(exc).splitlines()[0][:200]}"
                                ) from None
        self.kind = "torch" if tcpstore is not None else "builtin"
        self.where = f"{host}:{port}"

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:      # the store's host (rank 0) is gone
            raise NetbenchError(f"the rendezvous {self.where} went away (rank 0 ended or "
                                f"died): {str(exc).splitlines()[0][:160]}") from None

    def set(self, key: str, value: Any) -> None:
        self._call(self.store.set, key, json.dumps(value, default=_jsonable))

    def get(self, key: str) -> Any:
        raw = self._call(self.store.get, key)
        try:
            return json.loads(raw)
        except (ValueError, RecursionError):
            raise NetbenchError(f"the rendezvous {self.where} holds something that is not "
                                f"netbench's JSON under {key!r}: {_clip(raw)}") from None

    def has(self, key: str) -> bool:
        return self.has_all([key])

    def delete(self, key: str) -> None:
        self._call(self.store.delete_key, key)

    def has_all(self, keys: Sequence[str]) -> bool:
        return bool(self._call(self.store.check, list(keys)))

    def claim(self, key: str, value: Any) -> Any:
        """Set ``key`` unless it is set already (one atomic compare-and-set); what it holds
        afterwards: ``value``, or the record of whoever set it first."""
        text = json.dumps(value, default=_jsonable)
        got = self._call(self.store.compare_set, key, "", text)
        try:
            return json.loads(got)
        except (ValueError, RecursionError):
            return got if isinstance(got, str) else bytes(got).decode("utf-8", "replace")

    def abort(self, reason: str) -> None:
        """Rank 0 cannot go on: every rank stops with its reason, not a lost connection."""
        try:
            self.set("abort", reason)
            time.sleep(2 * POLL + 1.0)       # the others poll it before the store closes
        except NetbenchError:
            pass

    def wait_for(self, keys: Sequence[str], deadline: float) -> list[str]:
        """The keys still missing at ``deadline`` (monotonic); [] when all arrived. Keys are
        asked about in chunks, and the deadline is kept between round trips, so a world of
        a million ranks ends on time too (keys not asked about by then count as missing)."""
        missing = list(keys)
        while missing:
            missing = self._absent(missing, deadline)
            if not missing or time.monotonic() >= deadline:
                break
            if self.has("abort"):
                raise NetbenchError(_clip(self.get("abort"), 2000))
            time.sleep(POLL)
        return missing

    def _absent(self, keys: list[str], deadline: float) -> list[str]:
        """The keys not in the store: a chunk at a time, a chunk with some missing halved
        until they are found (a few round trips for one missing rank among thousands)."""
        absent: list[str] = []
        todo = [keys[i:i + CHECK_CHUNK] for i in range(0, len(keys), CHECK_CHUNK)][::-1]
        asked = False
        while todo:
            if asked and time.monotonic() >= deadline:
                absent.extend(k for part in reversed(todo) for k in part)
                break
            part = todo.pop()
            asked = True
            if self.has_all(part):
                continue
            if len(part) == 1:
                absent.extend(part)
            else:
                todo.extend((part[len(part) // 2:], part[:len(part) // 2]))
        return absent


def _clip(value: Any, limit: int = 120) -> str:
    """A value from the rendezvous as one printable line, cut to ``limit``."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = json.dumps(text)[1:-1] if not text.isprintable() else text
    return text if len(text) <= limit else text[:limit] + "..."


_JOIN = {"host": str, "device": str, "addr": str, "port": int, "nonce": str}


def _endpoint(rank: int, record: Any) -> Endpoint:
    """A rank's join record, checked: anything but what a netbench rank writes is refused by
    name, never a TypeError."""
    ok = isinstance(record, dict) and all(
        isinstance(record.get(k), t) and not isinstance(record.get(k), bool)
        for k, t in _JOIN.items())
    if ok:
        texts = (record["host"], record["device"], record["addr"])
        ok = all(len(t) <= 255 and t.isprintable() for t in texts) and bool(
            record["host"]) and bool(record["addr"]) and 0 < record["port"] < 65536
    if not ok:
        raise NetbenchError(f"rank {rank}'s join record in the rendezvous is malformed: "
                            f"{_clip(record)} (a rank writes host, device, addr, port and "
                            "nonce; is every rank the same netbench version?)")
    return Endpoint(rank, record["host"], record["device"], record["addr"], record["port"])


def _who(record: Any) -> str:
    """A join record in a message: host (device) at addr:port, or the raw record."""
    if isinstance(record, dict) and isinstance(record.get("host"), str):
        device = record.get("device")
        return (_clip(record["host"], 80) + (f" (device {_clip(device, 40)})" if device else "")
                + f" at {_clip(record.get('addr'), 60)}:{_clip(record.get('port'), 8)}")
    return _clip(record)


def _listed(items: Sequence[str], total: int | None = None) -> str:
    total = len(items) if total is None else total
    more = total - min(len(items), SHOWN)
    return ", ".join(items[:SHOWN]) + (f" and {more} more" if more > 0 else "")


def _jsonable(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)


_TIMES = ("started_at", "case_started_at")


MAX_ROUTE = 64 << 10      # bytes of a row's route (a trace's addresses) kept from a rank


def check_adaptive(pattern: str, direction: str, k: int | None, rails: bool,
                   rounds: int | None, trace: bool, shape: Any, plan: Plan) -> bool:
    """Are the options of an adaptive sweep consistent (True), or is it none (False)?
    UsageError naming the option that does not fit."""
    if pattern != "adaptive":
        if rounds is not None or trace:
            raise UsageError(f"{'--rounds' if rounds is not None else '--trace'} applies to "
                             "--pattern adaptive")
        return False
    if direction == "bidirectional" or k is not None or rails:
        raise UsageError("--pattern adaptive chooses each round's pairs and their direction "
                         "itself: leave out --direction bidirectional, --k and --rails")
    if rounds is not None and not 1 <= rounds <= 10_000:
        raise UsageError(f"--rounds {rounds}: a whole number 1..10000")
    if trace and (shape is None or not shape.addresses):
        raise UsageError("--trace names each flow's routers by their addresses: give a "
                         "--topology that has them (LLDP, with lldpd advertising every "
                         "fabric address: lldpd -m PATTERN)")
    untraced = sorted({p.bench.name for p in plan.cases if not p.bench.traces})
    if trace and untraced:
        raise UsageError(f"--trace: {', '.join(untraced)} cannot trace its connections "
                         "(tcp.stream can)")
    return True


_RANK_KEY = re.compile(r"[0-9]{1,9}")      # a rank in a rendezvous key: ASCII digits only
_TEXT_COLUMNS = ("benchmark", "family", "op", "transport", "device", "params", "metric",
                 "unit", "better", "status", "reason", "peer_device", "resolved", "lead",
                 "trail", "headline", "flow", "statistic", "per_metric", "unit_note")


def _forged(rows: Sequence[Mapping[str, Any]], client: str, server: str, wanted: set[int],
            base: Mapping[str, Any]) -> str:
    """Why a rank's rows for its pair cannot be stored, or "": each row must be of the
    pair it was given (its host, that peer), a case of it, this run (id and label), and of
    the schema's types (a value a finite number or none, text as text, samples numbers). A
    bad row fails the pair with this reason, never the run, and is never stored as if
    measured (a rank had published a pair it never measured, with a run id of its own)."""
    for row in rows:
        index = row.get("case_index")
        value = row.get("value")
        samples = row.get("samples")
        problem = (
            "another host's" if row.get("host") != client else
            "another pair's" if row.get("peer") != server else
            "a case not of its pair" if not (isinstance(index, int)
                                             and not isinstance(index, bool)
                                             and index in wanted) else
            "another run's" if (row.get("run_id"), row.get("label")) != (
                base.get("run_id"), base.get("label")) else
            "a value that is no finite number" if value is not None and not (
                isinstance(value, (int, float)) and not isinstance(value, bool)
                and math.isfinite(value)) else
            "samples that are no list of numbers" if samples is not None and not (
                isinstance(samples, list) and len(samples) <= MAX_RANK_SAMPLES
                and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                        for x in samples)) else
            next((f"{c} that is no text" for c in _TEXT_COLUMNS
                  if row.get(c) is not None and not isinstance(row.get(c), str)), ""))
        if problem:
            return f"its rows in the rendezvous are forged or malformed: {problem} row " \
                   f"({_clip(row)})"
    return ""


def _decoded(row: dict[str, Any]) -> dict[str, Any]:
    # A rank reports what it measured; a flow's fair share is rank 0's to work out, and a
    # route is a bounded string or nothing.
    row.pop("fair_share", None)
    if not (isinstance(row.get("route"), str) and len(row["route"]) <= MAX_ROUTE):
        row["route"] = None
    if counters_of(row.get("counters")) is None:
        row["counters"] = None          # a rank's garbage: not read, rather than a crash
    for key in _TIMES:
        if isinstance(row.get(key), str):
            try:
                row[key] = datetime.fromisoformat(row[key])
            except ValueError:
                row[key] = None            # a rank's garbage is not rank 0's crash
    return row


@dataclass(frozen=True)
class Options:
    """How the sweep runs: the schedule's pattern and the rendezvous' patience."""

    pattern: str = "all"
    direction: str = "each"
    k: int | None = None
    center: str | None = None
    pairs_file: str | None = None
    rails: bool = False
    label: str = ""
    join_timeout: float = JOIN_TIMEOUT
    store: str = "auto"          # the rendezvous: torch's TCPStore, or netbench's own
    # pattern "adaptive": rank 0's planner, made from the endpoints' names, chooses each
    # round from what the earlier ones read (``next_round()`` -> pairs and why, or None;
    # ``record(pairs, values, better)``): netbench.analysis.adaptive, handed in by the CLI.
    planner: Callable[[list[str]], Any] | None = None
    topology: Any = None         # the fabric's shape (--topology): kept with the run
    # Trace each pair's data connection (--trace): its path (``route``) and, for the planner,
    # the switches it names (the topology's addresses), each flow judged on its fair share.
    trace: bool = False
    # A burn-in (--soak): the pattern's rounds again and again for this many seconds, each
    # pass a sweep of its own (adaptive: a fresh planner), judged pass by pass.
    soak: float | None = None


class _Passes:
    """Rank 0's adaptive planner for a burn-in: each pass a fresh one from ``make``, started
    while the soak has time left and its file room (``full``: whether it has none);
    otherwise the planner itself (every attribute its own)."""

    def __init__(self, make: Callable[[], Any], seconds: float,
                 full: Callable[[], bool] = lambda: False) -> None:
        self.make, self.seconds, self.began, self.full = make, seconds, time.monotonic(), full
        self.current = make()
        self.given = 0
        self.starts = [0]            # the round each pass began with

    def next_round(self) -> Any:
        chosen = self.current.next_round()
        if chosen is None and time.monotonic() - self.began < self.seconds and not self.full():
            gone = sorted(getattr(self.current, "_gone", ()))
            self.current = self.make()
            if gone:                 # a rank gone in an earlier pass is asked for nothing
                self.current.record([], [], gone=gone)
            self.starts.append(self.given)
            chosen = self.current.next_round()
        self.given += chosen is not None
        return chosen

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current, name)


def sweep(plan: Plan, env: Mapping[str, Any], launched: Any, store: Store, options: Options, *,
          rendezvous: str | None = None, bind: str | None = None, port: int = 0,
          device: str = "", say: Any = lambda text: None) -> SweepResult:
    """Run the sweep as this rank. Rank 0 stores the run in ``store`` and returns every row;
    the other ranks return their own."""
    if launched is None:
        raise UsageError("netbench fabric runs one process per host under a launcher (srun, "
                         "mpirun, torchrun): it reads the rank and world size they set "
                         "(RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS, OMPI_COMM_WORLD_*)")
    rank, world = launched.rank, launched.world_size
    if world < 2:
        raise UsageError(f"a fabric sweep needs at least two ranks; the world has {world}")
    if not 0 <= rank < world:
        raise UsageError(f"rank {rank} is outside the world of {world} (ranks 0..{world - 1}):"
                         f" check the launcher's rank and world size variables")
    if not 0 < options.join_timeout < math.inf:
        raise UsageError(f"--join-timeout {options.join_timeout:g}: a positive, finite number "
                         "of seconds")
    plan = check_plan(plan, options.direction, device)
    if options.rails and not device:
        raise UsageError("--rails pairs NIC i with NIC i: give each rank its NIC with --device")
    if rendezvous:
        meet_host, meet_port = parse_hostport(rendezvous, 29500)
        source = "--rendezvous"
    else:
        try:
            found = rendezvous_address(launched)
        except ValueError as exc:
            raise UsageError(f"{exc}; give --rendezvous HOST:PORT (rank 0's host)") from None
        if found is None:
            raise UsageError(
                f"no rendezvous under {launched.launcher}: give --rendezvous HOST:PORT (rank "
                "0's host), or set MASTER_ADDR and MASTER_PORT as torchrun does (mpirun -x "
                "MASTER_ADDR=<rank 0's host> -x MASTER_PORT=29500); under srun it is the first "
                "node of SLURM_STEP_NODELIST")
        meet_host, meet_port, source = found
    say(f"rendezvous at {meet_host}:{meet_port} ({source})")
    addr = bind or local_address(meet_host, options.join_timeout)
    # The far ends' per-request log lines are `netbench serve`'s; here they would interleave
    # with the sweep's own (a library imported later may have set up the root logger).
    logging.getLogger("netbench.serve").setLevel(logging.WARNING)
    server = Server(registry.get, bind=addr, port=port, device=device)   # its far ends' NIC
    addr, port = server.listen()
    serving = threading.Thread(target=server.serve_forever, name="fabric-serve", daemon=True)
    serving.start()
    try:
        if options.store not in STORES:
            raise UsageError(f"rendezvous store {options.store!r}: one of {', '.join(STORES)}")
        meet = Rendezvous(meet_host, meet_port, rank, world, options.join_timeout,
                          options.store)
        me = {"host": Fingerprint(env).host or socket.gethostname(), "device": device,
              "addr": addr, "port": port}
        try:
            return _run(meet, plan, env, rank, world, me, store, options, say)
        except (NetbenchError, UsageError) as exc:
            if rank == 0:
                meet.abort(str(exc))
            raise
    finally:
        server.stop()


def _join(meet: Rendezvous, rank: int, world: int, me: Mapping[str, Any]) -> None:
    """Publish this rank once: a second process with the same RANK finds the first one's
    record (never overwrites it), and the sweep stops on every rank naming both."""
    mine = {**me, "nonce": uuid.uuid4().hex}     # tells this process from a duplicate
    first = meet.claim(f"join/{rank}", mine)
    if isinstance(first, dict) and first.get("nonce") == mine["nonce"]:
        return
    reason = (f"rank {rank} was started twice: {_who(first)} joined as rank {rank} first, "
              f"then {_who(mine)}; every process needs its own rank (0..{world - 1})")
    meet.set("abort", reason)                    # every other rank stops with it too
    raise UsageError(reason)


def _run(meet: Rendezvous, plan: Plan, env: Mapping[str, Any], rank: int, world: int,
         me: Mapping[str, Any], store: Store, options: Options, say: Any) -> SweepResult:
    _join(meet, rank, world, me)
    missing = meet.wait_for([f"join/{r}" for r in range(world)],
                            time.monotonic() + options.join_timeout)
    if missing:
        gone = {int(m.split("/")[1]) for m in missing}
        joined = (r for r in range(world) if r not in gone)
        known = [_who(meet.get(f"join/{r}")) for r in itertools.islice(joined, SHOWN)]
        raise NetbenchError(f"rank(s) {_listed([str(r) for r in sorted(gone)])} of {world} "
                            f"never joined the rendezvous {meet.where} within "
                            f"{options.join_timeout:g} s; joined: "
                            f"{_listed(known, world - len(gone)) or 'none'}")
    endpoints = name_endpoints([_endpoint(r, meet.get(f"join/{r}")) for r in range(world)])
    names = [e.name for e in endpoints]
    adaptive = options.pattern == "adaptive"
    planner = None
    if adaptive:                 # rounds are chosen as the sweep goes, by rank 0
        plan_schedule = sched.Schedule(names, [], "adaptive", "forward")
        if rank == 0:
            if options.planner is None:
                raise UsageError("pattern adaptive needs a planner (netbench fabric makes one)")
            make = options.planner
            planner = _Passes(functools.partial(make, list(names)), options.soak,
                              lambda: len(result.rows) >= SOAK_ROWS) \
                if options.soak else make(names)
    else:
        plan_schedule = sched.build(names, options.pattern, options.direction, options.k,
                                    options.center, options.pairs_file,
                                    [e.device for e in endpoints] if options.rails else None)
    if rank == 0:
        meet.set("run", {"run_id": uuid.uuid4().hex[:12],
                         "started_at": datetime.now(UTC).isoformat()})
    run = meet.get("run")
    try:
        run_id, started = str(run["run_id"]), datetime.fromisoformat(run["started_at"])
    except (TypeError, KeyError, ValueError):
        raise NetbenchError(f"the rendezvous' run record is malformed: {_clip(run)}") from None
    runner = Runner(NullStore(), env, label=options.label)
    if options.soak:             # hours of rounds: each pair's samples thinned, as a soak's
        runner.sample_limit = SOAK_SAMPLES
    runner.trace = options.trace
    base = runner.base(run_id, started, plan.suite)
    result = SweepResult(run_id, endpoints, plan_schedule)
    writer = None
    if rank == 0:
        store.check_writable()
        path = store.path_for(run_id, started.isoformat())
        facts = {"pattern": options.pattern, "direction": options.direction, "k": options.k,
                 "rails": options.rails, "endpoints": names,
                 "rounds": len(plan_schedule.rounds)}
        if options.soak:                     # each pass's first row, for its own verdict
            facts["soak"] = {"seconds": options.soak, "passes": []}
        result.facts = facts
        kept = {"netbench_plan": plan_fingerprint(plan), "netbench_fabric": json.dumps(facts)}
        if options.topology is not None:     # report and analysis of the run read it back
            kept["netbench_topology"] = options.topology.to_json()
        names = runner.counters_kept()        # rank 0's: the fleet reads alike
        if names is not None:
            kept["netbench_counters"] = names
        writer = store.open_run(path, kept)
        if adaptive:
            say(f"netbench fabric {run_id}: {world} endpoints, adaptive rounds (at most "
                f"{getattr(planner, 'budget', '?')}), {len(plan.cases)} case(s) a pair")
        else:
            say(f"netbench fabric {run_id}: {world} endpoints, {plan_schedule.pattern} pairs "
                f"({options.direction}), {len(plan_schedule.rounds)} rounds of at most "
                f"{plan_schedule.concurrency()} pairs, {len(plan.cases)} case(s) a pair")
    per_round = sum(p.timeout for p in plan.cases) + ROUND_SLACK
    offset = 0
    total = "?" if adaptive else str(len(plan_schedule.rounds))
    why: list[str] = []
    steering: list[dict[int, tuple[frozenset[str], ...]]] = []   # a round's, by client rank
    began = time.monotonic()
    static = list(plan_schedule.rounds)
    try:
        for number in itertools.count():
            if adaptive:
                pairs = _agree_round(meet, number, planner, world, endpoints, per_round,
                                     why, steering, options.topology)
                if pairs is None:
                    break
                if options.soak:        # hours of rounds: the newest rounds' reasons only
                    del why[:-SOAK_WHY]
                plan_schedule.rounds.append(pairs)
                runner.steer = steering[-1].get(rank, ())
                starts = number in getattr(planner, "starts", ())
            elif number < len(static):
                pairs, starts = static[number], number == 0 and bool(options.soak)
            elif options.soak and static and (number % len(static) or _agree_more(
                    meet, number, rank, began, options.soak, per_round, endpoints,
                    len(result.rows) >= SOAK_ROWS)):
                pairs, starts = static[number % len(static)], number % len(static) == 0
            else:
                break
            if rank == 0 and options.soak and starts:
                facts["soak"]["passes"].append({
                    "round": number, "case_index": offset * len(plan.cases),
                    "started_at": datetime.now(UTC).isoformat()})
                say(f"pass {len(facts['soak']['passes'])}: {time.monotonic() - began:.0f} s "
                    f"of {options.soak:g} s")
            rows = _round(number, pairs, offset, plan, endpoints, rank, runner, base, result)
            for note in runner.take_notes():       # each once a run (counters unread, ...)
                say(f"{endpoints[rank].name}: {note}")
            offset += len(pairs)
            if rows is not None:
                meet.set(f"rows/{number}/{rank}", rows)
            meet.set(f"fin/{number}/{rank}", 1)
            if rank == 0:
                stored = _collect(meet, number, pairs, offset - len(pairs), plan, endpoints,
                                  runner, base, result, per_round)
                if options.soak:        # hours of rounds: what rank 0 read is let go
                    for r in range(world):
                        meet.delete(f"rows/{number}/{r}")
                        meet.delete(f"fin/{number}/{r}")
                if planner is not None:
                    values, better, routes = _pair_values(stored, pairs, endpoints)
                    paths = _switch_paths(routes, pairs, endpoints, options.topology) \
                        if options.trace else None
                    planner.record(pairs.tolist(), values, better, sorted(result.gone),
                                   paths=paths)
                    if options.trace:
                        _keep_shares(stored, planner.measured[-len(pairs):], endpoints)
                        _count_steered(facts, planner.log[-1], paths)
                    facts.update(rounds=number + 1, why=why)   # kept with the run
                if planner is not None or options.soak:
                    facts["rounds"] = number + 1
                    writer.extra["netbench_fabric"] = json.dumps(facts)
                writer.append(stored)
                # A burn-in's verdict reads each pair's figure, not its samples (stored):
                # hours of rounds kept in memory without them.
                result.rows.extend([{**r, "samples": None} for r in stored] if options.soak
                                   else stored)
                failed = sum(1 for r in stored if r["status"] == "failed")
                where = f"round {number + 1}/{total}" if not options.soak else \
                    f"pass {len(facts['soak']['passes'])}, round {number + 1}"
                say(f"[{where}] {len(pairs)} pair(s)"
                    + (f", {failed} failed row(s)" if failed else "")
                    + (f": {why[-1]}" if adaptive else ""))
            else:
                if rows and not options.soak:       # rank 0 judges a burn-in
                    result.rows.extend(rows)
                if meet.wait_for([f"round/{number}"], time.monotonic() + per_round * 2):
                    raise NetbenchError(f"rank 0 ({endpoints[0].name}) stopped answering in "
                                        f"round {number + 1}: the sweep cannot be stored")
                verdict = meet.get(f"round/{number}")
                if not isinstance(verdict, dict) or not all(
                        _RANK_KEY.fullmatch(str(r)) and int(r) < world and isinstance(why, str)
                        for r, why in verdict.items()):
                    raise NetbenchError(f"the rendezvous' record of round {number + 1} is "
                                        f"malformed: {_clip(verdict)}")
                result.gone.update({int(r): why for r, why in verdict.items()})
        # The store lives in rank 0's process: it waits for the others' last read before
        # it ends, so none of them finds the rendezvous gone instead of the sweep done.
        if rank == 0:
            meet.wait_for([f"bye/{e.rank}" for e in endpoints[1:] if e.rank not in
                           result.gone], time.monotonic() + ROUND_SLACK)
        else:
            meet.set(f"bye/{rank}", 1)
    finally:
        runner.close_shared()
        if writer is not None:
            writer.close()
    return result


def _agree_more(meet: Rendezvous, number: int, rank: int, began: float, seconds: float,
                per_round: float, endpoints: list[Endpoint], full: bool = False) -> bool:
    """A burn-in's word, the same on every rank, on whether another pass of the schedule
    starts at round ``number``: rank 0's, while the soak has time left and its file room
    (``full``: none)."""
    key = f"more/{number}"
    if rank == 0:
        more = time.monotonic() - began < seconds and not full
        meet.set(key, more)
        return more
    if meet.wait_for([key], time.monotonic() + per_round * 2):
        raise NetbenchError(f"rank 0 ({endpoints[0].name}) said nothing of round {number + 1} "
                            f"within {per_round * 2:g} s: the burn-in cannot go on")
    more = meet.get(key)
    if not isinstance(more, bool):
        raise NetbenchError(f"the rendezvous' word on round {number + 1} is malformed: "
                            f"{_clip(more)}")
    return more


MAX_WHY = 2000        # characters of a round's reason kept with the run
MAX_VIA = 16          # switches one pair is steered through
MAX_VIA_ADDRESSES = 64   # addresses one switch answers a trace from
MAX_ADDRESS = 64      # characters of one (an IPv6 address with a zone fits)


def _agree_round(meet: Rendezvous, number: int, planner: Any, world: int,
                 endpoints: list[Endpoint], per_round: float, why: list[str],
                 steering: list[dict[int, tuple[frozenset[str], ...]]],
                 topology: Any = None) -> Any:
    """An adaptive round's pairs, the same on every rank: rank 0 asks its planner and
    publishes them (or that the sweep is done), the others wait for them and check them
    (pairs of ranks in the world, each rank at most once). None: the sweep is done.
    ``steering`` gains the round's steering by client rank: the switches (each as the
    addresses it answers a trace from) its traced flow should cross."""
    import numpy as np

    if planner is not None:
        chosen = planner.next_round()
        record = {"done": True} if chosen is None else {
            "pairs": [[int(c), int(s)] for c, s in chosen.pairs], "why": chosen.why}
        if chosen is not None and topology is not None and any(getattr(chosen, "via", ())):
            answers: dict[str, list[str]] = {}
            for address, name in topology.addresses.items():
                answers.setdefault(name, []).append(address)
            # Only addresses a rank would take (a longer one names no router a trace sees).
            record["via"] = [[sorted(a for a in answers.get(s, []) if len(a) <= MAX_ADDRESS)
                              [:MAX_VIA_ADDRESSES] for s in v[:MAX_VIA]] for v in chosen.via]
        meet.set(f"plan/{number}", record)
    else:
        if meet.wait_for([f"plan/{number}"], time.monotonic() + per_round * 2):
            raise NetbenchError(f"rank 0 ({endpoints[0].name}) chose no round {number + 1} "
                                f"within {per_round * 2:g} s: the sweep cannot go on")
        record = meet.get(f"plan/{number}")
    if not isinstance(record, dict):
        raise NetbenchError(f"the rendezvous' plan of round {number + 1} is malformed: "
                            f"{_clip(record)}")
    if record.get("done") is True:
        return None
    pairs = record.get("pairs")
    flat = [r for p in pairs for r in p] if isinstance(pairs, list) and all(
        isinstance(p, list) and len(p) == 2 for p in pairs) else None
    if not flat or not all(isinstance(r, int) and not isinstance(r, bool) and 0 <= r < world
                           for r in flat) or len(set(flat)) != len(flat):
        raise NetbenchError(f"the rendezvous' plan of round {number + 1} is malformed (want "
                            f"pairs of distinct ranks 0..{world - 1}): {_clip(record)}")
    via = record.get("via", [])
    if not isinstance(via, list) or (via and len(via) != len(pairs)) or not all(
            isinstance(v, list) and len(v) <= MAX_VIA and all(
                isinstance(a, list) and len(a) <= MAX_VIA_ADDRESSES and all(
                    isinstance(x, str) and len(x) <= MAX_ADDRESS for x in a) for a in v)
            for v in via):
        raise NetbenchError(f"the rendezvous' plan of round {number + 1} is malformed (want "
                            f"'via': a list a pair of at most {MAX_VIA} switches, each at "
                            f"most {MAX_VIA_ADDRESSES} addresses): {_clip(record)}")
    steering.append({c: tuple(frozenset(a) for a in v if a)
                     for (c, _), v in zip(pairs, via)})
    why.append(str(record.get("why", ""))[:MAX_WHY])
    return np.array(pairs, dtype=int)


def _judged_rows(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """Each pair's row the planner judges it by: its first case's headline metric, or the
    failed row where that case failed."""
    found: dict[tuple[str, str], Mapping[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r.get("case_index") or 0):
        key = (str(row.get("host")), str(row.get("peer")))
        if key not in found and (row.get("status") == "failed" or (
                row.get("status") == "ok" and row.get("metric") == row.get("headline"))):
            found[key] = row
    return found


def _pair_values(rows: Sequence[Mapping[str, Any]], pairs: Any, endpoints: list[Endpoint],
                 ) -> tuple[list[float | None], str, list[Any]]:
    """Each pair's figure for the planner: its first case's headline metric (None where the
    pair failed), which way that figure is better, and its traced routers (the row's
    ``route``: one list a connection; None where untraced)."""
    judged = _judged_rows(rows)
    better = next((str(r["better"]) for r in judged.values()
                   if r.get("status") == "ok" and r.get("better")), "higher")
    picked = [judged.get((endpoints[c].name, endpoints[s].name)) for c, s in pairs.tolist()]
    return ([r.get("value") if r is not None and r.get("status") == "ok" else None
             for r in picked], better,
            [r.get("route") if r is not None else None for r in picked])


def _switch_paths(routes: Sequence[Any], pairs: Any, endpoints: list[Endpoint],
                  topology: Any) -> list[tuple[str, ...] | None]:
    """Each pair's traced routers as the topology's switch path (its addresses name them);
    None where the pair ran on several connections (several paths), a router did not answer
    or its address is not the topology's."""
    if topology is None:
        return [None] * len(routes)
    return [topology.path_of_route(route, endpoints[c].name, endpoints[s].name)
            for route, (c, s) in zip(routes, pairs.tolist())]


def _count_steered(facts: dict[str, Any], chosen: Any,
                   paths: Sequence[tuple[str, ...] | None] | None) -> None:
    """Kept with the run: how many pairs were steered through switches, and how many
    flows' traced paths crossed them (a miss runs where it hashed, judged on that path)."""
    kept = facts.setdefault("steered", {"asked": 0, "took": 0})
    for via, path in zip(getattr(chosen, "via", ()), paths or ()):
        if via:
            kept["asked"] += 1
            kept["took"] += int(path is not None and set(via) <= set(path))


def _keep_shares(rows: list[dict[str, Any]], measured: Sequence[Any],
                 endpoints: list[Endpoint]) -> None:
    """The rows of the case each pair was judged by get its flow's fair share (0 where
    unknown), so the stored verdict judges them as the planner did; a pair's other cases
    ran on other connections (other paths, other neighbours): 0, set aside."""
    share = {(endpoints[m.client].name, endpoints[m.server].name):
             (0.0 if math.isnan(m.share) else float(m.share)) for m in measured}
    judged = {key: row.get("case_index") for key, row in _judged_rows(rows).items()}
    for row in rows:
        key = (str(row.get("host")), str(row.get("peer")))
        row["fair_share"] = share.get(key, 0.0) \
            if key in judged and row.get("case_index") == judged[key] else 0.0


def _round(number: int, pairs: Any, offset: int, plan: Plan, endpoints: list[Endpoint],
           rank: int, runner: Any, base: Mapping[str, Any],
           result: SweepResult) -> list[dict[str, Any]] | None:
    """This rank's part of one round: its pair's cases when it is the client."""
    import numpy as np

    at = np.nonzero(pairs[:, 0] == rank)[0]
    if not len(at):
        return None
    server = endpoints[int(pairs[at[0], 1])]
    if server.rank in result.gone:
        return []                  # rank 0 writes the failed rows, with the reason
    runner.peer = f"{server.addr}:{server.port}"
    rows = []
    me = endpoints[rank]
    for i, planned in enumerate(plan.cases):
        index = (offset + int(at[0])) * len(plan.cases) + i
        for row in runner.measure(index, planned, base):
            row["host"], row["peer"], row["peer_device"] = me.name, server.name, \
                server.device or None
            rows.append(row)
    return rows


def _collect(meet: Rendezvous, number: int, pairs: Any, offset: int, plan: Plan,
             endpoints: list[Endpoint], runner: Any, base: Mapping[str, Any],
             result: SweepResult, per_round: float) -> list[dict[str, Any]]:
    """Rank 0: every client's rows of the round; who did not report is gone, its pairs
    failed rows that say so, and the round's verdict on who is gone is published."""
    alive = [e.rank for e in endpoints if e.rank not in result.gone]
    late = meet.wait_for([f"fin/{number}/{r}" for r in alive],
                         time.monotonic() + per_round)
    for key in late:
        gone = int(key.rsplit("/", 1)[1])
        result.gone[gone] = (f"{endpoints[gone].name} stopped answering in round "
                             f"{number + 1} (no word within {per_round:g} s)")
    meet.set(f"round/{number}", {str(r): why for r, why in result.gone.items()})
    rows: list[dict[str, Any]] = []
    for position, (client, server) in enumerate(pairs.tolist()):
        left = [r for r in (client, server) if r in result.gone]
        malformed = ""
        if client not in result.gone and meet.has(f"rows/{number}/{client}"):
            got = meet.get(f"rows/{number}/{client}")
            if isinstance(got, list) and all(isinstance(r, dict) for r in got):
                wanted = {(offset + position) * len(plan.cases) + i
                          for i in range(len(plan.cases))}
                malformed = _forged(got, endpoints[client].name, endpoints[server].name,
                                    wanted, base)
                if not malformed and (got or not left):
                    rows.extend(_decoded(r) for r in got)
                    continue
            else:
                malformed = f"its rows in the rendezvous are malformed: {_clip(got)}"
        why = "; ".join(result.gone[r] for r in left) or malformed or "no rows came back"
        for i, planned in enumerate(plan.cases):
            index = (offset + position) * len(plan.cases) + i
            for row in runner.status_rows(index, planned, base, "failed",
                                          f"pair {endpoints[client].name} -> "
                                          f"{endpoints[server].name}: {why}"):
                # Not rank 0's fingerprint on another host's row: that host's is unknown.
                row.update(dict.fromkeys(RUN_ENV), host=endpoints[client].name,
                           peer=endpoints[server].name,
                           peer_device=endpoints[server].device or None,
                           case_started_at=datetime.now(UTC), case_seconds=0.0)
                rows.append(row)
    return rows
