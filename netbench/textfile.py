"""Reading the files a user hands netbench (suites, specs, thresholds, JSON lines): every way
they can be unreadable is one clear error naming the file, never a traceback."""

from __future__ import annotations

import os
import re
import tempfile
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from netbench.errors import NetbenchError, UsageError


def read_text(path: str | Path, what: str = "file") -> str:
    path = Path(path)
    try:
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise UsageError(f"cannot read {what} {path}: it is a directory") from None
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        line = exc.object[:exc.start].count(b"\n") + 1
        raise UsageError(f"{path}:{line}: not UTF-8 text (byte {exc.object[exc.start]:#04x} "
                         f"at offset {exc.start})") from None


PROBE_BYTES = 1 << 20        # a writability check writes this much: a full disk fails it
STALE_TMP = 3600.0           # seconds after which a leftover ".name.tmp" is a killed writer's


def check_writable(directory: Path, what: str) -> None:
    """Fail before anything is measured if a result of realistic size could not be written
    there (a full filesystem passes an empty-file test), and sweep temp files that a killed
    writer left behind."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-") as f:
            f.write(b"\0" * PROBE_BYTES)
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        raise NetbenchError(f"{what} {directory} cannot be written: "
                            f"{exc.strerror or exc}") from None
    now = time.time()
    for stale in directory.glob(".*.tmp"):
        try:
            if now - stale.stat().st_mtime > STALE_TMP:
                stale.unlink()
        except OSError:
            pass


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """``write(tmp)`` then rename over ``path``: a reader, or a crash, never sees half."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise NetbenchError(f"cannot write {path}: {exc.strerror or exc}") from None


def load_toml(path: str | Path, what: str = "file") -> tuple[dict[str, Any], str]:
    """The parsed table and the text (for line numbers in later errors)."""
    text = read_text(path, what)
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        prefix = f"{path}:{where.group(1)}:{where.group(2)}" if where else str(path)
        raise UsageError(f"{prefix}: not valid TOML: {exc}") from None
