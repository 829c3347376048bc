"""mem.copy: the host's memcpy bound is the memory's rate, read from buffers well beyond the
last-level cache, and every row names the size it copied and where that stands."""

import json

from conftest import netbench

from netbench.api import BEYOND_CACHE, format_size, last_level_cache


def test_default_is_beyond_the_last_level_cache_and_the_row_names_its_size(tmp_path):
    cache = last_level_cache()
    proc = netbench("run", "mem.copy", "-p", "iterations=2", "-p", "warmup=1", "--json",
                    "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = {r["metric"]: r for r in json.loads(proc.stdout)}
    bw = rows["bw"]
    assert bw["status"] == "ok" and bw["value"] > 0
    # The case is what was asked (msg_size=0: the bound); the row says the size it copied.
    assert json.loads(bw["params"])["msg_size"] == 0
    size = json.loads(bw["resolved"])["msg_size"]
    assert size == bw["msg_size"] and size & (size - 1) == 0      # no size 0: the one copied
    if cache is not None:                # here /sys says: 32M L3 -> 256M buffers
        llc, level = cache
        assert size >= BEYOND_CACHE * llc
        assert f"{format_size(size)} buffers, " in bw["reason"]
        assert f"x the {format_size(llc)} L{level}: memory, not cache" in bw["reason"]
    assert "huge pages" in bw["reason"] or "4 KiB pages" in bw["reason"]
    assert rows["bw_peak"]["value"] >= bw["value"]
    # The progress line, the console's table and case name say the size, never 0 alone.
    assert f"mem.copy msg_size=0 (the bound: {format_size(size)} buffers)" in proc.stderr
    table = proc.stderr.split("mem.copy", 1)[1]
    assert format_size(size) in table and "\n0 " not in table


def test_one_size_within_the_cache_says_it_read_the_cache(tmp_path):
    proc = netbench("run", "mem.copy", "-p", "msg_size=4M", "-p", "hugepages=false", "-p",
                    "iterations=3", "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    bw = next(r for r in json.loads(proc.stdout) if r["metric"] == "bw")
    assert bw["msg_size"] == 4 << 20 and json.loads(bw["params"])["msg_size"] == 4 << 20
    assert bw["reason"].endswith("4 KiB pages (huge pages not requested)")
    cache = last_level_cache()
    if cache is not None and 4 << 20 < BEYOND_CACHE * cache[0]:
        assert "this reads the cache, not a memory bound" in bw["reason"]
    assert len(bw["samples"]) == 3


def test_the_dashboards_bound_is_the_copy_beyond_the_cache_not_a_sweeps_best(tmp_path):
    """A 1M..256M sweep: the 1M copy (in the cache) is the fastest, the bound drawn is 256M's."""
    from netbench.report.dashboard import bandwidth_chart
    from netbench.store import ResultStore

    cache = last_level_cache()
    res = tmp_path / "res"
    assert netbench("run", "mem.copy", "-p", "msg_size=1M,256M", "-p", "iterations=5",
                    "--results", str(res)).returncode == 0
    assert netbench("run", "tcp.stream", "-p", "duration=0.3", "--results",
                    str(res)).returncode == 0
    rows = ResultStore(res).read()
    chart = bandwidth_chart(rows)
    drawn = [t for t in chart["data"] if t["name"].startswith("host memcpy bound")]
    if cache is not None and 256 << 20 < BEYOND_CACHE * cache[0]:
        # A cache this large (480 MiB of L3 on some hosts) holds 256M as well: no copy here
        # is a memory bound, and the chart says so rather than draw a cache's rate.
        assert drawn == [] and "no memcpy bound" in chart["layout"]["title"]["text"]
        return
    (bound,) = drawn
    copies = rows[(rows.benchmark == "mem.copy") & (rows.metric == "bw")]
    at_256m = float(copies.loc[copies.msg_size == 256 << 20, "value"].iloc[0])
    assert bound["y"][0] == at_256m * 8
    if cache is not None:
        assert f"at 256M, beyond the {format_size(cache[0])} L{cache[1]}" in bound["name"]
