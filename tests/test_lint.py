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


def _is_module(dotted: str) -> bool:
    """Is this dotted name a module or package of ROOT's (not a name inside one)?"""
    base = ROOT.joinpath(*dotted.split("."))
    return (base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()
            or base.with_suffix(".c").is_file())     # a compiled extension, built or not


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
            # ``from x import mod`` imports x.mod; x itself only as every import of a
            # submodule loads its package first, which is no arrow of this module's.
            subs = {f"{stem}.{alias.name}" for alias in node.names}
            modules = {s for s in subs if _is_module(s)}
            found |= modules
            # From outside the package, its __init__ runs for this module: an arrow to it.
            if len(modules) < len(subs) or not name.startswith(stem + "."):
                found.add(stem)
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
    assert "netbench.benchmarks.rdma.pyverbs_plane" in mods["netbench.benchmarks.rdma.choice"]
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
                  and m.split(".")[1] not in ("api", "errors", "registry", "stats", "units", "host",
                                              "fingerprint",
                                              "cli", "hooks", "pytest_plugin", "textfile",
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


# --- analysis and report read what a case declared, never who the benchmark is -----------------

def _benchmark_names() -> set[str]:
    import tomllib

    table = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return set(table["project"]["entry-points"]["netbench.benchmarks"])


def _name_tests(source: str, names: set[str]) -> list[str]:
    """String constants in code (docstrings aside) that name a benchmark or a family's
    prefix ("tcp.stream", "coll.", "gpu.*"): a reader telling benchmarks apart by name."""
    families = {n.split(".", 1)[0] for n in names}
    tree = ast.parse(source)
    docs = {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef,
                                 ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docs:
            text = node.value
            # A bare family name is also a transport's ("tcp", "rdma"): a declared column.
            if text in names or text in {f"{f}." for f in families} | {
                    f"{f}.*" for f in families}:
                found.append((node.lineno, node.col_offset, f"line {node.lineno}: {text!r}"))
    return [text for *_, text in sorted(found)]


def test_analysis_and_report_never_ask_the_registry_nor_test_a_benchmark_name():
    """What they need of a case (its headline, which way the data flows, bytes per
    operation, the bus factor, the reference tool's columns) is stored in its rows."""
    mods = _modules()
    readers = [m for m in mods if _stage(m) in ("analysis", "report")]
    assert _offenders(mods, readers, ("netbench.registry", "netbench.benchmarks")) == []
    names = _benchmark_names()
    found = {str(p.relative_to(ROOT)): hits for p in [*(PACKAGE / "analysis").rglob("*.py"),
                                                     *(PACKAGE / "report").rglob("*.py")]
             if (hits := _name_tests(p.read_text(), names))}
    assert found == {}


def test_the_name_rule_can_fail():
    names = {"coll.all_reduce", "gpu.loader_feed"}
    code = ('"""About coll.all_reduce."""\n'
            'def f(rows):\n    """gpu.loader_feed in a docstring is prose."""\n'
            '    a = rows[rows["benchmark"].str.startswith("coll.")]\n'
            '    return a, rows["benchmark"] != "gpu.loader_feed", "gpu.*"\n')
    assert _name_tests(code, names) == ["line 4: 'coll.'", "line 5: 'gpu.loader_feed'",
                                        "line 5: 'gpu.*'"]


def _cycles(mods: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in mods.get(v, ()):
            if w not in mods:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                out.append(sorted(group))

    for v in sorted(mods):
        if v not in index:
            visit(v)
    return out


def test_no_import_circle_anywhere():
    """Every module of netbench/, lazy imports included (the RDMA planes and the plane that
    chose between them were one; the package and its store another)."""
    assert _cycles(_modules()) == []
    assert _cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]    # it can fail


def test_a_compiled_extension_or_a_submodule_is_no_import_of_its_package():
    mods = _modules()
    assert "netbench.benchmarks.tcp._fastloop" in mods["netbench.benchmarks.tcp.loops"]
    assert "netbench.benchmarks.tcp" not in mods["netbench.benchmarks.tcp.loops"]
    assert "netbench" not in mods["netbench.api"] and "netbench.stats" in mods["netbench.api"]


# What api.py may import: the modules whose names it re-exports to plugins. It declares; the
# host probes (host.py) and the units (units.py) read and convert.
API_REEXPORTS = {"netbench.errors", "netbench.stats", "netbench.units", "netbench.host",
                 "netbench.env", "netbench.fingerprint",
                 "netbench.env.softroce", "netbench.env.launch", "netbench.run.wire"}


def _reads_files(source: str) -> list[str]:
    return sorted(f"line {n.lineno}: {ast.unparse(n.func)}" for n in ast.walk(ast.parse(source))
                  if isinstance(n, ast.Call) and (
                      isinstance(n.func, ast.Name) and n.func.id == "open"
                      or isinstance(n.func, ast.Attribute) and n.func.attr in (
                          "read_text", "read_bytes", "glob", "walk")))


def test_api_is_only_the_contract():
    assert imports_of(PACKAGE / "api.py") <= API_REEXPORTS, imports_of(PACKAGE / "api.py")
    assert _reads_files((PACKAGE / "api.py").read_text()) == []
    assert _reads_files("def f(p):\n    return open(p), p.read_text()\n") == [
        "line 2: open", "line 2: p.read_text"]                          # it can fail


# --- the CLI parses and dispatches --------------------------------------------------------------

# cli.py was 889 lines, cmd_run 112 of them; issue 22 left it at 607 (630 with fabric's
# --pattern adaptive). A command parses its options, calls run/, sweep/ or analysis/, and
# prints what report/ returns. 670: issue 36 gave compare, history and report the suite's
# stored thresholds (their flags declared once) and run its time estimate and --interval.
# 685: issue 39's fabric --soak (declared, parsed, its ending chosen) and a soak under a
# launcher storing on rank 0 only. 690: issue 40's accept --expectations; 697: a run's end
# judged against published figures (the site's table beside its suite; the resume command
# built apart to keep cmd_run under 40 lines). 746: issue 41's healthcheck (its options, and
# the one place that runs a measurement and judges it: probe, run, accept, counters, Slurm);
# 760: --prom on healthcheck and compare (their verdicts for node_exporter, written as export's);
# 762: export carries a burn-in's verdict; 778: healthcheck judges the node before it measures (its
# measurement a function apart), compare --prom honours --allow-lost; 779: one check at a time.
CLI_LINES = 779
CLI_FUNCTION_LINES = 40


def _long_functions(source: str, limit: int = CLI_FUNCTION_LINES) -> list[str]:
    """Functions longer than ``limit`` lines; build_parser, the declaration of every option,
    aside."""
    return sorted(f"{node.name}: {node.end_lineno - node.lineno + 1} lines"
                  for node in ast.walk(ast.parse(source))
                  if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.name != "build_parser"
                  and node.end_lineno - node.lineno + 1 > limit)


def test_the_cli_stays_thin():
    """Planning, the store, the run's env and resume are run/session.py's; tables and the
    end-of-run text report/console.py's. A second orchestration or presentation layer
    growing back in cli.py fails here."""
    source = (PACKAGE / "cli.py").read_text()
    assert _long_functions(source) == []
    assert len(source.splitlines()) <= CLI_LINES
    # The store a process writes to and the run itself are chosen and driven in run/.
    chosen_here = {"netbench.store.JsonlStore", "netbench.store.NullStore",
                   "netbench.run.runner.Runner", "netbench.run.runner.prepare_resume"}
    assert imports_of(PACKAGE / "cli.py") & chosen_here == set()


def _aligned_columns(source: str) -> list[str]:
    """f-string fields padded into columns ({name:<14}): a table being laid out."""
    return sorted(f"line {node.lineno}" for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.FormattedValue) and node.format_spec is not None
                  and any(isinstance(v, ast.Constant) and any(c in str(v.value) for c in "<>^")
                          for v in node.format_spec.values))


def test_the_cli_lays_out_no_table():
    """Every table (list, runs, compare, history, accept) is report/'s: cli.py prints what
    report/ returns."""
    assert _aligned_columns((PACKAGE / "cli.py").read_text()) == []
    assert _aligned_columns('def f(e):\n    print(f"{e:<14} {e!r}")\n') == ["line 2"]


def test_the_thin_cli_rule_can_fail():
    code = ("def cmd_x(args):\n" + "    print(args)\n" * 40
            + "def build_parser():\n" + "    pass\n" * 200)
    assert _long_functions(code) == ["cmd_x: 41 lines"]


# --- the fingerprint's keys are spelled in one module ------------------------------------------

# Keys the fingerprint shares with other tables (a row's host and device columns, a rank's
# name and kind, a port's state): only its own keys are held to netbench/fingerprint.py.
SHARED_WORDS = {"host", "device", "name", "kind", "rank", "world_size", "job", "bytes", "level",
                "state", "port", "ports", "mtu", "link_layer", "rate", "summary", "model",
                "driver", "os", "arch", "virtual", "hops", "netdev"}


def _fingerprint_keys() -> set[str]:
    from dataclasses import fields

    from netbench import fingerprint as fp

    keys = {k for td in (fp.Record, fp.Launcher, fp.Cache) for k in td.__annotations__}
    keys |= {f.name for dc in (fp.Nic, fp.RdmaPort, fp.RdmaDevice, fp.Gpu, fp.PciePath)
             for f in fields(dc)}
    return keys - SHARED_WORDS


def _keys_spelled(source: str, keys: set[str]) -> list[str]:
    """Each ``x["key"]``, ``x.get("key")``, ``{"key": ...}`` and ``"key" in x`` of ``keys``
    (a sysfs file of the same name, ``base / "fw_ver"``, is no key)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript):
            spelled = [node.slice]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("get", "pop", "setdefault") and node.args:
            spelled = node.args[:1]
        elif isinstance(node, ast.Dict):
            spelled = [k for k in node.keys if k is not None]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn) \
                and not isinstance(node.comparators[0], ast.Call):   # not `"x" in str(v)`
            spelled = [node.left]
        else:
            continue
        found += [f"line {k.lineno}: {k.value!r}" for k in spelled
                  if isinstance(k, ast.Constant) and k.value in keys]
    return sorted(set(found))


def test_only_the_fingerprint_module_spells_its_keys():
    """A stored fingerprint is read through netbench.fingerprint (typed, tolerant of an old or
    forged one), written through its Record: no other module walks the dict by hand."""
    keys = _fingerprint_keys()
    assert {"nics", "rdma_devices", "speed_mbps", "fw_ver", "cpu_cores", "pcie_paths"} <= keys
    found = {str(p.relative_to(ROOT)): hits for p in PACKAGE.rglob("*.py")
             if p.name != "fingerprint.py" and (hits := _keys_spelled(p.read_text(), keys))}
    assert found == {}


def test_the_fingerprint_key_rule_can_fail():
    code = ('def f(env, nic):\n    a = env.get("nics") or env["rdma_devices"]\n'
            '    return {"speed_mbps": 1}, "fw_ver" in nic, env["name"]\n')
    assert _keys_spelled(code, _fingerprint_keys()) == [
        "line 2: 'nics'", "line 2: 'rdma_devices'", "line 3: 'fw_ver'", "line 3: 'speed_mbps'"]


# --- presentation is handed data ------------------------------------------------------------------

# What only analysis does: read a store, choose runs, judge them.
STORE_READERS = ("netbench.store.protocol", "netbench.store.parquet", "netbench.store.jsonl",
                 "netbench.analysis.selection", "netbench.analysis.views")
CHOOSING_CALLS = {"read", "runs", "resolve", "dashboard_views", "analyse", "build",
                  "judge_selections", "judge_family", "comparison", "invocation_test", "judge"}


def _calls(source: str, names: set[str]) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)
            if name in names:
                found.append(f"line {node.lineno}: {name}()")
    return sorted(found)


def _documents(source: str) -> list[str]:
    """Where a module writes a document a machine reads: JUnit XML, indented JSON, print."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("xml"):
            found.append(f"line {node.lineno}: imports {node.module}")
        elif isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Name) and f.id == "print":
                found.append(f"line {node.lineno}: print()")
            elif isinstance(f, ast.Attribute) and f.attr == "dumps" \
                    and any(k.arg == "indent" for k in node.keywords):
                found.append(f"line {node.lineno}: json.dumps(indent=)")
    return sorted(found)


def test_presentation_is_handed_data_and_analysis_writes_no_document():
    """report/ renders what analysis chose and judged (analysis.views, compare.Comparison,
    history.History, fabric matrices): it reads no store and chooses no run; text, JSON and
    JUnit are all written in report/, none in analysis/."""
    mods = _modules()
    report = [m for m in mods if _stage(m) == "report"]
    assert _offenders(mods, report, STORE_READERS) == []
    found = {str(p.relative_to(ROOT)): hits for p in (PACKAGE / "report").rglob("*.py")
             if (hits := _calls(p.read_text(), CHOOSING_CALLS))}
    assert found == {}
    written = {str(p.relative_to(ROOT)): hits for p in (PACKAGE / "analysis").rglob("*.py")
               if (hits := _documents(p.read_text()))}
    assert written == {}


def test_the_presentation_rules_can_fail():
    code = ("from xml.etree import ElementTree\nimport json\n"
            "def f(store, h):\n    rows = store.read(['a'])\n    print(json.dumps(h, indent=1))\n")
    assert _calls(code, CHOOSING_CALLS) == ["line 4: read()"]
    assert _documents(code) == ["line 1: imports xml.etree", "line 5: json.dumps(indent=)",
                                "line 5: print()"]
