"""netbench compare: direction-aware, significance-tested verdicts and environment changes."""

import json
import random
from datetime import UTC, datetime

import pytest
from conftest import assert_clean_error, netbench

from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore, params_json


def _env(fw: str, kernel: str = "6.1.0") -> str:
    return json.dumps({"kernel": kernel, "versions": {"netbench": "0.1.0"},
                       "nics": [], "rdma_devices": [{"name": "mlx5_0", "fw_ver": fw,
                                                     "ports": [{"port": 1, "rate": "100 Gb/sec",
                                                                "state": "4: ACTIVE"}]}]})


def _run(store, run_id, label, values, fw="28.39.1002", spread=0.01, n=30, seed=1,
         host="h1", busy=None, started=None):
    """One stored run: {metric: (value, better)} for rdma.write_bw at 64K, with samples."""
    rng = random.Random(seed)
    rows = []
    for metric, (value, better) in values.items():
        row = {name: None for name, _ in COLUMNS}
        row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, host=host,
                   load_other_cores=busy,
                   started_at=started or datetime.now(UTC), benchmark="rdma.write_bw",
                   family="rdma",
                   op="write_bw", metric=metric, value=value, better=better, unit="u",
                   status="ok", case_index=0, msg_size=65536, env_json=_env(fw),
                   params=params_json({"msg_size": 65536, "qps": 1}),
                   samples=[rng.gauss(value, value * spread) for _ in range(n)] if n else None)
        rows.append(row)
    store.write_run(store.path_for(run_id, datetime.now(UTC).isoformat()), rows)


def test_verdicts_follow_each_metrics_direction(tmp_path):
    store = ResultStore(tmp_path)
    for i in range(3):              # three invocations a side, each 0.5% from the others
        _run(store, f"r1{i}", "before", {"bw_avg": (100.0 + 0.5 * i, "higher"),
                                         "lat_p50": (2.0 + 0.01 * i, "lower"),
                                         "msg_rate": (10.0 + 0.05 * i, "higher")})
        _run(store, f"r2{i}", "after", {"bw_avg": (80.0 + 0.4 * i, "higher"),
                                        "lat_p50": (1.5 + 0.01 * i, "lower"),
                                        "msg_rate": (10.1 + 0.05 * i, "higher")},
             fw="28.40.1000", seed=2)
    proc = netbench("compare", "before", "after", "--results", str(tmp_path), "--json")
    assert proc.returncode == 1, proc.stderr          # something regressed: a CI gate
    data = json.loads(proc.stdout)
    verdicts = {v["metric"]: v for v in data["verdicts"]}
    assert verdicts["bw_avg"]["verdict"] == "regressed"
    assert verdicts["bw_avg"]["change"] == pytest.approx(-0.2, abs=0.002)
    assert verdicts["bw_avg"]["p_value"] < 0.001 and verdicts["bw_avg"]["evidence"] == "repeats"
    assert verdicts["lat_p50"]["verdict"] == "improved"      # lower latency is better
    assert verdicts["msg_rate"]["verdict"] == "unchanged"    # +1% is inside the 5% default
    assert {"what": "mlx5_0 firmware", "baseline": "28.39.1002",
            "candidate": "28.40.1000"} in data["environment_changes"]
    text = netbench("compare", "before", "after", "--results", str(tmp_path)).stdout
    assert "REGRESSED" in text and "mlx5_0 firmware: 28.39.1002 -> 28.40.1000" in text
    assert "3 vs 3 repeats" in text
    # One run a side, however many samples it kept: no invocation-level spread, unverified,
    # and it says what would decide it; the gate stays green unless asked.
    single = netbench("compare", "r10", "r20", "--results", str(tmp_path), "--no-history",
                      "--json")
    assert single.returncode == 0, single.stdout
    v = {v["metric"]: v for v in json.loads(single.stdout)["verdicts"]}["bw_avg"]
    assert v["verdict"] == "unverified" and v["p_value"] is None
    assert "needs 3 repeats a side" in v["needs"] and "earlier run" in v["needs"]
    assert netbench("compare", "r10", "r20", "--results", str(tmp_path), "--no-history",
                    "--fail-on-noisy").returncode == 3


def test_noise_is_not_a_regression_and_thresholds_apply(tmp_path):
    store = ResultStore(tmp_path)
    for i, (x, y) in enumerate([(100.0, 80.0), (90.0, 99.0), (110.0, 93.0)]):
        _run(store, f"a{i}", "a", {"bw_avg": (x, "higher")}, n=5, seed=3)
        _run(store, f"b{i}", "b", {"bw_avg": (y, "higher")}, n=5, seed=4)
    proc = netbench("compare", "a", "b", "--results", str(tmp_path), "--json")
    assert proc.returncode == 0                      # noise is not a regression
    (v,) = json.loads(proc.stdout)["verdicts"]
    # -7%, beyond the threshold but within how far invocations move: it says so, and what
    # would decide it.
    assert v["verdict"] == "noisy" and v["p_value"] > 0.05 and v["evidence"] == "repeats"
    assert "repeats a side" in v["needs"]
    assert netbench("compare", "a", "b", "--results", str(tmp_path),
                    "--fail-on-noisy").returncode == 3
    # Four repeats a side: the values themselves are the evidence, and -3% is real (a store
    # of its own: the runs above would be these cases' history, and they move 10%).
    store = ResultStore(tmp_path := tmp_path / "strict")
    store.check_writable()
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


def _at(minute):
    return datetime(2026, 11, 1, 2, minute, tzinfo=UTC)


def test_the_stores_history_on_the_host_is_the_noise_model(tmp_path):
    """Known answer 3 on stored rows: eight nightly runs of a case on one host moving about
    1%, then one run a side. Nothing changed: unchanged. -8%: regressed, with the history
    named as the evidence. A history too short to judge by: unverified, saying how many
    runs it needs."""
    store = ResultStore(tmp_path)
    rng = random.Random(9)
    for i in range(8):
        _run(store, f"n{i}", "nightly", {"bw_avg": (100.0 * (1 + rng.gauss(0, 0.01)),
                                                    "higher")}, n=0, started=_at(i))
    _run(store, "base", "base", {"bw_avg": (100.2, "higher")}, n=0, started=_at(10))
    _run(store, "same", "same", {"bw_avg": (99.4, "higher")}, n=0, started=_at(11))
    _run(store, "slow", "slow", {"bw_avg": (92.0, "higher")}, n=0, started=_at(12))
    _run(store, "elsewhere", "x", {"bw_avg": (50.0, "higher")}, n=0, host="h2",
         started=_at(9))              # another host's run is not this host's noise
    same = json.loads(netbench("compare", "base", "same", "--results", str(tmp_path),
                               "--threshold", "bw_avg=0.5%", "--json").stdout)["verdicts"]
    assert same[0]["verdict"] == "noisy" and same[0]["evidence"] == "history"
    slow = netbench("compare", "base", "slow", "--results", str(tmp_path), "--json")
    assert slow.returncode == 1, slow.stdout
    (v,) = json.loads(slow.stdout)["verdicts"]
    assert v["verdict"] == "regressed" and v["evidence"] == "history", v
    assert v["history_runs"] == 8
    text = netbench("compare", "base", "slow", "--results", str(tmp_path)).stdout
    assert "spread of 8 earlier runs on this host" in text
    # The nightly label itself as the baseline: eight invocations against one.
    nightly = json.loads(netbench("compare", "nightly", "slow", "--results", str(tmp_path),
                                  "--json").stdout)["verdicts"]
    assert nightly[0]["verdict"] == "regressed" and nightly[0]["invocations"] == [8, 1]
    # Only two earlier runs (a store of its first nights): not enough to judge by.
    short = ResultStore(tmp_path / "short")
    short.check_writable()
    for i in range(2):
        _run(short, f"n{i}", "nightly", {"bw_avg": (100.0 + i, "higher")}, n=0,
             started=_at(i))
    _run(short, "base", "base", {"bw_avg": (100.2, "higher")}, n=0, started=_at(5))
    _run(short, "slow", "slow", {"bw_avg": (92.0, "higher")}, n=0, started=_at(6))
    proc = netbench("compare", "base", "slow", "--results", str(tmp_path / "short"), "--json")
    (v,) = json.loads(proc.stdout)["verdicts"]
    assert proc.returncode == 0 and v["verdict"] == "unverified", v
    assert "1 more earlier run(s) of this case on this host" in v["needs"]


def test_a_busy_side_is_named_and_its_slowdown_not_blamed_on_the_code(tmp_path):
    store = ResultStore(tmp_path)
    for i in range(3):
        _run(store, f"q{i}", "quiet", {"lat_p50": (10.0 + 0.05 * i, "lower")}, n=0, busy=0.02)
        _run(store, f"b{i}", "busy", {"lat_p50": (13.0 + 0.05 * i, "lower")}, n=0, busy=0.95)
    proc = netbench("compare", "quiet", "busy", "--results", str(tmp_path), "--json")
    (v,) = json.loads(proc.stdout)["verdicts"]
    assert proc.returncode == 0 and v["verdict"] == "disturbed", v
    assert v["disturbed"].startswith("candidate: 0.95 cores busy outside netbench (the other "
                                     "side 0.02)")
    text = netbench("compare", "quiet", "busy", "--results", str(tmp_path)).stdout
    assert ("busy host: candidate: 0.95 cores busy outside netbench (the other side 0.02) "
            "during rdma.write_bw") in text
    # Load moves figures either way (an idle VM wakes a ping-pong slowly): a slower quiet
    # side against a busy baseline is disturbed too, naming the busy baseline.
    for i in range(3):
        _run(store, f"s{i}", "slow-quiet", {"lat_p50": (16.0 + 0.05 * i, "lower")}, n=0,
             busy=0.0)
    worse = netbench("compare", "busy", "slow-quiet", "--results", str(tmp_path), "--json")
    (v,) = json.loads(worse.stdout)["verdicts"]
    assert worse.returncode == 0 and v["verdict"] == "disturbed", v
    assert v["disturbed"].startswith("baseline: 0.95 cores busy")
    # Both sides equally busy: judged as usual (a regression on a loaded host is caught).
    for i in range(3):
        _run(store, f"bs{i}", "busy-slow", {"lat_p50": (16.0 + 0.05 * i, "lower")}, n=0,
             busy=0.9)
    same_load = netbench("compare", "busy", "busy-slow", "--results", str(tmp_path),
                         "--no-history", "--json")
    (v,) = json.loads(same_load.stdout)["verdicts"]
    assert same_load.returncode == 1 and v["verdict"] == "regressed", v


def test_a_side_pools_one_hosts_runs_unless_asked(tmp_path):
    store = ResultStore(tmp_path)
    for i, host in enumerate(("node1", "node2", "node1")):
        _run(store, f"a{i}", "a", {"bw_avg": (100.0 + i, "higher")}, n=0, host=host)
        _run(store, f"b{i}", "b", {"bw_avg": (100.0 + i, "higher")}, n=0, host="node1")
    assert_clean_error(netbench("compare", "a", "b", "--results", str(tmp_path)),
                       "the baseline pools runs from different hosts: node1 (a0, a2), "
                       "node2 (a1)")
    assert netbench("compare", "a", "b", "--results", str(tmp_path),
                    "--pool-hosts").returncode == 0


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
    # One rule for a suite that sets repeat itself: --repeat replaces it, never multiplies.
    suite = tmp_path / "r3.toml"
    suite.write_text('[suite]\nname = "r3"\nrepeat = 3\n[[case]]\nbenchmark = "mem.copy"\n'
                     'msg_size = "1M"\niterations = 2\n')
    for extra, times in (([], 3), (["--repeat", "2"], 2), (["--repeat", "1"], 1)):
        proc = netbench("run", str(suite), *extra, "--json", "--results", str(tmp_path))
        assert proc.returncode == 0, proc.stderr
        assert sum(r["metric"] == "bw" for r in json.loads(proc.stdout)) == times, extra


def test_many_metrics_at_once_are_adjusted_benjamini_hochberg():
    from netbench.analysis.compare import adjust

    # By hand: sorted 0.01, 0.03, 0.04, 0.5 (m = 4) -> 0.04, min(0.06, 0.0533), 0.0533, 0.5.
    assert adjust([0.01, 0.04, None, 0.03, 0.5]) == pytest.approx(
        [0.04, 0.04 * 4 / 3, None, 0.04 * 4 / 3, 0.5])
    assert adjust([]) == [] and adjust([None]) == [None]


def test_a_a_of_a_real_suite_with_repeats_calls_nothing_regressed(tmp_path):
    """Known answer (a), on this machine: the same suite, run twice with --repeat 3 on
    unchanged code, compares with 0 regressed (and 0 improved). tcp.rr pins its two ends
    (client on CPU 0, the loopback server on CPU 1): where the scheduler puts a ping-pong's
    ends is state a whole run shares, which its repeats cannot see (one CI run read lat_p50
    +26% between two runs, every repeat alike, p 0.0009); the unpinned CI suite's A/A under
    load is tests/test_verdicts_under_load.py."""
    suite = tmp_path / "aa.toml"
    suite.write_text('[suite]\nname = "aa"\nrepeat = 3\n'
                     '[[case]]\nbenchmark = "tcp.stream"\nmsg_size = ["16K", "128K"]\n'
                     'duration = 0.3\nwarmup = 0.1\n'
                     '[[case]]\nbenchmark = "tcp.rr"\nmsg_size = [64, 4096]\n'
                     'iterations = 2000\naffinity = "0,1"\n'
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
    assert len(verdicts) > 25 and {v["evidence"] for v in verdicts} <= {"repeats", "history"}


def test_a_case_is_matched_by_its_planned_params_whatever_auto_became(tmp_path):
    """Identity apart from resolution: data_plane=auto is the same case on a machine where
    auto became compiled and on one where it became pyverbs (the row says which, in
    resolved); a run stored before params and resolved were kept apart (its params hold what
    auto became) is still matched, by what it measured as."""
    import pandas as pd

    from netbench.analysis.compare import compare

    def rows(value, resolved, old=False):
        planned = {"msg_size": 65536, "data_plane": "auto"}
        out = []
        for i in range(3):
            row = {name: None for name, _ in COLUMNS}
            row.update(schema_version=SCHEMA_VERSION, run_id="r", host="h1",
                       benchmark="rdma.write_bw", metric="bw_avg", better="higher", unit="u",
                       status="ok", value=value * (1 + 0.001 * i), msg_size=65536,
                       params=params_json({**planned, **resolved} if old else planned),
                       resolved=None if old else params_json(resolved))
            out.append(row)
        return pd.DataFrame(out)

    compiled, pyverbs = {"data_plane": "compiled"}, {"data_plane": "pyverbs"}
    (v,) = compare(rows(100.0, compiled), rows(60.0, pyverbs), {})
    assert v.verdict == "regressed" and json.loads(v.params)["data_plane"] == "auto"
    (v,) = compare(rows(100.0, compiled, old=True), rows(99.9, compiled), {})
    assert v.verdict == "unchanged"


def test_an_extremes_step_between_two_runs_of_unchanged_code_is_unverified(tmp_path):
    """Two runs of a stored A/A (bench/aa_trials.py, unchanged code, steal 0.0 and 0.01):
    tcp.rr 4 KiB's max read 305, 292, 276 us in one run's repeats and 110, 103, 104 in the
    next's, and was called improved (-64%). Files written before rows carried their
    statistic: the CLI reads it from the installed benchmark. Now nothing in the A/A is
    regressed or improved; that max is unverified, saying it is one sample and what decides."""
    import shutil

    from conftest import FIXTURES

    store = tmp_path / "aa"
    shutil.copytree(FIXTURES / "results" / "aa-tail", store)
    proc = netbench("compare", "aa0", "aa1", "--results", str(store), "--json")
    assert proc.returncode == 0, proc.stderr
    verdicts = json.loads(proc.stdout)["verdicts"]
    assert not [v for v in verdicts if v["verdict"] in ("regressed", "improved")]
    (top,) = [v for v in verdicts if v["benchmark"] == "tcp.rr" and v["metric"] == "lat_max"
              and v["msg_size"] == 4096]
    assert top["verdict"] == "unverified" and top["change"] < -0.6, top
    assert "lat_max is one sample" in top["needs"] and "it would read improved" in top["needs"]


def test_a_stdev_tripled_in_every_repeat_of_one_run_is_unverified_and_history_decides():
    """A CI A/A on a quiet host (busy 0.01 both sides): tcp.rr lat_stdev +204.5%, each repeat
    of the second run alike, called regressed. A stdev squares each sample's distance, so a
    few stalls of a run set it as they set a max: judged by one run's repeats it is
    unverified, saying what decides; a history of runs that never moved so decides it."""
    import pandas as pd

    from netbench.analysis.compare import compare

    def rows(run, stdev):
        out = []
        for i, value in enumerate(stdev):
            row = {name: None for name, _ in COLUMNS}
            row.update(schema_version=SCHEMA_VERSION, run_id=run, host="h1", repeat=i,
                       benchmark="tcp.rr", metric="lat_stdev", better="lower", unit="us",
                       status="ok", value=value, msg_size=64, statistic="stdev",
                       n_samples=20_000, params=params_json({"msg_size": 64}))
            out.append(row)
        return pd.DataFrame(out)

    base, cand = rows("a", [2.0, 2.1, 1.9]), rows("b", [6.1, 6.0, 6.3])
    (v,) = compare(base, cand, {})
    assert v.verdict == "unverified" and v.change > 2.0, v
    assert "farthest out" in v.needs and "it would read regressed" in v.needs
    past = pd.concat([rows(f"h{i}", [2.0 + 0.03 * i] * 3) for i in range(6)])
    (v,) = compare(base, cand, {}, history=past)
    assert v.verdict == "regressed" and v.evidence == "history", v
    (p50,) = compare(base.assign(metric="lat_p50", statistic="p50"),
                     cand.assign(metric="lat_p50", statistic="p50"), {})
    assert p50.verdict == "regressed"          # the same step in a typical value is judged


def test_pool_reads_nullable_columns_and_keeps_the_fewest_samples(tmp_path):
    """``netbench.load()`` frames hold pandas' nullable integers (a missing count is NA, not
    NaN): pooled, a missing count is unknown, a count of 0 is kept, the fewest wins."""
    import shutil

    import pandas as pd
    from conftest import FIXTURES

    import netbench
    from netbench.analysis.compare import pool

    shutil.copytree(FIXTURES / "results" / "aa-tail", tmp_path / "aa")
    rows = netbench.load(tmp_path / "aa")
    assert str(rows["n_samples"].dtype) == "Int64"
    rr = rows[(rows["benchmark"] == "tcp.rr") & (rows["metric"] == "lat_max")
              & (rows["msg_size"] == 4096)].copy()
    assert len(rr) == 6
    rr["n_samples"] = pd.array([pd.NA, 0, 5000, 20000, 3000, pd.NA], dtype="Int64")
    (entry,) = pool(rr).values()
    assert entry["n_samples"] == 0 and entry["statistic"] == "max"


def test_a_suites_own_thresholds_judge_its_runs_in_compare_history_and_report(tmp_path):
    """README's compare names no thresholds file: the suite's [thresholds] ride with its runs
    (stored in each run's footer), so compare, history and the dashboard judge by its 3%,
    say which thresholds judged and whence, and --threshold / --thresholds still override."""
    suite = tmp_path / "s.toml"
    suite.write_text('[suite]\nname = "gate"\n[[case]]\nbenchmark = "tcp.stream"\n'
                     'duration = 0.2\nmsg_size = "64K"\n[thresholds]\ngoodput = "3%"\n'
                     '"tcp.stream:cpu_client" = 0.3\n')
    results = tmp_path / "r"
    for label in ("before", "after"):
        run = netbench("run", str(suite), "--label", label, "--results", str(results))
        assert run.returncode == 0, run.stderr
    proc = netbench("compare", "before", "after", "--results", str(results), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    out = json.loads(proc.stdout)
    assert out["thresholds"]["values"] == {"goodput": 0.03, "tcp.stream:cpu_client": 0.3}
    assert "suite gate's [thresholds]" in out["thresholds"]["source"]
    by_metric = {v["metric"]: v["threshold"] for v in out["verdicts"]}
    assert by_metric["goodput"] == 0.03 and by_metric["cpu_client"] == 0.3, by_metric
    text = netbench("compare", "before", "after", "--results", str(results)).stdout
    assert "thresholds: goodput 3%, tcp.stream:cpu_client 30%; 5% for the rest (suite gate's" \
        in text, text
    flag = json.loads(netbench("compare", "before", "after", "--results", str(results),
                               "--threshold", "goodput=7%", "--json").stdout)
    assert {v["metric"]: v["threshold"] for v in flag["verdicts"]}["goodput"] == 0.07
    assert "--threshold" in flag["thresholds"]["source"]
    own = tmp_path / "t.toml"
    own.write_text("[thresholds]\ndefault = 0.2\n")
    file = json.loads(netbench("compare", "before", "after", "--results", str(results),
                               "--thresholds", str(own), "--json").stdout)
    assert {v["metric"]: v["threshold"] for v in file["verdicts"]}["goodput"] == 0.2
    hist = netbench("history", "--results", str(results))
    assert "thresholds: goodput 3%" in hist.stdout, hist.stdout
    # The dashboard judges as compare does, and lands beside the store it read.
    report = netbench("report", "--results", str(results), "--baseline", "before",
                      "--candidate", "after", cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert "thresholds: goodput 3%" in report.stdout
    assert (results / "_dashboard.html").exists() and not (tmp_path / "results").exists()


def test_only_the_cases_own_interfaces_are_environment_changes(tmp_path):
    """Another program's temporary veth (nbct0) present on one side is no environment change
    of an RDMA case on mlx5_0; that device's firmware changing is."""
    store = ResultStore(tmp_path)
    for run_id, label, fw, nics in (
            ("a", "before", "28.39", [{"name": "nbct0", "driver": "veth", "mtu": 1500}]),
            ("b", "after", "28.40", [])):
        env = json.dumps({"kernel": "6.1.0", "nics": nics, "rdma_devices": [
            {"name": "mlx5_0", "fw_ver": fw, "ports": [{"port": 1, "rate": "100 Gb/sec"}]},
            {"name": "mlx5_1", "fw_ver": fw, "ports": []}]})
        rows = []
        for i in range(3):
            row = {name: None for name, _ in COLUMNS}
            row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, host="h1",
                       started_at=datetime.now(UTC), benchmark="rdma.write_bw", family="rdma",
                       metric="bw_avg", value=90.0 + i, better="higher", unit="Gbit/s",
                       status="ok", case_index=0, msg_size=65536, env_json=env,
                       device="mlx5_0:1", params=params_json({"msg_size": 65536}))
            rows.append(row)
        store.write_run(store.path_for(run_id, datetime.now(UTC).isoformat()), rows)
    out = json.loads(netbench("compare", "before", "after", "--results", str(tmp_path),
                              "--json").stdout)
    changed = {c["what"] for c in out["environment_changes"]}
    assert changed == {"mlx5_0 firmware"}, changed


def test_figures_at_a_floats_edge_are_judged_without_a_traceback(tmp_path):
    """Stored values of +-1e308 (a forged or broken file): compare and history answer, one
    verdict each, no OverflowError."""
    store = ResultStore(tmp_path)
    for i in range(3):
        _run(store, f"a{i}", "a", {"bw_avg": (1e308, "higher")}, n=0)
        _run(store, f"b{i}", "b", {"bw_avg": (-1e308, "higher")}, n=0)
    proc = netbench("compare", "a", "b", "--results", str(tmp_path), "--json")
    assert proc.returncode in (0, 1) and "Traceback" not in proc.stderr, proc.stderr
    assert len(json.loads(proc.stdout)["verdicts"]) == 1
    hist = netbench("history", "--results", str(tmp_path))
    assert hist.returncode in (0, 1) and "Traceback" not in hist.stderr, hist.stderr
