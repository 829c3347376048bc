"""RDMA on a host without RDMA: skipped rows that say why, and the soft-RoCE and import paths.

The verbs code itself runs against a real rxe device in the VM stage (`make bench-softroce`,
run by .ci/run): tools/softroce/in-vm.sh, faults.py and crosscheck.py.
"""

import json
import os
from pathlib import Path

import pytest
from conftest import assert_clean_error, netbench

from netbench import registry
from netbench.env.probe import probe

RDMA = ["rdma.write_bw", "rdma.read_bw", "rdma.send_bw", "rdma.write_lat", "rdma.read_lat",
        "rdma.send_lat"]
NO_RDMA = not probe()["rdma_devices"]


def test_all_six_are_registered_with_perftest_units():
    benches = registry.all_benchmarks()
    assert set(RDMA) <= set(benches)
    assert benches["rdma.write_bw"].metric("bw_avg").unit == "Gbit/s"
    assert benches["rdma.write_bw"].metric("msg_rate").unit == "Mpps"
    assert benches["rdma.write_lat"].metric("lat_p50").unit == "us (half RTT)"
    assert benches["rdma.read_lat"].metric("lat_p50").unit == "us (full RTT)"
    assert benches["rdma.send_lat"].metric("lat_p99.9").better == "lower"


def test_msg_size_all_is_perftest_a():
    cases = registry.get("rdma.write_bw").expand({"msg_size": "all"})
    sizes = [c.msg_size for c in cases]
    assert sizes[0] == 2 and sizes[-1] == 8 << 20 and len(sizes) == 23


@pytest.mark.skipif(not NO_RDMA, reason="this host has an RDMA device")
def test_without_a_device_rows_are_skipped_with_the_reason(tmp_path):
    proc = netbench("run", "rdma.write_bw", "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["status"] == "skipped" and row["transport"] == "rdma"
    assert "no RDMA device" in row["reason"] and "bench-softroce" in row["reason"]
    listing = json.loads(netbench("list", "--json").stdout)
    for bench in listing["benchmarks"]:
        if bench["name"] in RDMA:
            assert bench["available"] is False and "RDMA device" in bench["reason"]


@pytest.mark.skipif(not NO_RDMA, reason="this host has an RDMA device")
def test_suite_softroce_fallback_reports_why_it_could_not(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nsoftroce = "auto"\n[[case]]\nbenchmark = "rdma.write_lat"\n')
    proc = netbench("run", str(suite), "--json", "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    (row,) = json.loads(proc.stdout)
    assert row["status"] == "skipped" and "soft-RoCE failed" in row["reason"]
    assert "fallback: no RDMA device, and soft-RoCE could not be set up" in proc.stderr


def test_rxe_add_fails_clearly_where_it_cannot_work():
    if Path("/sys/module/rdma_rxe").exists():
        pytest.skip("this kernel has rdma_rxe loaded")
    proc = netbench("rxe", "add", "lo", "--name", "nbtest0")
    assert_clean_error(proc)
    line = next(ln for ln in proc.stderr.splitlines() if ln.startswith("netbench: error:"))
    # Each honest reason: not root, no modprobe (kmod), or a kernel without rdma_rxe.
    reasons = ["needs root"] if os.geteuid() != 0 else [
        "rdma_rxe", "`modprobe` is not installed (apt-get install kmod)"]
    assert any(reason in line for reason in reasons), line
    assert_clean_error(netbench("rxe", "del", "nope0"), "no soft RDMA device 'nope0'")
    assert netbench("rxe", "list").returncode == 0


def test_bad_suite_softroce_key(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nsoftroce = 3\n[[case]]\nbenchmark = "rdma.write_lat"\n')
    assert_clean_error(netbench("run", str(suite)), "s.toml:2:", "softroce")
    suite.write_text('[suite]\nsoft_roce = "auto"\n[[case]]\nbenchmark = "mem.copy"\n')
    assert_clean_error(netbench("run", str(suite)), "unknown key 'soft_roce'")


def test_jsonl_rows_import_into_parquet(tmp_path):
    rows = tmp_path / "rows.jsonl"
    proc = netbench("run", "mem.copy", "-p", "msg_size=64K", "--jsonl", str(rows))
    assert proc.returncode == 0, proc.stderr
    imported = netbench("import", str(rows), "--results", str(tmp_path / "res"))
    assert imported.returncode == 0, imported.stderr
    import pandas as pd

    df = pd.read_parquet(tmp_path / "res")
    assert set(df["metric"]) == {"bw", "bw_peak"} and str(df["started_at"].dt.tz) == "UTC"
    rows.write_text(rows.read_text() + "{not json\n")
    assert_clean_error(netbench("import", str(rows), "--results", str(tmp_path / "res")),
                       "rows.jsonl:3: not a netbench result row")
    assert_clean_error(netbench("import", str(tmp_path / "missing.jsonl")), "cannot read")


def test_runs_from_an_uninstalled_source_tree(tmp_path):
    """The soft-RoCE VM runs netbench from the checkout with the distribution's Python."""
    import shutil
    import subprocess
    import sys

    from conftest import ROOT

    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "netbench", tree / "netbench",
                    ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    code = ("import sys; sys.path = [p for p in sys.path if 'site-packages' not in p];"
            "sys.path.insert(0, sys.argv[1]);"
            "from netbench import registry; print(sorted(registry.all_benchmarks()))")
    out = subprocess.run([sys.executable, "-S", "-c", code, str(tree)], capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "rdma.write_bw" in out.stdout and "tcp.stream" in out.stdout


def test_softroce_setup_keeps_what_the_cli_added_to_the_environment(monkeypatch):
    """The RDMA family's run set-up makes rxe0; the runner then probes again (the device is
    new) but keeps the launcher and collective facts the CLI put in the fingerprint, and
    undoes the set-up at the end. rdma_rxe cannot load on this kernel, so the two
    kernel-facing calls are stood in for."""
    from netbench.env import softroce
    from netbench.run import runner as runner_mod
    from netbench.run.suite import Plan, plan_single
    from netbench.store import NullStore

    removed = []
    monkeypatch.setattr(softroce, "add", lambda netdev, name: "lo")
    monkeypatch.setattr(softroce, "remove", lambda name: removed.append(name))
    monkeypatch.setattr(runner_mod, "probe", lambda root=None: {"host": "h",
                                                                "rdma_devices": [{"name": "rxe0"}]})
    env = {"host": "h", "rdma_devices": [], "launcher": {"name": "torchrun", "rank": 0},
           "collective_env": {"NCCL_DEBUG": "INFO"}}
    run = runner_mod.Runner(NullStore(), env)
    cases = plan_single("rdma.write_lat", {}).cases + plan_single("mem.copy", {}).cases
    result = runner_mod.RunResult("r", None)
    setups = run._prepare(Plan("s", cases, {"softroce": "auto"}), result)
    assert [family for family, _ in setups] == ["rdma"]           # mem has nothing to set up
    assert run.env["rdma_devices"] == [{"name": "rxe0"}]
    assert run.env["launcher"] == {"name": "torchrun", "rank": 0}
    assert run.env["collective_env"] == {"NCCL_DEBUG": "INFO"}
    assert "created soft-RoCE rxe0 on lo" in result.fallbacks[0]
    setups[0][1].close()
    assert removed == ["rxe0"]
