"""netbench export: a real run's metrics as OpenMetrics, read back by the Prometheus client's
own parsers (the strict OpenMetrics one, and the text-format one node_exporter speaks)."""

import pandas as pd
import pytest
from conftest import assert_clean_error, netbench
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families as prom_parse


def test_export_parses_as_openmetrics_and_carries_the_stored_values(tmp_path):
    res = tmp_path / "res"
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nrepeat = 2\n[[case]]\nbenchmark = "mem.copy"\n'
                     'msg_size = ["1M", "4M"]\niterations = 3\n'
                     '[[case]]\nbenchmark = "tcp.rr"\niterations = 300\n'
                     '[[case]]\nbenchmark = "rdma.write_lat"\n')
    assert netbench("run", str(suite), "--results", str(res), "--label", "nightly",
                    timeout=300).returncode == 0
    out = tmp_path / "textfile" / "netbench.prom"
    out.parent.mkdir()
    proc = netbench("export", "--results", str(res), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.endswith("# EOF\n") and not list(out.parent.glob(".*"))   # atomic, no temp
    families = {f.name: f for f in om_parse(text)}
    assert {"netbench_bw", "netbench_lat_p99_9", "netbench_run_cases",
            "netbench_run_started_seconds"} <= set(families)
    assert all(f.type == "gauge" for f in families.values())
    stored = pd.read_parquet(res)
    for size, case in ((1 << 20, "msg_size=1M"), (4 << 20, "msg_size=4M")):
        (sample,) = [s for s in families["netbench_bw"].samples if s.labels["case"] == case]
        want = stored[(stored.metric == "bw") & (stored.msg_size == size)]["value"].median()
        # Two repeats: their median, in the family's one unit (GB/s stored, 8x in Gbit/s).
        assert sample.value == pytest.approx(want * 8, rel=1e-12)
        assert sample.labels["benchmark"] == "mem.copy" and sample.labels["unit"] == "Gbit/s"
        assert sample.labels["better"] == "higher" and sample.labels["label"] == "nightly"
    counts = {s.labels["status"]: s.value for s in families["netbench_run_cases"].samples}
    assert counts == {"ok": 6, "skipped": 2, "failed": 0}
    # Series are unique (what Prometheus requires), and the text format parses too.
    keys = [(f.name, tuple(sorted(s.labels.items()))) for f in families.values()
            for s in f.samples]
    assert len(keys) == len(set(keys))
    assert {f.name for f in prom_parse(text)} >= {"netbench_bw", "netbench_lat_p50"}
    # One unit per family: a gauge's series add up as alike (bw_peak of mem.copy in GB/s and
    # of a stream in Gbit/s are both Gbit/s here).
    for f in families.values():
        assert len({s.labels.get("unit") for s in f.samples}) == 1, f.name


def test_export_bad_input_is_one_clear_error(tmp_path):
    res = tmp_path / "res"
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                    "--results", str(res)).returncode == 0
    assert_clean_error(netbench("export", "--results", str(res), "-o", str(tmp_path)),
                       "a directory")
    assert_clean_error(netbench("export", "--results", str(res), "--run", "nope"),
                       "'nope' is not a results directory, run id or label")
    assert_clean_error(netbench("export", "--results", str(tmp_path / "none")),
                       "no results in the store")


def test_no_run_id_on_any_series_so_a_new_run_adds_none(tmp_path):
    """docs/commands.md: no run id on the series. Two runs of one label export the same series (the
    run's start and case counts included), and a label's runs together stay unique."""
    res = tmp_path / "res"
    for _ in range(2):
        assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                        "--results", str(res), "--label", "nightly").returncode == 0
    runs = pd.read_parquet(res).sort_values("started_at")["run_id"].unique()

    def series(*args):
        proc = netbench("export", "--results", str(res), *args)
        assert proc.returncode == 0, proc.stderr
        families = list(om_parse(proc.stdout))
        keys = [(f.name, tuple(sorted(s.labels.items()))) for f in families for s in f.samples]
        assert len(keys) == len(set(keys)), proc.stdout
        return {f.name: f for f in families}, set(keys)

    first, first_keys = series("--run", runs[0])
    second, second_keys = series("--run", runs[1])
    assert first_keys == second_keys
    assert not any("run_id" in dict(labels) for _, labels in first_keys)
    both, both_keys = series("--label", "nightly")
    assert both_keys == second_keys
    # Both runs: the newest one's start, and its cases (not the sum of the two).
    (started,) = both["netbench_run_started_seconds"].samples
    assert started.value == second["netbench_run_started_seconds"].samples[0].value
    counts = {s.labels["status"]: s.value for s in both["netbench_run_cases"].samples}
    assert counts == {"ok": 1, "skipped": 0, "failed": 0}
