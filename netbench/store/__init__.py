"""The Parquet result store: one file per finished run, schema-versioned, append-only.

While a run is measured, each case lands in its own part file under ``<run>.parts/`` (one
small atomic write, whatever the run's length), so a run killed with -9 loses at most the case
in flight. When the run ends its parts are compacted into ``<run>.parquet`` (written
atomically, then the parts removed). ``pandas.read_parquet("results/")`` loads every run ever
stored, finished or interrupted: all files share one schema; temporary and lock files start
with "." so readers skip them. A parts folder beside its finished file is a compaction that
died after the rename: it is ignored, and swept by the next writer.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from stat import S_ISREG
from typing import Any

from netbench.api import json_safe
from netbench.errors import NetbenchError, UsageError
from netbench.textfile import (
    MAX_TOML_DEPTH,
    check_writable,
    nesting_depth,
    open_regular,
    read_text,
    temp_name,
    write_atomic,
)

SCHEMA_VERSION = 1
MAX_STORED_SAMPLES = 100_000   # beyond this, samples are thinned evenly; n_samples stays true

# (column, arrow type name) in file order; env_* columns flatten the fingerprint.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("schema_version", "int32"), ("run_id", "string"), ("label", "string"),
    ("started_at", "timestamp"), ("host", "string"), ("peer", "string"), ("suite", "string"),
    ("case_index", "int32"), ("benchmark", "string"), ("family", "string"), ("op", "string"),
    ("transport", "string"), ("device", "string"), ("msg_size", "int64"), ("params", "string"),
    ("metric", "string"), ("value", "float64"), ("unit", "string"), ("better", "string"),
    ("n_samples", "int64"), ("samples", "list<double>"), ("status", "string"),
    ("reason", "string"), ("env_kernel", "string"), ("env_os", "string"),
    ("env_cpu", "string"), ("env_nic", "string"), ("env_rdma_device", "string"),
    ("env_gpu", "string"), ("env_netbench", "string"), ("env_python", "string"),
    ("env_torch", "string"), ("env_nccl", "string"), ("env_rdma_core", "string"),
    ("env_json", "string"),
    # Added within schema 1 (files without them read them as missing): when each case
    # started and how long it took, harness included.
    ("case_started_at", "timestamp"), ("case_seconds", "float64"),
    # The unit's qualifier ("half RTT"): the unit column spells each quantity one way ("us").
    ("unit_note", "string"),
    # A fabric sweep's far end: the peer's device (host and peer name the pair).
    ("peer_device", "string"),
    # How busy the host was outside netbench while the case ran (netbench.env.hostload).
    ("load_other_cores", "float64"), ("load_own_cores", "float64"),
    ("load_steal_cores", "float64"), ("load_avg1", "float64"), ("load_cpu_mhz", "float64"),
    ("load_throttle_events", "int64"),
    # What a case's ``auto`` params became on this machine (data_plane=auto -> compiled, a
    # size of 0 -> the size measured), JSON; ``params`` stays as planned: the case's identity.
    # Rows of files written before the two were kept apart have no resolved (their params
    # hold both): see case_identity.
    ("resolved", "string"),
)


# The run's environment: the same on every row of one host's run, so a file keeps it once, in
# its footer (ENVS: {host: {column: value}}), and ``ResultStore.read`` joins it back. The
# env_nic / env_rdma_device / env_gpu columns stay on the rows: they name the case's device.
RUN_ENV = ("env_kernel", "env_os", "env_cpu", "env_netbench", "env_python", "env_torch",
           "env_nccl", "env_rdma_core", "env_json")
ENVS = "netbench_envs"
_UNIT_NOTE = re.compile(r"^\s*(?P<unit>[^()]+?)\s*\((?P<note>[^()]*)\)\s*$")


def arrow_schema() -> Any:
    import pyarrow as pa

    types = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
             "string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"),
             "list<double>": pa.list_(pa.float64())}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS],
                     metadata={"netbench_schema_version": str(SCHEMA_VERSION)})


class _RunFacts:
    """What a run's footer says about its rows, gathered row by row (an import streams)."""

    def __init__(self) -> None:
        self.first: Mapping[str, Any] | None = None
        self.hosts: set[str] = set()
        self.benchmarks: set[str] = set()
        self.ok_benchmarks: set[str] = set()
        self.by_case: dict[Any, set[str]] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        if self.first is None:
            self.first = {k: row.get(k) for k in ("run_id", "label", "started_at", "suite")}
        if row.get("host"):
            self.hosts.add(str(row.get("host")))
        self.benchmarks.add(str(row.get("benchmark")))
        if row.get("status") == "ok":
            self.ok_benchmarks.add(str(row.get("benchmark")))
        self.by_case.setdefault(row.get("case_index"), set()).add(str(row.get("status")))

    def metadata(self) -> dict[str, str]:
        """Run-level facts kept in the file footer, so a store's index needs no column reads."""
        first = self.first
        if first is None:
            return {"netbench_schema_version": str(SCHEMA_VERSION)}
        started = first.get("started_at")
        hosts = sorted(self.hosts)       # a run of several hosts (a fabric sweep): how many
        return {
            "netbench_schema_version": str(SCHEMA_VERSION),
            "netbench_run_id": str(first.get("run_id") or ""),
            "netbench_label": str(first.get("label") or ""),
            "netbench_started_at": started.isoformat() if hasattr(started, "isoformat")
            else str(started),
            "netbench_suite": str(first.get("suite") or ""),
            "netbench_host": hosts[0] if len(hosts) == 1 else
            f"{len(hosts)} hosts" if hosts else "",
            "netbench_benchmarks": json.dumps(sorted(self.benchmarks)),
            "netbench_ok_benchmarks": json.dumps(sorted(self.ok_benchmarks)),
            "netbench_cases": json.dumps(_by_status(self.by_case)),
        }


def _run_metadata(rows: list[Mapping[str, Any]]) -> dict[str, str]:
    facts = _RunFacts()
    for row in rows:
        facts.add(row)
    return facts.metadata()


def case_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Cases (not rows) by status: a case is failed if any of its rows failed, skipped if all
    were skipped, else ok."""
    by_case: dict[Any, set[str]] = {}
    for row in rows:
        by_case.setdefault(row.get("case_index"), set()).add(str(row.get("status")))
    return _by_status(by_case)


def _by_status(by_case: Mapping[Any, set[str]]) -> dict[str, int]:
    counts = {"ok": 0, "skipped": 0, "failed": 0}
    for statuses in by_case.values():
        status = "failed" if "failed" in statuses else "ok" if "ok" in statuses else "skipped"
        counts[status] += 1
    return counts


def params_json(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def params_of(text: Any) -> dict[str, Any]:
    """A row's ``params`` (or ``resolved``) as a dict: the one parser of them; {} where the
    text is missing or no JSON object."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def measured_params(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a row's case ran with on its machine: the planned params, ``auto`` resolved."""
    return {**params_of(row.get("params")), **params_of(row.get("resolved"))}


def keyed(*frames: Any) -> list[Any]:
    """``frames`` of rows with ``params`` made each row's case as compare, history and the
    fabric matrices match it: the params as planned (data_plane=auto on every machine,
    whatever auto became there). Rows of files written before params and resolved were
    kept apart (no ``resolved``: their params hold what auto became) can only be matched as
    measured, so where any frame holds one, every row of every frame is keyed by its params
    with resolved merged in (None frames pass through)."""
    present = [f for f in frames if f is not None and not f.empty]
    unsplit = any("resolved" not in f or f["resolved"].isna().any() for f in present)
    if not unsplit:
        return list(frames)
    cache: dict[tuple[Any, Any], Any] = {}

    def merged(params: Any, resolved: Any) -> Any:
        key = (params, resolved)
        if key not in cache:
            extra = params_of(resolved)
            cache[key] = params_json({**params_of(params), **extra}) if extra else params
        return cache[key]

    out = []
    for f in frames:
        if f is None or f.empty or "resolved" not in f:
            out.append(f)
            continue
        out.append(f.assign(params=[merged(p, r) for p, r in zip(f["params"],
                                                                 f["resolved"])]))
    return out


def thin(samples: Sequence[float], limit: int = MAX_STORED_SAMPLES) -> list[float]:
    if len(samples) <= limit:
        return [float(s) for s in samples]
    step = len(samples) / limit
    return [float(samples[int(i * step)]) for i in range(limit)]


def clean_value(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


PARTS = ".parts"           # suffix of a run's folder of part files while it is written
LOCK = ".lock"             # inside it: held (flock) by the process writing the run
# Inside it too: its writer had every case in and began compacting. Left behind by a writer
# killed mid-compaction, it tells the next reader or writer to finish the job (nothing is
# left to measure, so `--resume` has nothing to run).
COMPACTING = ".compacting"
RUN_ID = re.compile(r"[A-Za-z0-9_]{1,64}")
RUN_ID_RULE = "1 to 64 ASCII letters, digits or underscores (netbench makes 12 hex digits)"
CATALOG = "_catalog.parquet"   # the finished runs' footers, cached (ResultStore.runs)


def _conform(table: Any, schema: Any) -> Any:
    """A stored table in the current schema: columns added since it was written become
    nulls (a run written by an older netbench and resumed by this one)."""
    import pyarrow as pa

    columns = [table.column(f.name) if f.name in table.column_names
               else pa.nulls(len(table), type=f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema.remove_metadata())


def _table(rows: list[dict[str, Any]], metadata: Mapping[str, str]) -> Any:
    """Rows as a table, the run's environment moved from its rows into the footer."""
    import pyarrow as pa

    envs = _envs_of(rows)
    if envs:
        metadata = {**metadata, ENVS: json.dumps(envs, sort_keys=True)}
        blank = dict.fromkeys(RUN_ENV)
        rows = [{**r, **blank} for r in rows]
    rows = [{**r, **split_unit(r.get("unit"))} for r in rows]
    return pa.Table.from_pylist(rows, schema=arrow_schema().with_metadata(dict(metadata)))


def split_unit(unit: Any) -> dict[str, Any]:
    """The stored spelling: "us (half RTT)" -> unit "us", unit_note "half RTT"."""
    match = _UNIT_NOTE.match(unit) if isinstance(unit, str) else None
    return {"unit": match.group("unit"), "unit_note": match.group("note")} if match else \
        {"unit": unit}



def _envs_of(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """{host: {env column: value}} from the first row of each host that carries them."""
    envs: dict[str, dict[str, Any]] = {}
    for row in rows:
        host = str(row.get("host") or "")
        if host not in envs and any(row.get(c) is not None for c in RUN_ENV):
            envs[host] = {c: row.get(c) for c in RUN_ENV}
    return envs


def env_of(text: Any) -> dict[str, Any]:
    """A row's env_json (or a footer's JSON) as a dict; {} where none was recorded (missing,
    NaN, not JSON, not an object)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not isinstance(text, str) or not text:
        return {}
    try:
        env = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return env if isinstance(env, dict) else {}


def _footer_envs(metadata: Mapping[bytes, bytes] | None) -> dict[str, dict[str, Any]]:
    return env_of((metadata or {}).get(ENVS.encode()))


class RunWriter:
    """One run being written: ``append`` a case's rows (a new part file), ``close`` to
    compact. Holds the run's lock for its life, so no other process resumes or compacts it."""

    def __init__(self, store: ResultStore, path: Path, extra: Mapping[str, str]) -> None:
        import fcntl

        self.store, self.path, self.extra = store, path, dict(extra)
        self.parts = path.with_name(path.stem + PARTS)
        try:
            self.parts.mkdir(parents=True, exist_ok=True)
            self._lock = open(self.parts / LOCK, "a+")
        except OSError as exc:
            raise NetbenchError(f"cannot write {self.parts}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            raise NetbenchError(f"run {path.stem}: another live process is writing it "
                                f"({self.parts / LOCK} is locked); wait for it, or resume "
                                "it once that process has ended") from None
        self._lock.seek(0)
        self._lock.truncate()
        self._lock.write(str(os.getpid()))
        self._lock.flush()
        self.count = len(list(self.parts.glob("part-*.parquet")))

    def append(self, rows: Iterable[Mapping[str, Any]]) -> Path:
        """One case's rows as the next part file: a write that costs the same at case 1
        and at case 10,000."""
        import pyarrow.parquet as pq

        rows = [dict(r) for r in rows]
        self.count += 1
        part = self.parts / f"part-{self.count:06d}.parquet"
        table = _table(rows, {**_run_metadata(rows), **self.extra})
        write_atomic(part, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
        return part

    def close(self, compact: bool = True) -> None:
        """Compact the parts into the run's file (atomically), then remove them; release."""
        try:
            if compact:
                try:
                    (self.parts / COMPACTING).touch()
                except OSError:
                    pass            # the compaction below fails alike and says why
                self.store.compact(self.path, self.parts, self.extra)
                _remove_parts_dir(self.parts)
        finally:
            self._lock.close()


class ResultStore:
    """A results folder: ``<dir>/<started>-<run_id>.parquet``, one file per finished run,
    ``<dir>/<started>-<run_id>.parts/`` while it is written."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory)
        self._index: tuple[Any, Any] | None = None      # runs(), with what it was built from

    def check_writable(self) -> None:
        """Fail before measuring anything if results could not be kept; sweep what dead
        writers left (temp files, parts of runs whose compaction finished)."""
        if self.directory.exists() and not self.directory.is_dir():
            raise NetbenchError(f"results directory {self.directory} is a file; name a "
                                "directory with --results")
        check_writable(self.directory, "results directory")
        for parts in self._parts_dirs():
            # Parts beside their run's file: a compaction that died after its rename (they
            # are in the file already) or a resume of a finished run killed before its own
            # compaction (they are not): merging them in is right either way.
            if (parts / COMPACTING).exists() or \
                    parts.with_name(parts.name[:-len(PARTS)] + ".parquet").exists():
                self._finish_compaction(parts)

    def _finish_compaction(self, parts: Path) -> bool:
        """Compact a run whose writer is gone (killed while compacting, see COMPACTING):
        True if done. Best effort: where the store cannot be written, the parts stay and are
        read as they are."""
        import fcntl

        try:
            with open(parts / LOCK, "a+") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    return False                # a live writer: it compacts itself
                path = parts.with_name(parts.name[:-len(PARTS)] + ".parquet")
                self.compact(path, parts, _writer_extra(parts))
                _remove_parts_dir(parts)
        except Exception:    # noqa: BLE001 - a repair that cannot be made leaves things as are
            return False
        warnings.warn(f"finished compacting run {_run_of(path)} into {path} (its writer "
                      "ended before it could)", StoreWarning, stacklevel=3)
        return True

    def path_for(self, run_id: str, started_at: str) -> Path:
        """The run's file. The one place a run id becomes a path, so the one place it is
        checked: an imported row could name ``x.parts/../../elsewhere``."""
        check_run_id(run_id)
        stamp = started_at.replace(":", "").replace("-", "")[:15]
        if not re.fullmatch(r"[0-9T]{1,15}", stamp):
            raise UsageError(f"started_at {started_at[:60]!r} is not an ISO time "
                             "(2026-12-01T10:00:00+00:00)")
        return self.directory / f"{stamp}-{run_id}.parquet"

    def open_run(self, path: Path, extra: Mapping[str, str] | None = None) -> RunWriter:
        return RunWriter(self, path, extra or {})

    def stored(self, path: Path) -> tuple[int, dict[str, int]] | None:
        """What a run's file holds: rows, and cases by status (from its footer); None where
        it has no readable file (its parts were never compacted)."""
        import pyarrow.parquet as pq

        try:
            meta = pq.read_metadata(path)
            cases = json.loads((meta.metadata or {})[b"netbench_cases"])
            return meta.num_rows, {s: int(cases.get(s, 0)) for s in ("ok", "skipped", "failed")}
        except Exception:       # noqa: BLE001 - missing, unreadable or foreign: not known
            return None

    def write_run(self, path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
        """Atomically write one whole run's file (imports, tools)."""
        import pyarrow.parquet as pq

        rows = [dict(r) for r in rows]
        table = _table(rows, _run_metadata(rows))
        write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))

    def compact(self, path: Path, parts: Path, extra: Mapping[str, str]) -> None:
        """A run's part files (and an earlier compacted file, when a finished run was
        resumed) into one file; a corrupt part is skipped with a warning naming it."""
        from concurrent.futures import ThreadPoolExecutor

        import pyarrow as pa
        import pyarrow.compute as pc
        import pyarrow.parquet as pq

        def read(part: Path) -> Any:
            try:
                return pq.read_table(part)
            except Exception as exc:
                return exc

        files = sorted(parts.glob("part-*.parquet"))
        with ThreadPoolExecutor(max_workers=8) as pool:      # pyarrow reads without the GIL
            read_parts = list(pool.map(read, files))
        tables = [pq.read_table(path)] if path.exists() else []
        for part, table in zip(files, read_parts):
            if isinstance(table, Exception):
                warnings.warn(f"skipping {part}: not a readable Parquet file ({table}); "
                              "its case is not stored", StoreWarning, stacklevel=2)
            else:
                tables.append(table)
        schema = arrow_schema()
        envs: dict[str, dict[str, Any]] = {}
        for t in tables:                   # later parts (a resume's) describe the run last
            envs.update(_footer_envs(t.schema.metadata))
        tables = [_conform(t, schema) for t in tables]
        # A case measured again (a resumed run redoing an interrupted case): the latest wins.
        latest: dict[Any, int] = {}
        for number, table in enumerate(tables):
            for case in table.column("case_index").to_pylist():
                latest[case] = number
        kept = [t.filter(pa.array([latest[c] == number
                                   for c in t.column("case_index").to_pylist()]))
                for number, t in enumerate(tables)]
        table = pa.concat_tables(kept) if kept else schema.empty_table()
        table = table.take(pc.sort_indices(table, [("case_index", "ascending")]))
        facts = table.select(["run_id", "label", "started_at", "suite", "host", "benchmark",
                              "status", "case_index"]).to_pylist()
        footer = {**_run_metadata(facts), **extra}
        if envs:
            footer[ENVS] = json.dumps(envs, sort_keys=True)
        table = table.replace_schema_metadata(footer)
        write_atomic(path, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
        for part in parts.glob("part-*.parquet"):
            part.unlink(missing_ok=True)
        for leftover in parts.glob(".*.tmp"):
            leftover.unlink(missing_ok=True)

    def _parts_dirs(self) -> list[Path]:
        try:
            return sorted(p for p in self.directory.glob("*" + PARTS) if p.is_dir()
                          and not p.name.startswith((".", "_")))
        except OSError:
            return []

    def files(self, run_ids: Iterable[str] | None = None) -> list[Path]:
        """Finished runs' files, and the part files of runs still (or never again) being
        written: every file that holds rows (of the given runs only, if any are given)."""
        listing = self._listing()
        if run_ids is not None:
            wanted = set(run_ids)
            listing = [(n, st) for n, st in listing if _run_of_name(n) in wanted]
        return [self.directory / name for name, _ in listing]

    def _listing(self) -> list[tuple[str, tuple[int, int]]]:
        """Every file that holds rows, by its name in the store ("<run>.parquet" or
        "<run>.parts/part-N.parquet"), with its (size, mtime): one directory scan, no stat
        per file and no Path per entry (a store of 10,000 runs lists in tens of ms)."""
        def scan(folder: Path, keep: Any) -> list[tuple[str, tuple[int, int]]]:
            try:
                with os.scandir(folder) as entries:
                    out = []
                    for entry in entries:
                        if keep(entry):
                            st = entry.stat()
                            out.append((entry.name, (st.st_size, st.st_mtime_ns),
                                        (st.st_dev, st.st_ino)))
            except OSError:
                return []
            # A second name for one file (a hard link, a symlink in the store) is one run,
            # read once: the name that sorts first stands for it.
            seen: set[tuple[int, int]] = set()
            kept = []
            for name, stat, inode in sorted(out):
                if inode not in seen:
                    seen.add(inode)
                    kept.append((name, stat))
            return kept

        if self.directory.exists() and not self.directory.is_dir():
            raise NetbenchError(f"results directory {self.directory} is a file, not a store "
                                "(a folder of run files); name a directory with --results")
        if os.access(self.directory, os.W_OK):
            for parts in self._parts_dirs():     # a writer killed while compacting
                if (parts / COMPACTING).exists():
                    self._finish_compaction(parts)
        done = scan(self.directory, lambda e: e.name.endswith(".parquet")
                    and not e.name.startswith((".", "_")) and e.is_file())
        names = {name[:-len(".parquet")] for name, _ in done}
        listing = list(done)
        for folder in self._parts_dirs():
            if folder.name[:-len(PARTS)] in names:
                continue                 # a finished run's leftover parts: not read
            listing += [(f"{folder.name}/{name}", stat) for name, stat in scan(
                folder, lambda e: e.name.startswith("part-") and e.name.endswith(".parquet")
                and e.is_file())]            # a FIFO would block the reader
        return listing

    def runs(self) -> Any:
        """One row per stored run (path, run_id, label, started_at, suite, host, benchmarks,
        ok_benchmarks, ok/skipped/failed case counts, state), from the files' footers: cheap
        even for a large store. ``state``: finished, interrupted (parts only, no writer
        alive) or running (its writer holds the lock)."""
        import pandas as pd

        listing = self._listing()
        # The index is a function of the files (name, size, mtime) and of which runs have a
        # live writer: while neither changed, a command asking again gets it without work.
        signature = (tuple(listing), tuple(_locked(d) for d in self._parts_dirs()))
        if self._index is not None and self._index[0] == signature:
            return self._index[1].copy()
        merged: dict[str, dict[str, Any]] = {}
        cached = self._catalog()
        fresh: dict[str, tuple[int, int, str]] = {}
        missed = [name for name, stat in listing
                  if cached.get(name) is None or cached[name][:2] != stat]
        footers = self._footers(missed)
        for name, stat in listing:
            path = self.directory / name
            hit = cached.get(name)
            if hit is not None and hit[:2] == stat:
                info = env_of(hit[2])
            else:
                meta = footers[name]
                if isinstance(meta, Exception):
                    warnings.warn(f"skipping {path}: not a readable Parquet file ({meta})",
                                  StoreWarning, stacklevel=2)
                    continue
                info = {k.decode(errors="replace"): v.decode(errors="replace")
                        for k, v in meta.items() if k.startswith(b"netbench_") and
                        k != ENVS.encode()}
                if "netbench_run_id" not in info or "netbench_cases" not in info:
                    info = self._metadata_from_columns(path) or {}
                    if "netbench_run_id" not in info:
                        continue
            facts = _footer_facts(info)
            if facts is None:
                warnings.warn(f"skipping {path}: its footer is not a netbench run's (run id, "
                              "start, case counts)", StoreWarning, stacklevel=2)
                continue
            if not path.parent.name.endswith(PARTS):
                fresh[name] = (*stat, hit[2] if hit is not None and hit[:2] == stat
                               else json.dumps(info))
            cases, started, benchmarks, ok_benchmarks = facts
            part = path.parent.name.endswith(PARTS)
            run = merged.get(info["netbench_run_id"])
            if run is None:
                state = "finished"
                if part:
                    state = "running" if _locked(path.parent) else "finished" if (
                        path.parent / COMPACTING).exists() else "interrupted"
                run = merged[info["netbench_run_id"]] = {
                    "path": str(path.parent if part else path),
                    "run_id": info["netbench_run_id"],
                    "label": info.get("netbench_label", ""),
                    "started_at": started,
                    "suite": info.get("netbench_suite", ""),
                    "host": info.get("netbench_host", ""), "benchmarks": set(),
                    "ok_benchmarks": set(), "ok": 0, "skipped": 0, "failed": 0,
                    "state": state, "plan": info.get("netbench_plan", "")}
            run["benchmarks"] |= benchmarks
            run["ok_benchmarks"] |= ok_benchmarks
            for key in ("ok", "skipped", "failed"):
                run[key] += cases[key]
        if set(fresh) != set(cached) or any(cached[k][:2] != v[:2] for k, v in fresh.items()):
            self._save_catalog(fresh)
        index = [{**r, "benchmarks": sorted(r["benchmarks"]),
                  "ok_benchmarks": sorted(r["ok_benchmarks"])} for r in merged.values()]
        columns = ["path", "run_id", "label", "started_at", "suite", "host", "benchmarks",
                   "ok_benchmarks", "ok", "skipped", "failed", "state", "plan"]
        frame = pd.DataFrame(index, columns=columns)
        frame = frame.sort_values("started_at", ignore_index=True) if index else frame
        self._index = (signature, frame)
        return frame.copy()

    def _footers(self, names: list[str]) -> dict[str, Any]:
        """The footer metadata of these files (or the error reading one). Opening a Parquet
        file costs ~0.4 ms of the interpreter's time, so a cold cache (10,000 runs copied
        in) is read by worker processes, not threads."""
        paths = [str(self.directory / n) for n in names]
        if len(paths) < 512:
            return dict(zip(names, map(_read_footer, paths)))
        from concurrent.futures import ProcessPoolExecutor

        workers = max(1, min(8, len(os.sched_getaffinity(0))))
        try:
            with ProcessPoolExecutor(max_workers=workers) as pool:
                return dict(zip(names, pool.map(_read_footer, paths, chunksize=256)))
        except (OSError, RuntimeError):        # no processes to be had: read them here
            return dict(zip(names, map(_read_footer, paths)))

    def _scan(self, paths: list[Path], columns: list[str] | None,
              where: Mapping[str, list[Any]], known: set[str] | None = None) -> Any:
        """Files as one dataset scan (threads, column and row filters pushed down; columns a
        file predates read as nulls). Raises where a file cannot be scanned, so the caller
        reads file by file and names the bad one."""
        import pyarrow.dataset as ds
        import pyarrow.parquet as pq

        known = set(self._catalog()) if known is None else known
        checked = []
        for path in paths:               # a foreign Parquet file would scan as null rows
            if path.name not in known:
                names = pq.read_schema(path).names
                if "metric" not in names or "schema_version" not in names:
                    warnings.warn(f"skipping {path}: not a netbench result file",
                                  StoreWarning, stacklevel=4)
                    continue
            checked.append(path)
        dataset = ds.dataset([str(p) for p in checked], format="parquet",
                             schema=arrow_schema().remove_metadata())
        expr = None
        for key, values in where.items():
            term = ds.field(key).isin(values)
            expr = term if expr is None else expr & term
        return dataset.to_table(columns=columns, filter=expr)

    def _catalog(self) -> dict[str, tuple[int, int, str]]:
        """The footers of finished runs' files, cached in ``_catalog.parquet`` (the leading
        underscore keeps pandas from reading it as a run): name -> (size, mtime, facts). Only
        a cache: an entry whose file changed, or a file without one, is read afresh."""
        import pyarrow.parquet as pq

        try:
            if not S_ISREG(os.stat(self.directory / CATALOG).st_mode):
                return {}         # a FIFO or a device there: never read
            table = pq.read_table(self.directory / CATALOG).to_pydict()
            return {n: (int(z), int(m), str(i)) for n, z, m, i in zip(
                table["name"], table["size"], table["mtime_ns"], table["facts"])}
        except Exception:         # none yet, or unreadable: every footer is read once more
            return {}

    def _save_catalog(self, entries: Mapping[str, tuple[int, int, str]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not os.access(self.directory, os.W_OK):
            return                # a read-only store: the footers are read each time
        names = sorted(entries)
        table = pa.table({"name": names, "size": [entries[n][0] for n in names],
                          "mtime_ns": [entries[n][1] for n in names],
                          "facts": [entries[n][2] for n in names]})
        try:
            write_atomic(self.directory / CATALOG,
                         lambda tmp: pq.write_table(table, tmp, compression="zstd"))
        except (NetbenchError, OSError):
            pass                  # only a cache: a reader never fails for want of it

    def _metadata_from_columns(self, path: Path) -> dict[str, str] | None:
        """Files written before run metadata lived in the footer."""
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path, columns=["run_id", "label", "started_at", "suite",
                                                 "host", "benchmark", "status", "case_index"])
        except Exception:
            warnings.warn(f"skipping {path}: not a netbench result file", StoreWarning,
                          stacklevel=3)
            return None
        return _run_metadata(table.to_pylist())

    def read(self, run_ids: Iterable[str] | None = None,
             columns: list[str] | None = None,
             where: Mapping[str, Iterable[Any]] | None = None) -> Any:
        """Runs as one DataFrame (all, or the given run ids; all columns, or some; ``where``:
        only rows whose column holds one of the values, pushed down into the Parquet scan).
        Many files are scanned as one pyarrow dataset; a corrupt or foreign file is skipped
        with a warning naming it. What the files keep once or apart is joined back: the run's
        environment (RUN_ENV columns, from the footers) and each unit with its qualifier
        ("us (half RTT)", as tables print it; ``load`` keeps them apart)."""
        paths = self.files(run_ids)
        where = {k: list(v) for k, v in (where or {}).items()}
        env = [c for c in RUN_ENV if columns is None or c in columns]
        unit = columns is None or "unit" in columns
        asked = columns
        if columns is not None:            # the joins need each row's run, host, unit note
            need = [*(("run_id", "host") if env else ()), *(("unit_note",) if unit else ())]
            columns = [*columns, *(c for c in need if c not in columns)]
        frame = self._read(paths, columns, where)
        if env and len(frame):
            self._join_envs(frame, paths, env)
        if unit and len(frame) and "unit_note" in frame:
            noted = frame["unit_note"].notna() & ~frame["unit"].astype(str).str.contains(
                "(", regex=False)                  # a row written already joined stays
            if noted.any():
                frame.loc[noted, "unit"] = (frame.loc[noted, "unit"].astype(str) + " ("
                                            + frame.loc[noted, "unit_note"].astype(str) + ")")
        return frame[asked] if asked is not None and list(frame.columns) != asked else frame

    def _join_envs(self, frame: Any, paths: list[Path], env: list[str]) -> None:
        """Fill the run-level environment columns from the files' footers (rows of files
        written before it moved there keep their own)."""
        from concurrent.futures import ThreadPoolExecutor

        import pyarrow.parquet as pq

        def footer(path: Path) -> tuple[str, dict[str, dict[str, Any]]]:
            try:
                return _run_of(path), _footer_envs(pq.read_schema(path).metadata)
            except Exception:
                return _run_of(path), {}

        runs = set(frame["run_id"].dropna().unique())
        paths = [p for p in paths if _run_of(p) in runs]
        with ThreadPoolExecutor(max_workers=8) as pool:
            footers = list(pool.map(footer, paths))
        by_key: dict[str, dict[str, Any]] = {}
        for run_id, envs in footers:
            for host, values in envs.items():
                by_key[f"{run_id}\0{host}"] = values
        if not by_key:
            return
        keys = frame["run_id"].astype(str) + "\0" + frame["host"].fillna("").astype(str)
        for column in env:
            joined = keys.map({k: v.get(column) for k, v in by_key.items()})
            frame[column] = frame[column].where(frame[column].notna(), joined) \
                if column in frame else joined

    def _read(self, paths: list[Path], columns: list[str] | None,
              where: Mapping[str, list[Any]]) -> Any:
        import pandas as pd

        known = set(self._catalog())
        if len(paths) > 16:
            try:
                return self._scan(paths, columns, where, known).to_pandas()
            except Exception:
                pass                 # one file cannot be read: file by file, to name it
        frames = []
        for path in paths:
            try:
                frames.append(self._scan([path], columns, where, known).to_pandas())
            except Exception as exc:
                warnings.warn(f"skipping {path}: not a readable Parquet file ({exc})",
                              StoreWarning, stacklevel=3)
        if not frames:
            return pd.DataFrame(columns=columns or [name for name, _ in COLUMNS])
        return pd.concat(frames, ignore_index=True)


def load(path: str | os.PathLike[str] = "results", run_ids: Iterable[str] | None = None,
         params: bool = True) -> Any:
    """The store as a tidy DataFrame, for pandas users: counts and sizes as nullable integers
    (Int64, not float64 with NaN), a run without a label as missing (not ""), one spelling
    per unit with the qualifier in ``unit_note`` ("us (half RTT)" -> "us", "half RTT"),
    and (``params``) every param as planned as its own ``param_<name>`` column, what an
    ``auto`` one became as ``resolved_<name>``. ``pandas.read_parquet`` still reads the raw
    files; this is the same rows, ready to group."""
    import pandas as pd

    store = ResultStore(path)
    rows = store.read(run_ids)
    for column in ("schema_version", "case_index", "msg_size", "n_samples"):
        rows[column] = pd.array([None if _missing(v) else int(v) for v in rows[column]],
                                dtype="Int64")
    rows["label"] = rows["label"].map(lambda v: pd.NA if _missing(v) or v == "" else v)
    split = [split_unit(u) for u in rows["unit"]]       # read() joined them for display
    rows["unit_note"] = [p.get("unit_note", pd.NA) for p in split]
    rows["unit"] = [p["unit"] for p in split]
    if params:
        for column, prefix in (("params", "param_"), ("resolved", "resolved_")):
            if column not in rows:
                continue
            parsed = {text: params_of(text) for text in set(rows[column].dropna())}
            for key in sorted({k for p in parsed.values() for k in p}):
                rows[f"{prefix}{key}"] = [parsed[t].get(key) if isinstance(t, str) else None
                                          for t in rows[column]]
    return rows


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(value != value)
    except (TypeError, ValueError):
        return False


def _footer_facts(info: Mapping[str, Any]) -> tuple[dict[str, int], Any, set[str],
                                                   set[str]] | None:
    """A footer's case counts, start (in UTC), benchmarks and those that measured something,
    or None where they are not what netbench writes (a forged or foreign file): a reader
    skips that file rather than fail on it."""
    import pandas as pd

    try:
        cases = json.loads(info["netbench_cases"])
        counts = {k: cases[k] for k in ("ok", "skipped", "failed")}
        started = pd.Timestamp(info["netbench_started_at"])
        lists = [json.loads(info.get(k, "[]"))
                 for k in ("netbench_benchmarks", "netbench_ok_benchmarks")]
    except (KeyError, TypeError, ValueError, RecursionError):
        return None
    if not isinstance(info.get("netbench_run_id"), str) or started is pd.NaT or \
            not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                    for v in counts.values()) or \
            not all(isinstance(b, list) and all(isinstance(x, str) for x in b) for b in lists):
        return None
    # One zone for every run, so runs sort: a footer without one is UTC, as netbench writes.
    started = started.tz_localize("UTC") if started.tzinfo is None else \
        started.tz_convert("UTC")
    return counts, started, set(lists[0]), set(lists[1])


def _read_footer(path: str) -> Any:
    """A file's footer metadata, or the exception reading it (picklable, for workers)."""
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(path).metadata or {}
    except Exception as exc:
        return ValueError(str(exc))


def _run_of_name(name: str) -> str:
    """The run id of a file named as ``_listing`` names it."""
    first = name.split("/", 1)[0]
    stem = first[:-len(PARTS)] if first.endswith(PARTS) else first[:-len(".parquet")]
    return stem.rsplit("-", 1)[-1]


def _run_of(path: Path) -> str:
    """The run id a file holds rows of: ``<stamp>-<id>.parquet``, or a part file under
    ``<stamp>-<id>.parts/``."""
    parts = path.parent.name.endswith(PARTS)
    return _run_of_name(f"{path.parent.name}/{path.name}" if parts else path.name)


def _locked(parts: Path) -> bool:
    """Is a live process writing this run (holding its lock)?"""
    import fcntl

    try:               # non-blocking: a FIFO in the lock's place would wait for a writer
        fd = os.open(parts / LOCK, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if not S_ISREG(os.fstat(fd).st_mode):
            return False               # nobody can hold that
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            return True
        return False
    finally:
        os.close(fd)


class StoreWarning(UserWarning):
    """Something in the store was skipped or repaired; the CLI prints it as one line."""


def check_run_id(run_id: Any) -> str:
    """A run id that can name a file in the store, or a UsageError saying what is accepted."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        shown = repr(run_id)[:80] if isinstance(run_id, str) else \
            f"{type(run_id).__name__} {str(run_id)[:60]!r}"
        raise UsageError(f"run_id {shown} cannot name a run's file: a run id is {RUN_ID_RULE}")
    return run_id


def _remove_parts_dir(parts: Path) -> None:
    """A compacted run's parts folder, emptied of what netbench put there, then removed."""
    for leftover in (*parts.glob("part-*.parquet"), parts / COMPACTING, parts / LOCK):
        leftover.unlink(missing_ok=True)
    try:
        parts.rmdir()
    except OSError:
        pass                    # something else in there: left as it is


_DERIVED = frozenset(_RunFacts().metadata()) | {
    "netbench_run_id", "netbench_label", "netbench_started_at", "netbench_suite",
    "netbench_host", "netbench_benchmarks", "netbench_ok_benchmarks", "netbench_cases", ENVS}


def _writer_extra(parts: Path) -> dict[str, str]:
    """What a dead writer put in every footer beside the rows' facts (the plan's
    fingerprint, its resumes), read back from its newest readable part."""
    for part in sorted(parts.glob("part-*.parquet"), reverse=True):
        meta = _read_footer(str(part))
        if not isinstance(meta, Exception):
            return {k.decode(): v.decode() for k, v in meta.items()
                    if k.decode().startswith("netbench_") and k.decode() not in _DERIVED}
    return {}


def _jsonable(value: Any) -> Any:
    return value.isoformat() if hasattr(value, "isoformat") else value


class JsonlStore:
    """Rows as JSON lines in one file, for places where pyarrow cannot or should not load (the
    soft-RoCE VM, where Python runs ~50x slower). ``netbench import`` turns it into Parquet."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.file = Path(path)
        self._earlier = ""            # rows of earlier runs in the file: kept, never lost

    def check_writable(self) -> None:
        if self.file.is_dir():
            raise NetbenchError(f"--jsonl {self.file} is a directory; name a file")
        check_writable(self.file.parent, "the folder of")
        if self.file.exists():
            self._earlier = read_text(self.file, "rows", limit=None)
            if self._earlier and not self._earlier.endswith("\n"):
                self._earlier += "\n"

    def path_for(self, run_id: str, started_at: str) -> Path:
        return self.file

    def open_run(self, path: Path, extra: Mapping[str, str] | None = None) -> Any:
        return _Rewriter(self, path)

    def write_run(self, path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
        def write(tmp: Path) -> None:
            with open(tmp, "w") as f:
                f.write(self._earlier)            # this run's rows follow the earlier runs'
                for row in rows:
                    f.write(json.dumps(json_safe({k: _jsonable(v) for k, v in row.items()}),
                                       allow_nan=False) + "\n")

        write_atomic(path, write)


_PYTHON_TYPES = {"int32": int, "int64": int, "float64": (int, float), "string": str}


_INT_BITS = {"int32": 32, "int64": 64}


def _a_double(x: Any) -> bool:
    """A JSON number a float64 column can hold (an integer of 400 digits is none)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return False
    try:
        float(x)
    except OverflowError:
        return False
    return True


def _mistyped(row: Mapping[str, Any]) -> str | None:
    """What in an imported row does not fit its column's type, or None."""
    for name, kind in COLUMNS:
        value = row.get(name)
        if value is None or kind == "timestamp":
            continue
        if kind == "list<double>":
            if not isinstance(value, list) or not all(_a_double(x) for x in value):
                return f"{name} must be a list of numbers, not {str(value)[:60]!r}"
            continue
        want = _PYTHON_TYPES[kind]
        if isinstance(value, bool) or not isinstance(value, want):
            return f"{name} must be {kind}, not {type(value).__name__} {str(value)[:60]!r}"
        bits = _INT_BITS.get(kind)
        if (bits and not -(1 << bits - 1) <= value < 1 << bits - 1) or (
                kind == "float64" and not _a_double(value)):
            return f"{name} must fit {kind}, not {str(value)[:60]}"
    if row.get("status") not in ("ok", "skipped", "failed"):
        return f"status must be ok, skipped or failed, not {row.get('status')!r}"
    return None


IMPORT_BATCH_BYTES = 1 << 20    # rows of JSON parsed, then written as one row group
MAX_ROW_BYTES = 16 << 20        # one row: 100,000 stored samples are ~2 MB of JSON


def _import_row(line: bytes, where: str, names: set[str]) -> dict[str, Any]:
    """One JSON line as a row of the schema, or a NetbenchError naming file and line."""
    from datetime import datetime

    try:
        row = json.loads(line)
        row["started_at"] = datetime.fromisoformat(row["started_at"])
    except (ValueError, KeyError, TypeError, RecursionError, AttributeError):
        raise NetbenchError(f"{where}: not a netbench result row") from None
    if row.get("case_started_at") is not None:
        try:
            row["case_started_at"] = datetime.fromisoformat(row["case_started_at"])
        except (ValueError, TypeError):
            raise NetbenchError(f"{where}: case_started_at must be an ISO "
                                f"time, not {str(row['case_started_at'])[:60]!r}") from None
    unknown = set(row) - names
    if unknown or row.get("schema_version") != SCHEMA_VERSION:
        raise NetbenchError(f"{where}: not a schema-{SCHEMA_VERSION} row "
                            f"(unknown keys: {', '.join(sorted(unknown)) or 'none'})")
    bad = _mistyped(row) or _unparsable(row)
    if bad:
        raise NetbenchError(f"{where}: {bad}")
    return {**dict.fromkeys(names), **row}


def _unparsable(row: Mapping[str, Any]) -> str | None:
    """What in an imported row's JSON columns every reader could not parse, or None: params
    resolved and env_json are read back as JSON objects (a deep one would exhaust a reader's
    stack)."""
    for column in ("params", "resolved", "env_json"):
        text = row.get(column)
        if text is None or text == "":
            continue
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):
            value = None
        if not isinstance(value, dict) or nesting_depth(value) > MAX_TOML_DEPTH:
            return (f"{column} must be the text of a JSON object nested at most "
                    f"{MAX_TOML_DEPTH} deep, not {str(text)[:60]!r}")
    return None


MAX_OPEN_IMPORTS = 32     # runs of one import written through an open file; the rest in batches


class _ImportedRun:
    """One run of an import, written batch by batch. The first MAX_OPEN_IMPORTS runs stream
    into their temp file through an open writer; later ones (a JSON-lines file may hold
    thousands of runs, and descriptors are few) put each batch in a file of a temp folder,
    copied into their temp file batch by batch at the end. ``import_jsonl`` renames the temp
    files into place."""

    def __init__(self, path: Path) -> None:
        self.path, self.tmp = path, temp_name(path)
        self.batches = temp_name(path, ".import")
        self.rows: list[dict[str, Any]] = []
        self.facts, self.envs = _RunFacts(), {}
        self.writer: Any = None
        self.written = 0                      # batch files

    def _table(self) -> Any:
        import pyarrow as pa

        for host, env in _envs_of(self.rows).items():
            self.envs.setdefault(host, env)          # the first row of a host that has one
        blank = dict.fromkeys(RUN_ENV) if self.envs else {}
        rows = [{**r, **blank, **split_unit(r.get("unit"))} for r in self.rows]
        self.rows = []
        return pa.Table.from_pylist(rows, schema=arrow_schema())

    def flush(self, may_open: bool) -> None:
        import pyarrow.parquet as pq

        if not self.rows:
            return
        table = self._table()
        if self.writer is None and not self.written and may_open:
            # No Arrow schema in the file: it would be the one known now, without the footer
            # added at the end (readers take it from there); the types round-trip without it.
            self.writer = pq.ParquetWriter(self.tmp, table.schema, compression="zstd",
                                           store_schema=False)
        if self.writer is not None:
            self.writer.write_table(table)
        else:
            self.batches.mkdir(exist_ok=True)
            self.written += 1
            pq.write_table(table, self.batches / f"{self.written:06d}.parquet")

    def finish(self) -> None:
        import pyarrow.parquet as pq

        footer = self.facts.metadata()
        last = self._table() if self.rows else None
        if self.envs:
            footer[ENVS] = json.dumps(self.envs, sort_keys=True)
        if self.writer is not None:
            if last is not None:
                self.writer.write_table(last)
            self.writer.add_key_value_metadata(footer)
            self.writer.close()
            self.writer = None
            return
        schema = arrow_schema().with_metadata(footer)
        with pq.ParquetWriter(self.tmp, schema, compression="zstd") as writer:
            for number in range(1, self.written + 1):
                writer.write_table(pq.read_table(self.batches / f"{number:06d}.parquet"))
            if last is not None:
                writer.write_table(last)
        self._drop_batches()

    def _drop_batches(self) -> None:
        if self.written:
            import shutil

            shutil.rmtree(self.batches, ignore_errors=True)

    def discard(self) -> None:
        try:
            if self.writer is not None:
                self.writer.close()
        except Exception:    # noqa: BLE001 - only cleaning up after the error being raised
            pass
        self._drop_batches()
        self.tmp.unlink(missing_ok=True)


def _check_replaceable(run: _ImportedRun) -> None:
    """An import replaces a stored run only with one holding every case it holds: the same
    JSON-lines file is imported again and again (it keeps every earlier run), and a file
    holding less of a run, or another run under its id, must not cost stored rows."""
    import pyarrow.parquet as pq

    run_id = _run_of(run.path)
    if run.path.with_name(run.path.stem + PARTS).is_dir():
        raise NetbenchError(f"run {run_id} is being written in this store, or was "
                            f"interrupted ({run.path.stem + PARTS}); import it elsewhere")
    if not run.path.exists():
        return
    try:
        stored = set(pq.read_table(run.path, columns=["case_index"]).column(0).to_pylist())
    except Exception:        # noqa: BLE001 - an unreadable file holds nothing to keep
        return
    missing = stored - set(run.facts.by_case)
    if missing:
        raise NetbenchError(f"run {run_id} is already stored in {run.path}, and this import "
                            f"lacks {len(missing)} of its {len(stored)} cases; importing it "
                            "would lose them: import into another --results, or remove "
                            "that file first")


def import_jsonl(source: str | os.PathLike[str], store: ResultStore) -> list[Path]:
    """Store rows written by JsonlStore as Parquet runs (one file per run id). The file is
    streamed (memory bounded by a batch, whatever its size) and must be a regular file (a FIFO
    would block, /dev/zero never ends). Nothing is stored unless every row is valid: runs are
    written to temp files and renamed into place only once the last line has been read."""
    source = Path(source)
    names = {name for name, _ in COLUMNS}
    runs: dict[str, _ImportedRun] = {}
    writable, buffered = False, 0
    try:
        with open_regular(source, "rows") as f:
            number = 0
            while True:
                line = f.readline(MAX_ROW_BYTES + 1)
                if not line:
                    break
                number += 1
                if len(line) > MAX_ROW_BYTES:
                    raise NetbenchError(f"{source}:{number}: a line longer than "
                                        f"{MAX_ROW_BYTES >> 20} MiB: not a netbench result row")
                if not line.strip():
                    continue
                row = _import_row(line, f"{source}:{number}", names)
                run = runs.get(row["run_id"]) if isinstance(row["run_id"], str) else None
                if run is None:
                    try:
                        path = store.path_for(row["run_id"], row["started_at"].isoformat())
                    except UsageError as exc:
                        raise UsageError(f"{source}:{number}: {exc}") from None
                    run = runs[row["run_id"]] = _ImportedRun(path)
                run.rows.append(row)
                run.facts.add(row)
                buffered += len(line)
                if buffered > IMPORT_BATCH_BYTES:
                    if not writable:
                        store.check_writable()
                        writable = True
                    opened = sum(each.writer is not None for each in runs.values())
                    for each in runs.values():
                        had = each.writer is not None
                        each.flush(opened < MAX_OPEN_IMPORTS)
                        opened += each.writer is not None and not had
                    buffered = 0
        if not runs:
            raise NetbenchError(f"{source}: no rows to import")
        for run in runs.values():
            _check_replaceable(run)
        if not writable:
            store.check_writable()
        for run in runs.values():
            run.finish()
    except OSError as exc:            # reading the source, or writing the store
        for run in runs.values():
            run.discard()
        raise NetbenchError(f"cannot import {source} into {store.directory}: "
                            f"{exc.strerror or exc}") from None
    except BaseException:
        for run in runs.values():
            run.discard()
        raise
    written = []
    for run in runs.values():
        try:
            os.replace(run.tmp, run.path)
        except OSError as exc:
            for rest in runs.values():
                rest.tmp.unlink(missing_ok=True)
            raise NetbenchError(f"cannot write {run.path}: {exc.strerror or exc}") from None
        written.append(run.path)
    return written


class _Rewriter:
    """A run in a one-file store (JSON lines): every case rewrites the file atomically. Runs
    there are small (the soft-RoCE VM's), so the cost stays below a case's own."""

    def __init__(self, store: Any, path: Path) -> None:
        self.store, self.path, self.rows = store, path, []

    def append(self, rows: Iterable[Mapping[str, Any]]) -> Path:
        self.rows.extend(dict(r) for r in rows)
        self.store.write_run(self.path, self.rows)
        return self.path

    def close(self, compact: bool = True) -> None:
        pass


class NullStore:
    """For ranks other than 0 under a launcher: rank 0 writes the run, the others do not."""

    def check_writable(self) -> None:
        pass

    def path_for(self, run_id: str, started_at: str) -> Path:
        return Path(os.devnull)

    def open_run(self, path: Path, extra: Mapping[str, str] | None = None) -> Any:
        return _Rewriter(self, path)

    def write_run(self, path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
        pass
