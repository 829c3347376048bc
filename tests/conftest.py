"""Shared helpers: run the real CLI in a subprocess; a real `netbench serve` fixture."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from netbench.run.peer import ServerProcess

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
H200_RESULTS = FIXTURES / "results" / "h200-vm"   # real rows: bench/gpu_check.py


@pytest.fixture
def h200_results(tmp_path: Path) -> Path:
    """A copy of the H200 store to read: any reader may refresh a store's footer cache
    (_catalog.parquet), and the committed one is stale after every checkout (mtimes)."""
    return Path(shutil.copytree(H200_RESULTS, tmp_path / "h200-vm"))


def _fixture_state() -> dict[str, tuple[int, int]]:
    state = {}
    for folder, dirs, files in os.walk(FIXTURES):
        for name in dirs + files:
            path = os.path.join(folder, name)
            st = os.lstat(path)      # a folder by its presence (a rename in it is no change)
            state[os.path.relpath(path, FIXTURES)] = (0, 0) if name in dirs else (
                st.st_size, st.st_mtime_ns)
    return state


_FIXTURE_BYTES: dict[str, bytes] = {}     # the fixtures' files as the session found them


def _same_as_found(name: str) -> bool:
    path = FIXTURES / name
    return name in _FIXTURE_BYTES and path.is_file() and not path.is_symlink() \
        and path.read_bytes() == _FIXTURE_BYTES[name]


@pytest.fixture(autouse=True)
def _fixtures_untouched() -> Iterator[None]:
    """A test must leave tests/fixtures as it found them (a command reading a store there
    refreshes its footer cache): a change fails the test, named, and is undone for the
    tests after. A file rewritten with the same bytes is no change; a new one is named, and
    left (it may be a fixture someone is writing)."""
    before = _fixture_state()
    yield
    after = _fixture_state()
    if after == before:
        return
    changed = sorted(k for k in before.keys() | after.keys()
                     if before.get(k) != after.get(k) and not _same_as_found(k))
    for name in reversed(changed):          # a folder's files before the folder
        path = FIXTURES / name
        # A new file is named, never deleted: it may be a fixture someone is writing now.
        if name in before and name in _FIXTURE_BYTES:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(_FIXTURE_BYTES[name])
    if changed:
        pytest.fail(f"the test changed tests/fixtures: {', '.join(changed)}; read a copy "
                    "(the h200_results fixture, or shutil.copytree to tmp_path)", pytrace=False)


def pytest_sessionstart(session: pytest.Session) -> None:
    for folder, _, files in os.walk(FIXTURES):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    _FIXTURE_BYTES[os.path.relpath(path, FIXTURES)] = f.read()


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


class CpuHog:
    """A busy loop pinned to one core, in its own process: a shared CI runner's neighbour.
    A context manager; ``on()``/``off()`` for a hog beside some runs only."""

    def __init__(self, core: int = 0) -> None:
        self.core, self.proc = core, None

    def on(self) -> None:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", "import os\n"
                                          f"os.sched_setaffinity(0, {{{self.core}}})\n"
                                          "while True:\n    pass\n"])

    def off(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> CpuHog:
        self.on()
        return self

    def __exit__(self, *exc: object) -> None:
        self.off()


KNOWN_ANSWERS = Path(__file__).with_name("known_answers.txt")


def known_answer_ids() -> set[str]:
    """The node ids tests/known_answers.txt lists (comments and blank lines aside); a file's
    path alone marks all its tests (their shared fixture is the slow part)."""
    return {line.strip() for line in KNOWN_ANSWERS.read_text().splitlines()
            if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks the known-answer tests (``-m "not known_answer"`` is `make check`'s fast tier)."""
    listed = known_answer_ids()
    for item in items:
        if item.nodeid in listed or item.nodeid.split("::")[0] in listed:
            item.add_marker(pytest.mark.known_answer)
