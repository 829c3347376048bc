"""README and docs/ are true, example by example: every `netbench` command in their code
blocks runs here, and README's plugin is installed and run.

`netbench run` examples run with `--dry-run` (every case planned and validated, nothing
measured: some sweep to 256 MiB on 4 ranks); the rest run for real against a store made for
them. Examples that need what this machine cannot have are skipped, each with its reason.
The benchmarks table names every metric each benchmark reports.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, install_plugin, netbench

from netbench import registry

README = (ROOT / "README.md").read_text()
DOCS = {path.name: path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))}

SKIP = [
    (r"--peer host", "needs a second host running netbench serve"),
    (r"^netbench serve", "a server; exercised by tests/test_serve*.py"),
    (r"^netbench rxe (add|del)", "needs root and a kernel with rdma_rxe (the VM stage)"),
    (r"3f2a9c1d0b7e", "names a run id of the reader's own store"),
    (r"^torchrun|^srun|^mpirun", "needs a cluster launcher"),
    (r"\| *jq", "pipes into jq, which the tests do not install"),
    (r"^netbench healthcheck .*--drain", "drains the Slurm node this machine is: "
     "tests/test_healthcheck.py drains and resumes it"),
]


def _examples() -> list[str]:
    """Commands in the indented code blocks of README and docs/ (comments dropped)."""
    lines = []
    for line in "\n".join([README, *DOCS.values()]).splitlines():
        if not line.startswith("    ") or line.startswith("     #"):
            continue
        text = line.strip()
        if not text.startswith(("netbench ", "torchrun ", "srun ")):
            continue
        lines.append(re.split(r"\s{2,}#", text)[0].strip())
    return lines


EXAMPLES = _examples()


def test_the_readme_has_examples_to_run():
    assert len(EXAMPLES) > 25 and any("netbench compare" in e for e in EXAMPLES)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A store with the labels the examples name, and the files they read."""
    work = tmp_path_factory.mktemp("readme")
    for label in ("before-driver-update", "after-driver-update", "accept-mlx5-SN1234"):
        proc = subprocess.run([sys.executable, "-m", "netbench", "run", "mem.copy", "-p",
                               "msg_size=1M", "-p", "iterations=3", "--label", label,
                               "--results", str(work / "results")], cwd=work,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    for label in ("before-driver-update", "after-driver-update"):   # the history example's
        proc = subprocess.run([sys.executable, "-m", "netbench", "run", "tcp.stream", "-p",
                               "duration=0.3", "-p", "warmup=0.1", "--label", label,
                               "--results", str(work / "results")], cwd=work,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
    (work / "suites").symlink_to(ROOT / "suites")
    (work / "tmp").mkdir()
    # What the import example reads: the RDMA suite's rows (skipped here, with the reason).
    proc = subprocess.run([sys.executable, "-m", "netbench", "run", "suites/rdma-ci.toml",
                           "--jsonl", str(work / "tmp" / "rows.jsonl")], cwd=work,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return work


def _command(example: str, work) -> list[list[str]]:
    """The example as argv lists (`a && b` is two), `run` ones made dry, /tmp in ``work``."""
    parts = []
    for piece in example.replace("/tmp/", f"{work}/tmp/").split("&&"):
        argv = shlex.split(piece.replace(">", " > ").split(" > ")[0])
        if argv[:2] == ["netbench", "run"]:
            argv.append("--dry-run")
        parts.append(argv[1:])
    return parts


@pytest.mark.parametrize("example", EXAMPLES)
def test_readme_example_runs(example, workdir):
    for pattern, reason in SKIP:
        if re.search(pattern, example):
            pytest.skip(reason)
    for argv in _command(example, workdir):
        proc = netbench(*argv, cwd=workdir, timeout=300)
        # accept, compare and history answer with a verdict (exit 1 = failed / regressed);
        # anything else must succeed. A usage error (2) or a traceback is a README that lies.
        verdict = argv[0] in ("accept", "compare", "history")
        assert proc.returncode in ((0, 1) if verdict else (0,)), (example, proc.stderr)
        assert "Traceback" not in proc.stderr, proc.stderr


def test_readme_stays_short_and_links_every_doc():
    assert len(README.encode()) <= 12 * 1024, len(README.encode())
    assert all(f"docs/{name}" in README for name in DOCS), [n for n in DOCS
                                                            if f"docs/{n}" not in README]


def test_readme_plugin_installs_lists_and_runs(tmp_path):
    source = README.split("```python\n", 1)[1].split("```", 1)[0]
    entry = README.split("```toml\n", 1)[1].split("```", 1)[0]
    name, target = (x.strip().strip('"') for x in entry.splitlines()[1].split("=", 1))
    module, _, cls = target.partition(":")
    folder = install_plugin(tmp_path, source, {name: f"demo_plugin:{cls}"})
    assert module == "demo_sleep" and len(source.splitlines()) <= 30
    env = {**os.environ, "PYTHONPATH": folder}
    listed = netbench("list", env=env)
    assert name in listed.stdout, listed.stdout
    run = netbench("run", name, "-p", "interval=0.002", "-p", "iterations=20", "--json",
                   "--results", str(tmp_path / "r"), env=env)
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)
    assert row["metric"] == "overshoot" and row["value"] >= 0 and row["n_samples"] == 20


def test_the_benchmarks_table_names_every_metric():
    section = DOCS["benchmarks.md"].split("# Benchmarks", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            for name in re.findall(r"`([\w.]+)`", cells[0]):
                rows[name] = cells[2]
    missing = []
    for name, bench in registry.all_benchmarks().items():
        if name not in rows:
            missing.append(f"{name}: no row")
            continue
        words = set(re.findall(r"[\w.]+", rows[name]))
        missing += [f"{name}: {m.name}" for m in bench.metrics if m.name not in words]
    assert missing == [], missing
