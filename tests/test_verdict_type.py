"""One Verdict type: the kinds are spelled once (netbench.analysis.verdict.Verdict), the fields
judge decides are declared once (Judgement), and the words users read stay the plain words."""

import ast
import json
from dataclasses import asdict, fields
from datetime import UTC, datetime

import pytest
from conftest import ROOT

from netbench.analysis.compare import Comparison, MetricVerdict
from netbench.analysis.history import History, Series, Step
from netbench.analysis.selection import Selection
from netbench.analysis.verdict import UNDECIDED, VERDICTS, Judgement, Side, Verdict, judge
from netbench.report.formats import compare_json, history_json

WORDS = {v.value for v in Verdict}
HOME = ROOT / "netbench" / "analysis" / "verdict.py"

# What `compare --json` and `history --json` printed before the one type (scripts read them).
COMPARE_KEYS = {"benchmark", "params", "msg_size", "metric", "unit", "better", "baseline",
                "candidate", "change", "threshold", "p_value", "verdict", "evidence", "needs",
                "p_adjusted", "invocations", "history_runs", "busy", "disturbed", "steal",
                "detectable", "per", "reason"}
STEP_KEYS = {"run_id", "started_at", "label", "value", "verdict", "change", "p_value",
             "evidence", "against", "p_adjusted", "needs", "disturbed", "detectable"}


def verdict_literals(source: str) -> list[int]:
    """Lines where code spells a verdict word as a whole string literal (docstrings and other
    bare string statements are prose, not code)."""
    tree = ast.parse(source)
    prose = {id(node.value) for node in ast.walk(tree)
             if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)}
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
            and node.value in WORDS and id(node) not in prose]


def test_the_finder_finds_a_spelled_verdict_and_passes_prose():
    assert verdict_literals('x = v.verdict == "regressed"\n') == [1]
    assert verdict_literals("colours = {'noisy': 1}\n") == [1]
    assert verdict_literals('"""regressed"""\nx = f"{n} regressed"\n') == []


def test_no_module_but_the_verdicts_own_spells_a_verdict():
    found = [f"{path.relative_to(ROOT)}:{line}"
             for path in sorted((ROOT / "netbench").rglob("*.py")) if path != HOME
             for line in verdict_literals(path.read_text())]
    assert not found, ("spell a verdict as netbench.analysis.verdict.Verdict, not a string: "
                       + ", ".join(found))


def test_the_kind_is_its_plain_word():
    assert [str(v) for v in VERDICTS] == ["lost", "regressed", "improved", "disturbed",
                                          "noisy", "unverified", "unchanged"]
    assert Verdict.REGRESSED == "regressed" and f"{Verdict.NOISY}" == "noisy"
    assert Verdict("disturbed") is Verdict.DISTURBED
    assert json.dumps({"v": Verdict.IMPROVED}, indent=1) == '{\n "v": "improved"\n}'
    assert [v.display for v in Verdict] == ["LOST", "REGRESSED", "improved", "disturbed",
                                            "noisy", "unverified", "unchanged"]


def test_what_fails_a_gate():
    assert set(UNDECIDED) == {v for v in Verdict if v.undecided} == {
        Verdict.NOISY, Verdict.UNVERIFIED, Verdict.DISTURBED}
    assert [v for v in Verdict if v.fails_gate()] == [Verdict.LOST, Verdict.REGRESSED]
    assert [v for v in Verdict if v.fails_gate(allow_lost=True)] == [Verdict.REGRESSED]
    assert {v for v in Verdict if v.fails_gate(fail_on_noisy=True)} == {
        Verdict.LOST, Verdict.REGRESSED, *UNDECIDED}


def test_the_records_declare_none_of_the_judgements_fields_again():
    judged = {f.name for f in fields(Judgement)}
    assert judged == {"verdict", "p_value", "p_adjusted", "evidence", "needs", "disturbed",
                      "detectable"}
    for record in (MetricVerdict, Step):
        assert issubclass(record, Judgement)
        assert not judged & set(record.__annotations__), record


def _metric(**judged):
    return MetricVerdict("rdma.write_bw", '{"msg_size":65536}', 65536, "bw_avg", "Gbit/s",
                         "higher", 100.0, 90.0, -0.1, 0.05, (3, 3), 0, (0.0, 0.0),
                         (0.0, 0.0), **judged)


def test_a_record_from_plain_text_holds_the_kind_and_refuses_other_words():
    assert _metric(verdict="regressed").verdict is Verdict.REGRESSED
    with pytest.raises(ValueError):
        _metric(verdict="REGRESSED")


def test_compare_json_keeps_its_keys_and_plain_words():
    j = judge(Side([100.0, 100.2, 99.8]), Side([90.0, 90.1, 89.9]), -0.1, "higher", 0.05,
              1e-4, "repeats", p_value=2e-5)
    assert j.verdict is Verdict.REGRESSED and (j.p_value, j.p_adjusted) == (2e-5, 1e-4)
    v = _metric(**j.decision())
    assert asdict(v)["verdict"] == "regressed"
    side = Selection(None, ["r1"], "run r1")
    done = Comparison(side, side, [v], [], [], [], [], [], {}, "")
    out = json.loads(compare_json(done))["verdicts"][0]
    assert set(out) == COMPARE_KEYS
    assert (out["verdict"], out["p_value"], out["p_adjusted"], out["evidence"]) == (
        "regressed", 2e-5, 1e-4, "repeats")
    assert type(out["verdict"]) is str


def test_history_json_keeps_its_keys_and_a_first_run_unjudged():
    when = datetime(2026, 11, 1, tzinfo=UTC)
    first, newest = Step("r1", when, "nightly", 100.0), Step("r2", when, "new", 90.0, -0.1, 1)
    newest.adopt(Judgement(verdict=Verdict.NOISY, p_value=0.2, p_adjusted=0.3,
                           evidence="repeats", needs="about 9 repeats a side"))
    h = History([], [Series("rdma.write_bw", "{}", "bw_avg", "u", "higher", None,
                            [first, newest])], [], [])
    steps = json.loads(history_json(h))["series"][0]["steps"]
    assert all(set(s) == STEP_KEYS for s in steps)
    assert (steps[0]["verdict"], steps[0]["evidence"]) == ("", "")
    assert (steps[1]["verdict"], steps[1]["p_value"], steps[1]["p_adjusted"],
            steps[1]["needs"]) == ("noisy", 0.2, 0.3, "about 9 repeats a side")


def test_accept_fabric_and_counter_news_say_their_outcome_as_a_verdict_their_gates_ask():
    from netbench.analysis.accept import Check, Outcome
    from netbench.analysis.counter_news import CounterNews

    check = Check("c", "tcp.stream", "goodput")
    passed, below = Outcome(check, True, [("a", 1.0)], "", ""), Outcome(
        check, False, [("a", 1.0)], "", "")
    gone = Outcome(check, False, [], "", "")
    assert [o.verdict for o in (passed, below, gone)] == [
        Verdict.UNCHANGED, Verdict.REGRESSED, Verdict.LOST]
    assert gone.verdict.fails_gate() and not gone.verdict.fails_gate(allow_lost=True)
    own, shown = CounterNews("b", "{}", "rx_crc_errors", 0, 3), CounterNews(
        "b", "{}", "RetransSegs", 0, 9, gated=False)
    assert (own.verdict, shown.verdict) == (Verdict.REGRESSED, Verdict.UNCHANGED)
    side = Selection(None, ["r1"], "run r1")
    news_only = Comparison(side, side, [], [], [], [own], [], [], {}, "")
    assert news_only.fails_gate() and news_only.fails_gate(allow_lost=True)
    assert not Comparison(side, side, [], [], [], [shown], [], [], {}, "").fails_gate()
