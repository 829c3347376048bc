"""netbench compare: direction-aware, significance-tested verdicts and environment changes."""

import json
import random
from datetime import UTC, datetime

import pytest
from conftest import assert_clean_error, netbench

from netbench.analysis.compare import mann_whitney_p
from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore, params_json


def _env(fw: str, kernel: str = "6.1.0") -> str:
    return json.dumps({"kernel": kernel, "versions": {"netbench": "0.1.0"},
                       "nics": [], "rdma_devices": [{"name": "mlx5_0", "fw_ver": fw,
                                                     "ports": [{"port": 1, "rate": "100 Gb/sec",
                                                                "state": "4: ACTIVE"}]}]})


def _run(store, run_id, label, values, fw="28.39.1002", spread=0.01, n=30, seed=1):
    """One stored run: {metric: (value, better)} for rdma.write_bw at 64K, with samples."""
    rng = random.Random(seed)
    rows = []
    for metric, (value, better) in values.items():
        row = {name: None for name, _ in COLUMNS}
        row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label,
                   started_at=datetime.now(UTC), benchmark="rdma.write_bw", family="rdma",
                   op="write_bw", metric=metric, value=value, better=better, unit="u",
                   status="ok", case_index=0, msg_size=65536, env_json=_env(fw),
                   params=params_json({"msg_size": 65536, "qps": 1}),
                   samples=[rng.gauss(value, value * spread) for _ in range(n)] if n else None)
        rows.append(row)
    store.write_run(store.path_for(run_id, datetime.now(UTC).isoformat()), rows)


def test_verdicts_follow_each_metrics_direction(tmp_path):
    store = ResultStore(tmp_path)
    _run(store, "r1", "before", {"bw_avg": (100.0, "higher"), "lat_p50": (2.0, "lower"),
                                 "msg_rate": (10.0, "higher")})
    _run(store, "r2", "after", {"bw_avg": (80.0, "higher"), "lat_p50": (1.5, "lower"),
                                "msg_rate": (10.1, "higher")}, fw="28.40.1000", seed=2)
    proc = netbench("compare", "before", "after", "--results", str(tmp_path), "--json")
    assert proc.returncode == 1, proc.stderr          # something regressed: a CI gate
    data = json.loads(proc.stdout)
    verdicts = {v["metric"]: v for v in data["verdicts"]}
    assert verdicts["bw_avg"]["verdict"] == "regressed"
    assert verdicts["bw_avg"]["change"] == pytest.approx(-0.2)
    assert verdicts["bw_avg"]["p_value"] < 0.001
    assert verdicts["lat_p50"]["verdict"] == "improved"      # lower latency is better
    assert verdicts["msg_rate"]["verdict"] == "unchanged"    # +1% is inside the 5% default
    assert {"what": "mlx5_0 firmware", "baseline": "28.39.1002",
            "candidate": "28.40.1000"} in data["environment_changes"]
    text = netbench("compare", "r1", "r2", "--results", str(tmp_path)).stdout
    assert "REGRESSED" in text and "mlx5_0 firmware: 28.39.1002 -> 28.40.1000" in text


def test_noise_is_not_a_regression_and_thresholds_apply(tmp_path):
    store = ResultStore(tmp_path)
    _run(store, "a", "a", {"bw_avg": (100.0, "higher")}, spread=0.3, n=5, seed=3)
    _run(store, "b", "b", {"bw_avg": (92.0, "higher")}, spread=0.3, n=5, seed=4)
    proc = netbench("compare", "a", "b", "--results", str(tmp_path), "--json")
    assert proc.returncode == 0                      # noise is not a regression
    (v,) = json.loads(proc.stdout)["verdicts"]
    # -8%, beyond the threshold but within the noise: it says so, and what would decide it.
    assert v["verdict"] == "noisy" and v["p_value"] > 0.05 and v["evidence"] == "samples"
    assert v["repeats_needed"] >= 2
    assert netbench("compare", "a", "b", "--results", str(tmp_path),
                    "--fail-on-noisy").returncode == 3
    # One value a side, no samples: nothing to judge -3% against. Not a regression.
    _run(store, "c", "c", {"bw_avg": (100.0, "higher")}, n=0)
    _run(store, "d", "d", {"bw_avg": (97.0, "higher")}, n=0)
    single = netbench("compare", "c", "d", "--results", str(tmp_path), "--threshold",
                      "bw_avg=2%", "--json")
    assert single.returncode == 0
    (v,) = json.loads(single.stdout)["verdicts"]
    assert v["verdict"] == "inconclusive" and v["p_value"] is None and v["repeats_needed"] >= 3
    # Four repeats a side: the values themselves are the evidence, and -3% is real.
    for i in range(4):
        _run(store, f"cc{i}", "cc", {"bw_avg": (100.0 + 0.1 * i, "higher")}, n=0)
        _run(store, f"dd{i}", "dd", {"bw_avg": (97.0 + 0.1 * i, "higher")}, n=0)
    strict = netbench("compare", "cc", "dd", "--results", str(tmp_path), "--threshold",
                      "bw_avg=2%", "--json")
    assert strict.returncode == 1, strict.stdout
    (v,) = json.loads(strict.stdout)["verdicts"]
    assert v["verdict"] == "regressed" and v["evidence"] == "repeats" and v["p_value"] < 0.05
    spec = tmp_path.parent / "t.toml"
    spec.write_text('[thresholds]\n"rdma.write_bw:bw_avg" = "10%"\n')
    loose = netbench("compare", "cc", "dd", "--results", str(tmp_path), "--thresholds",
                     str(spec))
    assert loose.returncode == 0


def test_directories_and_bad_references(tmp_path):
    one, two = ResultStore(tmp_path / "one"), ResultStore(tmp_path / "two")
    one.check_writable()
    two.check_writable()
    _run(one, "x", "", {"bw_avg": (1.0, "higher")})
    _run(two, "y", "", {"lat_p50": (1.0, "lower")})
    proc = netbench("compare", str(tmp_path / "one"), str(tmp_path / "two"))
    assert proc.returncode == 2 and "no case in common" in proc.stderr
    assert_clean_error(netbench("compare", "nope", str(tmp_path / "two"), "--results",
                                str(tmp_path / "one")), "'nope' is not a results directory")
    assert_clean_error(netbench("compare", "x", "x", "--results", str(tmp_path / "one"),
                                "--threshold", "bw_avg=lots"), "threshold 'lots'")


def test_mann_whitney_matches_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = random.Random(5)
    for shift in (0.0, 0.3, 1.0):
        a = [rng.gauss(0, 1) for _ in range(40)]
        b = [rng.gauss(shift, 1) for _ in range(35)] + a[:5]      # with ties
        ref = scipy_stats.mannwhitneyu(a, b, alternative="two-sided", method="asymptotic")
        assert mann_whitney_p(a, b) == pytest.approx(ref.pvalue, rel=1e-6, abs=1e-12)


def test_a_a_same_noise_twice_is_never_a_regression(tmp_path):
    """A/A: the same system measured twice (20% noise, 30 samples a side, many metrics): no
    verdict may say regressed; changes beyond the threshold are noisy, not regressions."""
    store = ResultStore(tmp_path)
    metrics = {f"m{i}": (100.0, "higher" if i % 2 else "lower") for i in range(12)}
    _run(store, "a", "a", metrics, spread=0.2, n=30, seed=11)
    _run(store, "b", "b", metrics, spread=0.2, n=30, seed=12)
    proc = netbench("compare", "a", "b", "--results", str(tmp_path), "--json")
    verdicts = [v["verdict"] for v in json.loads(proc.stdout)["verdicts"]]
    assert proc.returncode == 0 and "regressed" not in verdicts, verdicts


def test_repeat_interleaves_cases_and_compare_uses_the_repeats(tmp_path):
    proc = netbench("run", "mem.copy", "-p", "msg_size=1M,2M", "-p", "iterations=2",
                    "--repeat", "3", "--json", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(proc.stdout) if r["metric"] == "bw"]
    assert [r["msg_size"] for r in rows] == [1 << 20, 2 << 20] * 3      # A B A B A B
    assert_clean_error(netbench("run", "mem.copy", "--repeat", "0"), "--repeat 0")


def test_many_metrics_at_once_are_adjusted_benjamini_hochberg():
    from netbench.analysis.compare import adjust

    # By hand: sorted 0.01, 0.03, 0.04, 0.5 (m = 4) -> 0.04, min(0.06, 0.0533), 0.0533, 0.5.
    assert adjust([0.01, 0.04, None, 0.03, 0.5]) == pytest.approx(
        [0.04, 0.04 * 4 / 3, None, 0.04 * 4 / 3, 0.5])
    assert adjust([]) == [] and adjust([None]) == [None]


def test_a_a_of_a_real_suite_with_repeats_calls_nothing_regressed(tmp_path):
    """Known answer (a), on this machine: the same suite, run twice with --repeat 3 on
    unchanged code, compares with 0 regressed (and 0 improved)."""
    suite = tmp_path / "aa.toml"
    suite.write_text('[suite]\nname = "aa"\nrepeat = 3\n'
                     '[[case]]\nbenchmark = "tcp.stream"\nmsg_size = ["16K", "128K"]\n'
                     'duration = 0.3\nwarmup = 0.1\n'
                     '[[case]]\nbenchmark = "tcp.rr"\nmsg_size = [64, 4096]\n'
                     'iterations = 2000\n'
                     '[[case]]\nbenchmark = "mem.copy"\nmsg_size = "16M"\niterations = 5\n')
    res = str(tmp_path / "res")
    for label in ("a", "b"):
        run = netbench("run", str(suite), "--results", res, "--label", label, timeout=300)
        assert run.returncode == 0, run.stderr
    proc = netbench("compare", "a", "b", "--results", res, "--json")
    verdicts = json.loads(proc.stdout)["verdicts"]
    called = [(v["benchmark"], v["metric"], v["change"], v["p_value"]) for v in verdicts
              if v["verdict"] in ("regressed", "improved")]
    assert called == [] and proc.returncode == 0, called
    # Repeats on both sides: each repeat is one value (pooling their samples called an
    # invocation-to-invocation drift of tcp.rr lat_p50, -7%, significant at p ~ 0).
    assert len(verdicts) > 25 and {v["evidence"] for v in verdicts} == {"repeats"}
