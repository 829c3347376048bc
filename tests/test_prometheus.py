"""The alert rules netbench ships, checked and unit-tested with Prometheus's own promtool,
and netbench's verdict files read by a real node_exporter's textfile collector, scraped on
loopback (Debian's prometheus and prometheus-node-exporter; `make test` installs them)."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request

import pytest
from conftest import ROOT, netbench
from prometheus_client.parser import text_string_to_metric_families

RULES = ROOT / "deploy" / "prometheus" / "netbench.rules.yml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "netbench.rules.test.yml"
EXPORTER = "prometheus-node-exporter"


def _promtool() -> str:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.skip("needs promtool (apt-get install prometheus; make test installs it)")
    return tool


def test_the_shipped_alert_rules_pass_promtools_check_and_their_unit_tests():
    tool = _promtool()
    checked = subprocess.run([tool, "check", "rules", str(RULES)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 0 and "SUCCESS: 6 rules found" in checked.stdout, checked
    tested = subprocess.run([tool, "test", "rules", str(RULE_TESTS)], capture_output=True,
                            text=True, timeout=120)
    assert tested.returncode == 0 and "SUCCESS" in tested.stdout, tested.stdout + tested.stderr


def test_the_rule_tests_fail_a_rule_that_would_not_fire(tmp_path):
    """The unit tests can fail: a rule whose bound is wrong (a healthy node alerting, a failed
    one silent) is caught."""
    tool = _promtool()
    (tmp_path / "netbench.rules.yml").write_text(
        RULES.read_text().replace("netbench_healthcheck_healthy == 0",
                                  "netbench_healthcheck_healthy == 1"))
    shutil.copy(RULE_TESTS, tmp_path / "netbench.rules.test.yml")
    tested = subprocess.run([tool, "test", "rules", str(tmp_path / "netbench.rules.test.yml")],
                            capture_output=True, text=True, timeout=120)
    assert tested.returncode != 0 and "NetbenchNodeUnhealthy" in tested.stdout + tested.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_node_exporters_textfile_collector_serves_a_failed_checks_verdict(tmp_path):
    """A real health check that fails (an interface that is not there) and a run's export,
    written where node_exporter's textfile collector reads, scraped from it on loopback: the
    verdict series are there as netbench wrote them, and the collector reports no error."""
    exporter = shutil.which(EXPORTER)
    if exporter is None:
        pytest.skip(f"needs {EXPORTER} (apt-get install prometheus-node-exporter)")
    textfiles = tmp_path / "textfile"
    textfiles.mkdir()
    spec = tmp_path / "hc.toml"
    spec.write_text('[suite]\nname = "hc"\n\n[healthcheck]\nnetdevs = ["nbgone0", "lo"]\n\n'
                    '[[case]]\nbenchmark = "mem.copy"\nmsg_size = "1M"\niterations = 3\n')
    results = str(tmp_path / "r")
    check = netbench("healthcheck", str(spec), "--results", results, "--prom",
                     str(textfiles / "netbench-health.prom"))
    assert check.returncode == 1, check.stdout + check.stderr
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=3",
                    "--results", results).returncode == 0
    assert netbench("export", "--results", results, "-o",
                    str(textfiles / "netbench.prom")).returncode == 0
    port = _free_port()
    proc = subprocess.Popen([exporter, "--collector.disable-defaults", "--collector.textfile",
                             f"--collector.textfile.directory={textfiles}",
                             f"--web.listen-address=127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        text = ""
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    text = r.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        assert text, "node_exporter did not answer on loopback"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    healthy = [v for (name, labels), v in samples.items()
               if name == "netbench_healthcheck_healthy"]
    assert healthy == [0.0], text[:2000]
    failed = {dict(labels)["check"]: v for (name, labels), v in samples.items()
              if name == "netbench_healthcheck_check_ok"}
    assert failed == {"interface nbgone0": 0.0, "interface lo": 1.0}, failed
    assert any(name == "netbench_bw" and dict(labels).get("benchmark") == "mem.copy"
               for name, labels in samples), "the run's figures are served beside the verdict"
    errors = [v for (name, _), v in samples.items() if name == "node_textfile_scrape_error"]
    assert errors == [0.0], errors


def test_a_burn_ins_verdict_is_exported_beside_its_figures(tmp_path):
    """A real soak (tcp.rr against the loopback server, 3 windows): its export carries the
    burn-in's dips, worst share and link events per case, which NetbenchBurnInDip reads."""
    results = str(tmp_path / "r")
    soaked = netbench("soak", "tcp.rr", "--duration", "3s", "--window", "1s", "--results",
                      results, "--json")
    assert soaked.returncode in (0, 1), soaked.stderr
    [case] = [c for c in json.loads(soaked.stdout)["cases"]]
    text = netbench("export", "--results", results).stdout
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("netbench_soak_dips", "netbench_soak_lowest_share", "netbench_soak_link_events"):
        [sample] = families[name].samples
        assert sample.labels["benchmark"] == "tcp.rr" and sample.labels["case"] == "msg_size=64"
    assert families["netbench_soak_dips"].samples[0].value == len(case["dips"])
    assert families["netbench_soak_lowest_share"].samples[0].value == pytest.approx(
        case["lowest"])
    # A run that is no burn-in exports no soak series.
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=3",
                    "--results", str(tmp_path / "plain")).returncode == 0
    assert "netbench_soak_dips" not in netbench("export", "--results",
                                                str(tmp_path / "plain")).stdout


def test_compare_prom_says_the_gate_as_the_exit_code_does(h200_results, tmp_path):
    """A case measured before and gone now: lost, the gate failed (exit 1); with --allow-lost
    the exit is 0 and so is netbench_compare_gate_failed."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = next(h200_results.glob("2*d85820a297fd.parquet"))
    table = pq.read_table(path)
    rows = [r for r in table.to_pylist() if r["benchmark"] != "mem.copy"]
    later = tmp_path / "later"
    later.mkdir()
    for r in rows:
        r["run_id"], r["started_at"] = "ab12cd34ef56", pd.Timestamp("2026-12-01", tz="UTC")
    pq.write_table(pa.Table.from_pylist(rows, schema=table.schema),
                   later / "20261201T000000-ab12cd34ef56.parquet")
    out = tmp_path / "cmp.prom"
    for flags, code, gate in (((), 1, 1.0), (("--allow-lost",), 0, 0.0)):
        done = netbench("compare", str(h200_results), str(later), *flags, "--prom", str(out))
        assert done.returncode == code, done.stdout + done.stderr
        families = {f.name: f for f in text_string_to_metric_families(out.read_text())}
        assert families["netbench_compare_gate_failed"].samples[0].value == gate
        lost = [s for s in families["netbench_compare_verdict"].samples
                if s.labels["verdict"] == "lost"]
        assert lost and {s.labels["benchmark"] for s in lost} == {"mem.copy"}
