"""Shared helpers: run the real CLI in a subprocess, start a real `netbench serve`."""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

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


class ServeProcess:
    def __init__(self, *extra: str, prefix: tuple[str, ...] = ()) -> None:
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "netbench", "serve", "--port", "0", *extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"))
        ready, _, _ = select.select([self.proc.stdout], [], [], 20)
        line = self.proc.stdout.readline() if ready else ""
        assert "listening on" in line, line + self.proc.stderr.read()
        self.address = line.split("listening on ", 1)[1].strip()
        self.host, port = self.address.rsplit(":", 1)
        self.port = int(port)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def server() -> Iterator[ServeProcess]:
    srv = ServeProcess()
    yield srv
    srv.stop()


def wait_for(predicate, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False
