"""`netbench serve` survives garbage, oversized frames and vanishing clients, and keeps serving."""

import json
import socket
import struct

import pytest
from conftest import netbench

from netbench.run.peer import MAX_CLIENTS, ClientSession
from netbench.run.wire import MAX_MESSAGE, Channel


def _frame(obj) -> bytes:
    data = json.dumps(obj).encode()
    return struct.pack("!I", len(data)) + data


def _exchange(server, payload: bytes, read: bool = True) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=15) as sock:
        sock.sendall(payload)
        if not read:
            return b""
        chunks = []
        while True:
            try:
                chunk = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def _works(server, tmp_path) -> None:
    proc = netbench("run", "tcp.rr", "-p", "iterations=200", "-p", "warmup=10", "--peer",
                    server.address, "--results", str(tmp_path / "r"))
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("payload,answer", [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", None),                 # huge length prefix
    (struct.pack("!I", MAX_MESSAGE + 1) + b"x" * 100, None),       # just over the bound
    (struct.pack("!I", 5) + b"\xff\xfe\xfd\xfc\xfb", None),        # not UTF-8 / JSON
    (_frame([1, 2, 3]), None),                                     # JSON, not an object
    (_frame({"op": "__import__('os').system('x')"}), "expected hello or data"),  # unknown op
    (_frame({"op": "data", "session": "forged", "index": 0}) + b"junk" * 1000, None),
    (b"\x00\x00", None),                                           # truncated header
])
def test_garbage_is_refused_and_server_keeps_serving(server, tmp_path, payload, answer):
    reply = _exchange(server, payload)
    if answer is None:
        assert reply == b""              # dropped without a word: nothing to exploit
    else:
        (length,) = struct.unpack("!I", reply[:4])
        message = json.loads(reply[4:4 + length])
        assert answer in message["error"], message
    assert server.alive()
    _works(server, tmp_path)


def test_control_requests_with_bad_content_get_errors(server):
    session = ClientSession("127.0.0.1", server.port)
    try:
        ch = session.channel
        ch.send({"op": "run", "benchmark": "no.such"})
        assert "unknown benchmark" in ch.recv(10)["error"]
        ch.send({"op": "run", "benchmark": "tcp.stream", "params": {"streams": 10_000}})
        assert "out of range" in ch.recv(10)["error"]
        ch.send({"op": "run", "benchmark": "tcp.stream", "params": {"msg_size": [1, 2]}})
        assert "error" in ch.recv(10)
        ch.send({"op": "run", "benchmark": "tcp.stream", "params": "zzz"})
        assert "error" in ch.recv(10)
        ch.send({"op": "dance"})
        assert "unknown op" in ch.recv(10)["error"]
    finally:
        session.close()
    assert server.alive()


def test_wrong_protocol_version_is_refused(server):
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        ch = Channel(sock, "srv")
        ch.send({"op": "hello", "protocol": 999})
        assert "protocol 999 not supported" in ch.recv(10)["error"]


def test_clients_that_vanish_mid_benchmark(server, tmp_path):
    # Ask for a stream, open nothing, disappear: the far end must give up and free itself.
    session = ClientSession("127.0.0.1", server.port)
    session.channel.send({"op": "run", "benchmark": "tcp.stream",
                          "params": {"streams": 2, "duration": 1}})
    session.channel.sock.close()
    # And one that opens half its data connections, then vanishes.
    session = ClientSession("127.0.0.1", server.port)
    session.run_remote("tcp.stream", {"streams": 2, "duration": 1}, 10)
    socks = session.open_data(1, 10)
    session.channel.sock.close()
    socks[0].close()
    # A silent connection that never says hello.
    silent = socket.create_connection(("127.0.0.1", server.port))
    _works(server, tmp_path)
    silent.close()
    assert server.alive()


def test_many_simultaneous_clients_are_bounded(server):
    socks = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(40)]
    try:
        # Beyond the session limit the server says it is busy instead of piling up threads.
        for sock in socks:
            sock.sendall(_frame({"op": "hello", "protocol": 1}))
        replies = [Channel(sock, "srv").recv(10) for sock in socks]
        assert sum("session" in r for r in replies) == MAX_CLIENTS
        assert all("server busy" in r["error"] for r in replies if "session" not in r)
    finally:
        for s in socks:
            s.close()
    assert server.alive()


def test_traced_data_connections_keep_their_routes_and_the_server_shrugs_off_the_probes(
        server, tmp_path):
    """open_data(traced=True): each data connection's 5-tuple traced first (on loopback no
    router answers: the first probe reaches the server and is reset), then the connection
    bound to that source port; the server takes the reset probes as vanished clients."""
    session = ClientSession("127.0.0.1", server.port)
    session.run_remote("tcp.stream", {"streams": 2, "duration": 0.2, "warmup": 0}, 10)
    socks = session.open_data(2, 10, traced=True)
    try:
        assert session.routes == [[], []]
        assert len({s.getsockname()[1] for s in socks}) == 2
    finally:
        for sock in socks:
            sock.close()
        session.channel.sock.close()
    _works(server, tmp_path)
    assert server.alive()
