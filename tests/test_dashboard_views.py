"""netbench report: each view shows its own labels' runs, legibly, on real loopback runs.

One store for the module: real `netbench run`s of loopback cases under several labels; the
assertions read the figure JSON the page embeds, and Chromium renders the views that matter.
"""

import json
import re

import pytest
from conftest import netbench
from test_dashboard import CHROMIUM, _facts

from netbench.store import ResultStore

HOSTILE = "\x1b[31mred\n<b>bold</b>&<img src=x onerror=alert(1)>"
COLLECTIVES = ("all_gather", "all_reduce", "all_to_all", "broadcast", "reduce",
               "reduce_scatter", "send_recv")
needs_chromium = pytest.mark.skipif(not CHROMIUM, reason="needs Debian's chromium")


def _run(store, *args, label):
    proc = netbench("run", *args, "--results", str(store), "--label", label, timeout=300)
    assert proc.returncode == 0, proc.stderr


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """before/after: TCP stream at two sizes, TCP RR (one size), mem.copy (the bound);
    coll: all seven collectives at one size beside tcp.stream; one-coll: one collective;
    newest, a label with escapes and HTML whose run skipped rdma.write_bw."""
    root = tmp_path_factory.mktemp("views")
    store = root / "res"
    pair = root / "pair.toml"
    pair.write_text('[[case]]\nbenchmark = "tcp.stream"\nmsg_size = ["16K", "1M"]\n'
                    'duration = 0.3\n[[case]]\nbenchmark = "tcp.rr"\niterations = 300\n'
                    '[[case]]\nbenchmark = "mem.copy"\niterations = 3\n')
    for label in ("before", "after"):
        _run(store, str(pair), label=label)
    coll = root / "coll.toml"
    coll.write_text("".join(f'[[case]]\nbenchmark = "coll.{c}"\nmsg_size = "256K"\n'
                            'iterations = 3\n' for c in COLLECTIVES) +
                    '[[case]]\nbenchmark = "tcp.stream"\nmsg_size = "64K"\nduration = 0.2\n')
    _run(store, str(coll), label="coll")
    _run(store, "coll.all_reduce", "-p", "msg_size=64K", "-p", "iterations=3", label="one-coll")
    odd = root / "odd.toml"
    odd.write_text('[[case]]\nbenchmark = "tcp.stream"\nmsg_size = "64K"\nduration = 0.2\n'
                   '[[case]]\nbenchmark = "rdma.write_bw"\n')
    _run(store, str(odd), label=HOSTILE)
    return store


def _data(page):
    """The figures and panels the page embeds (what plotly is handed)."""
    text = page.read_text()
    return json.loads(re.search(r"const NB = (.*?);\nfunction facts", text, re.S).group(1))


@pytest.fixture(scope="module")
def compare(store, tmp_path_factory):
    page = tmp_path_factory.mktemp("cmp") / "d.html"
    proc = netbench("report", "--results", str(store), "-o", str(page), "--baseline", "before",
                    "--candidate", "after")
    assert proc.returncode == 0, proc.stderr
    return page, _data(page)


def _run_ids(store, label):
    index = ResultStore(store).runs()
    return set(index.loc[index["label"] == label, "run_id"])


def test_each_view_shows_only_its_own_labels_runs(store, compare):
    page, data = compare
    views = data["views"]
    both = _run_ids(store, "before") | _run_ids(store, "after")
    trend = views["compare"]["figures"]["trend"]
    drawn = {c[2] for t in trend["data"] for c in t.get("customdata", [])}
    assert drawn and drawn <= both, drawn          # the trend: these two labels' runs only
    # A label with one run has no trend of its own (the store's trend is not borrowed).
    assert "trend" not in views["label:coll"]["figures"]
    # The newest run (another label) skipped rdma.write_bw: only its own view says so.
    odd = next(k for k in views if k.startswith("label:\\x1b"))
    assert "rdma.write_bw" in views[odd]["env"]
    for key in ("compare", "label:before", "label:coll"):
        assert "rdma.write_bw" not in views[key]["env"], key


def test_the_baseline_sits_beside_its_candidate_in_its_colour(compare, tmp_path):
    _, data = compare
    for name in ("bandwidth", "latency"):
        fig = data["views"]["compare"]["figures"][name]
        own = {t["legendgroup"]: t for t in fig["data"] if not t["name"].endswith("(baseline)")}
        base = [t for t in fig["data"] if t["name"].endswith("(baseline)")]
        assert base and len(base) == len(own), name
        for t in base:
            twin = own[t["legendgroup"]]           # the memcpy bound's value differs: group
            assert t["line"]["color"] == twin["line"]["color"], t["name"]
            # The dash is the series' own (a latency's percentile), never the side's too.
            assert t["line"].get("dash") == twin["line"].get("dash"), t["name"]
            assert t["opacity"] < 1 and "[before] (baseline)" in t["name"], t["name"]
            assert twin["name"].endswith("[after]"), twin["name"]
            if "symbol" in twin.get("marker", {}):
                assert t["marker"]["symbol"].endswith("-open")
                assert t["marker"]["size"] > twin["marker"]["size"]
    # tcp.rr at one size: the size is a category and the series sit side by side.
    latency = data["views"]["compare"]["figures"]["latency"]
    assert latency["layout"]["xaxis"]["type"] == "category"
    assert latency["layout"]["scattermode"] == "group"
    assert {t["offsetgroup"] for t in latency["data"]} == {t["name"] for t in latency["data"]}


@needs_chromium
def test_one_size_series_are_drawn_side_by_side(store, compare, tmp_path):
    page, _ = compare
    _, facts = _facts(tmp_path, page)
    xs = [float(re.match(r"translate\(([-\d.]+),", pts[0]).group(1))
          for pts in facts["latency"]["points"] if pts]
    assert len(xs) == 6 and len(set(xs)) == 6, xs     # p50/p99/p99.9, each side: 6 places


def test_memcpy_bound_is_in_the_title_only_where_drawn(compare):
    _, data = compare
    seen = set()
    for key, view in data["views"].items():
        fig = view["figures"].get("bandwidth")
        if fig is None:
            continue
        drawn = any("memcpy bound" in t["name"] and t["line"]["dash"] == "dot"
                    for t in fig["data"])
        said = "memcpy bound dotted" in fig["layout"]["title"]["text"]
        assert drawn == said, (key, fig["layout"]["title"]["text"])
        seen.add(drawn)
    assert seen == {True, False}                   # before/after have one, coll has none


def _log_axes(fig):
    return [(k, a) for k, a in fig["layout"].items()
            if k.startswith(("xaxis", "yaxis")) and a.get("type") == "log"]


def test_log_axes_write_each_tick_in_full(compare):
    from netbench.api import parse_size
    from netbench.report.dashboard import value_axis

    _, data = compare
    checked = 0
    for fig in data["views"]["compare"]["figures"].values():
        for _, axis in _log_axes(fig):
            assert len(axis["tickvals"]) >= 2 and len(axis["ticktext"]) == len(axis["tickvals"])
            for value, text in zip(axis["tickvals"], axis["ticktext"]):
                read = (parse_size(text) if text[-1] in "KMG" else float(text.replace(",", "")))
                assert read == pytest.approx(value), (value, text)
            checked += 1
    assert checked >= 3                            # bandwidth, latency y; cpu x
    # Within one decade plotly wrote 900 ... 200 as "9, 8 ... 2": here every tick is whole.
    assert value_axis([210.0, 880.0])["ticktext"] == ["200", "300", "500", "700", "1,000"]


@needs_chromium
def test_rendered_log_ticks_are_the_written_ones(compare, tmp_path):
    page, data = compare
    _, facts = _facts(tmp_path, page)
    figures = data["views"]["compare"]["figures"]
    for name, axis in (("bandwidth", "yaxis"), ("latency", "yaxis"), ("cpu", "xaxis")):
        shown = facts[name]["yticks" if axis == "yaxis" else "xticks"]
        allowed = set(figures[name]["layout"][axis]["ticktext"])
        assert shown and set(shown) <= allowed, (name, shown)


def test_trend_series_have_own_colours_and_a_verdict_key(compare):
    from netbench.report.dashboard import VERDICT_COLOURS

    _, data = compare
    trend = data["views"]["compare"]["figures"]["trend"]
    series = [t for t in trend["data"] if t.get("legendgroup") != "verdict"]
    colours = [t["line"]["color"] for t in series]
    assert len(set(colours)) == len(colours) >= 3
    assert not set(colours) & set(VERDICT_COLOURS.values())
    keys = {t["name"]: t["marker"]["color"] for t in trend["data"]
            if t.get("legendgroup") == "verdict"}
    judged = {c[4] for t in series for c in t["customdata"]} - {"first run"}
    assert judged and {f"verdict: {v}" for v in judged} == set(keys)
    assert all(VERDICT_COLOURS[k.split(": ")[1]] == c for k, c in keys.items())
    # Every series starts at 1: each later one is drawn smaller, so none hides another.
    sizes = [t["marker"]["size"] for t in series]
    assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes)


@needs_chromium
def test_trend_legend_shows_the_verdict_key(compare, tmp_path):
    page, _ = compare
    _, facts = _facts(tmp_path, page)
    assert any(t.startswith("verdict: ") for t in facts["trend"]["legend"]), facts["trend"]


def test_equal_series_never_cover_each_other(store, tmp_path):
    """The same label on both sides: every baseline point equals its candidate's."""
    page = tmp_path / "same.html"
    proc = netbench("report", "--results", str(store), "-o", str(page), "--baseline", "before",
                    "--candidate", "before")
    assert proc.returncode == 0, proc.stderr
    for name, fig in _data(page)["views"]["compare"]["figures"].items():
        if name not in ("bandwidth", "latency"):
            continue
        filled = [t for t in fig["data"] if "symbol" in t.get("marker", {})
                  and not t["marker"]["symbol"].endswith("-open")]
        sizes = [t["marker"]["size"] for t in filled]
        assert sizes == sorted(sizes, reverse=True) and len(set(sizes)) == len(sizes), name
        widths = [t["line"]["width"] for t in filled]
        assert widths == sorted(widths, reverse=True), name
        twins = {t["legendgroup"]: t for t in filled}
        for t in fig["data"]:                      # each baseline a ring around its twin
            if t["name"].endswith("(baseline)") and t["legendgroup"] in twins:
                assert t["marker"]["symbol"].endswith("-open"), t["name"]
                assert t["marker"]["size"] > twins[t["legendgroup"]]["marker"]["size"]


def _derived(store, source_label, new_label, env_edit, host=None):
    """A copy of a real run under a new label and id, its fingerprint edited as an upgrade
    edits it (the way tests/test_dashboard.py derives its candidate)."""
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    from netbench.store import arrow_schema

    run_id = sorted(_run_ids(store, source_label))[0]
    rows = ResultStore(store).read([run_id])
    rows["run_id"], rows["label"] = f"derived{abs(hash(new_label)) % 10**5:05d}", new_label
    rows["started_at"] = rows["started_at"] + pd.Timedelta(hours=1)
    env = json.loads(rows["env_json"].iloc[0])
    env_edit(env)
    rows["env_json"] = json.dumps(env)
    if host is not None:
        rows["host"] = host
    pq.write_table(pa.Table.from_pandas(rows, schema=arrow_schema(), preserve_index=False),
                   store / f"20991231T000000-{rows['run_id'].iloc[0]}.parquet")


def test_environment_change_note_is_level_whole_and_never_none(store, tmp_path):
    import shutil

    copy = tmp_path / "res"
    shutil.copytree(store, copy)

    def upgrade(env):
        env["kernel"] = "6.12.0-31-cloud-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.12.30-1"
        dropped = next(k for k, v in env["versions"].items() if v)
        env["versions"][dropped] = None            # a library no longer found: a None side

    _derived(copy, "after", "after-upgrade", upgrade)
    page = tmp_path / "d.html"
    proc = netbench("report", "--results", str(copy), "-o", str(page), "--baseline", "after",
                    "--candidate", "after-upgrade")
    assert proc.returncode == 0, proc.stderr
    trend = _data(page)["views"]["compare"]["figures"]["trend"]
    notes = trend["layout"]["annotations"]
    assert len(notes) == 1 and trend["layout"]["shapes"]
    note = notes[0]
    assert note.get("textangle", 0) == 0 and note["xanchor"] == "auto"
    assert "None" not in note["text"] and "(not recorded)" in note["text"]
    assert "Debian 6.12.30-1" in note["text"]      # the whole kernel string, never cut at 60
    assert trend["layout"]["margin"]["t"] >= 60 + 14 * len(note["text"].split("<br>"))


def test_collectives_are_named_and_side_by_side(compare):
    _, data = compare
    one = data["views"]["label:one-coll"]["figures"]["busbw"]
    assert one["layout"]["showlegend"] is True and [t["name"] for t in one["data"]] == [
        "coll.all_reduce"]
    seven = data["views"]["label:coll"]["figures"]["busbw"]
    assert sorted(t["name"] for t in seven["data"]) == [f"coll.{c}" for c in COLLECTIVES]
    assert seven["layout"]["xaxis"]["type"] == "category"
    assert seven["layout"]["scattermode"] == "group"
    assert {t["x"][0] for t in seven["data"]} == {"256K"}


@needs_chromium
def test_collectives_render_named_and_apart(compare, tmp_path):
    page, _ = compare
    _, one = _facts(tmp_path, page, "label:one-coll")
    assert "coll.all_reduce" in one["busbw"]["legend"], one["busbw"]
    _, seven = _facts(tmp_path, page, "label:coll")
    xs = {re.match(r"translate\(([-\d.]+),", pts[0]).group(1)
          for pts in seven["busbw"]["points"] if pts}
    assert len(xs) == 7, seven["busbw"]["points"]


def test_comparison_axis_stops_where_changes_can_go(compare):
    _, data = compare
    layout = data["views"]["compare"]["figures"]["comparison"]["layout"]
    low, high = layout["xaxis"]["range"]
    changes = [x for t in data["views"]["compare"]["figures"]["comparison"]["data"]
               for x in t["x"]]
    assert low >= -100 * 1.1 and low <= min(min(changes), 0) and high >= max(changes), (
        low, high)


def test_environment_panel_whole_lists_and_both_sides(store, compare):
    _, data = compare
    coll = data["views"]["label:coll"]["env"]
    assert all(f"coll.{c}" in coll for c in COLLECTIVES) and "tcp.stream" in coll
    env = data["views"]["compare"]["env"]
    for run_id in _run_ids(store, "before") | _run_ids(store, "after"):
        assert run_id in env, run_id
    assert "<th>side</th>" in env and "<td>baseline</td>" in env and "<td>candidate</td>" in env
    for view in data["views"].values():
        assert "<th></th>" not in view["env"]      # every table says what its columns are


def test_labels_and_hosts_with_escapes_and_html_show_as_text(store, tmp_path):
    import shutil

    copy = tmp_path / "res"
    shutil.copytree(store, copy)
    _derived(copy, HOSTILE, "host-odd", lambda env: None, host="<i>node</i>\x1b[0m\r\n07")
    page = tmp_path / "d.html"
    proc = netbench("report", "--results", str(copy), "-o", str(page), "--label", HOSTILE)
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    script = text[text.index("const NB = "):text.index("function facts")]
    assert "<" not in script and "\x1b" not in script    # nothing in the data opens a tag
    picker = re.search(r'<select id="view">(.*?)</select>', text, re.S).group(1)
    assert "\x1b" not in picker and "<b>" not in picker and "\\x1b[31mred\\n" in picker
    views = _data(page)["views"]
    odd = views["label:\\x1b[31mred\\n<b>bold</b>&<img src=x onerror=alert(1)>"]
    assert "\\x1b[31mred\\n&lt;b&gt;bold&lt;/b&gt;&amp;&lt;img" in odd["env"]
    host = views["label:host-odd"]["env"]
    assert "&lt;i&gt;node&lt;/i&gt;\\x1b[0m\\r\\n07" in host and "<i>" not in host
    if not CHROMIUM:
        return
    from test_dashboard import _chromium

    _facts(tmp_path, page)                          # rendered, no JS error
    dom = _chromium(tmp_path, "--dump-dom", page.as_uri()).stdout
    assert "<img" not in dom and "<b>bold" not in dom and "<i>node" not in dom
    assert "\\x1b[31mred\\n&lt;b&gt;bold" in dom


def test_the_trend_reads_up_as_better_for_every_series(compare):
    """goodput (higher is better) and lat_p50 (lower is better) share the trend's one axis:
    a latency is drawn as first / value, so up means better for both, and its name says so."""
    _, data = compare
    trend = data["views"]["compare"]["figures"]["trend"]
    series = [t for t in trend["data"] if t.get("legendgroup") != "verdict"]
    latency = [t for t in series if " lat_p" in t["name"]]
    assert latency and all(t["name"].endswith("(first / value)") for t in latency)
    for t in series:
        values = [float(c[0]) for c in t["customdata"]]
        want = ([values[0] / v for v in values] if t in latency
                else [v / values[0] for v in values])
        assert t["y"] == pytest.approx(want, rel=1e-3), t["name"]
    assert "up: better" in trend["layout"]["yaxis"]["title"]["text"]
