"""What a node health check keeps between two checks: the counters it read last (so the
next says what grew since), in one small JSON file in the results directory; and the lock
that keeps two checks of one node (Slurm's HealthCheckProgram and a prolog) from measuring at
once, each halving the other's loopback rate."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

from netbench.errors import UsageError
from netbench.textfile import read_text, write_atomic

FILE = "_healthcheck_counters.json"
MAX_BYTES = 4 << 20               # a snapshot holds at most counters.MAX_COUNTERS values


def read(results: str | Path) -> tuple[dict[str, int] | None, str]:
    """The last check's counters (None: none kept, or unreadable: then why)."""
    path = Path(results) / FILE
    if not path.exists():
        return None, ""
    try:
        data = json.loads(read_text(path, "health check state", MAX_BYTES))
        values = data["counters"]
        if not isinstance(values, dict) or not all(
                isinstance(k, str) and isinstance(v, int) for k, v in values.items()):
            raise ValueError("counters is not a table of whole numbers")
        return values, ""
    except (OSError, ValueError, KeyError, TypeError, UsageError) as exc:
        return None, f"{path}: unreadable ({exc}): counters recorded afresh"


def write(results: str | Path, values: Mapping[str, int]) -> None:
    path = Path(results) / FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"at": time.time(), "counters": dict(values)}, sort_keys=True)
    write_atomic(path, lambda tmp: tmp.write_text(text))


LOCK = "_healthcheck.lock"


@contextlib.contextmanager
def exclusive(results: str | Path, wait: float = 120.0) -> Iterator[None]:
    """Held while a check runs: a second check of the node waits up to ``wait`` seconds for
    the first, then gives up saying so (a UsageError: exit 2, NPD's "unknown")."""
    path = Path(results) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise UsageError(f"another netbench healthcheck holds {path} (waited "
                                     f"{wait:g} s)") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)
