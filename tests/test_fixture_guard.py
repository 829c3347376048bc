"""Tests leave the committed fixtures as they found them: conftest's guard fails a test that
changes tests/fixtures (here: `netbench runs` refreshing the H200 store's footer cache, as
the suite's readers of that store did, and a stray file), names what changed, and undoes a
change to a committed file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

from conftest import FIXTURES, ROOT

INNER = textwrap.dedent('''
    import os, subprocess, sys
    from conftest import FIXTURES, H200_RESULTS, ROOT

    def test_reads_the_fixture_store_in_place():
        catalog = H200_RESULTS / "_catalog.parquet"
        stale = catalog.stat().st_mtime_ns
        for run in H200_RESULTS.glob("2*.parquet"):   # as after a checkout: the cache is stale
            os.utime(run, ns=(stale, stale + 1))
        assert subprocess.run([sys.executable, "-m", "netbench", "runs", "--results",
                               str(H200_RESULTS)], cwd=ROOT, capture_output=True).returncode == 0

    def test_leaves_a_stray_file():
        (FIXTURES / "results" / "stray").mkdir()
        (FIXTURES / "results" / "stray" / "x").write_text("x")

    def test_reads_a_copy(h200_results):
        assert subprocess.run([sys.executable, "-m", "netbench", "runs", "--results",
                               str(h200_results)], cwd=ROOT, capture_output=True).returncode == 0
''')


def _contents() -> dict[str, bytes]:
    out = {}
    for folder, dirs, files in os.walk(FIXTURES):
        for name in dirs + files:
            path = os.path.join(folder, name)
            out[os.path.relpath(path, FIXTURES)] = (
                open(path, "rb").read() if os.path.isfile(path) else b"")
    return out


def test_a_test_that_changes_the_fixtures_fails_by_name_and_the_change_is_undone(tmp_path):
    (tmp_path / "test_inner.py").write_text(INNER)
    before = _contents()
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "conftest", "-p",
                           "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "tests")})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    # The guard fails a test at its teardown (an error, in pytest's words), the copy passes.
    assert "3 passed, 2 errors" in out, out
    for name in ("test_reads_the_fixture_store_in_place", "test_leaves_a_stray_file"):
        assert f"ERROR test_inner.py::{name}" in out, out
    assert "the test changed tests/fixtures: results/h200-vm/_catalog.parquet;" in out, out
    assert "results/stray, results/stray/x" in out, out
    # A changed fixture is restored; a new file is named and left (it may be a fixture
    # being written beside the run), so this test takes its own stray away.
    stray = FIXTURES / "results" / "stray"
    assert (stray / "x").read_text() == "x"
    shutil.rmtree(stray)
    assert _contents() == before                        # nothing left changed
