"""Nothing written is ever half-written, and a result that could not be kept is known before
anything is measured."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import time

import pytest
from conftest import assert_clean_error, netbench


def test_a_failed_report_leaves_the_previous_dashboard_whole(tmp_path):
    results = tmp_path / "r"
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2", "--results",
                    str(results)).returncode == 0
    out = results / "_dashboard.html"
    assert netbench("report", "--results", str(results), "-o", str(out)).returncode == 0
    before = out.read_bytes()
    # The next write cannot happen: files beyond 4 KiB are refused (EFBIG) mid-write.
    proc = netbench("report", "--results", str(results), "-o", str(out),
                    preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)))
    assert_clean_error(proc, "cannot write")
    assert out.read_bytes() == before
    assert not list(results.glob("._dashboard.html*.tmp"))     # the half-written one is gone


def test_jsonl_into_a_directory_fails_before_measuring(tmp_path):
    start = time.monotonic()
    proc = netbench("run", "tcp.stream", "-p", "duration=60", "--jsonl", str(tmp_path))
    assert_clean_error(proc, "is a directory")
    assert time.monotonic() - start < 30                # the 60 s were never measured


def test_jsonl_keeps_the_rows_of_earlier_runs(tmp_path):
    rows = tmp_path / "rows.jsonl"
    for _ in range(2):
        assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                        "--jsonl", str(rows)).returncode == 0
    runs = {json.loads(line)["run_id"] for line in rows.read_text().splitlines()}
    assert len(runs) == 2


def test_stale_temp_files_of_a_killed_writer_are_swept(tmp_path):
    results = tmp_path / "r"
    results.mkdir()
    stale = results / ".20260101T000000-dead.parquet.tmp"
    stale.write_bytes(b"half a file")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    fresh = results / ".20260101T000000-live.parquet.tmp"     # maybe a writer right now
    fresh.write_bytes(b"x")
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                    "--results", str(results)).returncode == 0
    assert not stale.exists() and fresh.exists()


@pytest.mark.root
def test_a_full_filesystem_is_refused_before_measuring(tmp_path):
    mnt = tmp_path / "full"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs",
                                            str(mnt)], capture_output=True).returncode != 0:
        pytest.skip("needs root and a tmpfs mount")
    try:
        proc = netbench("run", "mem.copy", "-p", "msg_size=1M", "--results", str(mnt / "r"))
        assert_clean_error(proc, "cannot be written")
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True)


def test_timeout_bounds_the_whole_case_connecting_included(tmp_path):
    """A peer that accepts and then says nothing (a blackhole after the SYN): the case ends
    at --timeout, not at a fixed connect timeout."""
    import socket

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        start = time.monotonic()
        proc = netbench("run", "tcp.rr", "--peer", f"127.0.0.1:{silent.getsockname()[1]}",
                        "--timeout", "2", "--results", str(tmp_path / "r"))
        took = time.monotonic() - start
    finally:
        silent.close()
    assert proc.returncode == 1, proc.stderr
    assert took < 2 + 6, took          # the case's 2 s plus start-up, not 10 s per connect
