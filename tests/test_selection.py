"""One run-selection rule for compare, accept, report and history; and the evidence compare
judges percentiles and repeats by (block bootstrap, the repeats' design effect)."""

import json
import random
from datetime import UTC, datetime, timedelta

from conftest import assert_clean_error, netbench

from netbench.analysis.selection import resolve
from netbench.stats import latency_summary
from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore, params_json

T0 = datetime(2026, 11, 1, tzinfo=UTC)


def _row(run_id, label, when, **kw):
    row = {name: None for name, _ in COLUMNS}
    row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, started_at=when,
               host="h1", suite="s", case_index=0, status="ok", env_json="{}")
    row.update(kw)
    return row


def _rr_run(store, run_id, label, when, latencies, status="ok", reason=None):
    """A tcp.rr case as the benchmark stores it: lat_p50 carries the samples, the other
    percentiles only their values."""
    common = dict(benchmark="tcp.rr", family="tcp", op="rr", msg_size=64, unit="us (half RTT)",
                  better="lower", params=params_json({"msg_size": 64}))
    if status != "ok":
        rows = [_row(run_id, label, when, status=status, reason=reason, **common)]
    else:
        summary = latency_summary(latencies)
        rows = [_row(run_id, label, when, metric=f"lat_{q}", value=summary[q],
                     samples=latencies if q == "p50" else None, n_samples=len(latencies),
                     **common) for q in ("p50", "p99", "max")]
    store.write_run(store.path_for(run_id, when.isoformat()), rows)


def _latencies(rng, n=4000, level=10.0, tail=1.0):
    return [level * rng.lognormvariate(0, 0.05) * (tail if rng.random() < 0.02 else 1.0)
            for _ in range(n)]


def test_one_rule_label_pools_measured_runs_and_names_what_it_left_out(tmp_path):
    store = ResultStore(tmp_path)
    rng = random.Random(1)
    _rr_run(store, "aaa", "nightly", T0, _latencies(rng))
    _rr_run(store, "bbb", "nightly", T0 + timedelta(days=1), [], status="failed",
            reason="connect: refused")
    _rr_run(store, "ccc", "nightly", T0 + timedelta(days=2), _latencies(rng))
    chosen = resolve(store, "nightly")
    assert chosen.run_ids == ["aaa", "ccc"]
    assert chosen.left_out == [("bbb", "nothing measured: 1 failed")]
    assert "bbb (nothing measured: 1 failed)" in chosen.describe()
    # Nothing named: the latest run that measured something, and the later one it passed by.
    latest = resolve(store, None)
    assert latest.run_ids == ["ccc"] and latest.left_out == []
    _rr_run(store, "ddd", "other", T0 + timedelta(days=3), [], status="failed",
            reason="connect: refused")
    latest = resolve(store, None)
    assert latest.run_ids == ["ccc"] and latest.left_out[0][0] == "ddd"
    # By id, a failed-only run is taken as asked, and said to be one.
    by_id = resolve(store, "ddd")
    assert by_id.run_ids == ["ddd"] and "asked for by id" in by_id.describe()
    # Every command prints the resolution: compare, accept.
    # As a comparison's candidate, a run that measured nothing is chosen (its cases are the
    # news: lost where nothing later measured them); here ccc measured tcp.rr since.
    proc = netbench("compare", "aaa", "nightly", "--results", str(tmp_path))
    assert "candidate: label 'nightly' -> 3 runs aaa, bbb, ccc" in proc.stdout, proc.stdout
    assert proc.returncode == 0 and "0 lost" in proc.stdout, proc.stdout
    spec = tmp_path / "spec.toml"
    spec.write_text('[[check]]\nbenchmark = "tcp.rr"\nmetric = "lat_p50"\nmax = 100\n')
    acc = netbench("accept", str(spec), "--results", str(tmp_path))
    assert acc.returncode == 0, acc.stdout + acc.stderr
    assert "latest run that measured tcp.rr -> run ccc; left out ddd" in acc.stdout
    acc = netbench("accept", str(spec), "--results", str(tmp_path), "--label", "nightly")
    assert "2 runs aaa, ccc" in acc.stdout and "(run aaa)" in acc.stdout
    # A label whose runs all failed: one error naming them.
    assert_clean_error(netbench("compare", "other", "nightly", "--results", str(tmp_path)),
                       "label 'other': no run measured anything", "ddd")


def test_percentiles_are_judged_by_their_invocations(tmp_path):
    """A tail that got heavier is caught in the percentiles it moves, across three runs a
    side; one run a side, however many samples it holds, is unverified."""
    store = ResultStore(tmp_path)
    rng = random.Random(7)
    for i, label in enumerate(("base", "same", "tail") * 3):
        _rr_run(store, f"{label}{i}", label, T0 + timedelta(hours=i),
                _latencies(rng, tail=1.6 if label == "tail" else 1.0))
    aa = json.loads(netbench("compare", "base", "same", "--results", str(tmp_path),
                             "--no-history", "--json").stdout)["verdicts"]
    assert {v["evidence"] for v in aa} == {"repeats"}
    assert not [v for v in aa if v["verdict"] in ("regressed", "improved")], aa
    one = json.loads(netbench("compare", "base0", "tail2", "--results", str(tmp_path),
                              "--no-history", "--json").stdout)["verdicts"]
    assert {v["metric"]: v["verdict"] for v in one}["lat_p99"] == "unverified"
    ab = netbench("compare", "base", "tail", "--results", str(tmp_path), "--no-history",
                  "--json")
    assert ab.returncode == 1
    by = {v["metric"]: v for v in json.loads(ab.stdout)["verdicts"]}
    # A heavier 2% tail moves p99 by half, not the median: caught where it is.
    assert by["lat_p99"]["verdict"] == "regressed" and by["lat_p99"]["p_value"] < 0.01
    assert by["lat_p50"]["verdict"] == "unchanged"


def test_run_to_run_spread_of_repeats_is_noise_not_a_regression(tmp_path):
    """Each run sits at its own level (±10%), its samples tight around it: the sides' medians
    differ by ~8%, which pooled samples taken as independent call significant (one-stage
    bootstrap p 0.003, Mann-Whitney p ~0); counted by their repeats, it is noise."""
    store = ResultStore(tmp_path)
    rng = random.Random(11)
    levels = [1.0, 0.92, 1.12, 1.0, 0.95, 0.90, 1.09, 1.04]
    for i, level in enumerate(levels):
        side = "a" if i % 2 == 0 else "b"
        _rr_run(store, f"r{i}", side, T0 + timedelta(hours=i), _latencies(rng, level=10 * level))
    verdicts = json.loads(netbench("compare", "a", "b", "--results", str(tmp_path),
                                   "--json").stdout)["verdicts"]
    assert not [v for v in verdicts if v["verdict"] in ("regressed", "improved")], verdicts
    assert {v["verdict"] for v in verdicts if v["metric"] in ("lat_p50", "lat_p99")} == {
        "noisy"}, verdicts


def test_a_side_whose_every_invocation_failed_is_named_not_dropped(tmp_path):
    """A run whose tcp.rr repeats all failed (its other case measured, so the run is chosen):
    the lost case is named with its reason, on the console and in the JSON."""
    store = ResultStore(tmp_path)
    rng = random.Random(5)
    for i in range(3):
        _rr_run(store, f"ok{i}", "good", T0 + timedelta(hours=i), _latencies(rng))
    mem = dict(benchmark="mem.copy", family="mem", op="copy", metric="bw", value=10.0,
               unit="GB/s", better="higher", params=params_json({"msg_size": 0}))
    when = T0 + timedelta(hours=5)
    rows = [_row("bad", "broken", when, benchmark="tcp.rr", family="tcp", op="rr",
                 msg_size=64, params=params_json({"msg_size": 64}), case_index=i,
                 status="failed", reason="peer 10.0.0.2 closed the connection")
            for i in range(3)] + [_row("bad", "broken", when, case_index=3, **mem)]
    store.write_run(store.path_for("bad", when.isoformat()), rows)
    # Nothing else in common: the lost case is the comparison, and it fails the gate.
    proc = netbench("compare", "good", "broken", "--results", str(tmp_path))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lost = next(line for line in proc.stdout.splitlines() if "LOST" in line)
    assert "tcp.rr" in lost and "failed: peer 10.0.0.2 closed the connection" in lost, lost
    assert netbench("compare", "good", "broken", "--results", str(tmp_path),
                    "--allow-lost").returncode == 0
    store.write_run(store.path_for("ok3", when.isoformat()), [_row("ok3", "good", T0, **mem)])
    proc = netbench("compare", "good", "broken", "--results", str(tmp_path))
    assert proc.returncode == 1 and "1 lost" in proc.stdout, proc.stdout + proc.stderr
    data = json.loads(netbench("compare", "good", "broken", "--results", str(tmp_path),
                               "--json").stdout)
    # Its params as the installed tcp.rr reads them (what it stored, the rest at their
    # defaults: registry._declared_params).
    ((case),) = data["failed_cases"]
    assert json.loads(case.pop("params"))["msg_size"] == 64, case
    assert case == {"side": "candidate", "benchmark": "tcp.rr",
                    "reason": "peer 10.0.0.2 closed the connection"}


def test_a_case_the_candidate_was_never_asked_to_run_is_named_and_the_same_suite_loses_it(
        tmp_path):
    """The baseline measured tcp.rr and mem.copy; the candidate ran mem.copy alone, from
    another suite (a narrower target): tcp.rr is named as not asked, never judged, and the
    gate holds (exit 0). The same candidate run from the baseline's own suite lost it: LOST,
    exit 1."""
    store = ResultStore(tmp_path)
    rng = random.Random(7)
    mem = dict(benchmark="mem.copy", family="mem", op="copy", metric="bw", value=10.0,
               unit="GB/s", better="higher", params=params_json({"msg_size": 0}))
    for i in range(2):
        _rr_run(store, f"b{i}", "before", T0 + timedelta(hours=i), _latencies(rng))
    store.write_run(store.path_for("bm", T0.isoformat()), [_row("bm", "before", T0, **mem)])
    when = T0 + timedelta(hours=5)
    store.write_run(store.path_for("c1", when.isoformat()),
                    [_row("c1", "after", when, suite="mem-only", **mem)])
    proc = netbench("compare", "before", "after", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("not asked: tcp.rr")]
    assert "only the baseline measured it" in line and "LOST" not in proc.stdout.replace(
        "would be LOST", ""), proc.stdout
    data = json.loads(netbench("compare", "before", "after", "--results", str(tmp_path),
                               "--json").stdout)
    ((case),) = data["not_asked_cases"]
    assert case["benchmark"] == "tcp.rr" and json.loads(case["params"])["msg_size"] == 64
    store.write_run(store.path_for("c2", (when + timedelta(hours=1)).isoformat()),
                    [_row("c2", "after2", when + timedelta(hours=1), **mem)])
    proc = netbench("compare", "before", "after2", "--results", str(tmp_path))
    assert proc.returncode == 1 and "1 lost" in proc.stdout, proc.stdout + proc.stderr
    assert "not asked" not in proc.stdout, proc.stdout
