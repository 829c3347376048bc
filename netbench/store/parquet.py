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
import os
import re
import shutil
import warnings
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from stat import S_ISREG
from typing import Any

from netbench.errors import NetbenchError, UsageError
from netbench.store.schema import (
    COLUMNS,
    ENVS,
    MAX_FILE_ROWS,
    MAX_FILE_SAMPLES,
    RUN_ENV,
    _conform,
    _footer_envs,
    _missing,
    _run_metadata,
    _RunFacts,
    _table,
    arrow_schema,
    check_run_id,
    env_of,
    params_of,
    split_unit,
    version_problem,
)
from netbench.textfile import (
    check_writable,
    write_atomic,
)

PARTS = ".parts"           # suffix of a run's folder of part files while it is written
# A part lives until its run is compacted (zstd and dictionaries then): encoded plainly it
# costs next to nothing to write and read back, where zstd + dictionary cost ~570
# instructions a stored sample each way (tcp.rr: a third of a round trip's whole count,
# bench/instructions_per_op.py), for parts ~3x larger while the run lasts.
PART_ENCODING = {"compression": "none", "use_dictionary": False}
# A run's single-case parts are merged into one file each time this many have been written
# (RunWriter._merge): a part is ~22 KB of footer whatever it holds, so a day's soak of 1 s
# windows would be 86,400 of them (1.9 GB) until it ends.
MERGE_PARTS = 256
# A compaction of more files than this streams them into the run's file (_stream_compact):
# memory bounded by one file's rows, not the run's, as a day of windows needs.
STREAM_FILES = 64
STREAM_GROUP_BYTES = 64 << 20     # rows held at once while streaming: a row group's worth
LOCK = ".lock"             # inside it: held (flock) by the process writing the run
# Inside it too: its writer had every case in and began compacting. Left behind by a writer
# killed mid-compaction, it tells the next reader or writer to finish the job (nothing is
# left to measure, so `--resume` has nothing to run).
COMPACTING = ".compacting"
CATALOG = "_catalog.parquet"   # the finished runs' footers, cached (ResultStore.runs)
# What one file may bring a reader is MAX_FILE_ROWS and MAX_FILE_SAMPLES (store.schema): a
# clear warning names a file beyond them, and it is not read.
MAX_CATALOG_ENTRIES = 1_000_000   # a catalog beyond it is no cache of any store: unread
# Footer keys the reader computes from the file itself, never taken from what it says.
ROWS_KEY, SAMPLES_KEY = "netbench_file_rows", "netbench_file_samples"


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
        # A merge killed before it removed its singles left both: the block holds them.
        existing = _drop_merged_singles(self.parts)
        self.count = max((_part_number(p.name) for p in existing), default=0)
        self._singles: list[Path] = []      # this writer's parts not yet merged
        self._held = 0                      # their rows and samples

    def append(self, rows: Iterable[Mapping[str, Any]]) -> Path:
        """One case's rows as the next part file: a write that costs the same at case 1
        and at case 10,000."""
        import pyarrow.parquet as pq

        rows = [dict(r) for r in rows]
        self.count += 1
        part = self.parts / f"part-{self.count:06d}.parquet"
        table = _table(rows, {**_run_metadata(rows), **self.extra})
        write_atomic(part, lambda tmp: pq.write_table(table, tmp, **PART_ENCODING))
        self._singles.append(part)
        # A block a reader would refuse (too_large) would hide its windows: closed early where
        # the windows carry many samples (tcp.rr's round trips: up to 100,000 a window).
        self._held += sum(0 if r.get("samples") is None else len(r["samples"]) for r in rows)
        self._held += len(rows)
        if len(self._singles) >= MERGE_PARTS or self._held >= MAX_FILE_SAMPLES // 4:
            try:
                self._merge()
            except Exception:           # a full disk, a part unreadable: the windows are
                self._singles = []      # stored; these stay singles, compacted at the end
            self._held = 0
        return part

    def _merge(self) -> None:
        """The singles written since the last merge as one part, ``part-A-B`` (A to B), then
        the singles removed. Killed between, both are there with the same rows: compaction
        keeps one (the latest file wins), the next writer removes the singles."""
        import pyarrow.parquet as pq

        singles = self._singles
        first, last = _part_number(singles[0].name), _part_number(singles[-1].name)
        block = self.parts / f"part-{first:06d}-{last:06d}.parquet"
        table = _latest_of([pq.read_table(p) for p in singles], self.extra)
        write_atomic(block, lambda tmp: pq.write_table(table, tmp, compression="zstd"))
        self._singles = []
        for single in singles:
            single.unlink(missing_ok=True)

    def close(self, compact: bool = True) -> Path | None:
        """Compact the parts into the run's file (atomically), then remove them; release.
        Not compacting (an interrupted run), the parts stay for ``--resume``: their folder,
        or None (and no folder) where no case was stored."""
        try:
            if compact:
                try:
                    (self.parts / COMPACTING).touch()
                except OSError:
                    pass            # the compaction below fails alike and says why
                self.store.compact(self.path, self.parts, self.extra)
                _remove_parts_dir(self.parts)
                return None
        finally:
            self._lock.close()
        if not any(self.parts.glob("part-*.parquet")):     # nothing stored: no run to resume
            shutil.rmtree(self.parts, ignore_errors=True)
            return None
        return self.parts


class ResultStore:
    """A results folder: ``<dir>/<started>-<run_id>.parquet``, one file per finished run,
    ``<dir>/<started>-<run_id>.parts/`` while it is written."""

    def __init__(self, directory: str | os.PathLike[str],
                 upgrade: Callable[[Any], Any] | None = None) -> None:
        self.directory = Path(directory)
        self._index: tuple[Any, Any] | None = None      # runs(), with what it was built from
        # Fills what files written by an older netbench lack (the CLI passes the registry's
        # ``stored_traits``): the store itself knows no benchmark.
        self.upgrade = upgrade
        # Keep the footers read in _catalog.parquet for the next reader; False: write
        # nothing (a run's time estimate reads the store without leaving a file in it).
        self.cache = True

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

    def file_of(self, listed: str | Path) -> Path:
        """The file a run listed at ``listed`` (its file, or its parts' folder) ends in."""
        path = Path(str(listed))
        if path.name.endswith(PARTS):
            return path.with_name(path.name[:-len(PARTS)] + ".parquet")
        return path

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

        import pyarrow.parquet as pq

        def read(part: Path) -> Any:
            try:
                return pq.read_table(part)
            except Exception as exc:
                return exc

        files = sorted(parts.glob("part-*.parquet"), key=_part_order)
        sources = ([path] if path.exists() else []) + files
        if not (len(sources) > STREAM_FILES and _stream_compact(path, sources, extra)):
            with ThreadPoolExecutor(max_workers=8) as pool:  # pyarrow reads without the GIL
                read_parts = list(pool.map(read, files))
            tables = [pq.read_table(path)] if path.exists() else []
            for part, table in zip(files, read_parts):
                if isinstance(table, Exception):
                    _unreadable(part, table)
                else:
                    tables.append(table)
            table = _latest_of(tables, extra)
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
            found = scan(folder, lambda e: e.name.startswith("part-")
                         and e.name.endswith(".parquet") and e.is_file())   # no FIFO
            # A merge killed after its block was written leaves the singles it holds until
            # the run's writer reopens: the block alone is read (the same rows, once).
            merged = _merged_singles([name for name, _ in found])
            listing += [(f"{folder.name}/{name}", stat) for name, stat in found
                        if name not in merged]
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
        missed = [name for name, stat in listing if not _trusted(cached.get(name), name, stat)]
        footers = self._footers(missed)
        for name, stat in listing:
            path = self.directory / name
            hit = cached.get(name)
            if name not in footers:
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
            large = too_large(info) or version_problem(info.get(VERSION_KEY.decode()))
            if large:
                warnings.warn(f"skipping {path}: {large}", StoreWarning, stacklevel=2)
                continue
            if not path.parent.name.endswith(PARTS):
                fresh[name] = (*stat, hit[2] if name not in footers else json.dumps(info))
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
                    "state": state, "plan": info.get("netbench_plan", ""),
                    "topology": info.get("netbench_topology", ""),
                    "counters": info.get("netbench_counters", ""),
                    "thresholds": info.get("netbench_thresholds", ""),
                    "soak": info.get("netbench_soak", ""),
                    "fabric": info.get("netbench_fabric", "")}
            run["benchmarks"] |= benchmarks
            run["ok_benchmarks"] |= ok_benchmarks
            for key in ("ok", "skipped", "failed"):
                run[key] += cases[key]
        if set(fresh) != set(cached) or any(cached[k][:2] != v[:2] for k, v in fresh.items()):
            self._save_catalog(fresh)
        index = [{**r, "benchmarks": sorted(r["benchmarks"]),
                  "ok_benchmarks": sorted(r["ok_benchmarks"])} for r in merged.values()]
        columns = ["path", "run_id", "label", "started_at", "suite", "host", "benchmarks",
                   "ok_benchmarks", "ok", "skipped", "failed", "state", "plan", "topology",
                   "counters", "thresholds", "soak", "fabric"]
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

        known = self._catalog() if known is None else known
        checked = []
        for path in paths:               # a foreign Parquet file would scan as null rows
            hit = known.get(path.name)
            if hit is None or ROWS_KEY not in hit[2]:
                names = pq.read_schema(path).names
                if "metric" not in names or "schema_version" not in names:
                    warnings.warn(f"skipping {path}: not a netbench result file",
                                  StoreWarning, stacklevel=4)
                    continue
                footer = _read_footer(str(path))
                info = {} if isinstance(footer, Exception) else {
                    k.decode(errors="replace"): v.decode(errors="replace")
                    for k, v in footer.items() if k in (ROWS_KEY.encode(),
                                                        SAMPLES_KEY.encode(), VERSION_KEY)}
            else:
                info = env_of(hit[2]) or {}
            large = too_large(info) or version_problem(info.get(VERSION_KEY.decode()))
            if large:
                warnings.warn(f"skipping {path}: {large}", StoreWarning, stacklevel=4)
                continue
            checked.append(path)
        dataset = ds.dataset([str(p) for p in checked], format="parquet",
                             schema=arrow_schema().remove_metadata())
        expr = None
        for key, values in where.items():
            term = ds.field(key).isin(values)
            expr = term if expr is None else expr & term
        table = dataset.to_table(columns=columns, filter=expr)
        _check_times(table)
        return table

    def _catalog(self) -> dict[str, tuple[int, int, str]]:
        """The footers of finished runs' files, cached in ``_catalog.parquet`` (the leading
        underscore keeps pandas from reading it as a run): name -> (size, mtime, facts). Only
        a cache: an entry whose file changed, or a file without one, is read afresh."""
        import pyarrow.parquet as pq

        try:
            st = os.stat(self.directory / CATALOG)
            # A FIFO or a device there is never read; a catalog another user wrote is no
            # cache of ours (its facts could say anything); one beyond any store's size
            # (10^7 entries had cost `runs` 2.85 GB) is read no further than its footer.
            if not S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                return {}
            if pq.read_metadata(self.directory / CATALOG).num_rows > MAX_CATALOG_ENTRIES:
                return {}
            table = pq.read_table(self.directory / CATALOG).to_pydict()
            return {n: (int(z), int(m), str(i)) for n, z, m, i in zip(
                table["name"], table["size"], table["mtime_ns"], table["facts"])}
        except Exception:         # none yet, or unreadable: every footer is read once more
            return {}

    def _save_catalog(self, entries: Mapping[str, tuple[int, int, str]]) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.cache or not os.access(self.directory, os.W_OK):
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
        if self.upgrade is not None and len(frame):
            frame = self.upgrade(frame)
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

        known = self._catalog()
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
         params: bool = True, upgrade: Callable[[Any], Any] | None = None) -> Any:
    """The store as a tidy DataFrame, for pandas users: counts and sizes as nullable integers
    (Int64, not float64 with NaN), a run without a label as missing (not ""), one spelling
    per unit with the qualifier in ``unit_note`` ("us (half RTT)" -> "us", "half RTT"),
    and (``params``) every param as planned as its own ``param_<name>`` column, what an
    ``auto`` one became as ``resolved_<name>``. ``pandas.read_parquet`` still reads the raw
    files; this is the same rows, ready to group."""
    import pandas as pd

    store = ResultStore(path, upgrade)
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
    if not pd.Timestamp(EARLIEST, tz="UTC") <= started < pd.Timestamp(LATEST, tz="UTC"):
        return None
    return counts, started, set(lists[0]), set(lists[1])


VERSION_KEY = b"netbench_schema_version"


def _read_footer(path: str) -> Any:
    """A file's footer metadata, or the exception reading it (picklable, for workers)."""
    import pyarrow.parquet as pq

    try:
        meta = pq.read_metadata(path)
        samples = 0
        for group in range(meta.num_row_groups):
            chunks = meta.row_group(group)
            for column in range(chunks.num_columns):
                chunk = chunks.column(column)
                if chunk.path_in_schema.startswith("samples."):
                    samples += chunk.num_values
        return {**(meta.metadata or {}), ROWS_KEY.encode(): str(meta.num_rows).encode(),
                SAMPLES_KEY.encode(): str(samples).encode()}
    except Exception as exc:
        return ValueError(str(exc))


def too_large(info: Mapping[str, Any]) -> str:
    """Why a file's rows are beyond what a reader takes (its footer's counts, as
    ``_read_footer`` computed them), or ""."""
    try:
        rows, samples = int(info.get(ROWS_KEY, 0)), int(info.get(SAMPLES_KEY, 0))
    except (TypeError, ValueError):
        return "its row and sample counts are unreadable"
    if rows > MAX_FILE_ROWS:
        return f"it holds {rows:,} rows, more than the {MAX_FILE_ROWS:,} a reader takes"
    if samples > MAX_FILE_SAMPLES:
        return (f"it holds {samples:,} samples, more than the {MAX_FILE_SAMPLES:,} a reader "
                "takes")
    return ""


EARLIEST, LATEST = "1970-01-01", "2200-01-01"   # the times a run of netbench's can hold


def _check_times(table: Any) -> None:
    """A ValueError where a time column holds what no run wrote (int64's largest, year 2262:
    history and report had stopped on it with a NotImplementedError): the reader then skips
    that file, naming it."""
    import pyarrow as pa
    import pyarrow.compute as pc

    for column in ("started_at", "case_started_at"):
        if column not in table.column_names or not len(table):
            continue
        bounds = pc.min_max(table[column].cast(pa.int64()))
        low, high = bounds["min"].as_py(), bounds["max"].as_py()
        if low is None:
            continue
        if low < _ns(EARLIEST) or high >= _ns(LATEST):
            raise ValueError(f"{column} outside {EARLIEST} .. {LATEST}: not a time a run "
                             "wrote")


def _ns(day: str) -> int:
    import pandas as pd

    return int(pd.Timestamp(day, tz="UTC").value)


def _trusted(hit: tuple[int, int, str] | None, name: str, stat: tuple[int, int]) -> bool:
    """Is a catalog entry this file's (same size and mtime, the counts the reader computes,
    and the run its name says)?"""
    if hit is None or hit[:2] != stat or f'"{ROWS_KEY}"' not in hit[2]:
        return False
    return f'"netbench_run_id": "{_run_of_name(name)}"' in hit[2]


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


def _part_number(name: str) -> int:
    """The newest part a part file holds: N of ``part-N``, B of a merged ``part-A-B``."""
    try:
        return int(name.split(".", 1)[0].rsplit("-", 1)[-1])
    except ValueError:
        return 0


def _part_order(part: Path) -> tuple[int, int]:
    """Parts in the order they were written: a block (A to B) before the singles it holds,
    which a kill mid-merge may have left (the later wins: the same rows)."""
    stem = part.name.split(".", 1)[0].split("-")[1:]
    try:
        return int(stem[0]), len(stem) == 1
    except (IndexError, ValueError):
        return 0, True


def _merged_singles(names: list[str]) -> set[str]:
    """The single parts (``part-N``) among ``names`` that a merged block (``part-A-B``,
    A <= N <= B) among them holds already."""
    blocks = [(_part_order(Path(n))[0], _part_number(n)) for n in names if n.count("-") == 2]
    return {n for n in names if n.count("-") == 1
            and any(a <= _part_number(n) <= b for a, b in blocks)}


def _drop_merged_singles(parts: Path) -> list[Path]:
    """The run's part files, once the singles a finished merge holds are removed."""
    files = list(parts.glob("part-*.parquet"))
    merged = _merged_singles([p.name for p in files])
    for part in files:
        if part.name in merged:
            part.unlink(missing_ok=True)
    return [p for p in files if p.name not in merged]


def _unreadable(part: Path, exc: BaseException) -> None:
    warnings.warn(f"skipping {part}: not a readable Parquet file ({exc}); its case is not "
                  "stored", StoreWarning, stacklevel=3)


def _latest_of(tables: list[Any], extra: Mapping[str, str]) -> Any:
    """Tables of one run as one, in case order: a case measured again (a resumed run redoing
    an interrupted case) as its latest table has it; the footer the run's facts, ``extra``
    and every table's hosts' environments (the later describe the run last)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema()
    envs: dict[str, dict[str, Any]] = {}
    for t in tables:
        envs.update(_footer_envs(t.schema.metadata))
    tables = [_conform(t, schema) for t in tables]
    latest: dict[Any, int] = {}
    for number, table in enumerate(tables):
        for case in table.column("case_index").to_pylist():
            latest[case] = number
    kept = [t.filter(pa.array([latest[c] == number for c in t.column("case_index").to_pylist()]))
            for number, t in enumerate(tables)]
    table = pa.concat_tables(kept) if kept else schema.empty_table()
    table = table.take(pc.sort_indices(table, [("case_index", "ascending")]))
    facts = table.select(list(_FACT_COLUMNS)).to_pylist()
    return table.replace_schema_metadata(_footer(_run_metadata(facts), extra, envs))


def _footer(facts: Mapping[str, str], extra: Mapping[str, str],
            envs: Mapping[str, Any]) -> dict[str, str]:
    """A compacted or merged file's footer: the run's facts, what its writer added, and
    every host's environment where any was kept."""
    footer = {**facts, **extra}
    if envs:
        footer[ENVS] = json.dumps(envs, sort_keys=True)
    return footer


_FACT_COLUMNS = ("run_id", "label", "started_at", "suite", "host", "benchmark", "status",
                 "case_index")


def _stream_compact(path: Path, sources: list[Path], extra: Mapping[str, str]) -> bool:
    """``sources`` (the run's earlier file, then its parts in order) written into ``path`` one
    at a time: memory bounded by the largest source, not the run. Two passes: the small
    columns first (which file's rows of a case are the latest; the footer's facts), then the
    rows. False (nothing written) where kept cases of two sources interleave (a finished run
    resumed): that is sorted in memory."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    schema = arrow_schema()
    readable, cases, envs = [], [], {}
    facts = _RunFacts()
    for source in sources:
        try:
            small = pq.read_table(source, columns=list(_FACT_COLUMNS))
        except Exception as exc:
            if source == path:
                raise
            _unreadable(source, exc)
            continue
        envs.update(_footer_envs(small.schema.metadata))
        readable.append(source)
        cases.append(small.column("case_index").to_pylist())
    latest = {c: n for n, index in enumerate(cases) for c in index}
    spans = []
    for n, index in enumerate(cases):
        kept = [c for c in index if latest[c] == n]
        if kept:
            spans.append((min(kept), max(kept), n))
    spans.sort()
    if any(a[1] >= b[0] for a, b in zip(spans, spans[1:])):
        return False
    keep = {n: pa.array([latest[c] == n for c in cases[n]]) for _, _, n in spans}
    for _, _, n in spans:                   # the facts in case order, one source at a time
        small = pq.read_table(readable[n], columns=list(_FACT_COLUMNS)).filter(keep[n])
        for row in small.to_pylist():
            facts.add(row)
    footer = _footer(facts.metadata(), extra, envs)

    def write(tmp: Path) -> None:
        # Sources gathered into row groups of STREAM_GROUP_BYTES: one a window would cost
        # each its own footer entry and its own compression (1 KB a window, not tens of bytes).
        with pq.ParquetWriter(tmp, schema.with_metadata(footer), compression="zstd") as out:
            group: list[Any] = []
            for _, _, n in spans:
                try:
                    whole = pq.read_table(readable[n])
                except Exception as exc:
                    if readable[n] == path:
                        raise
                    raise _Unreadable() from exc
                table = _conform(whole, schema).filter(keep[n])
                group.append(table.take(pc.sort_indices(table, [("case_index", "ascending")])))
                if sum(t.nbytes for t in group) >= STREAM_GROUP_BYTES:
                    out.write_table(pa.concat_tables(group).replace_schema_metadata(footer))
                    group = []
            if group:
                out.write_table(pa.concat_tables(group).replace_schema_metadata(footer))

    try:
        write_atomic(path, write)
    except _Unreadable:
        # A part whose small columns read but whose rows do not (a corrupt samples page):
        # compacted in memory, which skips it with a warning naming it, as it skips a part
        # no column of which reads.
        return False
    return True


class _Unreadable(Exception):
    """A part's rows failed to read midway through a streamed compaction."""


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
