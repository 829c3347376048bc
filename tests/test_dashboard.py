"""netbench report: a self-contained dashboard, rendered in a real headless Chromium."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, assert_clean_error, netbench

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=20000"]
ARTIFACTS = ROOT / "artifacts"


def _chromium(tmp_path, *args):
    return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args],
                          capture_output=True, text=True, timeout=120)


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium (apt-get install chromium)")
def test_dashboard_renders_offline_without_errors(tmp_path):
    store = tmp_path / "res"
    suite = tmp_path / "s.toml"
    suite.write_text('[[case]]\nbenchmark = "tcp.stream"\nmsg_size = ["16K", "128K"]\n'
                     'duration = 0.5\n[[case]]\nbenchmark = "tcp.rr"\niterations = 500\n'
                     '[[case]]\nbenchmark = "rdma.write_bw"\n[[case]]\nbenchmark = '
                     '"coll.all_reduce"\nmsg_size = ["4K", "64K"]\niterations = 3\n'
                     '[[case]]\nbenchmark = "mem.copy"\niterations = 3\n')
    for label in ("before", "after"):
        run = netbench("run", str(suite), "--results", str(store), "--label", label,
                       timeout=300)
        assert run.returncode == 0, run.stderr
    page = tmp_path / "dash.html"
    proc = netbench("report", "--results", str(store), "-o", str(page), "--baseline", "before",
                    "--candidate", "after")
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    assert "<script src=" not in text and "<link " not in text     # nothing to fetch: offline
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-status="rendered"' in body and 'data-errors="0"' in body, body
    expected = 4 if "coll.all_reduce" in text else 3
    assert int(re.search(r'data-charts="(\d+)"', body).group(1)) >= expected
    assert "Skipped and failed, and why" in text and "rdma.write_bw" in text
    assert re.search(r"host memcpy bound \d+ Gbit/s \(mem.copy\)", text)
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "dashboard.png"
    _chromium(tmp_path, "--window-size=1400,3000", f"--screenshot={shot}", page.as_uri())
    assert shot.stat().st_size > 20_000


def test_empty_store_is_a_clear_message(tmp_path):
    assert_clean_error(netbench("report", "--results", str(tmp_path / "none")),
                       "nothing to draw")


def test_dashboard_does_not_break_reading_the_store(tmp_path):
    import pandas as pd

    assert netbench("run", "mem.copy", "-p", "msg_size=64K", "--results",
                    str(tmp_path)).returncode == 0
    assert netbench("report", "--results", str(tmp_path),
                    "-o", str(tmp_path / "_dashboard.html")).returncode == 0
    assert len(pd.read_parquet(tmp_path)) == 2
    assert Path(tmp_path / "_dashboard.html").stat().st_size < 10_000_000


def test_h2d_view_draws_each_gpus_bound_or_says_why_it_cannot(tmp_path):
    import json

    import pandas as pd

    from netbench.report.dashboard import h2d_chart, h2d_missing

    # Without CUDA: the real skip row says why, and the probe's GPU links are named.
    store = tmp_path / "res"
    env = {**os.environ,
           "NETBENCH_SYSFS_ROOT": str(ROOT / "tests/fixtures/sysfs/qemu-q35-pcie")}
    assert netbench("run", "gpu.h2d", "--results", str(store), env=env).returncode == 0
    rows = pd.read_parquet(store)
    assert h2d_chart(rows) is None
    text = h2d_missing(rows)
    assert text.startswith("gpu.* skipped: no CUDA device") and "0000:05:00.0: bottleneck" in text
    # With copy rows (values as a GPU run stores them): one line per GPU and host memory
    # kind, and the bound each row was divided by, dashed.
    def case(index, mem, size, bw, eff, bench="gpu.h2d"):
        common = {"run_id": "r", "case_index": index, "benchmark": bench, "status": "ok",
                  "transport": "pcie", "device": "cuda:0", "msg_size": size,
                  "params": json.dumps({"host_mem": mem, "msg_size": size})}
        return [{**common, "metric": "bw", "value": bw},
                {**common, "metric": "link_efficiency", "value": eff}]
    frame = pd.DataFrame(case(0, "pinned", 1 << 20, 40.0, 0.8) + case(1, "pinned", 1 << 26,
                         50.0, 1.0) + case(2, "pageable", 1 << 26, 20.0, 0.4)
                         + case(3, "pinned", 1 << 26, 60.0, 0.6, "gpu.bidir"))
    fig = h2d_chart(frame)
    names = [t["name"] for t in fig["data"]]
    assert names == ["gpu.bidir cuda:0 pinned", "gpu.h2d cuda:0 pageable",
                     "gpu.h2d cuda:0 pinned", "cuda:0 link bound 50.00 GB/s"]   # not bidir's
    assert fig["data"][2]["y"] == [40.0, 50.0] and fig["data"][3]["line"]["dash"] == "dash"
