"""The pytest plugin, driven through a real inner pytest run (pytester)."""

import json
import os
import textwrap

from conftest import install_plugin

pytest_plugins = ["pytester"]

PLUGIN = '''
from netbench.api import Benchmark, Measurement, Metric, Param


class Fixed(Benchmark):
    name = "demo.fixed"
    transport = "none"
    metrics = (Metric("bw", "Gbit/s", "higher"), Metric("lat", "us", "lower"))
    params = (Param("level", "float", 10.0, minimum=0.001),)

    def run(self, case, ctx):
        level = case.params["level"]
        return Measurement({"bw": level, "lat": 100 / level},
                           {"bw": [level] * 5, "lat": [100 / level] * 5})


class Never(Benchmark):
    name = "demo.never"
    transport = "none"
    metrics = (Metric("x", "u", "higher"),)

    def available(self, env):
        return "no such hardware here"
'''


def _plugin(tmp_path, monkeypatch):
    folder = install_plugin(tmp_path, PLUGIN, {"demo.fixed": "demo_plugin:Fixed",
                                               "demo.never": "demo_plugin:Never"})
    monkeypatch.setenv("PYTHONPATH", f"{folder}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")


def test_fixtures_run_benchmarks_and_feed_pytest_benchmark(pytester, tmp_path, monkeypatch):
    _plugin(pytester.path, monkeypatch)
    pytester.makepyfile(textwrap.dedent('''
        import os

        def test_bandwidth(netbench_benchmark):
            level = float(os.environ.get("LEVEL", "10"))
            result = netbench_benchmark("demo.fixed", "bw", level=level)
            assert result.value("bw") == level

        def test_latency_check(netbench):
            assert netbench.run("demo.fixed", level=4).value("lat") == 25

        def test_real_tcp(netbench):
            assert netbench.run("tcp.rr", iterations=200).value("lat_p50") > 0

        def test_skipped(netbench):
            netbench.run("demo.never")
    '''))
    out = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "--benchmark-json",
                                        str(tmp_path / "b.json"), "--benchmark-autosave",
                                        f"--benchmark-storage={tmp_path / 'store'}",
                                        "--netbench-results", str(tmp_path / "rows"))
    out.assert_outcomes(passed=3, skipped=1)
    out.stdout.fnmatch_lines(["*no such hardware here*"])
    data = json.loads((tmp_path / "b.json").read_text())
    (bench,) = data["benchmarks"]
    assert bench["stats"]["min"] == 0.1                 # 1 / (10 Gbit/s): seconds per Gbit
    assert bench["extra_info"]["unit"] == "Gbit/s" and bench["extra_info"]["value"] == 10
    # A slower candidate: pytest-benchmark's own gate fails on netbench's numbers.
    monkeypatch.setenv("LEVEL", "5")
    gate = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-k", "bandwidth",
                                         f"--benchmark-storage={tmp_path / 'store'}",
                                         "--benchmark-compare",
                                         "--benchmark-compare-fail=mean:10%")
    assert gate.ret != 0
    assert "Field 'mean' has failed PercentageRegressionCheck" in gate.stderr.str()


def test_a_skipped_benchmark_skips_and_says_nothing_else(pytester, tmp_path, monkeypatch):
    """netbench_benchmark on a case that cannot run here: a skip with the reason, not also
    pytest-benchmark's "fixture was not used" (an error under -W error)."""
    _plugin(pytester.path, monkeypatch)
    pytester.makepyfile(textwrap.dedent('''
        def test_skipped_benchmark(netbench_benchmark):
            netbench_benchmark("demo.never", "x")
    '''))
    out = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "-W", "error",
                                        "--netbench-results", str(tmp_path / "rows"))
    out.assert_outcomes(skipped=1)
    out.stdout.fnmatch_lines(["*no such hardware here*"])
    assert "was not used" not in out.stdout.str() + out.stderr.str()


def test_a_soak_in_the_plugin_is_judged_by_accepts_bounds(pytester, tmp_path, monkeypatch):
    """netbench.soak runs a real burn-in (tcp.rr on loopback, 4 windows); assert_soak holds it
    to accept's soak bounds and fails, naming the bound, where it breaks one."""
    pytester.makepyfile(textwrap.dedent('''
        import pytest

        def test_soak(netbench):
            (case,) = netbench.soak("tcp.rr", duration=1.2, window=0.3)
            assert case.windows == 4 and case.metric == "lat_p50"
            netbench.assert_soak([case], max_link_downs=0)
            with pytest.raises(pytest.fail.Exception, match="line rate unknown"):
                netbench.assert_soak([case], min_window_line_rate=0.9)

        def test_cannot_soak(netbench):
            netbench.soak("mem.copy", duration=10, window=1)
    '''))
    out = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--netbench-results",
                                        str(tmp_path / "rows"))
    out.assert_outcomes(passed=1, failed=1)
    out.stdout.fnmatch_lines(["*mem.copy cannot run for a given time*"])


def test_a_run_whose_parts_could_not_be_compacted_fails_its_test(pytester, tmp_path,
                                                                  monkeypatch):
    """Every row stored but the parts left uncompacted (the disk full as they were compacted:
    here the writer's close refuses as a full disk does): the test fails saying so and where
    the rows are, as `netbench run` and `netbench soak` exit 1 for it; never a pass."""
    _plugin(pytester.path, monkeypatch)
    pytester.makeconftest(textwrap.dedent('''
        import errno

        from netbench.store import parquet

        def full(self, compact=True):
            if compact:
                raise OSError(errno.ENOSPC, "No space left on device")
            return None

        parquet.RunWriter.close = full
    '''))
    pytester.makepyfile(textwrap.dedent('''
        def test_run(netbench):
            netbench.run("demo.fixed")

        def test_soak(netbench):
            netbench.soak("tcp.rr", duration=0.6, window=0.3)
    '''))
    out = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--netbench-results",
                                        str(tmp_path / "rows"))
    out.assert_outcomes(failed=2)
    out.stdout.fnmatch_lines(["*demo.fixed: compacting its parts into * failed: no space left "
                              "on device*every row stored stays in*",
                              "*tcp.rr: compacting its parts into * failed*"])
