"""Reading the files a user hands netbench (suites, specs, thresholds, JSON lines): every way
they can be unreadable is one clear error naming the file, never a traceback."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

from netbench.errors import UsageError


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


def load_toml(path: str | Path, what: str = "file") -> tuple[dict[str, Any], str]:
    """The parsed table and the text (for line numbers in later errors)."""
    text = read_text(path, what)
    try:
        return tomllib.loads(text), text
    except tomllib.TOMLDecodeError as exc:
        where = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        prefix = f"{path}:{where.group(1)}:{where.group(2)}" if where else str(path)
        raise UsageError(f"{prefix}: not valid TOML: {exc}") from None
