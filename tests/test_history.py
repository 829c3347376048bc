"""netbench history, and the trend it shares with the dashboard: each run judged against the
runs before it by compare's test; what changed in the environment marked on its run."""

import json
import random
from datetime import timedelta

from conftest import assert_clean_error, netbench
from test_selection import T0, _latencies, _row

from netbench.stats import latency_summary
from netbench.store import ResultStore, params_json


def _env(fw):
    return json.dumps({"kernel": "6.1.0", "versions": {"netbench": "0.1.0"},
                       "rdma_devices": [{"name": "mlx5_0", "fw_ver": fw, "ports": []}]})


def _store_runs(store, levels, fws=None, unit="us (half RTT)", label="nightly", seed=5,
                prefix="run", start=0, stats=("p50", "p99")):
    rng = random.Random(seed)
    for i, level in enumerate(levels):
        when = T0 + timedelta(days=start + i)
        lat = _latencies(rng, level=level)
        summary = latency_summary(lat)
        env = _env((fws or ["28.39"] * len(levels))[i])
        rows = [_row(f"{prefix}{i}", label, when, benchmark="tcp.rr", family="tcp", op="rr",
                     msg_size=64, unit=unit, better="lower", metric=f"lat_{q}",
                     value=summary[q], samples=lat if q == "p50" else None, env_json=env,
                     params=params_json({"msg_size": 64}))
                for q in stats]
        store.write_run(store.path_for(f"{prefix}{i}", when.isoformat()), rows)


def test_history_names_the_run_that_regressed_and_what_changed_there(tmp_path):
    store = ResultStore(tmp_path)
    _store_runs(store, [10, 10, 10, 10, 13], fws=["28.39"] * 4 + ["28.40"])
    proc = netbench("history", "--results", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "#5   run4" in proc.stdout and "mlx5_0 firmware: 28.39 -> 28.40" in proc.stdout
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("tcp.rr")]
    assert len(lines) == 2 and all("REGRESSED (#5 vs 4)" in ln for ln in lines), proc.stdout
    assert "newest run regressed in 2 case metric(s)" in proc.stderr
    data = json.loads(netbench("history", "--results", str(tmp_path), "--json").stdout)
    (series,) = [s for s in data["series"] if s["metric"] == "lat_p99"]
    assert [st["verdict"] for st in series["steps"]] == ["", "unchanged", "unchanged",
                                                         "unchanged", "regressed"]
    assert series["steps"][-1]["evidence"] == "repeats"      # the window's runs: invocations
    assert data["runs"][4]["changes"] == [{"what": "mlx5_0 firmware", "before": "28.39",
                                           "after": "28.40"}]
    assert data["runs"][1]["changes"] == []


def test_history_of_unchanged_runs_is_silent_and_filters_apply(tmp_path):
    store = ResultStore(tmp_path)
    _store_runs(store, [10, 10, 10, 10])
    proc = netbench("history", "--results", str(tmp_path), "--metric", "lat_p99", "--last", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("tcp.rr")]
    assert len(lines) == 1 and "unchanged (#3 vs 2)" in lines[0], proc.stdout
    assert "history: 3 runs" in proc.stdout


def test_history_bad_input_is_one_clear_error(tmp_path):
    store = ResultStore(tmp_path)
    _store_runs(store, [10, 10])
    res = str(tmp_path)
    assert_clean_error(netbench("history", "--results", res, "--label", "nope"),
                       "label 'nope' names no run", "nightly")
    assert_clean_error(netbench("history", "--results", res, "--last", "1"), "at least 2 runs")
    assert_clean_error(netbench("history", "--results", res, "--window", "0"), "--window 0")
    typo = netbench("history", "--results", res, "--benchmark", "rdma.write_bw")
    assert_clean_error(typo, "no stored run measured rdma.write_bw; benchmarks there: ")
    assert typo.returncode == 2          # bad input, never read as "the newest regressed" (1)
    assert_clean_error(netbench("history", "--results", res, "--metric", "bw"),
                       "no chosen case has metric bw")
    assert_clean_error(netbench("history", "--results", str(tmp_path / "none")),
                       "no results in the store")
    # Units that changed between runs are two series, not one: refused, naming them.
    _store_runs(store, [10], unit="ns", seed=9, label="newer", prefix="ns", start=3)
    assert_clean_error(netbench("history", "--results", res), "different units",
                       "ns vs us (half RTT)")
    # A case in one run only has no trend.
    one = tmp_path / "one"
    one.mkdir()
    _store_runs(ResultStore(one), [10])
    assert_clean_error(netbench("history", "--results", str(one)), "in one run only",
                       "tcp.rr lat_p50 (run run0)")


def test_an_extremes_step_is_judged_by_the_windows_runs_one_value_each(tmp_path):
    """A max is one sample of a run: in a trend the window's earlier runs, one value each,
    are its run-level evidence (a step is judged from the fourth run on); between two runs
    alone, with no history, the same step is unverified, saying what decides it."""
    store = ResultStore(tmp_path)
    _store_runs(store, [10, 10, 10, 10, 13], stats=("p50", "max"))
    data = json.loads(netbench("history", "--results", str(tmp_path), "--json").stdout)
    (series,) = [s for s in data["series"] if s["metric"] == "lat_max"]
    steps = series["steps"]
    assert steps[-1]["verdict"] == "regressed", steps
    assert all(st["verdict"] != "regressed" for st in steps[:-1]), steps
    # Two labels of three runs each, no history: the sides' values are runs, but pooled as
    # repeats; a max's step is unverified, the typical round trip's regressed.
    other = tmp_path / "labels"
    other.mkdir()
    _store_runs(ResultStore(other), [10, 10, 10], stats=("p50", "max"), label="a")
    _store_runs(ResultStore(other), [13, 13, 13], stats=("p50", "max"), label="b",
                prefix="new", start=3)
    proc = netbench("compare", "a", "b", "--results", str(other), "--json", "--no-history")
    verdicts = {v["metric"]: v for v in json.loads(proc.stdout)["verdicts"]}
    assert verdicts["lat_p50"]["verdict"] == "regressed", verdicts["lat_p50"]
    top = verdicts["lat_max"]
    assert top["verdict"] == "unverified" and "one sample" in top["needs"], top
