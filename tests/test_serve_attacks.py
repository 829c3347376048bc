"""`netbench serve` survives any one client: each attack below, then a real benchmark through
the same server, with its file descriptors and memory bounded."""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import threading
import time

import psutil
import pytest
from conftest import netbench

from netbench.peer import (
    HELLO_TIMEOUT,
    MAX_QUEUED_DATA,
    TOTAL_MEMORY,
    ClientSession,
    ServerProcess,
)
from netbench.wire import Channel


def _frame(obj) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack("!I", len(data)) + data


def _stream_works(server: ServerProcess, tmp_path) -> None:
    proc = netbench("run", "tcp.stream", "-p", "duration=0.5", "-p", "warmup=0.1", "--peer",
                    server.address, "--results", str(tmp_path / "after"))
    assert proc.returncode == 0, proc.stderr


@pytest.fixture
def logged(tmp_path):
    """A server whose log we read afterwards (no tracebacks allowed in it)."""
    log = open(tmp_path / "serve.log", "w+")
    srv = ServerProcess(stderr=log)
    yield srv, log
    srv.stop()
    log.close()


def _log_text(log) -> str:
    log.flush()
    log.seek(0)
    return log.read()


def test_data_connections_beyond_the_bound_are_closed(logged, tmp_path):
    server, log = logged
    session = ClientSession("127.0.0.1", server.port)
    socks = []
    try:
        for index in range(MAX_QUEUED_DATA + 40):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            sock.sendall(_frame({"op": "data", "session": session.token, "index": index}))
            socks.append(sock)
        time.sleep(1.0)
        fds = psutil.Process(server.proc.pid).num_fds()
        assert fds < MAX_QUEUED_DATA + 60, fds          # the extra 40 were not kept
        closed = 0
        for sock in socks[-40:]:
            sock.settimeout(5)
            try:
                closed += sock.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                closed += 1
        assert closed == 40
    finally:
        for sock in socks:
            sock.close()
        session.close()
    assert server.alive()
    _stream_works(server, tmp_path)
    assert "Traceback" not in _log_text(log)


def test_out_of_file_descriptors_is_survived(tmp_path):
    """At the descriptor limit accept() fails with EMFILE: logged, survived, serving again."""
    log = open(tmp_path / "serve.log", "w+")
    limit = 64
    proc = subprocess.Popen(
        [sys.executable, "-c", f"import resource; resource.setrlimit(resource.RLIMIT_NOFILE, "
         f"({limit}, {limit})); from netbench.cli import main; main(['serve', '--port', '0'])"],
        stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        line = proc.stdout.readline()
        port = int(line.split("listening on ")[1].split()[0].rsplit(":", 1)[1])
        # Data connections are kept for their session (the slot is freed): 80 of them
        # outgrow the 64 descriptors this server may have.
        session = ClientSession("127.0.0.1", port)
        hogs = []
        for index in range(limit + 16):
            sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            sock.sendall(_frame({"op": "data", "session": session.token, "index": index}))
            hogs.append(sock)
        time.sleep(2.0)
        assert proc.poll() is None, _log_text(log)
        session.close()                      # the session's queued sockets are closed with it
        for sock in hogs:
            sock.close()
        time.sleep(1.0)
        run = netbench("run", "tcp.rr", "-p", "iterations=200", "--peer", f"127.0.0.1:{port}",
                       "--results", str(tmp_path / "r"))
        assert run.returncode == 0, run.stderr
        text = _log_text(log)
        assert "cannot accept a connection" in text and "Traceback" not in text, text
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def test_memory_a_client_can_make_the_server_hold_is_bounded(logged, tmp_path):
    server, _ = logged
    rss0 = psutil.Process(server.proc.pid).memory_info().rss
    peak = [rss0]
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.05):
            try:
                peak[0] = max(peak[0], psutil.Process(server.proc.pid).memory_info().rss)
            except psutil.Error:
                return

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        # 16 streams of 64 MiB messages: the receive side used to hold 16 x 64 MiB.
        proc = netbench("run", "tcp.stream", "-p", "msg_size=64M", "-p", "streams=16", "-p",
                        "duration=1", "-p", "warmup=0.2", "--peer", server.address,
                        "--results", str(tmp_path / "r"), timeout=120)
        assert proc.returncode == 0, proc.stderr
    finally:
        done.set()
        sampler.join()
    assert peak[0] - rss0 < 150 << 20, (rss0 >> 20, peak[0] >> 20)


def test_requests_beyond_the_memory_budget_are_refused_with_the_reason(logged, tmp_path):
    server, _ = logged
    per = 64 << 20                     # tcp.stream reverse: the 64 MiB payload it would send
    held = []
    try:
        for _ in range(TOTAL_MEMORY // per):
            session = ClientSession("127.0.0.1", server.port)
            held.append(session)
            session.run_remote("tcp.stream", {"msg_size": per, "direction": "reverse",
                                              "duration": 1}, 10)   # far end waits for data
        extra = ClientSession("127.0.0.1", server.port)
        held.append(extra)
        extra.channel.send({"op": "run", "benchmark": "tcp.stream",
                            "params": {"msg_size": per, "direction": "reverse"}})
        reply = extra.channel.recv(10)
        assert "server busy" in reply["error"] and "MiB" in reply["error"], reply
    finally:
        for session in held:
            session.channel.sock.close()
    time.sleep(1.0)                    # the far ends see their clients hang up, and free it
    _stream_works(server, tmp_path)


def test_a_slow_sender_cannot_hold_its_slot(logged):
    server, _ = logged
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        start = time.monotonic()
        frame = _frame({"op": "hello", "protocol": 1})
        dropped = None
        for byte in frame:
            try:
                sock.sendall(bytes([byte]))
                time.sleep(1.5)
                sock.setblocking(False)
                try:
                    if sock.recv(1) == b"":
                        dropped = time.monotonic() - start
                        break
                except BlockingIOError:
                    pass
                finally:
                    sock.setblocking(True)
            except (BrokenPipeError, ConnectionResetError):
                dropped = time.monotonic() - start
                break
        assert dropped is not None and dropped < HELLO_TIMEOUT + 4, dropped
    assert server.alive()


def test_deeply_nested_json_is_dropped_without_a_traceback(logged, tmp_path):
    server, log = logged
    body = b"[" * 200_000 + b"]" * 200_000
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(struct.pack("!I", len(body)) + body)
        sock.settimeout(10)
        try:
            sock.recv(1)
        except (ConnectionResetError, TimeoutError):
            pass
    assert server.alive()
    _stream_works(server, tmp_path)
    text = _log_text(log)
    assert "Traceback" not in text and "RecursionError" not in text, text


@pytest.mark.parametrize("port", ["70000", "-1", "abc", "65536"])
def test_ports_out_of_range_are_usage_errors(port):
    proc = netbench("serve", "--port", port)
    assert proc.returncode == 2 and "netbench: error:" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr


def test_the_server_says_which_channel_it_listens_on():
    srv = ServerProcess()
    try:
        with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as sock:
            ch = Channel(sock, "srv")
            ch.send({"op": "hello", "protocol": 1})
            assert ch.recv(5)["server"] == "netbench"
    finally:
        srv.stop()
