"""Runs that go wrong: a peer that dies, a case that overruns, Ctrl-C. Finished rows are kept."""

import shlex
import signal
import subprocess
import sys
import time

import pandas as pd
import psutil
import pytest
from conftest import ROOT, assert_clean_error, netbench, wait_for

from netbench.run.peer import ServerProcess

SUITE = """
[[case]]
benchmark = "mem.copy"
msg_size = "1M"
iterations = 3

[[case]]
benchmark = "tcp.stream"
duration = 8
warmup = 0
"""


def _suite(tmp_path):
    path = tmp_path / "two.toml"
    path.write_text(SUITE)
    return path


def _start_run(args, tmp_path):
    return subprocess.Popen([sys.executable, "-m", "netbench", "run", *args, "--results",
                             str(tmp_path / "res")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _stored(tmp_path):
    return pd.read_parquet(tmp_path / "res")


def test_peer_dying_mid_run_fails_clearly_and_keeps_finished_rows(tmp_path):
    server = ServerProcess()
    try:
        run = _start_run([str(_suite(tmp_path)), "--peer", server.address], tmp_path)
        # wait until the stream is under way (the mem.copy row is stored first)
        assert wait_for(lambda: (tmp_path / "res").exists() and any(
            True for p in (tmp_path / "res").rglob("*.parquet")), 30)
        time.sleep(1.5)
        server.proc.kill()
        start = time.monotonic()
        out, err = run.communicate(timeout=60)
        assert time.monotonic() - start < 30
    finally:
        server.stop()
    proc = subprocess.CompletedProcess(run.args, run.returncode, out, err)
    assert_clean_error(proc, "tcp.stream")
    df = _stored(tmp_path)
    assert df.loc[df.benchmark == "mem.copy", "status"].eq("ok").all()
    failed = df[df.benchmark == "tcp.stream"]
    assert failed["status"].tolist() == ["failed"]
    reason = failed["reason"].iloc[0]
    assert any(word in reason for word in ("reset", "closed", "peer", "Broken pipe")), reason


def test_case_timeout_is_enforced(tmp_path):
    start = time.monotonic()
    proc = netbench("run", "tcp.stream", "-p", "duration=30", "--timeout", "2", "--results",
                    str(tmp_path))
    assert time.monotonic() - start < 20
    assert_clean_error(proc, "timed out after 2 s")
    assert pd.read_parquet(tmp_path)["status"].tolist() == ["failed"]


def _stop_mid_stream(tmp_path, sig):
    """Start the two-case suite, and send ``sig`` while its tcp.stream runs."""
    run = _start_run([str(_suite(tmp_path))], tmp_path)
    assert wait_for(lambda: (tmp_path / "res").exists() and any(
        True for p in (tmp_path / "res").rglob("*.parquet")), 30)
    time.sleep(1.0)
    children = psutil.Process(run.pid).children(recursive=True)
    assert children, "the loopback server should be running"
    run.send_signal(sig)
    out, err = run.communicate(timeout=30)
    assert "Traceback" not in err
    # the loopback server the run started is gone with it
    _, alive = psutil.wait_procs(children, timeout=10)
    assert not alive
    return run.returncode, err


def test_ctrl_c_stops_cleanly_keeps_rows_and_leaves_the_run_resumable(tmp_path):
    code, err = _stop_mid_stream(tmp_path, signal.SIGINT)
    assert code == 130, err
    assert "interrupted; finished rows were kept; continue with: netbench run " in err
    assert "case 2/2 (tcp.stream" in err and "was cut off: not stored" in err
    df = _stored(tmp_path)
    assert df.loc[df.benchmark == "mem.copy", "status"].eq("ok").all()
    # The cut-off case is no failure (nothing of it is stored), and the run is interrupted,
    # not finished, as after kill -9: `runs` says so and names the resume.
    assert "tcp.stream" not in set(df.benchmark) and "failed" not in set(df.status)
    listed = netbench("runs", "--results", str(tmp_path / "res"))
    assert " interrupted " in listed.stdout and "--resume" in listed.stdout, listed.stdout


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_sigterm_and_sighup_stop_as_ctrl_c_does_and_the_hint_resumes(tmp_path, sig, code):
    got, err = _stop_mid_stream(tmp_path, sig)
    assert got == code, err
    assert f"stopped by {sig.name}; finished rows were kept; continue with: " in err
    hint = err.split("continue with: ", 1)[1].splitlines()[0]
    words = shlex.split(hint)
    assert words[:2] == ["netbench", "run"] and "--resume" in words
    resumed = subprocess.run([sys.executable, "-m", *words], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "1 finished case(s) kept, 1 to run" in resumed.stderr
    df = _stored(tmp_path)
    assert sorted(df.case_index.unique()) == [0, 1] and set(df.status) == {"ok"}
