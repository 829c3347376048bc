"""Shared helpers: run the real CLI in a subprocess; a real `netbench serve` fixture."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbench.peer import ServerProcess

ROOT = Path(__file__).resolve().parent.parent


def netbench(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """Run `python -m netbench ARGS` and capture everything."""
    return subprocess.run([sys.executable, "-m", "netbench", *args], capture_output=True,
                          text=True, timeout=timeout, cwd=kwargs.pop("cwd", ROOT), **kwargs)


def assert_clean_error(proc: subprocess.CompletedProcess, *needles: str) -> None:
    """A user mistake: non-zero exit, one `netbench: error:` line, no traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("netbench: error:")]
    assert len(errors) == 1, proc.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]


@pytest.fixture
def server() -> Iterator[ServerProcess]:
    srv = ServerProcess()
    yield srv
    srv.stop()


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def install_plugin(folder: Path, source: str, entries: dict[str, str],
                   group: str = "netbench.benchmarks") -> str:
    """A third-party plugin as pip would leave it: a module and a dist-info with entry points
    in ``group``. Returns the folder to put on PYTHONPATH."""
    (folder / "demo_plugin.py").write_text(source)
    dist = folder / "demo_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 1.0\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (dist / "entry_points.txt").write_text(f"[{group}]\n{lines}")
    return str(folder)
