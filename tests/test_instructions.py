"""bench/instructions_per_op.py's failures say what went wrong and never divide by zero; its
counter reads the files a real callgrind writes. The counts themselves are the bench
script's job (minutes under valgrind), not a unit test's."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

SCRIPT = ROOT / "bench" / "instructions_per_op.py"


@pytest.fixture(scope="module")
def ipo():
    spec = importlib.util.spec_from_file_location("instructions_per_op", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_valgrind_it_says_how_to_install_it_and_exits_2(tmp_path):
    python_only = tmp_path / "bin"
    python_only.mkdir()
    (python_only / "python3").symlink_to(sys.executable)
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env=dict(os.environ, PATH=str(python_only)))
    assert proc.returncode == 2
    assert "valgrind is not installed" in proc.stderr and "apt-get install valgrind" in \
        proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_a_loop_that_did_not_run_fails_its_point_without_dividing_by_zero(ipo, tmp_path):
    def flat(n, work):              # the same count whatever n: the loop never ran
        return 1_000_000, 0.0

    with pytest.raises(ipo.PointFailed, match="did not grow"):
        ipo.slope(flat, (10, 100), 1.0, tmp_path)

    def grows(n, work):
        return 5_000 + 700 * n, float(n)

    per_op, _ = ipo.slope(grows, (10, 100), 1.0, tmp_path)
    assert per_op == 700


def test_a_failing_reference_tool_names_itself(ipo, tmp_path):
    with pytest.raises(ipo.PointFailed, match="false exited 1"):
        ipo.counted(["false"], tmp_path)


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind (make test installs it)")
def test_the_counter_sums_what_callgrind_wrote_for_every_process(ipo, tmp_path):
    """sh and its child, each in its own callgrind file, both counted."""
    one, _ = ipo.counted(["true"], tmp_path)
    two, _ = ipo.counted(["sh", "-c", "true; /bin/true"], tmp_path)
    assert 10_000 < one < two
    files = [p for p in tmp_path.rglob("cg.*")]
    assert len(files) >= 3


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind (make test installs it)")
def test_per_object_counts_add_up_to_callgrinds_total(ipo, tmp_path):
    ipo.counted(["sh", "-c", "true"], tmp_path)
    (path,) = tmp_path.rglob("cg.*")
    per_object = ipo.by_object(path)
    totals = [int(line.split()[1]) for line in path.read_text().splitlines()
              if line.startswith("totals:")]
    assert sum(per_object.values()) == totals[0]
    assert any(Path(obj).name.startswith("libc.") for obj in per_object)
    kinds = ipo.share({"libibverbs.so.1": 100, "librxe-rdmav34.so": 50, "libc.so.6": 10,
                       "ib_write_lat": 7}, {"libibverbs.so.1": 1100, "librxe-rdmav34.so": 550,
                                            "libc.so.6": 110, "ib_write_lat": 17}, 10)
    assert kinds == {"verbs": 150.0, "libc": 10.0, "own": 1.0}


def _verbsloop():
    return pytest.importorskip("netbench.benchmarks.rdma._verbsloop",
                               reason="the compiled RDMA plane is not built here")


@pytest.mark.skipif(not shutil.which("valgrind"), reason="needs valgrind (make test installs it)")
def test_each_labelled_dump_is_found_and_a_failed_run_is_named(ipo, tmp_path):
    """The counted netbench process's dumps, as the RDMA points read them: one per run,
    labelled; a run that failed is said, never counted."""
    vl = _verbsloop()
    if not vl.COUNTABLE:
        pytest.skip("the RDMA loops were built without valgrind's callgrind.h")
    out = tmp_path / "cg"
    out.mkdir()
    code = ("from netbench.benchmarks.rdma import _verbsloop as v\n"
            "v.count_instrument(True); sum(range(20000)); v.count_instrument(False)\n"
            "v.count_dump('rdma_write_lat_2 500')\n"
            "v.count_dump('rdma_write_lat_2 5000 failed 1')\n")
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={out}/cg.%p", sys.executable, "-c", code],
                   check=True, capture_output=True, timeout=120, cwd=ROOT)
    counts = ipo.dumps(out)
    assert set(counts) == {"rdma_write_lat_2 500", "rdma_write_lat_2 5000 failed 1"}
    assert counts["rdma_write_lat_2 500"][0] > 20000       # the instrumented sum, no more
    assert counts["rdma_write_lat_2 5000 failed 1"][0] == 0
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"status": "ok", "resolved": "{\\"data_plane\\": \\"compiled\\"}"}\n')
    job = {"label": "rdma_write_lat_2 500", "rows": str(rows), "plane": "compiled"}
    assert ipo.job_failure(job, counts) is None
    assert ipo.job_failure({**job, "plane": "pyverbs"}, counts) == \
        "data_plane=pyverbs ran as compiled"
    assert ipo.job_failure({**job, "label": "rdma_write_lat_2 5000"}, counts) == \
        "netbench exited 1"
    assert "stopped before it" in ipo.job_failure({**job, "label": "rdma_read_lat_2 1"},
                                                   counts)


def test_only_selects_a_whole_name_alone_and_a_part_by_substring(ipo):
    names = ["rdma_write_lat_2", "rdma_write_lat_2_pyverbs", "rdma_read_lat_2"]
    assert [n for n in names if ipo.selected(n, ["rdma_write_lat_2"], names)] == \
        ["rdma_write_lat_2"]
    assert [n for n in names if ipo.selected(n, ["lat_2"], names)] == names
    assert all(ipo.selected(n, [], names) for n in names)


def _crosscheck():
    spec = importlib.util.spec_from_file_location("rdma_vs_perftest",
                                                  ROOT / "bench" / "rdma_vs_perftest.py")
    crosscheck = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(crosscheck)
    return crosscheck


def test_the_vm_stage_names_points_that_exist(ipo):
    """CI's VM stage selects points by name (in-vm.sh): a renamed point must fail here, not
    silently leave the gate with nothing to judge."""
    import re
    text = (ROOT / "tools" / "softroce" / "in-vm.sh").read_text()
    counted = re.search(r"--only (\S+)", text).group(1).split(",")
    assert counted and set(counted) <= {p[0] for p in ipo.RDMA_POINTS}
    crosscheck = _crosscheck()
    timed = re.search(r"--points (\S+)", text).group(1).strip('"').split(",")
    assert timed and set(timed) <= {p[0] for p in crosscheck.POINTS}
    assert not any("lat" in t for t in timed)      # latency is judged by the counts there
    assert {"rdma_write_lat_2", "rdma_read_lat_2"} <= set(counted)


def test_the_vm_stage_gates_timing_only_off_tcg_and_over_enough_rounds():
    """Under TCG one pair's ratio moves 0.5-2.2 between boots while one boot's rounds agree:
    the timed cross-check there is shown, never gated; elsewhere it is gated over rounds
    enough for its interval to bear a verdict."""
    import re
    text = (ROOT / "tools" / "softroce" / "in-vm.sh").read_text()
    tcg, other = text.split('= tcg ]; then', 1)[1].split("\nelse\n", 1)
    other = other.split("\nfi\n", 1)[0]
    calls = [re.sub(r"\\\n\s*", " ", b).split("rdma_vs_perftest.py", 1)[1].split("||")[0]
             for b in (tcg, other)]
    assert "--gate" not in calls[0] and "shown, not gated" in tcg, calls[0]
    assert "--gate" in calls[1], calls[1]
    rounds = int(re.search(r"--rounds (\d+)", calls[1]).group(1))
    assert rounds >= _crosscheck().MIN_GATE_ROUNDS


def test_a_timing_gate_never_rests_on_too_few_rounds():
    """Two rounds that happen to agree (a fresh clone's VM stage: write_bw_4k 0.838, 0.840)
    make a tight interval that says nothing of the noise between boots: shown, not a MISS.
    Five rounds clearly below the target are a MISS; five around it are within noise."""
    judge = _crosscheck().judge
    two = judge([0.837, 0.840], "bw", gate=True)
    assert not two["miss"] and not two["gated"]
    assert "too few rounds to gate (2 < 5)" in two["verdict"], two
    five = judge([0.70, 0.72, 0.69, 0.71, 0.73], "bw", gate=True)
    assert five["miss"] and five["gated"] and five["verdict"] == "MISS", five
    assert judge([0.85, 0.95, 0.88, 0.93, 0.86], "bw", gate=True)["verdict"] == "within noise"
    assert judge([1.01, 0.98, 1.02, 0.97, 1.00], "bw", gate=True)["verdict"] == "ok"
    slow = judge([1.40, 1.45, 1.38, 1.50, 1.42], "lat", gate=True)      # latency: lower is
    assert slow["miss"] and slow["verdict"] == "MISS", slow              # better
    shown = judge([0.70, 0.72, 0.69, 0.71, 0.73], "bw", gate=False)
    assert not shown["miss"] and "shown, not gated: no --gate" in shown["verdict"], shown


def test_its_rows_import_into_a_store(ipo, tmp_path):
    """The rows it writes are what `netbench import` (the VM stage's last step) accepts."""
    from datetime import UTC, datetime

    from netbench.store import JsonlStore
    run_id = "0123456789ab"
    when = datetime.now(UTC)
    rows = [ipo.row(run_id, when, "rdma.write_lat", {"msg_size": 2, "data_plane": "compiled"},
                    1167.0, "round trip of 2 B", "instructions", transport="rdma",
                    device="rxe0"),
            ipo.row(run_id, when, "ref.ib_write_lat", {"point": "rdma_write_lat_2"}, 1853.0,
                    "round trip of 2 B", "instructions", transport="rdma", device="rxe0")]
    path = tmp_path / "instructions.jsonl"
    JsonlStore(path).write_run(path, rows)
    proc = subprocess.run([sys.executable, "-m", "netbench", "import", str(path), "--results",
                           str(tmp_path / "results")], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    from netbench.store import ResultStore
    back = ResultStore(tmp_path / "results").read()
    assert sorted(back["value"]) == [1167.0, 1853.0]
    assert set(back["metric"]) == {"instr_per_op"}


def test_only_that_names_no_point_lists_them_and_exits_2(tmp_path):
    if not shutil.which("valgrind"):
        pytest.skip("needs valgrind (make test installs it)")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--only", "rdma_wrte_lat",
                           "--rdma-device", "rxe0", "--rdma-addr", "10.0.0.1",
                           "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stderr
    assert "names no point" in proc.stderr and "rdma_write_lat_2" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_chained_points_run_whole_chains_and_pyverbs_points_warm_up_first(ipo, tmp_path):
    """perftest refuses iterations that are not a multiple of its post list; a whole-run
    point's first run, which pays first use, is counted apart and never in the slope."""
    points = [p for p in ipo.RDMA_POINTS
              if p[0] in ("rdma_write_rate_64_post16", "rdma_write_lat_2_pyverbs")]
    jobs = ipo.rdma_jobs(points, 0.3, "rxe0", 1, tmp_path)
    chained = [j for j in jobs if j["point"] == "rdma_write_rate_64_post16"]
    assert [j["n"] % 16 for j in chained] == [0, 0] and chained[0]["n"] < chained[1]["n"]
    post16 = next(p for p in points if p[0] == "rdma_write_rate_64_post16")
    assert post16[3]["cq_mod"] == 16 and "-Q" in post16[6]
    pyverbs = [j for j in jobs if j["point"] == "rdma_write_lat_2_pyverbs"]
    assert [j["warmup"] for j in pyverbs] == [True, False, False]
    assert pyverbs[0]["label"].startswith("warm-up ") and pyverbs[0]["rows"] != \
        pyverbs[1]["rows"]
    assert all(j["whole"] for j in pyverbs) and not any(j["whole"] for j in chained)
