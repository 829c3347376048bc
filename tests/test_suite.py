from pathlib import Path

import pytest

from netbench.errors import UsageError
from netbench.run.suite import load_suite, parse_cli_params, plan_single

ROOT = Path(__file__).resolve().parent.parent


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(text)
    return path


def test_shipped_suites_are_valid():
    for suite in sorted((ROOT / "suites").glob("*.toml")):
        plan = load_suite(suite)
        assert plan.cases, suite


def test_ci_suite_covers_every_family():
    from netbench import registry

    plan = load_suite(ROOT / "suites" / "ci.toml")
    families = {p.bench.family for p in plan.cases}
    assert families == {b.family for b in registry.all_benchmarks().values()}


def test_cases_expand_and_timeouts_apply(tmp_path):
    path = write(tmp_path, """
[suite]
name = "mine"
[[case]]
benchmark = "tcp.stream"
msg_size = ["16K", "1M"]
streams = [1, 4]
timeout = 42
[[case]]
benchmark = "mem.copy"
""")
    plan = load_suite(path)
    assert plan.suite == "mine"
    assert len(plan.cases) == 5
    assert [p.timeout for p in plan.cases[:4]] == [42.0] * 4
    assert plan.cases[3].case.params["msg_size"] == 1 << 20
    assert plan.cases[3].case.params["streams"] == 4


@pytest.mark.parametrize("text,needle", [
    ("[[case]]\nbenchmark = \"tcp.stream\"\nstreams = \"two\"\n",
     "s.toml:3: key 'streams': param streams: bad value 'two'"),
    ("[[case]]\nbenchmark = \"tcp.stream\"\n\n[[case]]\nbenchmark = \"tcp.stream\"\n"
     "colour = 1\n", "s.toml:6: key 'colour'"),
    ("[[case]]\nbenchmark = \"tcp.nope\"\n", "s.toml:2: unknown benchmark 'tcp.nope'"),
    ("[[case]]\nstreams = 1\n", "s.toml:1: case has no 'benchmark' key"),
    ("[[case]]\nbenchmark = \"tcp.rr\"\ntimeout = -3\n", "s.toml:3: timeout must be a positive"),
    ("[suite]\nname = \"x\"\n[extra]\na = 1\n", "unknown table or key 'extra'"),
    ("[suite]\nname = \"x\"\n", "no [[case]] entries"),
    ("[[case]\nbenchmark = 1\n", "not valid TOML"),
    ("[[case]]\nbenchmark = \"tcp.rr\"\nmsg_size = \"1..0\"\n", "s.toml:3: key 'msg_size'"),
])
def test_malformed_suites_name_file_line_and_key(tmp_path, text, needle):
    with pytest.raises(UsageError) as info:
        load_suite(write(tmp_path, text))
    assert needle in str(info.value)


def test_toml_syntax_error_reports_line(tmp_path):
    with pytest.raises(UsageError, match=r"s.toml:3:\d+: not valid TOML"):
        load_suite(write(tmp_path, "[[case]]\nbenchmark = \"tcp.rr\"\nmsg_size = = 3\nx=1\n"))


def test_missing_suite_file():
    with pytest.raises(UsageError, match="cannot read suite"):
        load_suite("/nonexistent/suite.toml")


def test_cli_params():
    assert parse_cli_params(["a=1", " b = x,y "]) == {"a": "1", "b": "x,y"}
    with pytest.raises(UsageError, match="expected key=value"):
        parse_cli_params(["novalue"])
    plan = plan_single("tcp.rr", {"msg_size": "64,1K"})
    assert [p.case.msg_size for p in plan.cases] == [64, 1024]
