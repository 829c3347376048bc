"""netbench report: a self-contained dashboard, rendered in a real headless Chromium."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import ROOT, assert_clean_error, netbench

from netbench import registry
from netbench.store import ResultStore

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--virtual-time-budget=20000"]
ARTIFACTS = ROOT / "artifacts"
H200_RESULTS = ROOT / "tests/fixtures/results/h200-vm"     # real rows: bench/gpu_check.py


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


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium (apt-get install chromium)")
def test_dashboard_of_a_real_gpu_run_renders_the_feed_view(tmp_path, h200_results):
    page = tmp_path / "gpu.html"
    proc = netbench("report", "--results", str(h200_results), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    bound = 32 * 16 * 128 / 130 / 8                # Gen5 x16, by hand: 63.02 GB/s
    assert f"link bound {bound:.2f} GB/s" in text and "NVIDIA H200" in text
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-status="rendered"' in body and 'data-errors="0"' in body, body
    ARTIFACTS.mkdir(exist_ok=True)
    _chromium(tmp_path, "--window-size=1400,3000",
              f"--screenshot={ARTIFACTS / 'dashboard-h200.png'}", page.as_uri())


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

    from netbench.report.dashboard import h2d_chart, h2d_missing

    # Without CUDA: the real skip row says why, and the probe's GPU links are named.
    store = tmp_path / "res"
    env = {**os.environ,
           "NETBENCH_SYSFS_ROOT": str(ROOT / "tests/fixtures/sysfs/qemu-q35-pcie")}
    assert netbench("run", "gpu.h2d", "--results", str(store), env=env).returncode == 0
    rows = ResultStore(store).read()              # with the run's environment joined back
    assert h2d_chart(rows) is None
    text = h2d_missing(rows)
    # The reason as the benchmark gave it: a CPU-only torch says so before CUDA is asked.
    assert text.startswith(("gpu.h2d skipped: no CUDA device", "gpu.h2d skipped: torch ")), text
    assert "0000:05:00.0: bottleneck" in text
    # Real rows from an H200 (Gen5 x16, inside a Firecracker VM): bench/gpu_check.py ran
    # suites/gpu-acceptance.toml and suites/ci.toml there. One line per GPU, host memory kind
    # and run; the loader at its batch's bytes; the bound each row was divided by, dashed.
    # Files from before a case's traits were stored read them from the installed benchmarks,
    # as the CLI reads them (the loader's batch bytes, gpu.bidir's flow both ways).
    fig = h2d_chart(ResultStore(H200_RESULTS, registry.stored_traits).read())
    lines = {t["name"]: t for t in fig["data"]}
    bounds = [name for name in lines if "link bound" in name]
    assert bounds == ["cuda:0 link bound 63.02 GB/s"]         # Gen5 x16; never bidir's 2x
    assert lines[bounds[0]]["line"]["dash"] == "dash"
    pinned = lines["gpu.h2d cuda:0 pinned (gpu-acceptance)"]
    assert pinned["x"] == [64 << 20, 256 << 20] and all(50 < y < 63.02 for y in pinned["y"])
    assert lines["gpu.loader_feed cuda:0 (gpu-acceptance)"]["x"] == [256 * 3 * 224 * 224]


def _facts(tmp_path, page, view="", width=None):
    """What Chromium drew: the page's own record of each chart (ticks, traces, bars, error
    bars, hover templates, ranges, where each label landed), read from the rendered DOM after
    plotly finished; ``width``: the window's, in pixels."""
    import html as html_

    url = page.as_uri() + (f"#view={view}" if view else "")
    size = [f"--window-size={width},3000"] if width else []
    dom = _chromium(tmp_path, *size, "--dump-dom", url).stdout
    body = re.search(r"<body[^>]*>", dom).group(0)
    assert 'data-status="rendered"' in body and 'data-errors="0"' in body, body[:300]
    attrs = {k: html_.unescape(v) for k, v in re.findall(r'data-(\w+)="([^"]*)"', body)}
    return attrs, __import__("json").loads(attrs["facts"])


def _report_against(store, after, run_id, tmp_path):
    """``after`` (a run's rows, changed) stored as run ``run_id`` labelled after-x, five
    minutes later; the dashboard of label 'before' against it."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from netbench.store import arrow_schema

    after["run_id"], after["label"] = run_id, "after-x"
    after["started_at"] = after["started_at"] + pd.Timedelta(minutes=5)
    pq.write_table(pa.Table.from_pandas(after, schema=arrow_schema(), preserve_index=False),
                   store / f"20991231T000000-{run_id}.parquet")
    page = tmp_path / "d.html"
    proc = netbench("report", "--results", str(store), "-o", str(page), "--baseline", "before",
                    "--candidate", "after-x")
    assert proc.returncode == 0, proc.stderr
    return page, proc


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium (apt-get install chromium)")
def test_dashboard_never_misleads(tmp_path):
    """One assertion per defect a new user found, each on what Chromium rendered."""
    import json

    import pandas as pd

    store = tmp_path / "res"
    for label in ("before", "after"):
        run = netbench("run", "tcp.stream", "-p", "msg_size=16K,1M", "-p", "streams=1,4",
                       "-p", "duration=0.3", "--results", str(store), "--label", label)
        assert run.returncode == 0, run.stderr
    # A derived candidate: the "after" run's rows, one metric at 26x the baseline's (+2,500%),
    # and a kernel update in its fingerprint.
    runs = [p for p in store.glob("*.parquet") if not p.name.startswith("_")]   # not the catalog
    after_id = next(pd.read_parquet(p)["run_id"].iloc[0] for p in runs
                    if pd.read_parquet(p)["label"].iloc[0] == "after")
    after = ResultStore(store).read([after_id])          # its environment joined back
    outlier = (after["metric"] == "cpu_per_gbit") & (after["msg_size"] == 16384) & (
        after["params"].str.contains('"streams":1'))
    before = pd.read_parquet(next(p for p in runs
                                  if pd.read_parquet(p)["label"].iloc[0] == "before"))
    same = (before["metric"] == "cpu_per_gbit") & (before["msg_size"] == 16384) & (
        before["params"].str.contains('"streams":1'))
    after.loc[outlier, "value"] = float(before.loc[same, "value"].iloc[0]) * 26   # +2,500%
    env = json.loads(after["env_json"].iloc[0])
    env["kernel"] = "9.9.9-updated"
    after["env_json"] = json.dumps(env)
    page, proc = _report_against(store, after, "outlier00001", tmp_path)
    # Run selection is printed: which runs each side resolved to.
    assert "baseline:  label 'before' -> run " in proc.stdout, proc.stdout
    attrs, facts = _facts(tmp_path, page)
    assert attrs["view"] == "compare" and attrs["labels"] == "after-x"   # no label mixing
    # CPU per Gbit: one dot per case (streams=1 and 4 at one size are two rows), no RDMA
    # in the title when there is none.
    cpu = facts["cpu"]
    assert sorted(cpu["yticks"]) == sorted({*cpu["yticks"]}) and len(cpu["yticks"]) == 4
    assert any("streams=4" in t for t in cpu["yticks"]) and cpu["bars"] == 0
    assert "RDMA vs TCP" not in cpu["title"] and "no RDMA rows" in cpu["title"]
    # Comparison: one row per verdict, labels whole, the outlier written but not flattening
    # the rest: the axis stops well short of 2,500%.
    comparison = facts["comparison"]
    assert len(comparison["yticks"]) == len(set(comparison["yticks"])) == comparison["bars"]
    assert all(not t.endswith("...") for t in comparison["yticks"])
    # (The axis follows the bulk of the measured changes: beside other work a CPU figure of
    # the real runs moved enough to put it at 538% once; 2,500% must stay far off it.)
    assert comparison["xrange"][1] < 2500 / 3
    # A derived metric (cpu_per_gbit) is a row of its own only where its verdict is one
    # compare prints (regressed, improved, disturbed), its true change written off scale;
    # else it is folded into the count under the chart.
    notes = [n[0] for n in comparison["boxes"]["notes"]]
    if any("cpu_per_gbit" in t for t in comparison["yticks"]):
        assert any(re.match(r"\+2500\.0% (regressed|improved|disturbed) \(off scale\)$", n)
                   for n in notes), notes
    else:
        assert any(n.startswith("other metrics folded: ") for n in notes), notes
    # Size axes tick at powers of two, written as sizes.
    from netbench.api import parse_size
    ticks = facts["bandwidth"]["xticks"]
    assert {"16K", "64K", "1M"} <= set(ticks), ticks
    assert all(parse_size(t) & (parse_size(t) - 1) == 0 for t in ticks), ticks
    # Hover names params, run and n; error bars from the stored samples.
    bandwidth = facts["bandwidth"]
    assert all("run %{customdata[3]}" in h and "n %{customdata[4]}" in h
               for h in bandwidth["hover"][:2])
    assert bandwidth["errorbars"] >= 4
    # Compare mode draws the baseline's curves beside the candidate's.
    assert any(t.endswith("(baseline)") for t in bandwidth["traces"])
    # The trend marks the kernel update where it happened.
    assert facts["trend"]["shapes"] >= 1 and len(facts["trend"]["traces"]) >= 4
    # The picker shows each label on its own.
    attrs, facts = _facts(tmp_path, page, "label:before")
    assert attrs["view"] == "label:before" and attrs["labels"] == "before"
    assert not any("(baseline)" in t for t in facts["bandwidth"]["traces"])
    assert "comparison" not in facts


def test_a_skip_only_benchmark_is_credited_to_its_latest_run():
    import pandas as pd

    from netbench.analysis.selection import latest_per_benchmark

    index = pd.DataFrame([{"run_id": "old", "benchmarks": ["gpu.h2d", "tcp.rr"],
                           "ok_benchmarks": ["tcp.rr"]},
                          {"run_id": "new", "benchmarks": ["gpu.h2d"], "ok_benchmarks": []}])
    assert latest_per_benchmark(index) == {"gpu.h2d": "new", "tcp.rr": "old"}


def test_the_comparison_axis_stops_near_minus_100_whatever_rises_beside_it():
    """A fall stops at -100%; a +700% rise beside it once padded the axis to -117%."""
    from types import SimpleNamespace

    from netbench.analysis.verdict import Verdict
    from netbench.report.dashboard import comparison_chart

    def verdict(metric, change, kind):
        return SimpleNamespace(benchmark="tcp.stream", params='{"msg_size":1024}',
                               metric=metric, change=change, threshold=0.05, verdict=kind,
                               unit="Gbit/s", baseline=1.0, candidate=1.0 + change,
                               evidence="repeats", p_adjusted=0.01, busy=(0.0, 0.0),
                               disturbed="", needs="")

    fig = comparison_chart([verdict("goodput", -1.0, Verdict.REGRESSED),
                            verdict("goodput_fwd", 7.0, Verdict.IMPROVED),
                            verdict("cpu_client", 0.01, Verdict.UNCHANGED)])
    low, high = fig["layout"]["xaxis"]["range"]
    assert -110 <= low <= -100 and high >= 700
    fig = comparison_chart([verdict("goodput", -0.2, Verdict.REGRESSED),
                            verdict("goodput_fwd", 0.3, Verdict.IMPROVED)])
    low, _ = fig["layout"]["xaxis"]["range"]
    assert -30 < low < -20                           # a small fall keeps its margin


def _overlap(a, b) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


@pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium (apt-get install chromium)")
def test_the_comparison_chart_reads_as_a_verdict_at_800_and_1400_px(tmp_path):
    """Real loopback runs; a candidate derived from the second, tcp.stream's goodput at
    0.639 of it (-36.1%) and tcp.rr's lat_p50 at 1.5x (+50%). In what Chromium drew at 800
    and 1400 px: every row's change is written whole, sign and size ("-36.1%", "+50.0%"), inside
    the window and clear of every row name; the worst rows come first; the derived metrics
    (cpu_client, lat_stdev, ...) are folded into one line, not a row each."""


    store = tmp_path / "res"
    suite = tmp_path / "s.toml"
    suite.write_text('[[case]]\nbenchmark = "tcp.stream"\nmsg_size = ["16K", "1M"]\n'
                     'duration = 0.3\n[[case]]\nbenchmark = "tcp.rr"\niterations = 300\n')
    for label in ("before", "after"):
        run = netbench("run", str(suite), "--results", str(store), "--label", label)
        assert run.returncode == 0, run.stderr
    index = ResultStore(store).runs()
    before_id, after_id = index["run_id"].iloc[0], index["run_id"].iloc[1]
    before = ResultStore(store).read([before_id])
    after = ResultStore(store).read([after_id])
    for metric, factor in (("goodput", 0.639), ("lat_p50", 1.5)):
        for params in set(after.loc[after["metric"] == metric, "params"]):
            was = before[(before["metric"] == metric) & (before["params"] == params)]
            now = (after["metric"] == metric) & (after["params"] == params)
            after.loc[now, "value"] = float(was["value"].median()) * factor
            after.loc[now, "samples"] = None
    page, _ = _report_against(store, after, "derived00001", tmp_path)
    ARTIFACTS.mkdir(exist_ok=True)
    for width in (800, 1400):
        _, facts = _facts(tmp_path, page, width=width)
        chart = facts["comparison"]
        boxes = chart["boxes"]
        rows = [n for n in boxes["notes"] if "%" in n[0] or n[0].startswith("LOST")]
        texts = [n[0] for n in rows]
        assert any(t.startswith("-36.1% ") for t in texts), (width, texts)
        assert any(t.startswith("+50.0% ") for t in texts), (width, texts)
        for text, *note in rows:
            assert note[2] <= width and note[0] >= 0, (width, text, note)     # whole, inside
            for tick in boxes["yticks"]:
                assert not _overlap(note, tick), (width, text, note, tick)
            assert not _overlap(note, boxes["plot"]), (width, text)
        # Worst first: all three unverified (one run a side), the largest change on top.
        order = [n[0] for n in sorted(rows, key=lambda n: n[2])]
        assert order[0].startswith("+50.0% ") and len(order) == 3, order
        assert not any(m in t for t in chart["yticks"] for m in ("cpu_client", "lat_stdev"))
        assert any(n[0].startswith("other metrics folded: ") for n in boxes["notes"])
        # Every chart's title is whole, inside the window and clear of plotly's toolbar.
        for name, drawn in facts.items():
            title, bar = drawn["boxes"]["title"], drawn["boxes"]["modebar"]
            if title is None:
                continue
            assert title[0] >= 0 and title[2] <= width, (width, name, title)
            assert bar is None or bar[2] - bar[0] == 0 or not _overlap(title, bar), \
                (width, name, drawn["title"], title, bar)
        _chromium(tmp_path, f"--window-size={width},1400",
                  f"--screenshot={ARTIFACTS / f'comparison-{width}.png'}", page.as_uri())
