"""A fresh machine passes `make test`: every external command the tests, the package and the
Makefile call comes from a Debian package that `.ci/run` or the Makefile installs first.

A developer's machine is never fresh (earlier runs installed qemu, kmod, rdma-core...), so a
missing install step hides there; this test names it wherever the command is present.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT

CALLS = (
    r"which\(\s*[\"']([A-Za-z][\w.+-]*)[\"']",
    r"(?:run|Popen|check_output|check_call|call)\(\s*\[\s*[\"']([A-Za-z][\w.+-]*)[\"']",
    r"`([a-z][\w.+-]*)` is not installed",
)


def _commands() -> set[str]:
    text = ""
    for path in [*ROOT.glob("tests/**/*.py"), *ROOT.glob("netbench/**/*.py"),
                 ROOT / "Makefile", ROOT / ".ci" / "run"]:
        if path.is_file() and "fixtures" not in path.parts:
            text += path.read_text(errors="ignore")
    names: set[str] = set()
    for pattern in CALLS:
        names |= set(re.findall(pattern, text))
    return names


def _package(path: str) -> str | None:
    for base in dict.fromkeys([Path(path).name, Path(path).resolve().name]):
        for folder in ("/usr/bin", "/usr/sbin", "/bin", "/sbin"):
            found = subprocess.run(["dpkg", "-S", f"{folder}/{base}"], capture_output=True,
                                   text=True)
            if found.returncode == 0:
                return found.stdout.split(":")[0].strip()
    return None


@pytest.mark.skipif(not shutil.which("dpkg"), reason="not a Debian machine (no dpkg)")
def test_every_command_called_comes_from_an_installed_package():
    installs = "".join((ROOT / name).read_text() for name in (".ci/run", "Makefile"))
    missing = []
    for name in sorted(_commands()):
        path = shutil.which(name)
        if not path or not path.startswith(("/usr/", "/bin/", "/sbin/")):
            continue                 # not a system command here (a venv tool, or absent)
        package = _package(path)
        if package is None:
            continue
        meta = subprocess.run(["dpkg-query", "-W", "-f=${Essential} ${Priority}", package],
                              capture_output=True, text=True).stdout
        if meta.startswith("yes") or "required" in meta:
            continue                 # on every Debian machine
        if not re.search(rf"(?<![\w-]){re.escape(package)}(?![\w-])", installs):
            missing.append(f"{name} (Debian package {package})")
    assert not missing, ("commands the tests or the package call whose package neither "
                         f".ci/run nor the Makefile installs: {', '.join(missing)}")


def test_the_scan_sees_the_commands_it_must():
    """The patterns find what the code really calls (or the check above would pass empty)."""
    names = _commands()
    assert {"modprobe", "ip", "tc", "chromium"} <= names, names
