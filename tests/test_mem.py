"""mem.copy: the host's memcpy bound is the best it does, and the row says how it was got."""

import json

from conftest import netbench


def test_default_is_the_best_over_sizes_and_the_row_names_it(tmp_path):
    proc = netbench("run", "mem.copy", "-p", "iterations=2", "-p", "warmup=1", "--json",
                    "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = {r["metric"]: r for r in json.loads(proc.stdout)}
    bw = rows["bw"]
    assert bw["status"] == "ok" and bw["value"] > 0
    params = json.loads(bw["params"])
    assert params["msg_size"] == 0 and params["bound_size"] in (16 << 20, 64 << 20, 256 << 20,
                                                                 1 << 30)
    assert bw["reason"].startswith("best of 16M")
    assert "huge pages" in bw["reason"] or "4 KiB pages" in bw["reason"]
    assert rows["bw_peak"]["value"] >= bw["value"]


def test_one_size_on_plain_pages_says_so(tmp_path):
    proc = netbench("run", "mem.copy", "-p", "msg_size=4M", "-p", "hugepages=false", "-p",
                    "iterations=3", "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    bw = next(r for r in json.loads(proc.stdout) if r["metric"] == "bw")
    assert bw["msg_size"] == 4 << 20 and "bound_size" not in json.loads(bw["params"])
    assert bw["reason"] == "4 KiB pages (huge pages not requested)"
    assert len(bw["samples"]) == 3
