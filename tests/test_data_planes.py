"""Who times the loop is a param, chosen in one place, and the row says what ``auto`` became
(``resolved``), beside the params as planned."""

import json

import pytest
from conftest import netbench

from netbench.api import SkipCase
from netbench.benchmarks.tcp import loops


def test_tcp_rr_records_the_loop_auto_became(tmp_path):
    run = netbench("run", "tcp.rr", "-p", "iterations=200", "-p", "warmup=20", "-p",
                   "data_plane=python", "--json", "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    assert {json.loads(r["params"])["data_plane"] for r in rows} == {"python"}
    assert {json.loads(r["resolved"])["data_plane"] for r in rows} == {"python"}
    run = netbench("run", "tcp.rr", "-p", "iterations=200", "-p", "warmup=20", "--json",
                   "--results", str(tmp_path))
    want = "compiled" if loops._fastloop is not None else "python"
    rows = json.loads(run.stdout)
    assert {json.loads(r["params"])["data_plane"] for r in rows} == {"auto"}    # the case
    assert {json.loads(r["resolved"])["data_plane"] for r in rows} == {want}    # what it ran


def test_a_loop_asked_for_by_name_and_not_built_is_skipped_saying_why(monkeypatch):
    monkeypatch.setattr(loops, "_fastloop", None)
    monkeypatch.setattr(loops, "_WHY", "No module named '_fastloop'")
    assert loops.choose_loop("auto").name == "python"
    with pytest.raises(SkipCase, match="C loop is not built .No module named"):
        loops.choose_loop("compiled")


def test_the_rdma_plane_asked_for_by_name_and_not_built_is_skipped_saying_why(monkeypatch):
    pytest.importorskip("pyverbs")
    import sys

    from netbench.benchmarks.rdma import plane

    monkeypatch.setitem(sys.modules, "netbench.benchmarks.rdma.compiled_plane", None)
    chosen, fallback = plane.choose({"data_plane": "auto"})
    assert chosen.name == "pyverbs" and "C data plane was not built" in fallback
    with pytest.raises(SkipCase, match="data_plane=compiled: the C data plane is not built"):
        plane.choose({"data_plane": "compiled"})
