"""bench/instructions_per_op.py's failures say what went wrong and never divide by zero; its
counter reads the files a real callgrind writes. The counts themselves are the bench
script's job (minutes under valgrind), not a unit test's."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "bench" / "instructions_per_op.py"


@pytest.fixture(scope="module")
def ipo():
    spec = importlib.util.spec_from_file_location("instructions_per_op", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_valgrind_it_says_how_to_install_it_and_exits_2(tmp_path):
    python_only = tmp_path / "bin"
    python_only.mkdir()
    (python_only / "python3").symlink_to(sys.executable)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PATH=str(python_only)))
    assert proc.returncode == 2
    assert "valgrind is not installed" in proc.stderr and "apt-get install valgrind" in \
        proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_loop_that_did_not_run_fails_its_point_without_dividing_by_zero(ipo, tmp_path):
    def flat(n, work):              # the same count whatever n: the loop never ran
        return 1_000_000, 0.0

    with pytest.raises(ipo.PointFailed, match="did not grow"):
        ipo.slope(flat, (10, 100), 1.0, tmp_path)

    def grows(n, work):
        return 5_000 + 700 * n, float(n)

    per_op, _ = ipo.slope(grows, (10, 100), 1.0, tmp_path)
    assert per_op == 700


def test_a_failing_reference_tool_names_itself(ipo, tmp_path):
    with pytest.raises(ipo.PointFailed, match="false exited 1"):
        ipo.counted(["false"], tmp_path)


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind (make test installs it)")
def test_the_counter_sums_what_callgrind_wrote_for_every_process(ipo, tmp_path):
    """sh and its child, each in its own callgrind file, both counted."""
    one, _ = ipo.counted(["true"], tmp_path)
    two, _ = ipo.counted(["sh", "-c", "true; /bin/true"], tmp_path)
    assert 10_000 < one < two
    files = [p for p in tmp_path.rglob("cg.*")]
    assert len(files) >= 3
