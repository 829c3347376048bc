"""Probe on live and captured sysfs; the console reporter on a terminal and in CI."""

import io
import json
import os
import shutil
from pathlib import Path

from conftest import assert_clean_error, netbench

from netbench.api import Case
from netbench.probe import nic_summary, probe, probe_nics, probe_rdma
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
    assert nic_summary(env, "lo").startswith("lo: virtual")
    assert nic_summary(env, "nope") is None
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
    header = text.splitlines()[0]
    assert "streams" in header and "goodput [Gbit/s]" in header
    assert header.index("goodput [Gbit/s]") < header.index("goodput_rev [Gbit/s]")
    assert "9.5 ±1.242" in text        # t(2) = 4.303 * 0.5 / sqrt(3)
    assert "failed: peer vanished" in text


def test_reporter_plain_lines_in_ci_and_a_live_line_on_a_terminal():
    case = Case("tcp.stream", {"msg_size": 1024, "streams": 1})
    plain = io.StringIO()
    rep = Reporter(plain, interactive=False)
    rep.start_run("abc", "ci", 1, "lbl")
    rep.start_case(0, case)
    rep.end_case(0, None, [_rows()[0]])
    out = plain.getvalue()
    assert "\r" not in out and "[1/1] tcp.stream msg_size=1K streams=1" in out
    assert "ok  goodput 9.5 Gbit/s" in out

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
