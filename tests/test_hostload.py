"""The host's load recorded around a case (netbench.env.hostload), with real processes."""

import os
import signal
import subprocess
import sys
import time

from netbench.env import hostload


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def test_a_neighbour_counts_as_other_work_and_our_own_as_ours():
    # A neighbour, not a descendant: started by a process that exits at once, so the busy
    # loop belongs to init (a descendant of netbench is netbench's own work).
    spawn = ("import subprocess, sys\n"
             "p = subprocess.Popen([sys.executable, '-c', 'while True: pass'],"
             " stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\nprint(p.pid)\n")
    pid = int(subprocess.run([sys.executable, "-c", spawn], capture_output=True, text=True,
                             timeout=10).stdout)
    try:
        time.sleep(0.2)
        begin = hostload.start()
        time.sleep(0.6)                         # netbench idle, the neighbour busy
        beside = hostload.finish(begin)
    finally:
        os.kill(pid, signal.SIGKILL)
    begin = hostload.start()
    _spin(0.6)                                  # netbench busy itself
    alone = hostload.finish(begin)
    print(beside, alone)
    assert beside["load_other_cores"] >= 0.5, beside      # one core's worth, give or take
    assert beside["load_own_cores"] < 0.1, beside          # we slept
    assert alone["load_own_cores"] >= 0.1, alone           # what the shared host gave us
    assert set(beside) == set(hostload.COLUMNS)


def test_a_short_case_records_no_load_rather_than_a_wrong_one():
    begin = hostload.start()
    out = hostload.finish(begin)
    assert out["load_other_cores"] is None and out["load_own_cores"] is not None


def test_a_spawned_child_is_netbench_s_own_work():
    begin = hostload.start()
    child = subprocess.Popen([sys.executable, "-c",
                              "import time\nend = time.monotonic() + 0.6\n"
                              "while time.monotonic() < end:\n    pass\n"])
    child.wait()
    out = hostload.finish(begin)
    assert out["load_own_cores"] >= 0.1, out            # reaped: counted as ours


def test_a_short_case_in_a_run_takes_the_load_from_just_before_it():
    meter = hostload.Meter()
    _spin(0.3)                                  # an earlier case of the run
    begin = meter.start()
    out = meter.finish(begin)                   # a case of a few microseconds
    assert out["load_own_cores"] is not None and out["load_other_cores"] is not None
    assert out["load_own_cores"] >= 0.1, out    # the spin just before it is in its window
