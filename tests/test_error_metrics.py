"""Error counters judged like any metric in compare and history (netbench.analysis.error_metrics):
growth of the case's own device's error counters, lower is better, one value an invocation."""

import json
from datetime import UTC, datetime, timedelta

from conftest import netbench

from netbench.analysis.error_metrics import own_errors, with_error_metrics
from netbench.store import COLUMNS, SCHEMA_VERSION, ResultStore, params_json

START = datetime(2026, 12, 1, tzinfo=UTC)


def _env() -> str:
    return json.dumps({"kernel": "6.1.0", "versions": {"netbench": "0.1.0"}, "nics": [],
                       "rdma_devices": [{"name": "mlx5_0", "fw_ver": "28.39.1002",
                                         "ports": [{"port": 1, "netdev": "ens1f0"}]}]})


def _run(store, run_id, label, grown, when, bw=100.0):
    """One stored run of rdma.write_bw on mlx5_0:1 (far end mlx5_1:1), one case invocation
    (repeat) per entry of ``grown``: its counters' deltas (None: counters not read)."""
    rows = []
    for i, deltas in enumerate(grown):
        row = {name: None for name, _ in COLUMNS}
        row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, host="h1",
                   started_at=when, benchmark="rdma.write_bw", family="rdma", op="write_bw",
                   transport="rdma", device="mlx5_0:1", peer_device="mlx5_1:1",
                   metric="bw_avg", value=bw + 0.2 * i, better="higher", unit="Gbit/s",
                   status="ok", case_index=i, msg_size=65536, env_json=_env(),
                   params=params_json({"msg_size": 65536}), samples=[bw],
                   counters=None if deltas is None else json.dumps(deltas))
        rows.append(row)
    store.write_run(store.path_for(run_id, when.isoformat()), rows)


def _verdicts(tmp_path, *args):
    proc = netbench("compare", "before", "after", "--results", str(tmp_path), "--json", *args)
    data = json.loads(proc.stdout)
    return proc, {v["metric"]: v for v in data["verdicts"]}, data["counter_news"]


def test_a_nic_that_dropped_a_few_before_and_hundreds_after_regressed(tmp_path):
    """Not news (the baseline was not clean), but a regression: judged as any metric is."""
    store = ResultStore(tmp_path)
    _run(store, "a", "before", [{"rdma/mlx5_0/1/port_xmit_discards": n} for n in (5, 7, 6)],
         START)
    _run(store, "b", "after", [{"rdma/mlx5_0/1/port_xmit_discards": n} for n in (510, 470, 530)],
         START + timedelta(hours=1))
    proc, verdicts, news = _verdicts(tmp_path)
    assert proc.returncode == 1, proc.stdout
    v = verdicts["err.port_xmit_discards"]
    assert (v["verdict"], v["better"], v["unit"], v["evidence"]) == (
        "regressed", "lower", "count", "repeats")
    assert (v["baseline"], v["candidate"]) == (6.0, 510.0)
    assert verdicts["bw_avg"]["verdict"] == "unchanged"
    assert news == []                       # grown before: not news, a regression
    text = netbench("compare", "before", "after", "--results", str(tmp_path)).stdout
    assert "err.port_xmit_discards" in text and "REGRESSED" in text, text


def test_the_same_errors_both_sides_and_a_clean_nic_stay_silent(tmp_path):
    store = ResultStore(tmp_path)
    _run(store, "a", "before", [{"rdma/mlx5_0/1/port_xmit_discards": n} for n in (5, 7, 6)],
         START)
    _run(store, "b", "after", [{"rdma/mlx5_0/1/port_xmit_discards": n} for n in (6, 5, 7)],
         START + timedelta(hours=1))
    proc, verdicts, _ = _verdicts(tmp_path)
    assert proc.returncode == 0, proc.stdout
    assert verdicts["err.port_xmit_discards"]["verdict"] == "unchanged"
    # Nothing grew anywhere (counters read, all quiet): no error metric at all.
    clean = tmp_path / "clean"
    clean.mkdir()
    store = ResultStore(clean)
    _run(store, "a", "before", [{"rdma/mlx5_0/1/port_rcv_data": 9}] * 3, START)
    _run(store, "b", "after", [{}] * 3, START + timedelta(hours=1))
    proc = netbench("compare", "before", "after", "--results", str(clean), "--json")
    assert [v["metric"] for v in json.loads(proc.stdout)["verdicts"]] == ["bw_avg"]


def test_a_clean_baseline_then_errors_is_news_and_with_repeats_a_regression(tmp_path):
    store = ResultStore(tmp_path)
    _run(store, "a", "before", [{}] * 3, START)
    _run(store, "b", "after", [{"rdma_hw/mlx5_0/1/out_of_sequence": n} for n in (40, 52, 47)],
         START + timedelta(hours=1))
    proc, verdicts, news = _verdicts(tmp_path)
    assert proc.returncode == 1
    v = verdicts["err.out_of_sequence"]
    assert v["verdict"] == "regressed" and v["baseline"] == 0.0 and v["candidate"] == 47.0
    assert [n["name"] for n in news] == ["out_of_sequence"]


def test_only_the_cases_own_device_counts_and_an_unread_far_end_is_no_zero():
    deltas = {"net/docker0/rx_dropped": 50,          # another interface: not the case's
              "net/ens1f0/rx_dropped": 3,            # the netdev under mlx5_0
              "ethtool/ens1f0/rx_dropped": 3,        # the same statistic, repeated
              "ethtool/ens1f0/rx_discards_phy": 2,
              "rdma/mlx5_0/1/symbol_error": 1, "rdma/mlx5_0/1/port_rcv_data": 999,
              "far/rdma/mlx5_1/1/symbol_error": 4, "far/net/eth9/rx_errors": 8,
              "tcp/RetransSegs": 12}
    assert own_errors(deltas, "mlx5_0:1", "mlx5_1:1", "ens1f0") == {
        "err.rx_dropped": 3, "err.rx_discards_phy": 2, "err.symbol_error": 1,
        "far.err.symbol_error": 4}
    # A TCP case's retransmits are the network namespace's, where its own are.
    assert own_errors({"tcp/RetransSegs": 12, "net/lo/rx_dropped": 0}, "lo",
                      tcp=True) == {"err.RetransSegs": 12, "err.rx_dropped": 0}

    import pandas as pd
    row = {name: None for name, _ in COLUMNS}
    row.update(run_id="r", host="h", case_index=0, benchmark="rdma.write_bw", params="{}",
               metric="bw_avg", value=1.0, device="mlx5_0:1", peer_device="mlx5_1:1",
               status="ok", env_json=_env())
    read = {**row, "counters": json.dumps({"far/rdma/mlx5_1/1/symbol_error": 2,
                                           "net/ens1f0/rx_dropped": 1})}
    unread = {**row, "case_index": 1, "counters": json.dumps({"far/unread": 1})}
    never = {**row, "case_index": 2, "counters": None}     # --no-counters: no value at all
    (out,) = with_error_metrics(pd.DataFrame([read, unread, never]))
    got = sorted(zip(out["case_index"], out["metric"], out["value"]))
    assert got == [(0, "bw_avg", 1.0), (0, "err.rx_dropped", 1.0),
                   (0, "far.err.symbol_error", 2.0), (1, "bw_avg", 1.0),
                   (1, "err.rx_dropped", 0.0), (2, "bw_avg", 1.0)], got


def test_history_judges_error_counters_and_a_threshold_may_name_one(tmp_path):
    store = ResultStore(tmp_path)
    for i in range(4):
        _run(store, f"r{i}", "nightly", [{"net/ens1f0/rx_dropped": n}
                                         for n in (8 + i % 3, 13 - i % 2, 10)],
             START + timedelta(hours=i))
    _run(store, "r4", "nightly", [{"net/ens1f0/rx_dropped": 900}, {"net/ens1f0/rx_dropped": 880}],
         START + timedelta(hours=4))
    proc = netbench("history", "--results", str(tmp_path), "--json")
    series = {s["metric"]: s for s in json.loads(proc.stdout)["series"]}
    steps = series["err.rx_dropped"]["steps"]
    assert [s["verdict"] for s in steps[1:]][-1] == "regressed", steps
    assert all(s["verdict"] != "regressed" for s in steps[1:-1]), steps
    proc = netbench("history", "--results", str(tmp_path), "--metric", "err.rx_dropped",
                    "--json")
    assert [s["metric"] for s in json.loads(proc.stdout)["series"]] == ["err.rx_dropped"]
    # A threshold names an error metric like any other; a misspelt one is refused, listed.
    ok = netbench("compare", "r3", "r4", "--results", str(tmp_path), "--threshold",
                  "err.rx_dropped=100000%", "--json")
    judged = {v["metric"]: v for v in json.loads(ok.stdout)["verdicts"]}["err.rx_dropped"]
    assert (judged["verdict"], judged["threshold"], ok.returncode) == ("unchanged", 1000.0, 0)
    bad = netbench("compare", "r3", "r4", "--results", str(tmp_path), "--threshold",
                   "err_rx_dropped=5%")
    assert bad.returncode == 2 and "err.rx_dropped" in bad.stderr, bad.stderr


def test_the_netdev_under_an_rdma_port_is_the_cases_own_for_news_too(tmp_path):
    """RoCE drops show on the netdev under the RDMA device (the probe names it): news on it
    gates the comparison, where another interface's is only shown."""
    store = ResultStore(tmp_path)
    _run(store, "a", "before", [{}], START)
    _run(store, "b", "after", [{"net/ens1f0/rx_dropped": 30, "net/docker0/rx_errors": 4}],
         START + timedelta(hours=1))
    proc, verdicts, news = _verdicts(tmp_path)
    assert {n["name"]: n["gated"] for n in news} == {"rx_dropped": True, "rx_errors": False}
    assert proc.returncode == 1 and verdicts["err.rx_dropped"]["verdict"] == "unverified"
    assert "err.rx_errors" not in verdicts


def test_an_interface_that_carried_none_of_the_cases_traffic_is_not_its_news(tmp_path):
    """A collective names no interface ("2 ranks"): the interfaces whose bytes grew with its
    traffic are its own (loopback's errors are shown); another program's temporary veth that
    flapped beside it, moving no bytes of it, is no news of the case at all."""
    store = ResultStore(tmp_path)
    _run(store, "a", "before", [{"net/lo/rx_bytes": 10**9, "net/lo/tx_bytes": 10**9}], START)
    _run(store, "b", "after", [{"net/lo/rx_bytes": 10**9, "net/lo/tx_bytes": 10**9,
                                "net/lo/rx_dropped": 7, "net/nbfbr/carrier_changes": 1,
                                "net/nbfbr/tx_bytes": 90}], START + timedelta(hours=1))
    _, _, news = _verdicts(tmp_path)
    assert {n["name"] for n in news} == {"rx_dropped"}, news


def test_a_few_errors_after_runs_of_none_are_not_certainty_but_thousands_are(tmp_path):
    """One invocation a side, eight earlier runs of the case in the store that grew nothing:
    their spread is 0, yet 3 retransmits is within what counting events moves (a count's
    spread is at least Poisson's); 3,000 is a regression."""
    for grown, verdict in ((3, "noisy"), (3000, "regressed")):
        store = ResultStore(tmp_path / str(grown))
        (tmp_path / str(grown)).mkdir()
        for i in range(8):
            _run(store, f"h{i}", "past", [{}], START + timedelta(hours=i))
        _run(store, "a", "before", [{}], START + timedelta(hours=9))
        _run(store, "b", "after", [{"rdma/mlx5_0/1/port_rcv_errors": grown}],
             START + timedelta(hours=10))
        proc = netbench("compare", "before", "after", "--results", str(tmp_path / str(grown)),
                        "--json")
        v = {v["metric"]: v for v in json.loads(proc.stdout)["verdicts"]}["err.port_rcv_errors"]
        assert (v["verdict"], v["evidence"]) == (verdict, "history"), v


def test_compare_names_a_news_case_by_its_name_not_its_json(tmp_path):
    """Counter news on the console: "rdma.write_bw msg_size=64K: rx_dropped 0 -> 1,200",
    never the case's raw JSON params."""
    store = ResultStore(tmp_path)
    _run(store, "a", "before", [{}], START)
    _run(store, "b", "after", [{"net/ens1f0/rx_dropped": 1200}], START + timedelta(hours=1))
    text = netbench("compare", "before", "after", "--results", str(tmp_path)).stdout
    (line,) = [ln for ln in text.splitlines() if ln.startswith("counters: news: ")]
    assert line.startswith("counters: news: rdma.write_bw msg_size=64K: rx_dropped 0 -> 1,200")
    assert "{" not in line, line


def test_retransmits_the_receiver_had_already_are_no_error_and_real_drops_stay():
    """A loopback tcp.stream of a CI A/A (its counters as stored): 16 segments retransmitted,
    all 16 reported back as duplicates (D-SACK) and undone: nothing was lost, and the next run
    had none. A short queue that drops: 2,000 retransmits, 3 of them duplicates."""
    spurious = {"tcp/RetransSegs": 16, "tcpext/TCPDSACKRecvSegs": 16, "tcpext/TCPDSACKRecv": 12,
                "tcpext/TCPDSACKUndo": 5, "tcpext/TCPFastRetrans": 16, "tcp/OutSegs": 143088}
    assert own_errors(spurious, "lo", tcp=True).get("err.RetransSegs", 0) == 0
    dropped = {"tcp/RetransSegs": 2000, "tcpext/TCPDSACKRecvSegs": 3, "tcpext/TCPTimeouts": 7,
               "tcpext/TCPSpuriousRTOs": 2, "far/tcp/RetransSegs": 9}
    grown = own_errors(dropped, "veth0", tcp=True)
    assert grown["err.RetransSegs"] == 1997 and grown["err.TCPTimeouts"] == 5
    assert grown["far.err.RetransSegs"] == 9            # the far end's own, unreported: kept
    # A kernel without the per-segment count: its D-SACK blocks, at least one segment each.
    older = {"tcp/RetransSegs": 10, "tcpext/TCPDSACKRecv": 4}
    assert own_errors(older, "lo", tcp=True)["err.RetransSegs"] == 6


def _tcp_run(store, run_id, label, retransmits, when, device, other, steal,
             peer=None, rr=False):
    """One stored run of tcp.stream (``rr``: tcp.rr, its first row lat_min, an extreme) over
    ``device``, a case invocation per entry of ``retransmits`` (the namespace's RetransSegs
    growth), the host ``other`` cores busy outside netbench and ``steal`` stolen by the
    hypervisor."""
    rows = []
    for i, n in enumerate(retransmits):
        row = {name: None for name, _ in COLUMNS}
        row.update(schema_version=SCHEMA_VERSION, run_id=run_id, label=label, host="h1",
                   started_at=when, benchmark="tcp.rr" if rr else "tcp.stream", family="tcp",
                   op="rr" if rr else "stream", transport="tcp", device=device,
                   peer=peer or ("loopback" if device == "lo" else "10.0.0.2"),
                   statistic="min" if rr else None,
                   metric="lat_min" if rr else "goodput", value=30.0 + 0.1 * i,
                   better="lower" if rr else "higher", unit="us" if rr else "Gbit/s",
                   status="ok", case_index=i, msg_size=131072, env_json=_env(),
                   params=params_json({"msg_size": 131072}), samples=[30.0],
                   load_other_cores=other, load_steal_cores=steal,
                   counters=json.dumps({"tcp/RetransSegs": n}))
        rows.append(row)
    store.write_run(store.path_for(run_id, when.isoformat()), rows)


def test_loopback_retransmits_beside_a_hypervisors_steal_are_disturbed_and_a_links_regress(
        tmp_path):
    """The CI A/A false alarm (unchanged code, a hog beside the baseline, the hypervisor
    stealing 0.70 of a core from the candidate): loopback tcp.stream's RetransSegs 0 -> 43.
    Over loopback no link lost them: the host's own stack did, so the load rules apply and
    the verdict is disturbed. The same counts over a NIC regress (a neighbour does not make
    a link drop segments), and so do loopback's where both sides ran on a quiet host (tcp.rr's
    too, whose first row is an extreme: the count is none), and a remote peer's from an
    address on lo (a host's routable /32 there)."""
    stolen, quiet = ((1.0, 0.0), (0.03, 0.70)), ((0.0, 0.0), (0.0, 0.0))
    for n, (device, loads, extra, expected) in enumerate((
            ("lo", stolen, {}, "disturbed"), ("eth0", stolen, {}, "regressed"),
            ("lo", quiet, {}, "regressed"), ("lo", quiet, {"rr": True}, "regressed"),
            ("lo", stolen, {"peer": "10.0.0.2"}, "regressed"))):
        where = tmp_path / f"{n}"
        where.mkdir()
        store = ResultStore(where)
        _tcp_run(store, "a", "before", [0, 0, 0], START, device, *loads[0], **extra)
        _tcp_run(store, "b", "after", [43, 38, 51], START + timedelta(hours=1), device,
                 *loads[1], **extra)
        proc = netbench("compare", "before", "after", "--results", str(where), "--json",
                        "--no-history")
        v = {v["metric"]: v for v in json.loads(proc.stdout)["verdicts"]}["err.RetransSegs"]
        print(device, loads, extra, v["verdict"], v.get("disturbed"))
        assert v["verdict"] == expected, (device, loads, extra, v)
        assert proc.returncode == (1 if expected == "regressed" else 0), proc.stdout
        if expected == "disturbed":
            assert "stole" in v["disturbed"], v
