"""pytest integration: acceptance checks written as tests, gated the way a team already gates.

Fixtures (registered through the ``pytest11`` entry point, so installing netbench is enough):

``netbench``
    ``netbench.run("tcp.stream", duration=2)`` runs a benchmark in-process (loopback unless
    ``--netbench-peer HOST`` is given), stores its rows (``--netbench-results DIR``, default a
    temporary folder) and returns them; a skipped case skips the test with its reason, a failed
    case fails it.
``netbench_benchmark``
    ``netbench_benchmark("rdma.write_bw", "bw_avg", msg_size="1M")`` does the same and hands
    the metric's raw samples to pytest-benchmark, so its table, ``--benchmark-json`` and
    ``--benchmark-compare-fail`` see netbench's numbers. pytest-benchmark only knows "time,
    lower is better", so samples become seconds per unit of work: a latency in us becomes
    seconds, a bandwidth in Gbit/s becomes seconds per Gbit (1 / value). The original value,
    unit and direction go into ``extra_info``.

Regression gates: ``netbench.verdicts(result, baseline="nightly")`` judges a result against a
label, run id or results directory in the same store (``--netbench-baseline`` sets a default)
with compare's own decision function, so a test and `netbench compare` never disagree;
``netbench.assert_no_regression(result, baseline)`` fails the test on a regression and names
what was unverified, noisy or disturbed.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:       # imported when judged, not when pytest loads the plugin
    from netbench.analysis.compare import MetricVerdict

_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("netbench")
    group.addoption("--netbench-results", default=None,
                    help="store the rows of netbench fixtures here (default: a temp folder)")
    group.addoption("--netbench-peer", default=None,
                    help="HOST[:PORT] running `netbench serve` for peer benchmarks")
    group.addoption("--netbench-label", default="pytest", help="label of the stored runs")
    group.addoption("--netbench-baseline", default=None,
                    help="label, run id or results directory that netbench.verdicts() and "
                         "netbench.assert_no_regression() judge results against")


class NetbenchResult:
    """The rows of one netbench run, by metric."""

    def __init__(self, rows: list[dict[str, Any]], run_id: str = "") -> None:
        self.rows, self.run_id = rows, run_id

    def row(self, metric: str) -> dict[str, Any]:
        cases = {r.get("case_index") for r in self.rows if r["metric"] == metric}
        if len(cases) > 1:
            raise ValueError(f"this result holds {len(cases)} cases (a sweep): pick one with "
                             f"result.rows, or run one case per call")
        for row in self.rows:
            if row["metric"] == metric:
                return row
        known = sorted({r["metric"] for r in self.rows if r["metric"]})
        raise KeyError(f"no metric {metric!r} in this result; it has {', '.join(known)}")

    def value(self, metric: str) -> float:
        return float(self.row(metric)["value"])

    def samples(self, metric: str) -> list[float]:
        row = self.row(metric)
        return list(row["samples"]) if row["samples"] is not None else [float(row["value"])]


class NetbenchRunner:
    def __init__(self, results: Path, peer: str | None, label: str,
                 baseline: str | None = None) -> None:
        self.results, self.peer, self.label, self.baseline = results, peer, label, baseline

    def verdicts(self, result: NetbenchResult, baseline: str | None = None,
                 thresholds: dict[str, float] | None = None,
                 alpha: float = 0.05) -> list[MetricVerdict]:
        """``result`` judged against ``baseline`` (a label, run id or results directory) by
        ``netbench.analysis.compare.judge_selections``: what `netbench compare` says."""
        from netbench import registry
        from netbench.analysis.compare import judge_selections
        from netbench.analysis.selection import resolve
        from netbench.errors import NetbenchError
        from netbench.store import ResultStore

        ref = baseline or self.baseline
        if not ref:
            pytest.fail("netbench.verdicts: name a baseline (or --netbench-baseline)",
                        pytrace=False)
        store = ResultStore(self.results, registry.stored_traits)
        try:
            return judge_selections(store, resolve(store, ref), resolve(store, result.run_id),
                                    thresholds or {}, alpha)
        except NetbenchError as exc:
            pytest.fail(f"netbench: {exc}", pytrace=False)

    def _lost(self, run_id: str) -> list[MetricVerdict]:
        """The cases run ``run_id`` lost against the session's baseline (none without one)."""
        from netbench import registry
        from netbench.analysis.compare import judge_selections
        from netbench.analysis.selection import resolve
        from netbench.analysis.verdict import LOST
        from netbench.errors import NetbenchError
        from netbench.store import ResultStore

        if not self.baseline:
            return []
        store = ResultStore(self.results, registry.stored_traits)
        try:
            verdicts = judge_selections(store, resolve(store, self.baseline),
                                        resolve(store, run_id), {})
        except NetbenchError:
            return []
        return [v for v in verdicts if v.verdict == LOST]

    def assert_no_regression(self, result: NetbenchResult, baseline: str | None = None,
                             allow_lost: bool = False, **options: Any) -> list[MetricVerdict]:
        """Fails on a regression, or on a case the baseline measured and ``result`` did not
        (lost: skipped, failed), unless ``allow_lost``."""
        verdicts = self.verdicts(result, baseline, **options)
        failing = [v for v in verdicts if v.verdict and v.verdict.fails_gate(
            allow_lost=allow_lost)]
        if failing:
            pytest.fail("; ".join(
                f"{v.verdict}: {v.benchmark} {v.metric}: {v.reason}" if v.reason else
                f"{v.verdict}: {v.benchmark} {v.metric} {v.change:+.1%} "
                f"(p {v.p_adjusted:.3g})" for v in failing), pytrace=False)
        return verdicts

    def soak(self, benchmark: str, duration: float, window: float, line_rate: float | None = None,
             **params: Any) -> list[Any]:
        """A burn-in of ``benchmark`` (`netbench soak`): ``duration`` seconds in windows of
        ``window``, stored in the session's results; each case's windows judged
        (``netbench.analysis.soak.SoakCase``), against ``line_rate`` Gbit/s where given."""
        from netbench.analysis.soak import judge
        from netbench.env.probe import probe
        from netbench.errors import NetbenchError
        from netbench.report.console import Reporter
        from netbench.run.runner import Runner
        from netbench.run.suite import plan_single, soaked
        from netbench.store import ResultStore

        try:
            plan = soaked(plan_single(benchmark, dict(params)), duration, window)
            store = ResultStore(self.results)
            runner = Runner(store, probe(), label=self.label, peer=self.peer,
                            reporter=Reporter(io.StringIO(), interactive=False))
            result = runner.run(plan)
        except NetbenchError as exc:
            pytest.fail(f"netbench: {exc}", pytrace=False)
        if result.gave_up:          # stopped itself (far end gone, store full): a failure
            pytest.fail(f"netbench: soak stopped: {result.gave_up}", pytrace=False)
        if result.interrupted:
            raise KeyboardInterrupt
        _fail_uncompacted(benchmark, result)
        if result.tally.get("failed"):
            pytest.fail(f"{benchmark}: {result.tally['failed']} window(s) failed, the last: "
                        f"{result.rows[0]['reason'] if result.rows else '?'}", pytrace=False)
        return judge(store.read([result.run_id]), line_rate=line_rate)

    def assert_soak(self, cases: list[Any], **bounds: Any) -> None:
        """Fails where a soak (``soak()``'s) breaks accept's soak bounds:
        ``min_window_line_rate``, ``max_dips``, ``max_link_downs``, ``max_errors_per_hour``."""
        from netbench.analysis.soak import soak_failures

        failing = [f for c in cases for f in soak_failures(c, **bounds)]
        if failing:
            pytest.fail("; ".join(failing), pytrace=False)

    def run(self, benchmark: str, **params: Any) -> NetbenchResult:
        from netbench.env.probe import probe
        from netbench.errors import NetbenchError
        from netbench.report.console import Reporter
        from netbench.run.runner import Runner
        from netbench.run.suite import plan_single
        from netbench.store import ResultStore

        try:
            plan = plan_single(benchmark, {k: v for k, v in params.items()})
            runner = Runner(ResultStore(self.results), probe(), label=self.label,
                            peer=self.peer, reporter=Reporter(io.StringIO(), interactive=False))
            result = runner.run(plan)
        except NetbenchError as exc:
            pytest.fail(f"netbench: {exc}", pytrace=False)
        if result.gave_up:          # its store full: the rows before kept, this test failed
            pytest.fail(f"netbench: {benchmark}: stopped: {result.gave_up}", pytrace=False)
        if result.interrupted:      # the run kept its rows and stopped: so does the session
            raise KeyboardInterrupt
        _fail_uncompacted(benchmark, result)
        for row in result.rows:
            if row["status"] == "failed":
                pytest.fail(f"{benchmark}: {row['reason']}", pytrace=False)
        if result.rows and all(r["status"] == "skipped" for r in result.rows):
            # Measured on the baseline and skipped now (the device vanished after the update):
            # lost, which fails; a skip would read as nothing worse.
            lost = self._lost(result.run_id)
            if lost:
                pytest.fail("lost: " + "; ".join(f"{v.benchmark} {v.params}: {v.reason}"
                                                 for v in lost), pytrace=False)
            pytest.skip(f"{benchmark}: {result.rows[0]['reason']}")
        return NetbenchResult([r for r in result.rows if r["status"] == "ok"], result.run_id)


@pytest.fixture
def netbench(request: Any, tmp_path_factory: Any) -> NetbenchRunner:
    config = request.config
    results = config.getoption("--netbench-results") or tmp_path_factory.mktemp("netbench")
    return NetbenchRunner(Path(results), config.getoption("--netbench-peer"),
                          config.getoption("--netbench-label"),
                          config.getoption("--netbench-baseline"))


def as_seconds(samples: list[float], unit: str, better: str) -> list[float]:
    """Samples as pytest-benchmark's 'seconds, lower is better'."""
    if better == "higher":
        return [1.0 / s for s in samples if s > 0]
    return [s * _TIME_UNITS.get(unit.split()[0], 1.0) for s in samples]


@pytest.fixture
def netbench_benchmark(request: Any, netbench: NetbenchRunner) -> Callable[..., NetbenchResult]:
    bench_fixture = request.getfixturevalue("benchmark")     # needs pytest-benchmark

    def run(benchmark: str, metric: str, **params: Any) -> NetbenchResult:
        try:
            result = netbench.run(benchmark, **params)
        except pytest.skip.Exception:
            bench_fixture.skipped = True    # else its teardown warns "fixture was not used"
            raise
        row = result.row(metric)
        seconds = as_seconds(result.samples(metric), row["unit"], row["better"])
        if not seconds:
            pytest.fail(f"{benchmark} {metric}: no usable samples", pytrace=False)
        bench_fixture._mode = "netbench_benchmark(...)"
        stats = bench_fixture._make_stats(1)
        for value in seconds:
            stats.stats.update(value)
        bench_fixture.extra_info.update({
            "netbench_benchmark": benchmark, "metric": metric, "value": row["value"],
            "unit": row["unit"], "better": row["better"],
            "as_seconds": "1/value" if row["better"] == "higher" else f"value in {row['unit']}",
        })
        return result

    return run


def _fail_uncompacted(benchmark: str, result: Any) -> None:
    """Every row stored, but the run's parts not compacted into its file (its disk full): a
    failure, as `netbench run` and `netbench soak` exit 1 for it; the rows stay and are read
    as they are, and the next netbench command on the store with space compacts them."""
    if result.uncompacted:
        pytest.fail(f"netbench: {benchmark}: {result.uncompacted}; every row stored stays in "
                    f"{result.path} (the next netbench command on its store with space "
                    "compacts it)", pytrace=False)
