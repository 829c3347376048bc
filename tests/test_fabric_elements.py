"""Each element of a fabric with its evidence (netbench.analysis.elements), on rows the
flow-level simulator measured: a shaped trunk reads lowest, a healthy fabric has nothing
low, an element no pair crossed has no median, and ECMP's may-cross pairs are told apart."""

from __future__ import annotations

import pandas as pd

from netbench.analysis.elements import element_table, worst
from netbench.analysis.fabric import analyse
from netbench.report.console import fabric_text as summary
from netbench.sweep import simulate as sim

BAD = "link:leaf1--spine0"


def fabric_rows(topo, faults=None, seed=0, hosts=None):
    """Every directed pair of ``hosts`` (default: all the topology's), each measured alone
    by the simulator, as the rows a tcp.stream sweep stores."""
    names = sorted(hosts or topo.hosts)
    fabric = sim.FabricSim(topo, faults=faults or {}, noise=0.03, seed=seed)
    pairs = [(c, s) for c in names for s in names if c != s]
    return pd.DataFrame([{"benchmark": "tcp.stream", "params": '{"msg_size":131072}',
                          "metric": "goodput", "unit": "Gbit/s", "better": "higher",
                          "status": "ok", "reason": None, "host": c, "peer": s,
                          "value": fabric.measure([(c, s)])[0]} for c, s in pairs])


def bad_trunk_matrix(routing="dest"):
    topo = sim.fat_tree(4, 4, 2, routing=routing)
    (m,) = analyse(fabric_rows(topo, {BAD: 0.1}), topology=topo)
    return topo, m


def _by_name(table):
    return {e.element: e for e in table}


def test_a_shaped_trunk_reads_lowest_with_its_evidence():
    topo, m = bad_trunk_matrix()
    table = _by_name(m.elements)
    bad = table[BAD]
    core = [e for e in m.elements if e.kind == "switch" or e.trunk]
    assert min(core, key=lambda e: (e.median, e.directed)).base == BAD
    others = [e for e in core if e.base != BAD and e.median is not None]
    assert bad.median < 0.2 and min(e.median for e in others) > 0.9, bad
    # Routes known: every pair through it is pinned; every one of them slow.
    assert bad.pairs == bad.pinned == bad.slow > 0 and bad.maybe == 0
    assert bad.median_avoiding > 0.9
    assert worst(m.elements, 1, hosts=False)[0].element == BAD      # both ways: itself
    assert f"{BAD}: {bad.slow} of {bad.pairs} pairs slow, median 0.1" in bad.text()
    # Both directions of it are slow, each with half its pairs.
    assert table["link:leaf1->spine0"].pairs + table["link:spine0->leaf1"].pairs == bad.pairs


def test_a_one_way_fault_is_quoted_by_its_direction():
    topo = sim.fat_tree(4, 4, 2, routing="dest")
    (m,) = analyse(fabric_rows(topo, {"link:leaf1->spine0": 0.1}), topology=topo)
    (first,) = worst(m.elements, 1, hosts=False)
    assert first.element == "link:leaf1->spine0" and first.median < 0.2, first


def test_a_healthy_fabric_has_no_low_element():
    topo = sim.fat_tree(4, 4, 2, routing="dest")
    (m,) = analyse(fabric_rows(topo), topology=topo)
    assert min(e.median for e in m.elements if e.median is not None) > 0.9
    assert sum(e.slow for e in m.elements) == 0


def test_an_element_no_measured_pair_crosses_has_no_median():
    topo = sim.fat_tree(4, 4, 2, routing="dest")
    inside = [h for h in topo.hosts if h.startswith(("l0", "l1"))]     # two leaves only
    (m,) = analyse(fabric_rows(topo, hosts=inside), topology=topo)
    table = _by_name(m.elements)
    far = table["link:leaf3--spine1"]
    assert far.pairs == far.slow == 0 and far.median is None and far.median_avoiding is None
    assert "no measured pair crosses it" in far.text()
    assert table["switch:leaf2"].median is None and table["host:l3h0"].median is None
    assert table["link:leaf0--spine1"].median is not None


def test_under_ecmp_the_pairs_that_only_may_cross_are_counted_apart():
    topo = sim.fat_tree(4, 4, 2, routing="ecmp")
    (m,) = analyse(fabric_rows(topo, {BAD: 0.1}), topology=topo)
    table = _by_name(m.elements)
    spine = table["switch:spine0"]
    assert spine.pinned == 0 and spine.maybe == spine.pairs == 4 * 4 * 12   # every cross pair
    assert "only may: ECMP" in table[BAD].text()
    leaf = table["switch:leaf1"]                    # every pair to or from leaf1 crosses it
    assert leaf.pinned == leaf.pairs
    # The hash sent some of leaf1's pairs through the shaped link: they are its slow ones.
    assert 0 < table[BAD].slow < table[BAD].pairs


def test_medians_match_a_pair_by_pair_count():
    """The rank arithmetic against the plain definition, on a three-tier fabric."""
    topo = sim.three_tier(2, 2, 2, 2, 4, routing="ecmp")
    (m,) = analyse(fabric_rows(topo, {"link:p0a1--core2": 0.3}, seed=3), topology=topo)
    ratio = {(c, s): r for c, s, r in zip(m.cells.client, m.cells.server, m.cells.ratio)}

    def upper_median(values):
        values = sorted(values)
        return values[len(values) // 2] if values else None

    crossed = {p: topo.elements(*p, directed=True) for p in ratio}
    for e in m.elements:
        inside = [r for p, r in ratio.items() if e.element in crossed[p]]
        outside = [r for p, r in ratio.items() if e.element not in crossed[p]]
        sure = [p for p in ratio if crossed[p].get(e.element, 0) >= 1.0]
        assert (e.pairs, e.pinned, e.median, e.median_avoiding) == (
            len(inside), len(sure), upper_median(inside), upper_median(outside)), e


def test_the_inferred_shape_is_kept_and_has_its_table():
    topo = sim.two_leaves(4)
    (m,) = analyse(fabric_rows(topo, {"link:leafA--leafB": 0.1}))      # no topology given
    assert m.topology is not None and m.topology.inferred
    assert len({s for s in m.topology.hosts.values()}) == 2            # the two leaves
    trunks = [e for e in m.elements if e.trunk and not e.directed]
    assert len(trunks) == 2 and all(e.median < 0.2 for e in trunks)


def test_the_summary_lists_the_worst_elements_only_with_a_topology():
    _, m = bad_trunk_matrix()
    text = summary([m])
    lines = text.splitlines()
    at = lines.index("  worst elements (median of the pairs through each, x healthy):")
    assert lines[at + 1].startswith(f"    {BAD}: 48 of 48 pairs slow, median 0.1"), text
    assert "x healthy vs" in lines[at + 1] and "avoiding it" in lines[at + 1]
    assert len([ln for ln in lines[at + 1:] if ln.startswith("    ") and "avoiding" in ln]) <= 3
    (inferred,) = analyse(fabric_rows(sim.two_leaves(3), {"link:leafA--leafB": 0.1}))
    assert "worst elements" not in summary([inferred])


def test_a_matrix_without_pairs_has_an_empty_table():
    topo = sim.two_leaves(2)
    (m,) = analyse(fabric_rows(topo), topology=topo)
    m.cells = m.cells.iloc[:0]
    table = element_table(m, topo)
    assert table and all(e.pairs == 0 and e.median is None for e in table)


def test_failed_pairs_count_against_the_elements_they_would_have_crossed():
    topo = sim.two_leaves(2)
    rows = fabric_rows(topo)
    across = rows["host"].str[4] != rows["peer"].str[4]          # leafA <-> leafB
    rows.loc[across, ["value", "status", "reason"]] = [None, "failed", "timed out"]
    (m,) = analyse(rows, topology=topo)
    trunk = _by_name(m.elements)["link:leafA--leafB"]
    assert trunk.failed == int(across.sum()) == 8 and trunk.pairs == 0 and trunk.median is None
    assert trunk.text() == "link:leafA--leafB: no measured pair crosses it (8 failed)"
    assert _by_name(m.elements)["switch:leafA"].failed == 8


def test_a_burn_ins_passes_are_judged_each_on_its_own_and_the_trunk_named_with_its_passes():
    """`netbench fabric --soak` keeps each pass's first case_index; three passes of the
    simulated two leaves, the trunk at a tenth from the second: pass 1 names nothing, passes
    2-3 the trunk (against their own healthy rate), no host in any; the console says which
    passes named it and the burn-in fails."""
    from types import SimpleNamespace

    from netbench.analysis.fabric import named_in_passes, soak_passes
    from netbench.report.console import fabric_soak_ending

    topo = sim.two_leaves(3)
    frames = [fabric_rows(topo, faults, seed=i) for i, faults in
              enumerate([{}, {"link:leafA--leafB": 0.1}, {"link:leafA--leafB": 0.1}])]
    rows = pd.concat(frames, ignore_index=True)
    rows["case_index"] = range(len(rows))
    starts = [{"case_index": i * len(frames[0]), "started_at": f"2026-12-06T03:0{i}:00+00:00"}
              for i in range(3)]
    passes = soak_passes(rows, starts, topology=topo)
    assert [p.number for p in passes] == [1, 2, 3]
    assert [len(p.matrices[0].cells) for p in passes] == [30, 30, 30]
    assert passes[0].matrices[0].suspects == [] and not passes[0].matrices[0].faulty_hosts
    for p in passes[1:]:
        (suspect,) = p.matrices[0].suspects
        assert "link:leafA--leafB" in suspect.elements and not p.matrices[0].faulty_hosts
    ((key, numbers, said),) = named_in_passes(passes)
    assert "link:leafA--leafB" in key and numbers == [2, 3] and "0.1" in said, said
    result = SimpleNamespace(facts={"soak": {"seconds": 180.0}}, rows=rows.to_dict("records"),
                             run_id="3f2a9c1d0b7e")
    out, err, code = fabric_soak_ending(result, passes, False, "results")
    assert code == 1 and "pass 1 (03:00:00): 30 pairs, nothing named" in out, out
    assert "NAMED in pass(es) 2-3 of 3: " in out and "HOST" not in out, out
    assert "burn-in: 3 pass(es) of the sweep over 180 s" in out


def _stored_burn_in(tmp_path, keep_passes: bool):
    """Twelve passes of the simulated two leaves (three hosts each) stored as one burn-in
    run, the trunk at a tenth in passes 5 and 6 only; the passes kept in the footer as
    `netbench fabric --soak` keeps them (or not, for the contrast)."""
    import json
    from datetime import UTC, datetime, timedelta

    from netbench.store import ResultStore

    topo = sim.two_leaves(3)
    started = datetime(2026, 12, 6, 3, 0, tzinfo=UTC)
    rows, passes = [], []
    for n in range(12):
        faults = {"link:leafA--leafB": 0.1} if n in (4, 5) else {}
        frame = fabric_rows(topo, faults, seed=n)
        passes.append({"round": n, "case_index": len(rows),
                       "started_at": (started + timedelta(minutes=20 * n)).isoformat()})
        for r in frame.to_dict("records"):
            rows.append({**r, "schema_version": 1, "run_id": "3f2a9c1d0b7e", "label": "burn",
                         "started_at": started, "suite": "tcp.stream", "case_index": len(rows),
                         "family": "tcp", "msg_size": 131072, "n_samples": 1,
                         "env_json": json.dumps({"host": r["host"]})})
    store = ResultStore(tmp_path)
    store.check_writable()
    extra = {"netbench_topology": topo.to_json()}
    if keep_passes:
        extra["netbench_fabric"] = json.dumps({"pattern": "all", "soak": {
            "seconds": 3600, "passes": passes}})
    writer = store.open_run(store.path_for("3f2a9c1d0b7e", started.isoformat()), extra)
    writer.append(rows)
    writer.close()
    return store, topo


def test_a_stored_burn_in_is_judged_pass_by_pass_by_accept_and_the_dashboard(tmp_path):
    """Issue 39's review: a trunk slow in 2 passes of 12 made `netbench fabric --soak` exit 1,
    but accept and the dashboard pooled every pass (each pair's median: healthy) and showed a
    clean fabric. Now both judge the kept passes one at a time: accept names the trunk in
    passes 5 and 6, the dashboard shows a flagged pass. The same rows stored without the
    passes (a plain sweep repeated) are pooled, as before: nothing named."""
    from conftest import netbench

    from netbench.analysis.views import fabric_matrix

    spec = tmp_path / "spec.toml"
    spec.write_text('[[check]]\nbenchmark = "tcp.stream"\nmetric = "goodput"\n'
                    'max_element_deficit = 0.05\n')
    for keep in (True, False):
        store, topo = _stored_burn_in(tmp_path / f"r{keep}", keep)
        verdict = netbench("accept", str(spec), "--results", str(tmp_path / f"r{keep}"))
        named = [line for line in verdict.stdout.splitlines() if "leafA--leafB" in line
                 or "pass " in line]
        rows = store.read(["3f2a9c1d0b7e"])
        m = fabric_matrix(rows, topo, store.runs())
        if keep:
            from netbench.analysis.views import soaks_of

            # The dashboard's burn-in timeline: a window a pass, the lowest element's share
            # of the pass's healthy rate, the passes that named the trunk its dips.
            (timeline,) = soaks_of(store.runs(), rows, topo)
            assert timeline.windows == 12 and len(timeline.dips) == 2, timeline.dips
            shares = [s for _, s, _ in timeline.timeline]
            assert max(shares[4:6]) < 0.2 < min(shares[:4] + shares[6:]), shares
            assert all(any("leafA--leafB" in k for k in d.events) for d in timeline.dips)
            page = tmp_path / "page.html"
            report = netbench("report", "--results", str(tmp_path / f"r{keep}"), "-o", str(page))
            assert report.returncode == 0 and "Burn-in" in page.read_text(), report.stderr
            assert verdict.returncode == 1, verdict.stdout
            assert "pass 5 of run 3f2a9c1d0b7e: " in verdict.stdout, verdict.stdout
            assert "pass 6 of run 3f2a9c1d0b7e: " in verdict.stdout, verdict.stdout
            assert "pass 4 of" not in verdict.stdout and "pass 7 of" not in verdict.stdout
            assert any("link:leafA--leafB" in s.elements for s in m.suspects), m.suspects
        else:
            assert verdict.returncode == 0 and not named, verdict.stdout
            assert m.suspects == []
