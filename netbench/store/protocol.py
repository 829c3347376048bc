"""What a store is to the code that writes and reads runs: one Protocol each, so the runner
and the readers see the interface, never which store (Parquet, JSON lines, none) is behind
it or how it lays out a run's files."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class RunWriter(Protocol):
    """One run being written, a case at a time."""

    def append(self, rows: Iterable[Mapping[str, Any]]) -> Path:
        """One case's rows, stored before this returns; where they went."""

    def close(self, compact: bool = True) -> Path | None:
        """The run is over: finish it (``compact``: into its final form) and say where its
        rows stay unfinished, None where it was finished or nothing was stored (a Parquet
        run left in parts: their folder; one that stored no case: gone)."""


@runtime_checkable
class Store(Protocol):
    """Where a run's rows are written: the Parquet store, JSON lines, or nowhere (a rank
    under a launcher that is not rank 0)."""

    def check_writable(self) -> None:
        """Raise NetbenchError, saying why, where a run could not be stored."""

    def path_for(self, run_id: str, started_at: str) -> Path:
        """Where the run's rows go."""

    def open_run(self, path: Path, extra: Mapping[str, str] | None = None) -> RunWriter:
        """A writer for the run at ``path`` (``extra``: run facts for its footer)."""

    def write_run(self, path: Path, rows: Iterable[Mapping[str, Any]]) -> None:
        """A whole run's rows at once."""


@runtime_checkable
class ReadableStore(Store, Protocol):
    """A store that reads its runs back (the Parquet one): what resume, compare, history,
    accept and the dashboard read."""

    directory: Path

    def runs(self) -> Any:
        """One row per stored run (a DataFrame: path, run_id, label, state, ...)."""

    def read(self, run_ids: Iterable[str] | None = None, columns: list[str] | None = None,
             where: Mapping[str, Iterable[Any]] | None = None) -> Any:
        """The rows of these runs (all: None) as one DataFrame."""

    def file_of(self, listed: str | Path) -> Path:
        """The file a run listed by ``runs()`` at this path is finished into."""
