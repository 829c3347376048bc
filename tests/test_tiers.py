"""The fast tier (`make check`) leaves out only tests that exist: an id in
tests/known_answers.txt that names no test (renamed, removed) fails here, so a slow test
cannot slip into the fast tier by a rename going unnoticed by the list."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT, known_answer_ids


def test_every_listed_known_answer_names_a_collected_test():
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "tests"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    collected = {line.strip() for line in proc.stdout.splitlines() if "::" in line}
    assert len(collected) > 500, proc.stdout[-2000:] + proc.stderr[-2000:]
    files = {c.split("::")[0] for c in collected}
    assert sorted(known_answer_ids() - collected - files) == []


def test_the_marker_selects_them():
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-m", "known_answer",
                           "tests/test_known_answers.py", "tests/test_hooks.py"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    chosen = {line.strip() for line in proc.stdout.splitlines() if "::" in line}
    assert chosen and all(c.startswith("tests/test_known_answers.py::") for c in chosen), \
        proc.stdout
