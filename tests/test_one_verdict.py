"""One decision function: the same two sides get the same verdicts from `netbench compare`,
`netbench history`, the dashboard's comparison (as Chromium drew it) and the pytest plugin."""

import json
import re
import textwrap
from datetime import UTC, datetime

import pytest
from conftest import netbench
from test_dashboard import CHROMIUM, _facts
from test_pytest_plugin import _plugin

from netbench.analysis.verdict import VERDICTS
from netbench.report.dashboard import VERDICT_COLOURS
from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore, params_json

pytest_plugins = ["pytester"]

# metric -> (better, nightly values (five runs), the new run's value, cores busy in it)
CASES = {
    "bw_avg": ("higher", [100.0, 100.4, 99.7, 100.2, 99.9], 90.0, 0.0),       # regressed
    "msg_rate": ("higher", [10.0, 10.1, 9.9, 10.05, 9.95], 11.0, 0.0),        # improved
    "lat_p50": ("lower", [2.0, 2.01, 1.99, 2.0, 2.02], 2.4, 0.9),             # disturbed
    "lat_p99": ("lower", [5.0, 7.0, 4.0, 6.5, 4.5], 6.0, 0.0),                # noisy
    "lat_avg": ("lower", [3.0, 3.01, 2.99, 3.0, 3.0], 3.03, 0.0),             # unchanged
}


def _store(path):
    store = ResultStore(path)
    store.check_writable()
    for i in range(6):
        rows = []
        for metric, (better, nightly, new, busy) in CASES.items():
            row = {name: None for name, _ in COLUMNS}
            row.update(schema_version=SCHEMA_VERSION, run_id=f"r{i}",
                       label="nightly" if i < 5 else "new", host="h1",
                       started_at=datetime(2026, 11, 1, 2, i, tzinfo=UTC),
                       benchmark="rdma.write_bw", family="rdma", op="write_bw", metric=metric,
                       value=nightly[i] if i < 5 else new, better=better, unit="u",
                       status="ok", case_index=0, msg_size=65536,
                       params=params_json({"msg_size": 65536}), env_json="{}",
                       load_other_cores=busy if i == 5 else 0.0)
            rows.append(row)
        store.write_run(store.path_for(f"r{i}", rows[0]["started_at"].isoformat()), rows)
    return store


def test_every_verdict_has_a_colour():
    assert set(VERDICT_COLOURS) == set(VERDICTS)


def test_compare_history_dashboard_and_plugin_agree(tmp_path, pytester, monkeypatch):
    res = tmp_path / "res"
    _store(res)
    proc = netbench("compare", "nightly", "new", "--results", str(res), "--json")
    compared = {v["metric"]: v["verdict"] for v in json.loads(proc.stdout)["verdicts"]}
    assert compared == {"bw_avg": "regressed", "msg_rate": "improved", "lat_p50": "disturbed",
                        "lat_p99": "noisy", "lat_avg": "unchanged"}, compared
    assert proc.returncode == 1
    hist = json.loads(netbench("history", "--results", str(res), "--window", "5",
                               "--json").stdout)
    newest = {s["metric"]: s["steps"][-1]["verdict"] for s in hist["series"]}
    assert newest == compared
    # The pytest plugin, in a real inner pytest run over the same store.
    _plugin(pytester.path, monkeypatch)
    pytester.makepyfile(textwrap.dedent('''
        import json
        from netbench.pytest_plugin import NetbenchResult

        def test_same(netbench):
            verdicts = netbench.verdicts(NetbenchResult([], "new"), "nightly")
            print("VERDICTS" + json.dumps({v.metric: v.verdict for v in verdicts}))

        def test_gate(netbench):
            netbench.assert_no_regression(NetbenchResult([], "new"), "nightly")
    '''))
    out = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-s",
                                        "--netbench-results", str(res))
    line = next(x for x in out.outlines if x.startswith("VERDICTS") or "VERDICTS{" in x)
    assert json.loads(line[line.index("VERDICTS") + 8:]) == compared
    out.assert_outcomes(passed=1, failed=1)
    assert any("regressed: rdma.write_bw bw_avg -10.0%" in x for x in out.outlines)
    if not CHROMIUM:
        pytest.skip("the dashboard half needs Debian's chromium (apt-get install chromium)")
    page = tmp_path / "d.html"
    assert netbench("report", "--results", str(res), "--baseline", "nightly", "--candidate",
                    "new", "-o", str(page)).returncode == 0
    _, facts = _facts(tmp_path, page)
    # Each row's verdict as its column says it, and the folded metrics' verdicts as the note
    # under the chart counts them ("other metrics folded: 1 noisy, 1 unchanged"): together,
    # compare's.
    drawn = [t.rsplit(" ", 1)[-1] for trace in facts["comparison"]["texts"] for t in trace]
    (folded,) = [n[0] for n in facts["comparison"]["boxes"]["notes"]
                 if n[0].startswith("other metrics folded: ")]
    drawn += [v for n, v in re.findall(r"(\d+) (\w+)", folded.split("(")[0])
              for _ in range(int(n))]
    assert sorted(drawn) == sorted(compared.values()), (drawn, folded)
