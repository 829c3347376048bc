"""Probe on live and captured sysfs; the console reporter on a terminal and in CI."""

import io
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import assert_clean_error, netbench

from netbench.api import Case
from netbench.env.probe import probe, probe_nics, probe_rdma
from netbench.fingerprint import Fingerprint
from netbench.report.console import Reporter, summary_table


def _capture_net(dst: Path) -> list[str]:
    """Copy /sys/class/net/<dev>/{mtu,operstate,speed} the way a user would (cp of files)."""
    names = []
    for dev in sorted(os.listdir("/sys/class/net")):
        out = dst / "class" / "net" / dev
        out.mkdir(parents=True)
        for attr in ("mtu", "operstate", "speed"):
            try:
                shutil.copyfile(f"/sys/class/net/{dev}/{attr}", out / attr)
            except OSError:
                pass            # unreadable on this host (speed of a down link): leave it out
        names.append(dev)
    return names


def test_probe_reads_a_captured_tree_and_tolerates_missing_files(tmp_path):
    names = _capture_net(tmp_path)
    (tmp_path / "class" / "net" / names[0] / "mtu").unlink()
    (tmp_path / "class" / "net" / names[-1] / "operstate").write_text("garbage\n")
    env = probe(tmp_path)
    assert [n["name"] for n in env["nics"]] == names
    assert env["nics"][0]["mtu"] is None
    assert env["sysfs_root"] == str(tmp_path)
    assert env["rdma_devices"] == []
    assert probe_nics(tmp_path / "nowhere") == [] and probe_rdma(tmp_path / "nowhere") == []


def test_live_probe_finds_loopback_and_summarises_it():
    env = probe()
    lo = next(n for n in env["nics"] if n["name"] == "lo")
    assert lo["mtu"] > 0 and lo["virtual"] is True
    assert Fingerprint(env).nic_summary("lo").startswith("lo: virtual")
    assert Fingerprint(env).nic_summary("nope") is None
    json.dumps(env)          # the fingerprint must serialise as stored


def _rows():
    base = {"benchmark": "tcp.stream", "unit": "Gbit/s", "n_samples": 3, "status": "ok",
            "reason": None}
    return [
        {**base, "case_index": 0, "msg_size": 1024, "params": '{"streams":1}',
         "metric": "goodput", "value": 9.5, "samples": [9.0, 9.5, 10.0]},
        {**base, "case_index": 1, "msg_size": 1024, "params": '{"streams":2}',
         "metric": "goodput", "value": 12.25, "samples": None},
        {**base, "case_index": 1, "msg_size": 1024, "params": '{"streams":2}',
         "metric": "goodput_rev", "value": 3.0, "samples": None},
        {**base, "case_index": 2, "msg_size": 2048, "params": '{"streams":2}',
         "metric": None, "value": None, "status": "failed", "reason": "peer vanished"},
    ]


def test_summary_table_pivots_metrics_and_shows_failures():
    text = summary_table(_rows())
    title, header, units, *body = text.splitlines()
    assert title == "tcp.stream"
    assert header.split()[:2] == ["size", "streams"]          # the size column says so
    assert header.index("goodput") < header.index("goodput_rev")
    assert units.split() == ["Gbit/s", "Gbit/s"]                # the unit once per column
    assert "9.50 ±1.24" in text        # t(2) = 4.303 * 0.5 / sqrt(3); the column's decimals
    assert "12.25" in text and "3.00" in text
    assert "failed: peer vanished" in text
    assert any(line.split()[-1] == "failed" for line in body)  # marked in its row
    assert "(per interval, per window or per rank) within one run" in text
    # No ± shown, no footnote about one.
    assert "±" not in summary_table([r for r in _rows() if r.get("samples") is None])


def test_summary_table_fixed_decimals_and_the_reference_tools_columns():
    def row(bench, metric, value, unit, params, case=0, **kw):
        return {"benchmark": bench, "metric": metric, "value": value, "unit": unit,
                "params": params, "case_index": case, "status": "ok", "reason": None,
                "samples": None, "n_samples": kw.get("n"), "msg_size": kw.get("size", 64)}

    # The reference tools' columns as the benchmarks declare them (Traits.lead, .trail).
    coll = '{"dtype":"float32","reduce_op":"sum","msg_size":%d}'
    nccl = {"lead": '[["count","%s"],["type","float32"],["redop","sum"]]',
            "trail": '[["#wrong","0"]]'}
    rows = [row("tcp.rr", "tps", 20142.7, "transactions/s", "{}"),
            {**row("coll.all_reduce", "busbw", 0.25, "GB/s", coll % 4096, size=4096),
             **nccl, "lead": nccl["lead"] % "1,024"},
            {**row("coll.all_reduce", "busbw", 12.5, "GB/s", coll % 65536, case=1, size=65536),
             **nccl, "lead": nccl["lead"] % "16,384"},
            {**row("rdma.write_lat", "lat_p50", 1.5, "us", '{"iterations":1000}', case=2,
                   n=1000, size=2), "lead": '[["#iterations","1,000"]]'},
            {**row("rdma.write_bw", None, None, None, "{}", case=3), "status": "skipped",
             "reason": "no RDMA device", "lead": '[["#iterations","-"]]'}]
    text = summary_table(rows)
    assert "e+" not in text and "20,143" in text                   # never 2.014e+04
    lines = text.splitlines()
    coll_header = lines[lines.index(next(ln for ln in lines if ln.startswith("coll."))) + 1]
    assert coll_header.split() == ["size", "count", "type", "redop", "busbw", "#wrong"]
    assert "4K     1,024  float32    sum   0.25       0" in text, text
    assert "64K   16,384  float32    sum  12.50       0" in text, text
    lat = lines[lines.index("rdma.write_lat") + 1]
    assert lat.split()[:2] == ["size", "#iterations"] and "1,000" in text
    skipped = lines[lines.index("rdma.write_bw") + 2]
    assert skipped.split()[-1] == "skipped"


def test_reporter_plain_lines_in_ci_and_a_live_line_on_a_terminal():
    case = Case("tcp.stream", {"msg_size": 1024, "streams": 1})
    plain = io.StringIO()
    rep = Reporter(plain, interactive=False)
    rep.start_run("abc", "ci", 1, "lbl")
    rep.start_case(0, case)
    rep.end_case(0, None, [_rows()[0]])
    out = plain.getvalue()
    assert "\r" not in out and "[1/1] tcp.stream msg_size=1K streams=1" in out
    assert "ok  goodput 9.500 Gbit/s" in out

    tty = io.StringIO()
    rep = Reporter(tty, interactive=True)
    rep.start_run("abc", "ci", 1, "")
    rep.start_case(0, case)
    rep.progress(0.5)
    import time
    time.sleep(0.5)
    rep.end_case(0, None, [_rows()[3]])
    out = tty.getvalue()
    assert "\r" in out and "[##########..........]  50%" in out
    assert "failed: peer vanished" in out


def test_a_sysfs_root_that_is_no_tree_is_a_clear_error(tmp_path):
    for args in (["probe"], ["run", "mem.copy", "--results", str(tmp_path / "r")]):
        assert_clean_error(netbench(*args, "--sysfs-root", str(tmp_path / "nowhere")),
                           "no bus/, class/ or devices/")


def test_a_capture_reads_back_as_the_captured_host(tmp_path):
    """`probe --capture` then `--sysfs-root`: host, kernel, OS, versions and each NIC's model,
    driver, driver version and firmware are the captured host's, not the reader's."""
    live = json.loads(netbench("probe", "--json").stdout)
    dest = tmp_path / "cap"
    assert netbench("probe", "--capture", str(dest)).returncode == 0
    back = json.loads(netbench("probe", "--json", "--sysfs-root", str(dest)).stdout)
    for key in ("host", "kernel", "os", "arch", "cpu_model", "versions"):
        assert back[key] == live[key], key
    fields = ("model", "driver", "driver_version", "firmware")
    assert {n["name"]: {k: n.get(k) for k in fields} for n in back["nics"]} == {
        n["name"]: {k: n.get(k) for k in fields} for n in live["nics"]}
    assert back["captured_host_facts"] is True
    # Read elsewhere: the facts come from the file beside the tree, not from this machine.
    facts_file = dest / "_proc" / "netbench-host.json"
    facts = json.loads(facts_file.read_text())
    facts.update(host="gpu-node-17", kernel="6.8.0-49-generic", os="Ubuntu 24.04.1 LTS")
    first = live["nics"][0]["name"]
    facts["nics"][first] = {"model": "MT2910 Family [ConnectX-7]", "driver": "mlx5_core",
                            "driver_version": "24.10-1.1.4", "firmware": "28.43.1014"}
    facts_file.write_text(json.dumps(facts))
    other = json.loads(netbench("probe", "--json", "--sysfs-root", str(dest)).stdout)
    assert (other["host"], other["kernel"], other["os"]) == (
        "gpu-node-17", "6.8.0-49-generic", "Ubuntu 24.04.1 LTS")
    assert other["read_on"] == live["host"]
    nic = next(n for n in other["nics"] if n["name"] == first)
    assert (nic["model"], nic["driver_version"], nic["firmware"]) == (
        "MT2910 Family [ConnectX-7]", "24.10-1.1.4", "28.43.1014")
    # A capture of the capture keeps them.
    again = tmp_path / "again"
    assert netbench("probe", "--capture", str(again), "--sysfs-root", str(dest)).returncode == 0
    assert json.loads(netbench("probe", "--json", "--sysfs-root",
                               str(again)).stdout)["host"] == "gpu-node-17"


def test_the_run_table_prints_each_case_s_median_over_its_repeats(tmp_path):
    """A real run, three repeats: the end-of-run table's figure is the median of the stored
    repeats (what compare, history and export read), never the last repeat, and its ± is
    the repeats' spread, said so under the table."""
    import re

    import pyarrow.parquet as pq
    from conftest import netbench

    from netbench import stats

    proc = netbench("run", "tcp.stream", "-p", "duration=0.3", "-p", "msg_size=64K",
                    "--repeat", "3", "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    (path,) = (tmp_path / "r").glob("*.parquet")
    rows = pq.read_table(path).to_pandas()
    goodput = rows[(rows["metric"] == "goodput") & (rows["status"] == "ok")]
    values = sorted(goodput["value"].astype(float))
    assert len(values) == 3, values
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("64K"))
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("size"))
    column = header.split().index("goodput")
    cells = re.findall(r"-?\d+(?:\.\d+)?(?: ±\d+(?:\.\d+)?)?", line[len("64K"):])
    figure, half = (float(x) for x in cells[column - 1].split(" ±"))
    places = len(cells[column - 1].split(" ±")[0].partition(".")[2])
    assert figure == round(values[1], places), (line, values)
    assert half == round(stats.ci95_halfwidth(values), places), (line, values)
    assert "median of the case's repeats" in proc.stdout


def test_a_column_under_one_gbit_reads_in_mbit_as_iperf3_writes_it():
    """0.1909 Gbit/s is 190.9 Mbit/s: a column whose every figure is under one Gbit/s is
    written in Mbit/s (one unit a column); a column reaching past it stays in Gbit/s."""
    rows = [{**r, "value": r["value"] / 50 if r["value"] else r["value"],
             "samples": None} for r in _rows()]
    text = summary_table(rows)
    units = next(ln for ln in text.splitlines() if "bit/s" in ln)
    assert units.split() == ["Mbit/s", "Mbit/s"], text
    assert "190.0" in text and "245.0" in text and "60.00" in text, text
    assert "Gbit/s" in summary_table(_rows())


def test_a_tcp_table_has_iperf3s_retransmits_and_tcp_rr_fits_a_terminal(tmp_path):
    """Real loopback runs: tcp.stream's table carries a retr column, the retransmits its
    stored counters read (tcp/RetransSegs, the median of its repeats); tcp.rr's table says
    its unit's qualifier once ("us: half RTT") and fits 120 columns (it was 149)."""
    import pyarrow.parquet as pq
    from conftest import netbench

    from netbench.store import counters_of

    res = tmp_path / "r"
    proc = netbench("run", "tcp.stream", "-p", "duration=0.2", "-p", "msg_size=64K",
                    "--results", str(res))
    assert proc.returncode == 0, proc.stderr
    header = next(ln for ln in proc.stdout.splitlines() if ln.startswith("size"))
    assert header.split()[-1] == "retr", header
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("64K"))
    (path,) = res.glob("2*.parquet")
    grown = counters_of(pq.read_table(path).to_pandas()["counters"].dropna().iloc[0])
    assert line.split()[-1] == f"{grown.get('tcp/RetransSegs', 0):,}", (line, grown)
    rr = netbench("run", "tcp.rr", "-p", "iterations=300", "--results", str(res))
    assert rr.returncode == 0, rr.stderr
    table = rr.stdout.split("stored ")[0].splitlines()
    assert table[0].startswith("tcp.rr") and "us: half RTT" in table[0]
    assert max(len(ln) for ln in table) <= 120, "\n".join(table)


@pytest.mark.root
def test_capture_never_writes_through_what_was_planted_in_its_directory(tmp_path):
    """probe --capture as root into a directory holding a planted _proc/cpuinfo -> victim:
    refused (a new or empty directory only), the victim untouched; a sysfs entry linking
    outside its root is left out of the capture, never a traceback."""
    victim = tmp_path / "victim"
    victim.write_text("root's\n")
    dest = tmp_path / "cap"
    (dest / "_proc").mkdir(parents=True)
    (dest / "_proc" / "cpuinfo").symlink_to(victim)
    assert_clean_error(netbench("probe", "--capture", str(dest)), "not empty")
    assert victim.read_text() == "root's\n"
    tree = tmp_path / "sys"
    eth = tree / "devices" / "virtual" / "net" / "eth9"
    eth.mkdir(parents=True)
    (eth / "mtu").write_text("1500\n")
    (tree / "class" / "net").mkdir(parents=True)
    outside = tmp_path / "elsewhere" / "net" / "evil"
    outside.mkdir(parents=True)
    (outside / "mtu").write_text("9000\n")
    (tree / "class" / "net" / "evil").symlink_to(outside)
    (tree / "class" / "net" / "eth9").symlink_to(eth)
    proc = netbench("probe", "--capture", str(tmp_path / "new"), "--sysfs-root", str(tree))
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert not list((tmp_path / "new").rglob("*9000*"))
    assert not any(p.read_text() == "9000\n" for p in (tmp_path / "new").rglob("mtu")
                   if p.is_file())
