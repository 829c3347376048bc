"""Third-party plugins register through the same entry-point group as the built-ins."""

import json
import os
import textwrap

from conftest import install_plugin, netbench

from netbench import load as netbench_load
from netbench import registry

PLUGIN = '''
from netbench.api import Benchmark, Measurement, Metric, Param


class Echo(Benchmark):
    name = "demo.echo"
    transport = "none"
    description = "third-party demo"
    metrics = (Metric("value", "x", "higher"),)
    params = (Param("level", "int", 3, "the value to report", minimum=0),)

    def available(self, env):
        return None if env.get("kernel") else "no kernel?"

    def run(self, case, ctx):
        return Measurement({"value": float(case.params["level"])})


class NeedsHardware(Benchmark):
    name = "demo.hw"
    transport = "none"
    metrics = (Metric("value", "x", "higher"),)

    def available(self, env):
        return "no demo hardware on this host (plug one in)"
'''


def _install_plugin(tmp_path):
    folder = install_plugin(tmp_path, textwrap.dedent(PLUGIN), {
        "demo.echo": "demo_plugin:Echo", "demo.hw": "demo_plugin:NeedsHardware",
        "demo.broken": "demo_plugin:Missing"})
    return dict(os.environ, PYTHONPATH=folder)


def test_builtins_come_from_entry_points():
    names = set(registry.all_benchmarks())
    assert {"tcp.stream", "tcp.rr", "mem.copy"} <= names


def test_third_party_plugin_lists_runs_and_skips(tmp_path):
    env = _install_plugin(tmp_path)
    listing = json.loads(netbench("list", "--json", env=env).stdout)
    names = {b["name"]: b for b in listing["benchmarks"]}
    assert names["demo.echo"]["available"] is True
    assert names["demo.hw"]["reason"] == "no demo hardware on this host (plug one in)"
    assert "demo.broken" in listing["broken_plugins"]
    run = netbench("run", "demo.echo", "-p", "level=7", "--json", "--results",
                   str(tmp_path / "r"), env=env)
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)
    assert row["value"] == 7.0 and row["family"] == "demo" and row["op"] == "echo"
    skipped = netbench("run", "demo.hw", "--json", "--results", str(tmp_path / "r"), env=env)
    assert skipped.returncode == 0
    (row,) = json.loads(skipped.stdout)
    assert row["status"] == "skipped" and "plug one in" in row["reason"]
    assert "skipped: demo.hw: no demo hardware" in skipped.stderr
    broken = netbench("run", "demo.broken", env=env)
    assert broken.returncode == 2 and "failed to load" in broken.stderr


HOOKS = '''
import json
import os


class Site:
    """What a site would add: its own facts in every fingerprint, rows shipped elsewhere."""

    @staticmethod
    def update_env(env):
        env["site"] = {"rack": "r42", "switch_fw": "3.12.1"}

    @staticmethod
    def case_finished(rows):
        with open(os.environ["DEMO_HOOK_OUT"], "a") as f:
            f.write(json.dumps([r["metric"] for r in rows]) + "\\n")

    @staticmethod
    def run_finished(rows):
        with open(os.environ["DEMO_HOOK_OUT"], "a") as f:
            f.write(f"run {len(rows)}\\n")


class Broken:
    @staticmethod
    def case_finished(rows):
        raise RuntimeError("the collector is down")


class Typo:
    @staticmethod
    def case_finshed(rows):
        raise AssertionError("a misspelt hook is never called")
'''


def test_hooks_extend_the_fingerprint_and_see_stored_rows(tmp_path):

    folder = install_plugin(tmp_path, textwrap.dedent(HOOKS), {
        "site": "demo_plugin:Site", "broken": "demo_plugin:Broken",
        "missing": "demo_plugin:Nowhere", "typo": "demo_plugin:Typo"}, group="netbench.hooks")
    out = tmp_path / "hook.log"
    env = dict(os.environ, PYTHONPATH=folder, DEMO_HOOK_OUT=str(out))
    listing = json.loads(netbench("list", "--json", env=env).stdout)
    assert sorted(listing["hooks"]) == ["broken", "site"]
    assert "missing" in listing["broken_hooks"][0]
    # Declared hooks: a misspelt one is an error at load, named, not a function never run.
    assert "hook typo failed to load: case_finshed is no hook (did you mean case_finished?)" \
        in listing["broken_hooks"], listing["broken_hooks"]
    run = netbench("run", "mem.copy", "-p", "msg_size=1M,2M", "-p", "iterations=2",
                   "--results", str(tmp_path / "r"), env=env)
    assert run.returncode == 0, run.stderr                   # broken hooks never stop a run
    assert "hook broken.case_finished failed: RuntimeError: the collector is down" in run.stderr
    assert "hook missing" in run.stderr
    assert out.read_text().splitlines() == ['["bw", "bw_peak"]', '["bw", "bw_peak"]', "run 4"]
    stored = netbench_load(tmp_path / "r")
    assert json.loads(stored["env_json"].iloc[0])["site"] == {"rack": "r42",
                                                              "switch_fw": "3.12.1"}
    assert json.loads(netbench("probe", "--json", env=env).stdout)["site"]["rack"] == "r42"


def test_a_plugins_rows_are_charted_and_what_is_not_drawn_is_said_once(tmp_path):
    """A plugin's rows, stored by a real run, get the dashboard's "other benchmarks" chart
    (never "charts: none"), and the page names what it does not draw in one list after the
    charts, by what a reader calls them (no "fabric_graph")."""
    import re

    env = _install_plugin(tmp_path)
    res = str(tmp_path / "r")
    suite = tmp_path / "s.toml"
    suite.write_text('[[case]]\nbenchmark = "demo.echo"\nlevel = 3\n'
                     '[[case]]\nbenchmark = "demo.echo"\nlevel = 7\n')
    run = netbench("run", str(suite), "--results", res, env=env)
    assert run.returncode == 0, run.stderr
    page = tmp_path / "d.html"
    report = netbench("report", "--results", res, "-o", str(page), env=env)
    assert report.returncode == 0, report.stderr
    assert "charts: other" in report.stdout, report.stdout
    text = page.read_text()
    data = json.loads(re.search(r"const NB = (.*?);\nfunction facts", text, re.S).group(1))
    other = data["views"][data["chosen"]]["figures"]["other"]
    (trace,) = other["data"]
    assert trace["name"] == "demo.echo (x)" and sorted(trace["x"]) == [3.0, 7.0]
    assert data["names"]["fabric_graph"] == "Switch graph"
    assert text.count('id="missing"') == 1 and 'id="empty-' not in text
