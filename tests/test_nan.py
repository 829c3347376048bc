"""NaN never passes a gate: every number from a user is finite and in range, or a usage error
(exit 2, one line); JSON output is strict JSON (no bare NaN or Infinity)."""

import json

import pytest
from conftest import assert_clean_error, netbench
from test_accept import SPEC, _store
from test_compare import _run

from netbench.api import Param
from netbench.errors import UsageError
from netbench.store import ResultStore


def _strict(text: str):
    def refuse(name):
        raise ValueError(f"not JSON: {name}")
    return json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_float_params_refuse_non_finite(value):
    with pytest.raises(UsageError, match="finite|bad value"):
        Param("duration", "float", 1.0, "", minimum=0, maximum=10).parse(value)
    with pytest.raises(UsageError, match="bad value"):      # int('1e999'), int(inf): no crash
        Param("n", "int", 1, "", minimum=0).parse(float(value) if value != "1e999" else value)


@pytest.mark.parametrize("args", [["-p", "duration=nan"], ["-p", "duration=inf"],
                                  ["--timeout", "nan"], ["--timeout", "inf"],
                                  ["--timeout", "-1"]])
def test_cli_numbers_must_be_finite(tmp_path, args):
    proc = netbench("run", "tcp.stream", *args, "--results", str(tmp_path))
    assert_clean_error(proc)
    assert proc.returncode == 2


def test_suite_timeout_nan_names_the_line(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[[case]]\nbenchmark = "mem.copy"\ntimeout = nan\n')
    assert_clean_error(netbench("run", str(suite), "--results", str(tmp_path / "r")),
                       "s.toml", "timeout")


def test_accept_with_a_nan_bound_is_refused(tmp_path):
    results = _store(tmp_path / "a", {1 << 20: 95.0, 4 << 20: 96.0})
    spec = tmp_path / "spec.toml"
    spec.write_text(SPEC.replace("max = 2.0", "max = nan"))
    proc = netbench("accept", str(spec), "--results", str(results))
    assert_clean_error(proc, "spec.toml", "not a finite number")
    spec.write_text(SPEC.replace('line_rate = "probe"', "line_rate = inf"))
    assert_clean_error(netbench("accept", str(spec), "--results", str(results)), "line_rate")


def test_compare_threshold_nan_is_a_usage_error_and_json_is_strict(tmp_path):
    store = ResultStore(tmp_path)
    for i in range(3):              # three invocations a side: a verdict can be reached
        _run(store, f"r1{i}", "before", {"bw_avg": (100.0 + i / 10, "higher")})
        _run(store, f"r2{i}", "after", {"bw_avg": (76.0 + i / 10, "higher")}, seed=2)
    for bad in ("bw_avg=nan", "bw_avg=inf", "bw_avg=-5%"):
        proc = netbench("compare", "before", "after", "--results", str(tmp_path),
                        "--threshold", bad)
        assert_clean_error(proc, "threshold")
        assert proc.returncode == 2
    proc = netbench("compare", "before", "after", "--results", str(tmp_path), "--json")
    assert proc.returncode == 1                         # -24% is a regression, not "unchanged"
    data = _strict(proc.stdout)
    assert data["verdicts"][0]["verdict"] == "regressed"
