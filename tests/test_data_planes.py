"""Who times the loop is a param, chosen in one place, and the row says what ``auto`` became
(``resolved``), beside the params as planned."""

import json
from array import array

import pytest
from conftest import netbench

from netbench.api import SkipCase
from netbench.benchmarks.tcp import loops


def test_tcp_rr_records_the_loop_auto_became(tmp_path):
    run = netbench("run", "tcp.rr", "-p", "iterations=200", "-p", "warmup=20", "-p",
                   "data_plane=python", "--json", "--results", str(tmp_path))
    assert run.returncode == 0, run.stderr
    rows = json.loads(run.stdout)
    assert {json.loads(r["params"])["data_plane"] for r in rows} == {"python"}
    assert {json.loads(r["resolved"])["data_plane"] for r in rows} == {"python"}
    run = netbench("run", "tcp.rr", "-p", "iterations=200", "-p", "warmup=20", "--json",
                   "--results", str(tmp_path))
    want = "compiled" if loops._fastloop is not None else "python"
    rows = json.loads(run.stdout)
    assert {json.loads(r["params"])["data_plane"] for r in rows} == {"auto"}    # the case
    assert {json.loads(r["resolved"])["data_plane"] for r in rows} == {want}    # what it ran


def test_a_loop_asked_for_by_name_and_not_built_is_skipped_saying_why(monkeypatch):
    monkeypatch.setattr(loops, "_fastloop", None)
    monkeypatch.setattr(loops, "_WHY", "No module named '_fastloop'")
    assert loops.choose_loop("auto").name == "python"
    with pytest.raises(SkipCase, match="C loop is not built .No module named"):
        loops.choose_loop("compiled")


def test_the_rdma_plane_asked_for_by_name_and_not_built_is_skipped_saying_why(monkeypatch):
    pytest.importorskip("pyverbs")
    import sys

    from netbench.benchmarks.rdma import choice as plane

    monkeypatch.setitem(sys.modules, "netbench.benchmarks.rdma.compiled_plane", None)
    chosen, fallback = plane.choose({"data_plane": "auto"})
    assert chosen.name == "pyverbs" and "C data plane was not built" in fallback
    with pytest.raises(SkipCase, match="data_plane=compiled: the C data plane is not built"):
        plane.choose({"data_plane": "compiled"})


@pytest.mark.parametrize("plane", ["compiled", "python"])
def test_tcp_streams_loops_move_every_byte_and_count_it_while_they_run(plane, monkeypatch):
    """Over a real socket pair: the sender stops at its deadline, the receiver's counter
    grows while it runs (what the sampler reads) and ends at every byte sent."""
    import socket
    import threading
    import time

    if plane == "python":
        monkeypatch.setattr(loops, "_fastloop", None)
    elif loops._fastloop is None:
        pytest.skip("the C loop is not built here")
    loop = loops.StreamLoop()
    assert loop.name == plane
    a, b = socket.socketpair()
    counter = array("q", [0])
    seen = []
    receiver = threading.Thread(target=loop.receive, args=(b, bytearray(65536), counter))
    receiver.start()
    payload = b"x" * 100_000
    sent = []

    def send() -> None:
        loop.send_until(a, payload, time.monotonic() + 0.5)
        sent.append(True)
        a.shutdown(socket.SHUT_WR)

    sender = threading.Thread(target=send)
    began = time.monotonic()
    sender.start()
    while sender.is_alive():
        seen.append(counter[0])
        time.sleep(0.05)
    sender.join()
    receiver.join(10)
    assert 0.45 < time.monotonic() - began < 5 and sent and not receiver.is_alive()
    assert counter[0] > 0 and counter[0] % len(payload) == 0        # whole payloads only
    assert len({v for v in seen if v}) >= 3                          # counted as it ran
    a.close()
    b.close()


def test_a_stream_whose_peer_never_ends_stops_its_loops_before_the_sockets_close(monkeypatch):
    """A receiver still in its (C) loop at the deadline is shut down and joined: its fd number
    must not outlive the socket, or the loop would read whatever socket gets it next."""
    import socket
    import threading

    from netbench.api import PeerError
    from netbench.benchmarks import tcp

    monkeypatch.setattr(tcp, "STALL_TIMEOUT", 0.3)
    a, b = socket.socketpair()          # b never sends nor closes: a's receiver waits on
    before = threading.active_count()
    transfer = tcp._Transfer([a], [], 1024, 0.2, 0.05)
    with pytest.raises(PeerError, match="did not finish"):
        transfer.run()
    assert threading.active_count() == before
    a.close()
    b.close()
