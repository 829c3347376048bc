"""The house rules, held by tests that read every module's imports (statically: lazy imports
inside functions count, relative ones are resolved)."""

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PACKAGE = ROOT / "netbench"


def test_ruff_clean():
    ruff = shutil.which("ruff", path=str(ROOT / ".venv" / "bin")) or shutil.which("ruff")
    if not ruff:
        pytest.skip("ruff not installed (pip install -e '.[test]')")
    proc = subprocess.run([ruff, "check", "netbench", "tests", "bench"], cwd=ROOT,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it, as absolute dotted names."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            found.add(stem)
            found |= {f"{stem}.{alias.name}" for alias in node.names}   # from x import mod
    return {m for m in found if m.startswith("netbench")}


def _modules() -> dict[str, set[str]]:
    return {_module_name(p): imports_of(p) for p in PACKAGE.rglob("*.py")}


def _benchmark_modules(mods: dict[str, set[str]]) -> set[str]:
    return {m for m in mods if m.startswith("netbench.benchmarks.")}


def _offenders(mods, sources, forbidden) -> list[str]:
    return sorted(f"{src} imports {dep}" for src in sources for dep in mods[src]
                  if any(dep == f or dep.startswith(f + ".") for f in forbidden))


def test_the_parser_sees_lazy_and_relative_imports():
    mods = _modules()
    assert "netbench.benchmarks.rdma.pyverbs_plane" in mods["netbench.benchmarks.rdma.plane"]
    assert "netbench.analysis.compare" in mods["netbench.cli"]                   # lazy


def test_core_never_imports_a_benchmark():
    mods = _modules()
    core = [m for m in mods if not m.startswith("netbench.benchmarks")]
    assert _offenders(mods, core, ["netbench.benchmarks"]) == []


def test_benchmarks_import_only_the_api_and_their_own_helpers():
    mods = _modules()
    bad = []
    for src in _benchmark_modules(mods) | {"netbench.benchmarks"}:
        for dep in mods[src]:
            if dep.startswith("netbench.benchmarks") or dep in ("netbench", "netbench.api") \
                    or dep.startswith("netbench.api."):
                continue
            bad.append(f"{src} imports {dep}")
    assert bad == []


def test_running_never_imports_presentation_and_storage_knows_no_verdicts():
    mods = _modules()
    running = ["netbench.run.runner", "netbench.run.suite", "netbench.env.probe",
               "netbench.run.peer", "netbench.store", "netbench.registry", "netbench.hooks",
               "netbench.api"]
    assert _offenders(mods, running, ["netbench.report", "netbench.cli"]) == []
    analysis = [m for m in mods if m.startswith("netbench.analysis")]
    assert _offenders(mods, analysis, ["netbench.report", "netbench.cli",
                                       "netbench.run.runner"]) == []
    assert _offenders(mods, ["netbench.store"], ["netbench.analysis"]) == []


def test_importing_the_core_loads_no_benchmark():
    """And at run time too: the CLI's own import loads no benchmark module."""
    code = ("import sys, netbench.run.runner, netbench.store, netbench.cli, netbench.run.suite, "
            "netbench.analysis.compare, netbench.analysis.accept, netbench.report.dashboard;"
            "print([m for m in sys.modules if m.startswith('netbench.benchmarks.')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# The pipeline's stages, as folders: what each may import of the others (the arrows run down
# it: probe -> plan -> run -> store -> analyse -> present; cli, registry, hooks, api and the
# benchmarks sit beside it).
STAGES = ("env", "run", "sweep", "store", "analysis", "report")
MAY_IMPORT = {"env": set(), "run": {"env", "store"}, "sweep": {"env", "run", "store"},
              "store": set(), "analysis": {"env", "store"},
              "report": {"env", "store", "analysis"}}


def _stage(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in STAGES else None


def test_the_layout_is_the_pipeline_and_its_arrows_run_down_it():
    mods = _modules()
    assert {_stage(m) for m in mods} >= set(STAGES)        # every stage has its folder
    flat = sorted(m for m in mods if m.count(".") == 1 and _stage(m) is None
                  and m.split(".")[1] not in ("api", "errors", "registry", "stats", "cli",
                                              "hooks", "pytest_plugin", "textfile",
                                              "__main__", "benchmarks", "analysis", "report"))
    assert flat == [], f"modules outside the pipeline's folders: {flat}"
    upstream = sorted(f"{src} imports {dep}" for src, deps in mods.items()
                      for dep in deps if (s := _stage(src)) and (t := _stage(dep))
                      and t != s and t not in MAY_IMPORT[s])
    assert upstream == []


def test_the_stage_rule_can_fail():
    """The rule above, on a module graph that breaks it: storage importing a verdict."""
    mods = {"netbench.store.x": {"netbench.analysis.verdict"}}
    assert [f"{s} imports {d}" for s, deps in mods.items() for d in deps
            if _stage(d) not in MAY_IMPORT[_stage(s)]] == [
        "netbench.store.x imports netbench.analysis.verdict"]
