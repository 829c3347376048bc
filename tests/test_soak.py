"""Burn-in (`netbench soak`): a case window after window, each window stored as it ends, the
dips named with what the counters saw in them. The known answers run tcp.stream through a
real veth shaped with tc tbf, whose rate is lowered mid-soak; the rest are the verdict on
windows as stored, and bad input."""

import errno
import inspect
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest
from conftest import ROOT, assert_clean_error
from test_dashboard import CHROMIUM, _facts
from test_netns import _reshape, shaped_pair  # noqa: F401  (a fixture)

from netbench.analysis.soak import judge
from netbench.run.peer import ServerProcess
from netbench.store import ResultStore

RATE_MBIT = 1000


def _windows(values, seconds=5.0, counters=None, device="eth9", env=None):
    start = datetime(2026, 12, 5, 14, 0, tzinfo=UTC)
    return pd.DataFrame([{
        "run_id": "r", "benchmark": "tcp.stream", "params": "{}", "case_index": i,
        "metric": "goodput", "value": v, "unit": "Gbit/s", "better": "higher",
        "status": "ok", "headline": "goodput", "device": device,
        "case_started_at": start + timedelta(seconds=i * seconds), "case_seconds": seconds,
        "counters": json.dumps((counters or {}).get(i, {})),
        "env_json": json.dumps(env or {})} for i, v in enumerate(values)])


def test_a_dip_is_named_with_its_start_length_depth_and_the_counters_inside_it():
    values = [1.0] * 12 + [0.5, 0.48, 0.5, 0.5] + [1.0] * 8
    grown = {13: {"net/eth9/statistics/carrier_changes": 2}, 3: {"tcp/RetransSegs": 40}}
    (case,) = judge(_windows(values, counters=grown))
    assert case.reference_from == "the soak's median window" and case.reference == 1.0
    (dip,) = case.dips
    assert dip.start == datetime(2026, 12, 5, 14, 1, tzinfo=UTC) and dip.windows == 4
    assert dip.seconds == 20.0 and dip.depth == 0.48
    assert dip.events == {"net/eth9/statistics/carrier_changes": 2}
    assert case.link_events == 2 and case.namespace == {"tcp/RetransSegs": 40}
    assert case.errors_per_hour == pytest.approx(2 / (24 * 5 / 3600))
    assert (case.lowest, case.median) == (0.48, 1.0)


def test_the_line_rate_is_the_reference_only_where_the_link_is_real():
    nic = {"name": "eth9", "speed_mbps": 10000, "virtual": False}
    (real,) = judge(_windows([9.4, 9.5, 4.0], env={"nics": [nic]}))
    assert real.reference_from == "line rate 10 Gbit/s" and len(real.dips) == 1
    (veth,) = judge(_windows([0.94, 0.95, 0.4], env={"nics": [{**nic, "virtual": True}]}))
    assert veth.reference_from == "the soak's median window"
    rxe = {"name": "rxe0", "emulated": True, "parent_netdev": "eth0",
           "ports": [{"port": 1, "rate": "10 Gb/sec (1X SDR)", "netdev": "eth0"}]}
    (soft,) = judge(_windows([0.028, 0.029, 0.014], device="rxe0:1",
                             env={"rdma_devices": [rxe], "nics": [nic]}))
    assert soft.reference_from == "the soak's median window" and soft.dips[0].depth == 0.5
    hca = {**rxe, "name": "mlx5_0", "emulated": False}
    (hard,) = judge(_windows([9.4, 9.5, 4.0], device="mlx5_0:1",
                             env={"rdma_devices": [hca], "nics": [nic]}))
    assert hard.reference_from == "line rate 10 Gbit/s", hard.reference_from
    (told,) = judge(_windows([0.94, 0.95, 0.4]), line_rate=1.0)
    assert told.reference_from == "line rate 1 Gbit/s" and told.dips[0].depth == 0.4


def test_a_latency_soak_dips_when_it_grows():
    rows = _windows([10.0, 10.2, 30.0, 9.9]).assign(metric="lat_p50", unit="us",
                                                    better="lower", headline="lat_p50")
    (case,) = judge(rows)
    assert [d.windows for d in case.dips] == [1] and case.dips[0].depth == pytest.approx(
        10.0 / 30.0, rel=0.02)


def _netbench(*args, **kw):
    return subprocess.run([sys.executable, "-m", "netbench", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=kw.pop("timeout", 60), **kw)


@pytest.mark.parametrize("args, needle", [
    (["tcp.stream", "--duration", "9s", "--window", "5s"], "fewer than two windows"),
    (["tcp.stream", "--duration", "1m", "--window", "0.2s"], "at least 0.5 s"),
    (["mem.copy", "--duration", "1m"], "cannot run for a given time"),
    (["tcp.stream", "--duration", "soon"], "--duration 'soon': a positive time"),
    (["tcp.stream", "--duration", "1h", "--window", "-1"], "--window '-1'"),
])
def test_a_soak_it_cannot_run_is_refused_naming_what_it_can(args, needle, tmp_path):
    proc = _netbench("soak", *args, "--results", str(tmp_path))
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_ctrl_c_keeps_the_windows_and_resume_goes_on_to_one_soak(tmp_path):
    """A soak stopped mid-way keeps every window that ended and says how to go on; the
    resumed soak is the same run, every window once."""
    cmd = [sys.executable, "-m", "netbench", "soak", "tcp.stream", "--duration", "8s",
           "--window", "1s", "--results", str(tmp_path), "-p", "msg_size=64K"]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    again = next(line.strip() for line in err.splitlines() if "--resume" in line)
    assert again.startswith("netbench soak tcp.stream --duration 8s --window 1s")
    run_id = again.split()[-1]
    words = again.split()[1:]
    done = _netbench(*words, "--json", timeout=120)
    assert done.returncode == 0, done.stderr
    (case,) = json.loads(done.stdout)["cases"]
    assert case["windows"] == 8 and json.loads(done.stdout)["run_id"] == run_id
    starts = [t for t, _, _ in case["timeline"]]
    assert len(set(starts)) == 8


def _soak(results, duration, window, *extra):
    return subprocess.Popen([sys.executable, "-m", "netbench", "soak", "tcp.stream",
                             "--duration", duration, "--window", window, "--results",
                             str(results), *extra], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _wait_for_parts(results, n, proc, timeout=60):
    """Until the soak in ``proc`` has stored ``n`` windows (its part files)."""
    deadline = time.monotonic() + timeout
    while len(list(results.glob("*.parts/part-*.parquet"))) < n:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"fewer than {n} windows in {timeout} s"
        time.sleep(0.05)


def _run_files(results):
    """The finished runs' files in a results directory (not its catalog cache)."""
    return [p for p in results.glob("*.parquet") if not p.name.startswith("_")]


def _starts(results, run_id):
    """Each window the store holds of the run, as the store reads it back: its index and
    start; a window stored twice (two starts) fails."""
    rows = ResultStore(results).read([run_id], ["case_index", "case_started_at"])
    starts = rows.groupby("case_index")["case_started_at"]
    assert (starts.nunique() == 1).all(), rows
    return {int(i): t for i, t in starts.first().items()}


def test_kill_9_mid_soak_then_the_resume_netbench_runs_offers_goes_on_to_one_soak(tmp_path):
    """kill -9 in window 5 of a 10-window soak (2 s windows; "minute 2" of a long one,
    scaled down): no handler runs, the 4 windows stored stay as parts, `netbench runs` lists
    the run interrupted with the command that goes on, and that command is the same soak:
    one run, every window once, the 4 as they were, the cut one run again."""
    proc = _soak(tmp_path, "20s", "2s")
    try:
        _wait_for_parts(tmp_path, 4, proc)
        time.sleep(1)                   # half-way through window 5
    finally:
        proc.kill()
    proc.communicate(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    listed = _netbench("runs", "--results", str(tmp_path))
    assert listed.returncode == 0 and " interrupted " in listed.stdout, listed.stdout
    hint = next(line for line in listed.stdout.splitlines() if line.startswith("interrupted:"))
    again = hint.split("`")[1]
    assert again.startswith("netbench soak tcp.stream --duration 20s --window 2s --resume "), hint
    run_id = again.split()[-1]
    before = _starts(tmp_path, run_id)
    assert sorted(before) == [0, 1, 2, 3], before
    done = _netbench(*again.split()[1:], "--results", str(tmp_path), "--json", timeout=120)
    assert done.returncode == 0 and "resuming run" in done.stderr, done.stderr
    (case,) = json.loads(done.stdout)["cases"]
    assert case["windows"] == 10 and json.loads(done.stdout)["run_id"] == run_id
    after = _starts(tmp_path, run_id)
    assert sorted(after) == list(range(10)) and {i: after[i] for i in before} == before
    assert not list(tmp_path.glob("*.parts")) and len(_run_files(tmp_path)) == 1


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MiB tmpfs of its own, to fill: a results directory on a disk that runs out."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4096k", "tmpfs", str(disk)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs to fill (needs root, or CAP_SYS_ADMIN in a "
                    f"container): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _fill(path):
    """Writes ``path`` until the disk it is on has no space left."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fd, bytes(65536)):
            pass
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


# ``_fill`` inside the soak's process, run as its writer begins compacting: the disk fills
# exactly then, with every window stored.
_FULL_AT_COMPACTION = "import errno, os, sys\n" + inspect.getsource(_fill) + """
from netbench.cli import main
from netbench.store import parquet

close = parquet.RunWriter.close

def full_then_close(self, compact=True):
    if compact:
        _fill(sys.argv[1])
    return close(self, compact)

parquet.RunWriter.close = full_then_close
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.root
def test_a_disk_that_fills_mid_soak_stops_it_keeping_its_windows_and_resume_goes_on(
        small_disk):
    """The results directory's disk full after 3 windows of a 40 s soak (2 s windows): the
    soak stops at the window it cannot store (exit 1, no traceback), keeps the 3, says why
    in a line naming the directory, and its printed --resume, once the space is freed,
    finishes the same soak: every window once, the cut one run again."""
    results, filler = small_disk / "r", small_disk / "filler"
    proc = _soak(results, "40s", "2s")
    try:
        _wait_for_parts(results, 3, proc)
        _fill(filler)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1 and "Traceback" not in err, err
    (said,) = [line for line in err.splitlines() if "no space left on device" in line]
    assert said.startswith("netbench: soak ") and f"results directory {results};" in said, err
    again = next(line.strip() for line in err.splitlines() if "--resume" in line)
    assert again.startswith(f"netbench soak tcp.stream --duration 40s --window 2s --results "
                            f"{results} --resume "), again
    run_id = again.split()[-1]
    before = _starts(results, run_id)
    assert 3 <= len(before) < 20 and sorted(before) == list(range(len(before))), before
    assert f"window {len(before) + 1} was not stored" in said, said
    filler.unlink()
    done = _netbench(*again.split()[1:], "--json", timeout=180)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    (case,) = json.loads(done.stdout)["cases"]
    assert case["windows"] == 20 and json.loads(done.stdout)["run_id"] == run_id
    after = _starts(results, run_id)
    assert sorted(after) == list(range(20)) and {i: after[i] for i in before} == before


@pytest.mark.root
def test_a_disk_that_fills_as_the_soak_compacts_keeps_its_parts_and_a_reader_compacts_them(
        small_disk):
    """Every window stored, then the disk full as the parts are compacted into the run's
    file: the parts stay (read as they are: the verdict is printed), the soak says so, where
    they are and what compacts them (exit 1); with space again, that command does: one
    file, every window once."""
    results, filler = small_disk / "r", small_disk / "filler"
    proc = subprocess.run([sys.executable, "-c", _FULL_AT_COMPACTION, str(filler), "soak",
                           "tcp.stream", "--duration", "2s", "--window", "1s", "--results",
                           str(results)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    err = proc.stderr
    assert proc.returncode == 1 and "Traceback" not in err, err
    (parts,) = results.glob("*.parts")
    run_id = parts.name[16:28]                  # <started>-<run id>.parts
    (said,) = [line for line in err.splitlines() if "no space left on device" in line]
    assert said.startswith(f"netbench: soak {run_id}: compacting its parts into "
                           f"{parts.name[:-6]}.parquet failed: no space left on device in "
                           f"the results directory {results}; every window stored stays in "
                           f"{parts}, read as it is."), said
    assert said.endswith(f"compacts them: netbench runs --results {results}"), said
    assert "2 windows over" in proc.stdout, proc.stdout
    assert not _run_files(results)
    before = _starts(results, run_id)
    assert sorted(before) == [0, 1], before
    filler.unlink()
    listed = _netbench(*said.rsplit(": ", 1)[1].split()[1:])
    assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr
    assert f"finished compacting run {run_id}" in listed.stderr, listed.stderr
    assert " finished " in listed.stdout, listed.stdout
    assert not list(results.glob("*.parts")) and len(_run_files(results)) == 1
    assert _starts(results, run_id) == before


@pytest.mark.root
def test_a_rate_halved_for_20_s_of_a_3_minute_soak_is_exactly_the_one_dip(
        shaped_pair, tmp_path):  # noqa: F811
    """The known answer: tcp.stream through tbf at 1000 Mbit/s for 3 minutes in 5 s windows;
    60 s in, 500 Mbit/s for 20 s. Exactly that dip, starting within a window of when it
    began, ~0.5 deep; every other window at 0.9 of their median or more; the acceptance rule
    on the windows fails on it, naming it."""
    ns_a, ns_b, dev_a = shaped_pair
    for ns, dev in ((ns_a, dev_a), (ns_b, dev_a.replace("nbva", "nbvb"))):
        _reshape(ns, dev, RATE_MBIT)
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))
    marks = {}

    def shape_later():
        time.sleep(60)
        marks["low"] = datetime.now(UTC)
        _reshape(ns_a, dev_a, RATE_MBIT // 2)
        time.sleep(20)
        _reshape(ns_a, dev_a, RATE_MBIT)
        marks["high"] = datetime.now(UTC)

    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "soak",
             "tcp.stream", "--peer", server.address, "--duration", "3m", "--window", "5s",
             "--results", str(tmp_path), "--json"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "netbench soak" in proc.stderr.readline()     # its first line: it began
        shaper = threading.Thread(target=shape_later, daemon=True)
        shaper.start()
        out, err = proc.communicate(timeout=400)
        shaper.join(30)
    finally:
        server.stop()
        _reshape(ns_a, dev_a, RATE_MBIT)
    assert proc.returncode == 0, err
    (case,) = json.loads(out)["cases"]
    print(json.dumps({k: case[k] for k in ("windows", "lowest", "p1", "median", "dips")},
                     default=str))
    assert case["windows"] == 36
    (dip,) = case["dips"]
    start = datetime.fromisoformat(dip["start"])
    assert abs((start - marks["low"]).total_seconds()) <= 5.5, (start, marks["low"])
    assert 15 <= dip["seconds"] <= 30 and 0.4 <= dip["depth"] <= 0.6
    rate = RATE_MBIT / 1000
    low, high = marks["low"], marks["high"]
    others = [v / rate for t, v, _ in case["timeline"]
              if not low - timedelta(seconds=5.5) < datetime.fromisoformat(t) < high]
    # Against the soak's own steady level: through tbf on a shared host, goodput reads
    # 0.89-0.95 of the nominal rate run to run (a CI runner's steal), which is the host's,
    # not a dip; a spurious low window still fails here and in the one-dip assert above.
    assert others
    steady = statistics.median(others)
    assert steady >= 0.8 and min(others) >= 0.9 * steady, (steady, others)
    spec = tmp_path / "soak.toml"
    spec.write_text('[accept]\nline_rate = 1\n\n[[check]]\nbenchmark = "tcp.stream"\n'
                    'metric = "goodput"\nmin_window_line_rate = 0.9\nmax_dips = 0\n')
    verdict = _netbench("accept", str(spec), "--results", str(tmp_path),
                        "--junit", str(tmp_path / "j.xml"))
    assert verdict.returncode == 1, verdict.stdout + verdict.stderr
    # Against the line rate, a window of the host's own at 0.89 (above) is a dip as well: the
    # shaped one must be among those named, 15-30 s at 0.4-0.6 of 1 Gbit/s.
    named = re.search(r"(\d+) dips > 0 \(([^)]*)\)", verdict.stdout)
    assert named and "windows under 90% of the line rate 1 Gbit/s" in verdict.stdout, \
        verdict.stdout
    assert any(15 <= int(secs) <= 30 and 0.4 <= float(share) <= 0.6 for secs, share in
               re.findall(r"(\d+) s at ([0-9.]+)", named[2])), verdict.stdout
    junit = (tmp_path / "j.xml").read_text()
    assert f"{named[1]} dips &gt; 0" in junit or f"{named[1]} dips > 0" in junit, junit
    os.remove(tmp_path / "j.xml")


@pytest.mark.root
def test_a_link_down_for_2_s_is_one_dip_named_with_its_carrier_change(
        shaped_pair, tmp_path):  # noqa: F811
    """The far end's veth down for 2 s, 15 s into a 40 s soak of 5 s windows: the dip and
    the carrier changes are named together, in the same window."""
    ns_a, ns_b, dev_a = shaped_pair
    dev_b = dev_a.replace("nbva", "nbvb")
    for ns, dev in ((ns_a, dev_a), (ns_b, dev_b)):
        _reshape(ns, dev, RATE_MBIT)
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))

    def flap():
        time.sleep(15)
        subprocess.run(["ip", "-n", ns_b, "link", "set", dev_b, "down"], check=True)
        time.sleep(2)
        subprocess.run(["ip", "-n", ns_b, "link", "set", dev_b, "up"], check=True)

    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "soak",
             "tcp.stream", "--peer", server.address, "--duration", "40s", "--window", "5s",
             "--results", str(tmp_path), "--json"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "netbench soak" in proc.stderr.readline()
        flapper = threading.Thread(target=flap, daemon=True)
        flapper.start()
        out, err = proc.communicate(timeout=200)
        flapper.join(30)
    finally:
        server.stop()
        subprocess.run(["ip", "-n", ns_b, "link", "set", dev_b, "up"], capture_output=True)
    assert proc.returncode == 0, err
    (case,) = json.loads(out)["cases"]
    print(json.dumps({k: case[k] for k in ("windows", "lowest", "dips", "link_events")}))
    assert case["dips"], case["timeline"]
    carrier = [d for d in case["dips"] if any(k.endswith("carrier_changes")
                                              for k in d["events"])]
    assert len(carrier) == 1 and carrier[0]["depth"] < 0.8, case["dips"]
    assert case["link_events"] >= 2             # down and up, on this end's veth
    if CHROMIUM:                                # the timeline, as a reader sees it
        page = tmp_path / "dash.html"
        drawn = _netbench("report", "--results", str(tmp_path), "-o", str(page))
        assert drawn.returncode == 0 and "soak" in drawn.stdout, drawn.stdout + drawn.stderr
        for width in (800, 1400):
            _, facts = _facts(tmp_path, page, width=width)
            soak = facts["soak"]
            assert soak["shapes"] == len(case["dips"]), soak       # each dip shaded
            assert any("error counters grew" in t for t in soak["traces"]), soak["traces"]
            assert any(t.startswith("reference: the soak's median window") for t in
                       soak["traces"]), soak["traces"]
            title, bar = soak["boxes"]["title"], soak["boxes"]["modebar"]
            assert title[2] <= bar[0] or title[3] <= bar[1], (width, title, bar)


def test_a_far_end_that_dies_stops_the_soak_keeping_its_windows_and_resume_goes_on(tmp_path):
    """The peer killed mid-soak: the soak stops after a few failed windows (not hours of
    them), keeps the windows before, names why, and the printed --resume finishes it once a
    peer listens there again."""
    server = ServerProcess()
    cmd = [sys.executable, "-m", "netbench", "soak", "tcp.rr", "--peer", server.address,
           "--duration", "4s", "--window", "0.5s", "--results", str(tmp_path)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    time.sleep(2.5)
    server.stop()
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1, err
    assert "3 windows in a row failed, the last:" in err and "Traceback" not in err, err
    again = next(line.strip() for line in err.splitlines() if "--resume" in line)
    revived = ServerProcess(port=server.port)
    try:
        done = _netbench(*again.split()[1:], "--json", timeout=120)
    finally:
        revived.stop()
    assert done.returncode == 0, done.stderr
    (case,) = json.loads(done.stdout)["cases"]
    assert case["windows"] == 8 and 1 <= case["failed"] <= 3 and case["dips"]


@pytest.mark.root
def test_an_interface_renamed_mid_soak_is_named_and_the_soak_goes_on(
        shaped_pair, tmp_path):  # noqa: F811
    """A driver reload renames a port: the interface's counters vanish mid-soak. The soak
    names it once and goes on to its end."""
    ns_a, ns_b, dev_a = shaped_pair
    server = ServerProcess(bind="10.203.0.2", prefix=("ip", "netns", "exec", ns_b))

    def rename():
        time.sleep(5)
        for args in (["down"], ["name", "nbren"], ["up"]):
            subprocess.run(["ip", "-n", ns_a, "link", "set", dev_a, *args]
                           if args != ["up"] else ["ip", "-n", ns_a, "link", "set", "nbren",
                                                   "up"], check=True)
        subprocess.run(["ip", "-n", ns_a, "addr", "replace", "10.203.0.1/24", "dev", "nbren"],
                       check=True)

    try:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", ns_a, sys.executable, "-m", "netbench", "soak",
             "tcp.stream", "--peer", server.address, "--duration", "12s", "--window", "2s",
             "--results", str(tmp_path)],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        renamer = threading.Thread(target=rename, daemon=True)
        renamer.start()
        out, err = proc.communicate(timeout=120)
        renamer.join(30)
    finally:
        server.stop()
    assert proc.returncode == 0, err
    # Named once, whether the rename fell inside a window or between two (a loaded CI
    # runner put it in the gap once, and nothing was said).
    assert err.count(f"net/{dev_a} vanished") == 1, err
    assert "6 windows over" in out or "6 ok" in err, out + err


# The first window's part refused as a full disk refuses it (the probe of the directory
# passed: the disk filled between the two).
_FULL_AT_FIRST_WINDOW = """import errno, sys
from netbench.cli import main
from netbench.store import parquet

def full(self, rows):
    raise OSError(errno.ENOSPC, "No space left on device")

parquet.RunWriter.append = full
sys.exit(main(sys.argv[1:]))
"""


def test_a_soak_that_stores_no_window_says_to_start_it_again_not_to_resume_it(tmp_path):
    """The disk full at the first window: nothing stored, so no run to resume; the soak
    says so and prints the command that starts it again (no --resume), exit 1, no
    traceback."""
    proc = subprocess.run([sys.executable, "-c", _FULL_AT_FIRST_WINDOW, "soak", "tcp.stream",
                           "--duration", "2s", "--window", "1s", "--results",
                           str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    err = proc.stderr
    assert proc.returncode == 1 and "Traceback" not in err, err
    assert "stopped before any window was stored" in err and "nothing was kept" in err, err
    assert "--resume" not in err, err
    again = err.rstrip().splitlines()[-1].strip()
    assert again == f"netbench soak tcp.stream --duration 2s --window 1s --results " \
                    f"{tmp_path / 'r'}", err


@pytest.mark.parametrize("footer, says", [
    ('{"duration": 20.0, "window": 2.0}', "netbench soak tcp.stream --duration 20s --window 2s "
                                          "--resume 3f2a9c1d0b7e"),
    ("{", "--duration D --window W (as it was started: its file's soak footer is unreadable)"),
    ('{"duration": "x", "window": 2}', "its file's soak footer is unreadable"),
    ('["duration"]', "its file's soak footer is unreadable"),
    ("", "netbench run SUITE --resume 3f2a9c1d0b7e")])
def test_netbench_runs_lists_an_interrupted_soak_whatever_its_footer_holds(footer, says):
    """`netbench runs` offers an interrupted soak's --resume from its footer; a footer that is
    no such JSON (damaged, written by hand) is said as such, never a traceback."""
    from datetime import UTC, datetime

    import pandas as pd

    from netbench.report.console import runs_table

    index = pd.DataFrame([{"run_id": "3f2a9c1d0b7e", "label": "", "started_at":
                           datetime(2026, 12, 6, tzinfo=UTC), "host": "h", "suite": "tcp.stream",
                           "ok": 4, "skipped": 0, "failed": 0, "state": "interrupted",
                           "benchmarks": ["tcp.stream"], "soak": footer}])
    assert says in runs_table(index)


def test_a_long_soak_keeps_few_enough_samples_a_window_that_its_file_is_read(tmp_path,
                                                                           monkeypatch):
    """A finished soak is one file, and a file beyond MAX_FILE_SAMPLES is one no reader takes:
    a day of 1 s windows of tcp.rr (every round trip a sample) would be hidden whole. Each
    window keeps its share of half that bound (its figures from every sample, n_samples
    true). Here the bound lowered to 200,000, 10 windows of 50,000 samples: 10,000 kept a
    window, the file read back whole."""
    from netbench.api import Benchmark, Measurement, Metric, Param
    from netbench.run import runner as runner_module
    from netbench.run.runner import Runner, soak_sample_limit
    from netbench.run.suite import Plan, PlannedCase, soaked
    from netbench.store import ResultStore

    assert soak_sample_limit(3, 8) == 100_000                     # a short soak keeps all
    assert soak_sample_limit(86_400, 10) == 11                    # a day of 1 s tcp.rr
    assert soak_sample_limit(10 ** 9, 8) == 8                     # never fewer than 8

    class Many(Benchmark):
        name, family, transport, description = "sim.rr", "sim", "tcp", "simulated"
        metrics = (Metric("lat", "us", "lower"),)
        params = (Param("duration", "float", 1.0, "seconds a window", minimum=0.01),)

        def window_params(self, seconds: float) -> dict:
            return {"duration": seconds}

        def run(self, case, ctx):
            samples = [10.0 + (i % 13) for i in range(50_000)]
            return Measurement({"lat": 16.0}, {"lat": samples})

    monkeypatch.setattr(runner_module, "MAX_FILE_SAMPLES", 200_000)
    bench = Many()
    (case,) = bench.expand({})
    plan = soaked(Plan("sim", [PlannedCase(case, bench, 60.0)]), 10.0, 1.0)
    store = ResultStore(tmp_path)
    result = Runner(store, {"host": "sim", "sysfs_root": "/sys", "no_counters": True}).run(plan)
    rows = store.read([result.run_id])
    assert len(rows) == 10 and (rows["n_samples"] == 50_000).all()
    assert [len(s) for s in rows["samples"]] == [10_000] * 10


# Every file refused by the reader, as one beyond its bounds is.
_UNREADABLE = """import sys
from netbench.cli import main
from netbench.store import parquet

parquet.too_large = lambda info: "it holds more than a reader takes (refused here)"
sys.exit(main(sys.argv[1:]))
"""


def test_a_soak_whose_windows_cannot_be_read_back_fails_never_passes(tmp_path):
    """Windows stored but the file refused by every reader (beyond its bounds): the verdict
    judged nothing, and that is exit 1 with a line saying so, not a silent exit 0."""
    proc = subprocess.run([sys.executable, "-c", _UNREADABLE, "soak", "tcp.stream",
                           "--duration", "2s", "--window", "1s", "--results",
                           str(tmp_path / "r")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "2 window(s) stored but none read back" in proc.stderr, proc.stderr
    assert "more than a reader takes" in proc.stderr, proc.stderr


def test_a_soak_whose_file_no_reader_would_take_is_refused_before_it_runs(tmp_path):
    """A week of 1 s tcp.rr windows stores ~6 million rows, three times what a reader takes
    from one file: refused up front, naming the count and the remedy; a day of them (864,000
    rows) is not."""
    from netbench.run.suite import plan_single, soaked

    proc = _netbench("soak", "tcp.rr", "--duration", "7d", "--window", "1s", "--results",
                     str(tmp_path))
    assert_clean_error(proc, "604,800 windows store about 6,048,000 rows, more than the "
                             "2,000,000", "take longer windows")
    assert not any(tmp_path.iterdir())
    day = soaked(plan_single("tcp.rr", {}), 86_400, 1.0)
    assert len(day.cases) == 86_400
