"""A case's traits: what analysis and reports need to know of it (its headline, which way the
data flows, bytes per operation, the bus factor, what a size means, the reference tool's
columns), declared by its benchmark, stored in every row, read back without the plugin."""

import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import H200_RESULTS, netbench

from netbench import registry
from netbench.api import FLOWS, Benchmark, Case, Measurement, Metric, Traits
from netbench.store import COLUMNS, ResultStore

TRAITS = ("headline", "flow", "op_bytes", "bus_factor", "size_means", "lead", "trail")


def _case(name: str, **params) -> Case:
    bench = registry.get(name)
    planned = {p.name: p.default for p in bench.params} | params
    return Case(name, planned)


def test_every_benchmark_declares_traits_the_store_has_columns_for():
    assert set(TRAITS) <= {name for name, _ in COLUMNS}
    for name, bench in registry.all_benchmarks().items():
        traits = bench.traits(_case(name))
        assert traits.headline in {m.name for m in bench.metrics}, name
        assert traits.flow in (*FLOWS, None), name
        assert set(traits.as_row()) == set(TRAITS), name


@pytest.mark.parametrize("name, params, flow", [
    ("tcp.stream", {}, "forward"), ("tcp.stream", {"direction": "reverse"}, "reverse"),
    ("tcp.stream", {"direction": "both"}, "both"), ("tcp.rr", {}, "both"),
    ("rdma.write_bw", {}, "forward"), ("rdma.read_bw", {}, "reverse"),
    ("rdma.send_bw", {"bidirectional": True}, "both"), ("rdma.write_lat", {}, "both"),
    ("rdma.read_lat", {}, "reverse"), ("gpu.h2d", {}, "forward"), ("gpu.d2h", {}, "reverse"),
    ("gpu.bidir", {}, "both"), ("mem.copy", {}, None), ("coll.all_reduce", {}, None),
])
def test_which_way_the_data_flows(name, params, flow):
    assert registry.get(name).traits(_case(name, **params)).flow == flow


def test_the_reference_tools_columns_and_bytes_per_operation():
    coll = registry.get("coll.all_gather").traits(
        _case("coll.all_gather", msg_size=4096, world_size=4), Measurement({}, op_bytes=4096))
    assert coll.bus_factor == 0.75 and coll.op_bytes == 4096        # (n-1)/n
    assert coll.lead == (("count", "1,024"), ("type", "float32"))
    assert coll.trail == (("#wrong", "0"),)
    skipped = registry.get("coll.all_reduce").traits(_case("coll.all_reduce", world_size=8))
    assert skipped.bus_factor == 1.75 and skipped.trail == (("#wrong", "-"),)
    assert dict(skipped.lead)["redop"] == "sum"
    lat = registry.get("rdma.write_lat")
    timed = Measurement({}, {"lat_p50": [1.0] * 1500})
    assert lat.traits(_case("rdma.write_lat", duration=2.0), timed).lead == (
        ("#iterations", "1,500"),)                  # duration-bound: what it timed
    assert lat.traits(_case("rdma.write_lat")).lead == (("#iterations", "-"),)
    bw = registry.get("rdma.write_bw")
    assert bw.traits(_case("rdma.write_bw"), Measurement({})).lead == (("#iterations", "5,000"),)
    feed = registry.get("gpu.loader_feed").traits(_case("gpu.loader_feed"))
    assert feed.op_bytes == 256 * 3 * 224 * 224 and feed.size_means == "bytes per batch"
    copy = registry.get("mem.copy").traits(_case("mem.copy"), Measurement(
        {}, resolved={"msg_size": 1 << 28}))
    assert copy.op_bytes == 1 << 28                  # msg_size=0 (the bound) as measured


def test_a_flow_outside_the_declared_ones_is_refused():
    with pytest.raises(ValueError, match="flow must be one of forward, reverse, both"):
        Traits("x", flow="sideways")


def test_a_run_stores_each_cases_traits_in_its_rows(tmp_path):
    res = tmp_path / "res"
    for args in (("tcp.stream", "-p", "direction=reverse", "-p", "duration=0.2",
                  "-p", "warmup=0", "-p", "msg_size=64K"),
                 ("tcp.rr", "-p", "iterations=100", "-p", "warmup=10")):
        proc = netbench("run", *args, "--results", str(res))
        assert proc.returncode == 0, proc.stderr
    rows = pd.read_parquet(res)                     # the raw files, no plugin needed
    stream = rows[rows["benchmark"] == "tcp.stream"]
    assert set(stream["headline"]) == {"goodput"} and set(stream["flow"]) == {"reverse"}
    assert set(stream["op_bytes"]) == {65536} and set(stream["size_means"]) == {"message"}
    rr = rows[rows["benchmark"] == "tcp.rr"]
    assert set(rr["headline"]) == {"lat_p50"} and set(rr["flow"]) == {"both"}
    assert rows["bus_factor"].isna().all() and rows["lead"].isna().all()
    # What each value summarises, as its Metric declares it (verdicts judge extremes by runs).
    stat = dict(zip(rr["metric"], rr["statistic"]))
    assert stat["lat_max"] == "max" and stat["lat_p99.9"] == "p99.9" and stat["lat_min"] == "min"
    assert pd.isna(stat["lat_p50"]) and pd.isna(stat["tps"])
    assert stream["statistic"].isna().all()


class _Broken(Benchmark):
    name = "demo.broken_traits"
    transport = "none"
    metrics = (Metric("x", "us", "lower"),)

    def run(self, case, ctx):
        return Measurement({"x": 1.0})

    def traits(self, case, measured=None):
        raise RuntimeError("no idea")


def test_a_plugin_whose_traits_fail_keeps_its_figures(tmp_path):
    from netbench.env.probe import probe
    from netbench.run.runner import Runner
    from netbench.run.suite import Plan, PlannedCase

    bench = _Broken()
    plan = Plan("adhoc", [PlannedCase(Case(bench.name, {}), bench, 30.0)])
    result = Runner(ResultStore(tmp_path / "res"), probe()).run(plan)
    rows = pd.read_parquet(tmp_path / "res")
    assert list(rows["value"]) == [1.0] and list(rows["headline"]) == ["x"]    # defaults
    assert any("traits() failed" in line and "no idea" in line for line in result.fallbacks)


def test_files_from_before_traits_read_them_from_the_installed_benchmarks():
    raw = pd.read_parquet(H200_RESULTS)
    assert "headline" not in raw                     # written before traits were stored
    rows = ResultStore(H200_RESULTS, registry.stored_traits).read()
    assert rows["headline"].notna().all()
    feed = rows[rows["benchmark"] == "gpu.loader_feed"]
    for params, op_bytes in zip(feed["params"], feed["op_bytes"]):     # one batch each
        p = json.loads(params)
        dims = [int(d) for d in p["sample_shape"].split("x")]
        assert op_bytes == p["batch_size"] * dims[0] * dims[1] * dims[2]    # uint8
    assert 256 * 3 * 224 * 224 in set(feed["op_bytes"])
    assert set(rows.loc[rows["benchmark"] == "gpu.bidir", "flow"]) == {"both"}
    # Each metric's statistic, from what the installed benchmark declares of it.
    stats = rows.groupby(["benchmark", "metric"])["statistic"].first()
    assert stats[("tcp.rr", "lat_max")] == "max" and stats[("mem.copy", "bw_peak")] == "max"
    assert stats[("tcp.rr", "lat_p99.9")] == "p99.9" and pd.isna(stats[("tcp.rr", "lat_p50")])
    coll = rows[(rows["benchmark"].str.startswith("coll.")) & (rows["status"] == "ok")]
    if len(coll):
        assert coll["bus_factor"].notna().all()
        assert all(json.loads(t) == [["#wrong", "0"]] for t in coll["trail"])
    # Without the upgrade the store still reads them, the traits missing.
    plain = ResultStore(H200_RESULTS).read()
    assert len(plain) == len(rows) and plain["headline"].isna().all()


def test_a_case_stored_before_its_benchmark_gained_a_param_is_the_same_case_after(tmp_path):
    """The h200 fixture's coll.* rows were stored before coll.* declared ``cpu_bind``,
    ``duration`` and ``path``: read through the CLI's upgrade they hold them at their
    defaults (their own params untouched), so a run of the same case since compares against
    them instead of "no case in common" (every such baseline read as lost after an upgrade)."""
    import shutil

    res = Path(shutil.copytree(H200_RESULTS, tmp_path / "res"))
    raw = pd.read_parquet(res)
    old = raw[raw["benchmark"] == "coll.all_reduce"]["params"]
    assert not any("duration" in json.loads(p) or "cpu_bind" in json.loads(p) for p in old)
    rows = ResultStore(res, registry.stored_traits).read()
    for before, after in zip(old, rows[rows["benchmark"] == "coll.all_reduce"]["params"]):
        added = json.loads(after)
        assert added.pop("duration") == 0.0 and added.pop("cpu_bind") == "none"
        assert added.pop("path") == "auto"
        assert added == json.loads(before)
    new = netbench("run", "coll.all_reduce", "-p", "msg_size=4096", "-p", "iterations=10",
                   "-p", "warmup=5", "--results", str(res), "--label", "new", timeout=180)
    assert new.returncode == 0, new.stderr
    (old_run,) = {r for r, b in zip(raw["run_id"], raw["benchmark"]) if b == "coll.all_reduce"}
    compared = netbench("compare", old_run, "new", "--results", str(res))
    assert "no case in common" not in compared.stderr, compared.stderr
    assert "coll.all_reduce msg_size=4K  busbw" in compared.stdout, compared.stdout
    assert "0 lost" in compared.stdout, compared.stdout
