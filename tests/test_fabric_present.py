"""A fabric run presented by its topology: the heatmap ordered and banded by switch, the
switch graph with what is at fault in red, both in the dashboard of a stored run that kept
its shape (rendered by headless Chromium where it is installed)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime

import pytest
from conftest import netbench
from test_dashboard import CHROMIUM, _facts
from test_fabric_elements import BAD, bad_trunk_matrix, fabric_rows

from netbench.analysis.fabric import analyse
from netbench.env.topology import Topology
from netbench.report import heatmap
from netbench.report.switchgraph import switch_graph, tiers
from netbench.sweep import simulate as sim


def interleaved(leaves=4, hosts=4, spines=2):
    """A leaf-spine fabric whose host names do not follow their leaves (h00 on leaf0, h01
    on leaf1 ...): name order is not switch order."""
    topo = Topology(source="interleaved (test)", routing="dest")
    for i in range(leaves * hosts):
        topo.add_host(f"h{i:02d}", f"leaf{i % leaves}")
    for leaf in range(leaves):
        for s in range(spines):
            topo.add_trunk(f"leaf{leaf}", f"spine{s}")
    return topo


def test_the_heatmap_groups_hosts_by_switch_with_one_band_each():
    topo = interleaved()
    (m,) = analyse(fabric_rows(topo, {"link:leaf1--spine0": 0.1}), topology=topo)
    fig = heatmap.fabric_chart(m)
    grid = fig["data"][0]
    order = grid["y"]
    assert order == grid["x"] and sorted(order) == sorted(topo.hosts)
    assert [topo.hosts[h] for h in order] == sorted(
        (topo.hosts[h] for h in order), key=lambda s: int(s[4:]))      # leaf by leaf
    assert order[:4] == ["h00", "h04", "h08", "h12"]                   # then by name
    shapes = fig["layout"]["shapes"]
    blocks = [s for s in shapes if s["type"] == "rect"]
    assert [b["name"] for b in blocks] == ["leaf0", "leaf1", "leaf2", "leaf3"]
    assert [(b["x0"], b["x1"]) for b in blocks] == [(-0.5, 3.5), (3.5, 7.5), (7.5, 11.5),
                                                    (11.5, 15.5)]
    assert len([s for s in shapes if s["type"] == "line"]) == 2 * 3    # between leaves
    names = [a["text"] for a in fig["layout"]["annotations"]]
    assert sorted(names) == sorted(["leaf0", "leaf1", "leaf2", "leaf3"] * 2)
    # Each grid cell still holds its pair: leaf1's hosts' pairs across spine0 are slow.
    row = order.index("h01")
    assert min(v for v in grid["z"][row] if v is not None) < 0.2


def test_tiles_never_cross_a_switch(monkeypatch):
    monkeypatch.setattr(heatmap, "MAX_SIDE", 8)
    topo = interleaved(leaves=4, hosts=5)
    (m,) = analyse(fabric_rows(topo), topology=topo)
    fig = heatmap.fabric_chart(m)
    labels = fig["data"][0]["y"]
    assert len(labels) <= 8 and "tiles of up to 3 hosts" in fig["layout"]["title"]["text"]
    for label in labels:
        first, _, last = label.partition("..")
        assert topo.hosts[first] == topo.hosts[last or first], label
    assert len([s for s in fig["layout"]["shapes"] if s["type"] == "rect"]) == 4
    # More switches than tiles: the tiles run across them, no bands, and the title says so.
    monkeypatch.setattr(heatmap, "MAX_SIDE", 3)
    fig = heatmap.fabric_chart(m)
    assert "across switches" in fig["layout"]["title"]["text"]
    assert "shapes" not in fig["layout"]


def test_without_a_shape_of_several_switches_there_are_no_bands():
    topo = sim.two_leaves(3)
    (m,) = analyse(fabric_rows(topo))          # inferred: one group, nothing slow
    fig = heatmap.fabric_chart(m)
    assert "shapes" not in fig["layout"] and fig["data"][0]["y"] == sorted(topo.hosts)


def test_the_switch_graph_marks_the_bad_trunk_red_with_its_evidence():
    topo, m = bad_trunk_matrix()
    fig = switch_graph(m)
    traces = {t["name"]: t for t in fig["data"]}
    fault = traces["link at fault"]
    assert fault["text"] == ["leaf1--spine0"] and fault["line"]["color"] == "#d7191c"
    healthy = traces["link: >= 0.9 x healthy"]
    assert len([x for x in healthy["x"] if x is None]) == len(topo.trunks) - 1
    mids = traces["link medians"]
    hover = mids["customdata"][mids["text"].index("leaf1--spine0")]
    assert hover[0] == BAD and re.match(r"48 of 48 pairs slow, median 0\.1\d x healthy vs "
                                        r"(0\.9\d|1\.0\d) avoiding it", hover[1]), hover
    assert hover[3].startswith("AT FAULT: LINK leaf1--spine0: 48 of 48"), hover
    assert mids["marker"]["color"][mids["text"].index("leaf1--spine0")] < 0.2
    # Tiers: leaves at the bottom, spines one up; 16 hosts drawn one by one below.
    assert tiers(topo) == {**{f"leaf{i}": 0 for i in range(4)}, "spine0": 1, "spine1": 1}
    switches = traces["switch"]
    assert {y for y in switches["y"]} == {0.0, 1.0}
    assert len(traces["host"]["x"]) == 16 and "host blamed" not in traces
    assert "at fault: leaf1--spine0" in fig["layout"]["title"]["text"]


def test_a_healthy_graph_has_nothing_red_and_many_hosts_are_summarised():
    topo = sim.fat_tree(10, 8, 2, routing="dest")           # 80 hosts: summaries per leaf
    (m,) = analyse(fabric_rows(topo, {"host:l3h2": 0.2},
                               hosts=[h for h in topo.hosts if h[1] in "0123"]),
                   topology=topo)
    fig = switch_graph(m)
    traces = {t["name"]: t for t in fig["data"]}
    assert "link at fault" not in traces and "switch at fault" not in traces
    blamed = traces["hosts blamed"]
    assert blamed["text"] == ["8 (1 blamed)"] and blamed["customdata"][0][1].startswith(
        "1 blamed: l3h2")
    assert len(traces["hosts"]["x"]) == 9
    # Leaves 4..9 were not measured: their links are drawn, dotted, as such.
    assert traces["link: no measured pair"]["line"]["dash"] == "dot"


def test_a_dragonfly_is_drawn_on_a_ring():
    topo = sim.dragonfly(4, 3, 1)
    (m,) = analyse(fabric_rows(topo, {"link:g0r0--g1r0": 0.1}), topology=topo)
    fig = switch_graph(m)
    traces = {t["name"]: t for t in fig["data"]}
    assert set(tiers(topo).values()) == {0}
    assert traces["link at fault"]["text"] == ["g0r0--g1r0"]
    assert fig["layout"]["yaxis"]["range"] == [-1.3, 1.3]


def _stored_fabric(store_dir, topo, faults, run_id="fabric000001", keep_shape=True):
    """One sweep's rows written as `netbench fabric` writes them, the shape in its footer."""
    from netbench.store import ResultStore

    store = ResultStore(store_dir)
    store.check_writable()
    started = datetime(2026, 12, 1, tzinfo=UTC)
    rows = []
    for i, r in enumerate(fabric_rows(topo, faults).to_dict("records")):
        rows.append({**r, "schema_version": 1, "run_id": run_id, "label": "fabric",
                     "started_at": started, "suite": "fabric", "case_index": i,
                     "family": "tcp", "op": "stream", "transport": "tcp",
                     "msg_size": 131072, "n_samples": 1, "samples": [r["value"]],
                     "env_json": json.dumps({"host": r["host"]})})
    extra = {"netbench_topology": topo.to_json()} if keep_shape else {}
    writer = store.open_run(store.path_for(run_id, started.isoformat()), extra)
    writer.append(rows)
    writer.close()
    return store_dir


def test_the_dashboard_draws_the_graph_of_a_stored_fabric(tmp_path):
    topo = sim.fat_tree(4, 4, 2, routing="dest")
    store = _stored_fabric(tmp_path / "res", topo, {BAD: 0.1})
    page = tmp_path / "d.html"
    proc = netbench("report", "--results", str(store), "-o", str(page))
    assert proc.returncode == 0, proc.stderr
    text = page.read_text()
    data = json.loads(re.search(r"const NB = (.*?);\nfunction facts", text, re.S).group(1))
    figures = data["views"][data["chosen"]]["figures"]
    graph = {t["name"]: t for t in figures["fabric_graph"]["data"]}
    assert graph["link at fault"]["text"] == ["leaf1--spine0"]
    assert len([s for s in figures["fabric"]["layout"]["shapes"] if s["type"] == "rect"]) == 4
    assert "switch graph" in data["views"][data["chosen"]]["missing"]["fabric_graph"]
    if not CHROMIUM:
        pytest.skip("the rendering half needs Debian's chromium (apt-get install chromium)")
    attrs, facts = _facts(tmp_path, page)
    drawn = facts["fabric_graph"]
    assert "link at fault" in drawn["traces"] and "switch" in drawn["traces"]
    assert ["leaf1--spine0"] in drawn["texts"], drawn["texts"]
    assert "link at fault" in drawn["legend"]
    assert facts["fabric"]["shapes"] == 4 + 2 * 3
    assert {"leaf0", "leaf1", "leaf2", "leaf3"} <= set(facts["fabric"]["notes"])
