import shutil
import subprocess
import sys

import pytest
from conftest import ROOT


def test_ruff_clean():
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if not ruff:
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    proc = subprocess.run([ruff, "check", "netbench", "tests", "bench"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_core_never_imports_benchmark_modules():
    """DESIGN rule: runner, store, analysis and report never import a benchmark module."""
    code = ("import sys, netbench.runner, netbench.store, netbench.cli, netbench.suite;"
            "print([m for m in sys.modules if m.startswith('netbench.benchmarks.')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_benchmarks_import_only_the_api():
    for path in (ROOT / "netbench" / "benchmarks").glob("*.py"):
        for line in path.read_text().splitlines():
            stripped = line.strip()
            if stripped.startswith(("from netbench", "import netbench")):
                assert stripped.startswith("from netbench.api import"), f"{path.name}: {line}"
