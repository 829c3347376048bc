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
    stale = results / ".20260101T000000-dead.parquet.4242-0badc0de.tmp"   # temp_name's
    stale.write_bytes(b"half a file")
    old = time.time() - 2 * 3600
    os.utime(stale, (old, old))
    fresh = results / ".20260101T000000-live.parquet.4243-0badc0de.tmp"   # a writer now
    fresh.write_bytes(b"x")
    theirs = results / ".notes.tmp"            # not a name netbench makes: never swept
    theirs.write_bytes(b"a user's")
    os.utime(theirs, (old, old))
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                    "--results", str(results)).returncode == 0
    assert not stale.exists() and fresh.exists() and theirs.exists()


@pytest.mark.root
def test_root_never_writes_through_a_link_another_user_planted(tmp_path):
    """As root, in a directory anyone writes to: a link owned by another user (nobody)
    pointing at root's mode-600 file is refused by report -o, export -o and accept --junit
    (the victim unchanged, one clear error each); the stale-temp sweep leaves another user's
    temp files and trees alone; --junit naming a FIFO is an error at once, never a hang."""
    results = tmp_path / "r"
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                    "--results", str(results)).returncode == 0
    victim = tmp_path / "victim"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o1777)
    spec = tmp_path / "spec.toml"
    spec.write_text('[[check]]\nbenchmark = "mem.copy"\nmetric = "bw"\nmin = 0\n')
    for name, args in (("dash", ("report", "--results", str(results), "-o")),
                       ("prom", ("export", "--results", str(results), "-o")),
                       ("junit", ("accept", str(spec), "--results", str(results), "--junit"))):
        link = shared / name
        link.symlink_to(victim)
        os.lchown(link, 65534, 65534)
        proc = netbench(*args, str(link))
        assert_clean_error(proc, "symbolic link owned by uid 65534")
        assert victim.read_text() == "root's secret\n" and oct(victim.stat().st_mode)[-3:] == \
            "600", name
    own = shared / "mine"                      # root's own link: followed, as asked
    own.symlink_to(tmp_path / "dash.html")
    assert netbench("report", "--results", str(results), "-o", str(own)).returncode == 0
    assert (tmp_path / "dash.html").stat().st_size > 10_000
    old = time.time() - 2 * 3600
    other = results / ".20260101T000000-x.parquet.4242-0badc0de.tmp"
    other.write_bytes(b"someone else's")
    tree = results / ".y.import.4242-0badc0de.tmp"
    (tree / "inner").mkdir(parents=True)
    for path in (tree / "inner", tree, other):
        os.lchown(path, 65534, 65534)
        os.utime(path, (old, old))
    assert netbench("run", "mem.copy", "-p", "msg_size=1M", "-p", "iterations=2",
                    "--results", str(results)).returncode == 0
    assert other.exists() and (tree / "inner").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    proc = netbench("accept", str(spec), "--results", str(results), "--junit", str(fifo),
                    timeout=30)
    assert_clean_error(proc, "a FIFO")
    assert time.monotonic() - started < 20


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
