"""The real CLI in subprocesses: happy paths and every kind of bad input."""

import json
import re
import socket
import subprocess
import sys
import time

import pandas as pd
from conftest import assert_clean_error, netbench

from netbench import load as netbench_load


def test_list_shows_params_defaults_and_availability():
    proc = netbench("list")
    assert proc.returncode == 0, proc.stderr
    for name in ("tcp.stream", "tcp.rr", "mem.copy"):
        assert name in proc.stdout
    assert "msg_size = 128K" in proc.stdout and "ready" in proc.stdout
    data = json.loads(netbench("list", "--json").stdout)
    stream = next(b for b in data["benchmarks"] if b["name"] == "tcp.stream")
    assert stream["available"] is True
    assert {"name": "goodput", "unit": "Gbit/s", "better": "higher"} in stream["metrics"]
    assert any(p["name"] == "streams" and p["default"] == 1 for p in stream["params"])


def test_probe_json_has_fingerprint():
    env = json.loads(netbench("probe", "--json").stdout)
    for key in ("host", "kernel", "cpu_model", "cpu_cores", "memory_bytes", "nics",
                "rdma_devices", "versions"):
        assert key in env
    assert any(n["name"] == "lo" and n["mtu"] for n in env["nics"])
    assert env["versions"]["netbench"] and env["versions"]["python"]
    human = netbench("probe")
    assert human.returncode == 0 and "kernel" in human.stdout and "rdma" in human.stdout


def test_run_stream_loopback_stores_rows_read_back_by_pandas(tmp_path):
    proc = netbench("run", "tcp.stream", "-p", "duration=0.5", "-p", "warmup=0.2",
                    "-p", "msg_size=64K,128K", "--results", str(tmp_path), "--label",
                    "before-driver-update", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    good = [r for r in rows if r["metric"] == "goodput"]
    assert [r["msg_size"] for r in good] == [65536, 131072]
    assert all(r["value"] > 0.05 and r["unit"] == "Gbit/s" and r["better"] == "higher"
               for r in good)
    assert all(r["peer"] == "loopback" and r["device"] == "lo" for r in rows)
    assert "fallback: no --peer given" in proc.stderr
    df = pd.read_parquet(tmp_path)
    assert set(df["label"]) == {"before-driver-update"}
    assert len(df) == len(rows)
    assert df["run_id"].nunique() == 1
    cpu = df[df.metric == "cpu_per_gbit"]
    assert (cpu["value"] > 0).all() and set(cpu["better"]) == {"lower"}
    tidy = netbench_load(tmp_path)            # the run's environment, kept once per run
    env = json.loads(tidy["env_json"].iloc[0])
    assert env["kernel"] == tidy["env_kernel"].iloc[0]
    # per-interval samples are stored with the goodput rows
    assert all(len(s) >= 3 for s in df.loc[df.metric == "goodput", "samples"])


def test_run_rr_latency_percentiles_are_ordered(tmp_path):
    proc = netbench("run", "tcp.rr", "-p", "iterations=2000", "-p", "warmup=100",
                    "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    v = {r["metric"]: r for r in json.loads(proc.stdout)}
    order = ["lat_min", "lat_p50", "lat_p99", "lat_p99.9", "lat_max"]
    assert [v[m]["value"] for m in order] == sorted(v[m]["value"] for m in order)
    assert v["lat_p50"]["unit"] == "us (half RTT)" and v["lat_p50"]["n_samples"] == 2000
    assert len(v["lat_p50"]["samples"]) == 2000
    assert v["tps"]["value"] > 100


def test_unknown_benchmark_and_params():
    assert_clean_error(netbench("run", "tcp.nope"), "unknown benchmark 'tcp.nope'",
                       "tcp.stream")
    assert_clean_error(netbench("run", "tcp.stream", "-p", "colour=red"),
                       "has no param 'colour'", "streams")
    assert_clean_error(netbench("run", "tcp.stream", "-p", "streams=many"),
                       "param streams: bad value 'many'", "an integer")
    assert_clean_error(netbench("run", "tcp.stream", "-p", "direction=up"),
                       "one of forward, reverse, both")
    assert_clean_error(netbench("run", "tcp.stream", "-p", "novalue"), "expected key=value")


def test_malformed_suite_file_names_file_line_key(tmp_path):
    suite = tmp_path / "bad.toml"
    suite.write_text('[[case]]\nbenchmark = "tcp.rr"\niterations = "lots"\n')
    proc = netbench("run", str(suite), "--results", str(tmp_path))
    assert_clean_error(proc, f"{suite}:3:", "iterations")
    assert proc.returncode == 2


def test_unreachable_peer_fails_fast_and_clearly(tmp_path):
    with socket.socket() as s:          # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    proc = netbench("run", "tcp.stream", "--peer", f"127.0.0.1:{port}", "--results",
                    str(tmp_path))
    assert time.monotonic() - start < 20
    assert_clean_error(proc, "cannot reach netbench serve", "refused")
    df = pd.read_parquet(tmp_path)
    assert df["status"].tolist() == ["failed"] and df["peer"].tolist() == [f"127.0.0.1:{port}"]
    assert_clean_error(netbench("run", "tcp.rr", "--peer", "no-such-host.invalid",
                                "--results", str(tmp_path)), "cannot resolve peer")
    assert_clean_error(netbench("run", "tcp.rr", "--peer", "host:99999"), "port must be")


def test_unwritable_results_dir(tmp_path):
    blocker = tmp_path / "f"
    blocker.write_text("x")
    assert_clean_error(netbench("run", "mem.copy", "--results", str(blocker / "sub")),
                       "cannot be written")


def test_serve_port_in_use():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        proc = netbench("serve", "--port", str(port), timeout=20)
    assert_clean_error(proc, f"port {port}", "already in use")


def test_serve_binds_loopback_by_default():
    """`netbench serve` with no --bind: the kernel says which address the socket holds."""
    import psutil

    proc = subprocess.Popen([sys.executable, "-m", "netbench", "serve", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "listening on" in proc.stdout.readline()
        listening = [c.laddr for c in psutil.Process(proc.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN]
        assert [addr.ip for addr in listening] == ["127.0.0.1"], listening
    finally:
        proc.terminate()
        proc.wait(10)


def test_rr_python_fallback_loops_agree_with_c_loops():
    """Both timing loops (C fast path and the Python fallback) do the same work: exactly
    warmup + iterations round trips of the message size, counted by the far end (the C echo
    returns how many it echoed), and one sample per timed round trip, which add up to no more
    than the time the loop took. Exact counts, not timings: speed is for bench/ scripts."""
    import socket
    import threading

    from netbench.benchmarks.tcp import loops

    def rounds_echoed(client) -> tuple[int, object]:
        a, b = socket.socketpair()
        echoed: list[int] = []
        if loops._fastloop is not None:
            echo = threading.Thread(target=lambda: echoed.append(loops._fastloop.rr_echo(
                b.fileno(), 100)), daemon=True)
        else:
            echo = threading.Thread(target=loops.PythonLoop().echo, args=(b, 100), daemon=True)
        echo.start()
        try:
            result = client(a)
            a.shutdown(socket.SHUT_WR)
            echo.join(10)
            assert not echo.is_alive()
        finally:
            a.close()
            b.close()
        return (echoed[0] if echoed else -1), result

    python = loops.choose_loop("python")
    count, (rtts, elapsed) = rounds_echoed(lambda s: python.client(s, 100, 500, 50, 0))
    assert len(rtts) == 500 and all(r > 0 for r in rtts) and sum(rtts) <= elapsed * 1e9 * 1.01
    if loops._fastloop is None:
        return
    assert loops.choose_loop("auto").name == "compiled"
    assert count == 550                                  # 50 warm-up + 500 timed
    c_count, (c_rtts, c_elapsed) = rounds_echoed(
        lambda s: loops.choose_loop("compiled").client(s, 100, 500, 50, 0))
    assert c_count == count                              # the same work, round for round
    assert len(c_rtts) == len(rtts) and all(r > 0 for r in c_rtts)
    assert sum(c_rtts) <= c_elapsed * 1e9 * 1.01
    d_count, (rtts_dur, _) = rounds_echoed(lambda s: python.client(s, 100, 0, 5, int(0.2e9)))
    assert d_count == len(rtts_dur) + 5 and len(rtts_dur) > 10   # duration mode: all timed


def test_dry_run_estimates_the_wall_time_and_a_run_shows_what_is_left(tmp_path):
    """How long a plan takes comes from how long its cases took in the store's earlier runs
    on this host: --dry-run sums them (and names the cases never timed), and a running suite
    prints the time left on each case's line."""
    res = str(tmp_path / "r")
    args = ("tcp.stream", "-p", "duration=0.2", "-p", "msg_size=16K,64K")
    fresh = netbench("run", *args, "--results", res, "--dry-run")
    assert fresh.returncode == 0 and "no time estimate" in fresh.stdout, fresh.stdout
    assert netbench("run", *args, "--results", res).returncode == 0
    dry = netbench("run", "tcp.stream", "-p", "duration=0.2", "-p", "msg_size=16K,64K,1M",
                   "--results", res, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert re.search(r"about \d+ s for the 2 case\(s\) timed in the store's earlier runs on "
                     r"this host; 1 never timed here", dry.stdout), dry.stdout
    stored = [p for p in (tmp_path / "r").glob("*.parquet") if not p.name.startswith("_")]
    assert len(stored) == 1                                         # the dry run stored none
    run = netbench("run", *args, "--results", res)
    lines = [ln for ln in run.stderr.splitlines() if ln.startswith("[")]
    assert "left)" not in lines[0] and re.search(r"\(about \d+ s left\)$", lines[1]), lines


def test_interval_lines_as_iperf3_prints_them(tmp_path):
    """--interval 0.5 on a 1.5 s stream: a line each half second with the rate the far end
    acknowledged and the retransmits, before the case's result; a negative interval is bad
    input."""
    proc = netbench("run", "tcp.stream", "-p", "duration=1.5", "-p", "warmup=0",
                    "--interval", "0.5", "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines()
             if re.match(r"\s+\[\s*[\d.]+-\s*[\d.]+ s\]  goodput ", ln)]
    assert len(lines) >= 2, proc.stderr
    assert all(re.search(r"goodput [\d,.]+ [GM]bit/s  retr [\d,]+$", ln) for ln in lines), lines
    result = next(i for i, ln in enumerate(proc.stderr.splitlines()) if "-> ok" in ln)
    assert proc.stderr.splitlines().index(lines[-1]) < result
    quiet = netbench("run", "tcp.stream", "-p", "duration=0.3", "--results", str(tmp_path / "r"))
    assert "goodput" in quiet.stderr and not re.search(r"\[\s*[\d.]+-", quiet.stderr)
    assert_clean_error(netbench("run", "tcp.stream", "--interval", "-1", "--results",
                                str(tmp_path / "r")), "--interval -1")
