"""Rows as JSON lines: the store where pyarrow cannot or should not load (a lean host, the
soft-RoCE VM), and ``netbench import``, which streams such a file into the Parquet store,
checking every row against the schema first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from netbench.api import json_safe
from netbench.errors import NetbenchError, UsageError
from netbench.store.parquet import (
    PARTS,
    ResultStore,
    _run_of,
)
from netbench.store.schema import (
    COLUMNS,
    ENVS,
    RUN_ENV,
    SCHEMA_VERSION,
    _envs_of,
    _RunFacts,
    arrow_schema,
    counters_of,
    format_columns,
    rows_table,
    split_unit,
    version_problem,
)
from netbench.textfile import (
    MAX_TOML_DEPTH,
    check_writable,
    nesting_depth,
    open_regular,
    read_text,
    temp_name,
    write_atomic,
)


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
    version = row.get("schema_version")
    if type(version) is not int:
        raise NetbenchError(f"{where}: not a netbench result row (schema_version "
                            f"{str(version)[:20]!r}: a format version 1 to {SCHEMA_VERSION})")
    wrong = version_problem(str(version))
    if wrong:
        raise NetbenchError(f"{where}: {wrong.replace('it was', 'this row was', 1)}")
    unknown = set(row) - (set(format_columns(version)) & names)
    if unknown:
        raise NetbenchError(f"{where}: not a format-{version} row (unknown keys: "
                            f"{', '.join(sorted(unknown))})")
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
    text = row.get("counters")
    if text not in (None, "") and counters_of(text) is None:
        return ("counters must be the text of a JSON object of counter names to whole "
                f"numbers >= 0, not {str(text)[:60]!r}")
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
        for host, env in _envs_of(self.rows).items():
            self.envs.setdefault(host, env)          # the first row of a host that has one
        blank = dict.fromkeys(RUN_ENV) if self.envs else {}
        rows = [{**r, **blank, **split_unit(r.get("unit"))} for r in self.rows]
        self.rows = []
        return rows_table(rows, arrow_schema())

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
        # Run facts a Parquet writer keeps in its footer (a fabric sweep's rounds): JSON
        # lines have none; kept here so a writer's callers need not ask which store it is.
        self.extra: dict[str, str] = {}

    def append(self, rows: Iterable[Mapping[str, Any]]) -> Path:
        self.rows.extend(dict(r) for r in rows)
        self.store.write_run(self.path, self.rows)
        return self.path

    def close(self, compact: bool = True) -> Path | None:
        """Every case is in its file already: that file, where the run did not finish."""
        return None if compact else self.path


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
