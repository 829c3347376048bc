"""bench/gpu_check.py (make gpu-check) never reads green where it checked nothing: on this
GPU-less host it runs for real, exits 2 and names every check with why it could not run; its
judging of rows, on rows netbench really writes (skipped ones from a run here, ok ones an H200
stored, a failed one from a run here), counts a skip as not checked and a failure as a miss."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from conftest import H200_RESULTS, ROOT

SCRIPT = ROOT / "bench" / "gpu_check.py"


@pytest.fixture(scope="module")
def gc():
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module         # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def _netbench_rows(tmp: Path, *args: str) -> list[dict]:
    proc = subprocess.run([sys.executable, "-m", "netbench", "run", *args, "--json",
                           "--results", str(tmp)], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def skipped_rows(tmp_path_factory, gc) -> list[dict]:
    """gpu.h2d as netbench runs it here: without a CUDA device, a skipped row and its reason."""
    if gc.cuda_here()[0] is not None:
        pytest.skip("a CUDA device is here: gpu.h2d would run, not skip")
    rows = _netbench_rows(tmp_path_factory.mktemp("h2d"), "gpu.h2d", "-p", "msg_size=64M")
    assert [r["status"] for r in rows] == ["skipped"] and rows[0]["reason"]
    return rows


@pytest.fixture(scope="module")
def failed_rows(tmp_path_factory) -> list[dict]:
    """A real failed row: mem.copy refuses buffers larger than the host's memory."""
    rows = _netbench_rows(tmp_path_factory.mktemp("mem"), "mem.copy", "-p", "msg_size=16G")
    assert [r["status"] for r in rows] == ["failed"]
    return rows


def _h200_rows(benchmark: str, case: int | None = None) -> list[dict]:
    """Rows an H200 stored (read straight from the run files: the fixture stays untouched)."""
    rows = [r for f in sorted(H200_RESULTS.glob("2*.parquet"))
            for r in pq.read_table(f).to_pylist() if r["benchmark"] == benchmark]
    first = rows[0]["run_id"]            # one run: case indexes are per run
    rows = [r for r in rows if r["run_id"] == first]
    return [r for r in rows if case is None or r["case_index"] == case]


# --- on this host, for real ----------------------------------------------------------------------

def test_here_it_exits_2_and_names_every_check_it_could_not_run(gc):
    if gc.cuda_here()[0] is not None:
        pytest.skip("a CUDA device is here: the checks would run")
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    names = [n for step in gc.PLAN.values() for n in step]
    for name in names:
        line = re.search(rf"^NOT CHECKED  {re.escape(name)}: (.+)$", proc.stdout, re.M)
        assert line and re.search(r"torch|CUDA", line.group(1)), name
        assert f"NOT CHECKED {name}: " in proc.stderr
    assert "nccl-tests' all_reduce_perf" in proc.stdout or "all_reduce_perf: found" in proc.stdout
    assert not re.search(r"^ok\b|PASS", proc.stdout, re.M | re.I)
    assert proc.stdout.rstrip().splitlines()[-1] == \
        f"gpu-check: 0 ok, 0 missed, {len(names)} not checked"
    assert "Traceback" not in proc.stderr


def test_accepting_every_check_cannot_pass_a_run_that_checked_nothing(gc):
    if gc.cuda_here()[0] is not None:
        pytest.skip("a CUDA device is here: the checks would run")
    proc = subprocess.run([sys.executable, str(SCRIPT), "--allow-unchecked", "*,nosuch.*"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    checks = sum(len(step) for step in gc.PLAN.values())
    assert proc.returncode == 2
    assert proc.stdout.rstrip().endswith(f"not checked ({checks} accepted by --allow-unchecked)")
    assert "'nosuch.*' names no check" in proc.stderr


def test_without_torch_every_check_says_no_torch(gc, monkeypatch, capsys):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "torch" else real(name, *a))
    assert gc.main([]) == 2
    out = capsys.readouterr()
    assert "torch is not installed" in out.err
    assert out.out.count("NOT CHECKED") == len([n for s in gc.PLAN.values() for n in s])
    assert all(line.split(": ", 1)[1].startswith("no torch")
               for line in out.out.splitlines() if line.startswith("NOT CHECKED"))


def test_make_passes_allow_unchecked():
    proc = subprocess.run(["make", "-n", "gpu-check", "ALLOW_UNCHECKED=nccl.*,rdma.*"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert "bench/gpu_check.py --allow-unchecked 'nccl.*,rdma.*'" in proc.stdout


# --- judging real rows ---------------------------------------------------------------------------

def test_a_skipped_row_is_not_checked_with_its_reason(gc, skipped_rows):
    reason = skipped_rows[0]["reason"]
    assert gc.judge_rows(skipped_rows) == (gc.UNCHECKED, f"1 of 1 case(s) skipped: {reason}")
    # a reference figure beside a skipped row is no comparison either
    outcome, detail = gc.judge_reference(skipped_rows, gc.Reference(55.0, "nvbandwidth"))
    assert outcome == gc.UNCHECKED and reason in detail
    assert gc.ran_clean(skipped_rows)[0] == gc.UNCHECKED


def test_one_skipped_case_among_ok_ones_leaves_the_check_unchecked(gc, skipped_rows):
    ok = _h200_rows("gpu.h2d", 0)
    mixed = ok + [{**skipped_rows[0], "case_index": 1}]
    outcome, detail = gc.judge_rows(mixed)
    assert outcome == gc.UNCHECKED and detail.startswith("1 of 2 case(s) skipped")


def test_a_failed_row_is_a_miss(gc, failed_rows, skipped_rows):
    reason = failed_rows[0]["reason"]
    assert gc.judge_rows(failed_rows) == (gc.MISS, f"1 of 1 case(s) failed: {reason}")
    both = skipped_rows + [{**failed_rows[0], "case_index": 1}]
    assert gc.judge_rows(both)[0] == gc.MISS              # a failure outranks a skip
    assert gc.judge_rows([])[0] == gc.MISS                # netbench gave no answer


def test_ok_rows_beside_an_independent_reference(gc):
    rows = _h200_rows("gpu.h2d", 0)                      # 64 MiB pinned: bw 55.37 GB/s
    ref = gc.Reference(55.40, "nvbandwidth host_to_device_memcpy_ce (GPU 0)")
    outcome, detail = gc.judge_reference(rows, ref)
    assert outcome == gc.OK
    assert "55.37 GB/s vs 55.40 GB/s by nvbandwidth host_to_device_memcpy_ce" in detail
    assert "ratio 0.999" in detail and "link efficiency 0.88" in detail
    low = gc.judge_reference(rows, gc.Reference(62.0, "x"))
    high = gc.judge_reference(rows, gc.Reference(45.0, "x"))
    assert low[0] == gc.MISS and "reads low" in low[1]
    assert high[0] == gc.MISS and "reads high" in high[1]
    none = gc.judge_reference(rows, gc.Reference(None, "", "the host-clock copy failed"))
    assert none[0] == gc.UNCHECKED and "no independent reference" in none[1] \
        and "55.37" in none[1]
    clean = gc.ran_clean(rows)
    assert clean[0] == gc.OK and clean[1].endswith("no independent reference")


def test_all_reduce_without_nccl_tests_is_never_a_pass(gc, skipped_rows):
    rows = _h200_rows("coll.all_reduce")
    busbw = {r["msg_size"]: r["value"] for r in rows if r["metric"] == "busbw"}
    why = "nccl-tests' all_reduce_perf is not on PATH"
    outcome, detail = gc.judge_all_reduce(rows, {}, why)
    assert outcome == gc.UNCHECKED and detail.startswith(why)
    assert gc.judge_all_reduce(rows, busbw, "")[0] == gc.OK
    assert gc.judge_all_reduce(rows, {s: 2 * v for s, v in busbw.items()}, "")[0] == gc.MISS
    one = dict(list(busbw.items())[:1])                   # a size it has no figure for
    assert gc.judge_all_reduce(rows, one, "")[0] == gc.UNCHECKED
    assert gc.judge_all_reduce(skipped_rows, busbw, "")[0] == gc.UNCHECKED


# --- the verdict ---------------------------------------------------------------------------------

def _report(gc, outcomes: dict[str, str], allowed: list[str] | None = None):
    report = gc.Report(allowed)
    for name, outcome in outcomes.items():
        report.add(name, outcome, "detail", echo=False)
    return report


def test_exit_0_only_when_every_check_ran_and_passed(gc, capsys):
    ok = _report(gc, {"feed.d2d": gc.OK, "feed.bidir": gc.OK})
    assert ok.finish() == 0
    assert capsys.readouterr().out.rstrip().endswith("gpu-check: 2 ok, 0 missed, 0 not checked")
    assert _report(gc, {"feed.d2d": gc.OK, "feed.bidir": gc.UNCHECKED}).exit_code() == 2
    assert _report(gc, {"feed.d2d": gc.MISS, "feed.bidir": gc.UNCHECKED}).exit_code() == 1
    accepted = _report(gc, {"feed.d2d": gc.OK, "nccl.reduce": gc.UNCHECKED}, ["nccl.*"])
    assert accepted.exit_code() == 0
    assert accepted.summary().endswith("1 not checked (1 accepted by --allow-unchecked)")
    assert _report(gc, {"nccl.reduce": gc.UNCHECKED}, ["*"]).exit_code() == 2


def test_nvbandwidth_gives_gpu_0_not_the_sum(gc):
    text = """nvbandwidth Version: v0.8
Running host_to_device_memcpy_ce.
memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)
           0         1
 0     55.23     54.10

SUM host_to_device_memcpy_ce 109.33

Running device_to_host_memcpy_ce.
memcpy CE CPU(row) <- GPU(column) bandwidth (GB/s)
           0         1
 0     N/A       54.90

SUM device_to_host_memcpy_ce 54.90
"""
    assert gc.parse_nvbandwidth(text) == {"h2d": 55.23}
    assert gc.parse_nvbandwidth(text, gpu=1) == {"h2d": 54.10, "d2h": 54.90}


def test_link_agreement(gc):
    smi = [{"pci.bus_id": "00000000:3B:00.0", "pcie.link.gen.current": "5",
            "pcie.link.width.current": "16"}]
    assert gc.judge_link("0000:3b:00.0", 32.0, 16, smi)[0] == gc.OK
    assert gc.judge_link("0000:3b:00.0", 16.0, 16, smi)[0] == gc.MISS
    assert gc.judge_link("0000:3b:00.0", None, 16, smi)[0] == gc.UNCHECKED
    assert gc.judge_link("0000:3c:00.0", 32.0, 16, smi)[0] == gc.UNCHECKED


# --- the GPU path, on rows that did not run -------------------------------------------------------

class _Cuda:
    """What run_steps asks of torch.cuda, for one GPU at 0000:3b:00.0."""

    def device_count(self) -> int:
        return 1

    def get_device_name(self, index: int) -> str:
        return "a stand-in GPU"

    def get_device_properties(self, device):
        return type("Props", (), {"pci_bus_id": 0x3B, "pci_domain_id": 0, "pci_device_id": 0})

    def synchronize(self) -> None:
        pass


class _Torch:
    __version__ = "0+stand-in"
    uint8 = "uint8"
    cuda = _Cuda()

    def device(self, kind: str, index: int) -> str:
        return f"{kind}:{index}"

    def empty(self, *args, **kwargs):
        return type("Tensor", (), {"copy_": lambda self, src, non_blocking=False: None})()


@pytest.mark.parametrize("kind", ["skipped", "failed"])
def test_on_a_gpu_host_rows_that_did_not_run_never_read_ok(gc, monkeypatch, capsys, kind,
                                                           skipped_rows, failed_rows):
    """Every netbench row skipped (or failed) on a host with a GPU: the old script counted
    these as passing. Now each is NOT CHECKED with the row's reason (or a MISS); only the
    probe, which did find the GPU, is ok."""
    row = (skipped_rows if kind == "skipped" else failed_rows)[0]

    def rows(args, timeout=120, launcher=None):
        return [{**row, "benchmark": args[0], "family": args[0].split(".")[0]}]

    def probe(cmd, **kwargs):
        assert cmd[1:4] == ["-m", "netbench", "probe"], cmd
        out = json.dumps({"gpus": [{"pci_address": "0000:3b:00.0"}]}) if "--json" in cmd \
            else "GPU 0000:3b:00.0"
        return subprocess.CompletedProcess(cmd, 0, out, "")

    monkeypatch.setattr(gc, "netbench_rows", rows)
    monkeypatch.setattr(gc, "suite_rows", lambda suite, results: (rows(["gpu.h2d"]), ""))
    monkeypatch.setattr(gc.subprocess, "run", probe)
    monkeypatch.setattr(gc.time, "sleep", lambda s: None)
    report = gc.Report()
    gc.run_steps(report, _Torch(), None, budget=60)
    assert report.finish() == (2 if kind == "skipped" else 1)
    out = capsys.readouterr().out
    assert {c.name for c in report.checks.values()} == {n for s in gc.PLAN.values() for n in s}
    assert [c.name for c in report.checks.values() if c.outcome == gc.OK] == ["probe.gpus"]
    expected = gc.UNCHECKED if kind == "skipped" else gc.MISS
    for name in ("feed.h2d.64M", "feed.d2d", "link.h2d_stream", "nccl.all_reduce",
                 "suite.gpu_acceptance", "suite.ci", "sweep.h2d"):
        check = report.checks[name]
        assert check.outcome == expected and row["reason"] in check.detail, check
    assert "one GPU" in report.checks["nccl.send_recv"].detail
    assert report.checks["link.vs_nvidia_smi"].outcome == gc.UNCHECKED    # no nvidia-smi here
    assert out.rstrip().splitlines()[-1].startswith("gpu-check: 1 ok, ")
