"""The GPU feed family on a host without CUDA: the DataLoader pipeline measured for real with
device=cpu, the copies skipped with CUDA's own reason, and a GPU row's environment resolved
from a sysfs tree captured in the soft-RoCE VM."""

import json
import os

import pandas as pd
import pytest
from conftest import assert_clean_error, netbench

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="CPU-only behaviour")


def test_loader_feed_without_a_gpu_measures_the_loader_alone(tmp_path):
    proc = netbench("run", "gpu.loader_feed", "-p", "device=cpu", "-p", "workers=0,2",
                    "-p", "batch_size=16", "-p", "sample_shape=3x64x64", "-p", "batches=12",
                    "-p", "warmup=2", "--results", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = pd.read_parquet(tmp_path)
    ok = rows[rows.status == "ok"]
    assert sorted(ok.metric.unique()) == ["bw", "samples_per_s"]   # no link: nothing to divide
    for _, case in ok.groupby("case_index"):
        values = dict(zip(case.metric, case.value))
        # GB/s delivered is samples/s x bytes per sample: the two are one measurement.
        assert values["bw"] == pytest.approx(values["samples_per_s"] * 3 * 64 * 64 / 1e9)
        bw = case[case.metric == "bw"].iloc[0]
        assert len(bw.samples) == 12 and all(s > 0 for s in bw.samples)
        assert "device=cpu" in bw.reason and bw.transport == "memory"
        # 12 timed batches from 2 workers x prefetch 2 is a few bursts, and it says so
        bursty = json.loads(bw.params)["workers"] == 2
        assert ("raise batches to >= 16" in bw.reason) == bursty
    assert sorted(json.loads(p)["workers"] for p in ok.params.unique()) == [0, 2]


def test_copies_without_cuda_are_skipped_with_the_reason(tmp_path):
    proc = netbench("run", "gpu.h2d", "--results", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    row = pd.read_parquet(tmp_path).iloc[0]
    assert row.status == "skipped"
    assert "no GPU" in row.reason or "CPU-only build" in row.reason


def test_with_a_gpu_on_the_bus_but_no_cuda_the_skip_names_the_build(tmp_path):
    """A captured tree with display controllers: the cheap check passes, CUDA says no."""
    from test_linkpath import TREE
    proc = netbench("run", "gpu.d2h", "--results", str(tmp_path),
                    env={**os.environ, "NETBENCH_SYSFS_ROOT": str(TREE)})
    assert proc.returncode == 0, proc.stderr
    row = pd.read_parquet(tmp_path).iloc[0]
    assert row.status == "skipped" and "CPU-only build" in row.reason, row.reason


@pytest.mark.parametrize("args,needle", [
    (["-p", "sample_shape=3x0x2"], "sample_shape"),
    (["-p", "dtype=float8"], "dtype"),
    (["-p", "device=tpu"], "device"),
])
def test_bad_loader_params_are_clean_errors(args, needle):
    assert_clean_error(netbench("run", "gpu.loader_feed", *args), needle)


def test_gpu_rows_name_the_gpu_and_its_link():
    from test_linkpath import TREE

    from netbench.benchmarks.gpu_feed import link_bound
    from netbench.env.probe import probe
    from netbench.fingerprint import Fingerprint

    env = probe(TREE)
    assert [g["pci_address"] for g in env["gpus"]] == ["0000:01:00.0", "0000:05:00.0"]
    bound, why = link_bound(env, "0000:01:00.0")
    assert bound == pytest.approx(2.5 * 0.8 / 8) and why == ""
    assert link_bound(env, "0000:99:00.0")[0] is None
    assert "not found" in link_bound(env, "0000:99:00.0")[1]
    summary = Fingerprint(env).gpu_summary("0000:01:00.0")
    assert summary.startswith("0000:01:00.0:") and "Gen1 2.5 GT/s x1" in summary


def test_a_feed_larger_than_host_memory_is_refused_before_allocating(tmp_path):
    """No worker is started and nothing allocated: the error names the size and what is free."""
    proc = netbench("run", "gpu.loader_feed", "-p", "device=cpu", "-p", "sample_shape=1024x1024",
                    "-p", "dtype=float32", "-p", "batch_size=100000", "--results",
                    str(tmp_path))
    assert proc.returncode != 0
    row = pd.read_parquet(tmp_path).iloc[0]
    assert row.status == "failed" and "of host memory" in row.reason and "available" in row.reason


def test_numa_note_when_the_process_may_run_off_the_gpus_node(tmp_path):
    from netbench.benchmarks.gpu_feed import _cpulist, numa_note

    assert _cpulist("0-3,8\n") == {0, 1, 2, 3, 8}
    mine = sorted(os.sched_getaffinity(0))
    env = {"gpus": [{"pci_address": "0000:3b:00.0", "numa_node": 1}]}
    nodes = tmp_path / "node"
    (nodes / "node1").mkdir(parents=True)
    (nodes / "node1" / "cpulist").write_text(f"{mine[0]}\n")      # the GPU's node: one CPU
    note = numa_note(env, "0000:3b:00.0", str(nodes))
    if len(mine) > 1:
        assert "numactl --cpunodebind=1 --membind=1" in note
    (nodes / "node1" / "cpulist").write_text(",".join(map(str, mine)) + "\n")
    assert numa_note(env, "0000:3b:00.0", str(nodes)) == ""       # already local
    assert numa_note({"gpus": []}, "0000:3b:00.0", str(nodes)) == ""


class _Event:
    """Stands in for a CUDA event (no GPU here): done or not, as query() answers."""

    def __init__(self, done: bool) -> None:
        self.done = done

    def query(self) -> bool:
        return self.done


def test_the_link_is_read_again_while_the_copies_run(tmp_path):
    """An idle GPU's link reads Gen1; the copy benchmarks judge the link as it runs under load
    (read once the first copy is done and before the last is), and say when it stays low."""
    import shutil
    from pathlib import Path

    from netbench.benchmarks.gpu_feed import LinkUnderLoad
    from netbench.env.probe import probe

    tree = tmp_path / "tree"
    shutil.copytree(Path(__file__).parent / "fixtures/sysfs/qemu-q35-pcie", tree, symlinks=True)
    ends = [Path(str((tree / "bus/pci/devices" / a).resolve()))
            for a in ("0000:01:00.0", "0000:00:03.0")]

    def link(speed: str) -> None:
        for end in ends:
            for attr, value in (("max_link_speed", "16.0 GT/s PCIe"), ("max_link_width", "16"),
                                ("current_link_speed", speed), ("current_link_width", "16")):
                (end / attr).write_text(value + "\n")

    link("2.5 GT/s PCIe")                      # at rest, as the probe saw it
    env = probe(tree)
    watch = LinkUnderLoad(env, "0000:01:00.0")
    watch(_Event(True), _Event(False))
    assert "DOWNGRADED" in watch.note and "4.00 of 31.51 GB/s" in watch.note
    link("16.0 GT/s PCIe")                     # trained up under load: nothing to say
    watch = LinkUnderLoad(env, "0000:01:00.0")
    watch(_Event(True), _Event(False))
    assert watch.note == ""
    link("2.5 GT/s PCIe")                      # copies already over: no reading, no claim
    watch = LinkUnderLoad(env, "0000:01:00.0")
    watch(_Event(True), _Event(True))
    assert watch.note == ""


def test_loader_feed_on_a_cpu_only_torch_says_so_up_front(tmp_path):
    """gpu.loader_feed's default (device=cuda) is not "ready" in list or --dry-run on a
    CPU-only torch: each says why, and that device=cpu runs; a run skips before importing."""
    if torch.version.cuda is not None or getattr(torch.version, "hip", None) is not None:
        pytest.skip("a GPU build of torch")
    listed = json.loads(netbench("list", "--json").stdout)
    feed = next(b for b in listed["benchmarks"] if b["name"] == "gpu.loader_feed")
    assert feed["available"] is False and "CPU-only build" in feed["reason"]
    assert "device=cpu runs" in feed["reason"]
    assert "CPU-only build" in next(b["reason"] for b in listed["benchmarks"]
                                    if b["name"] == "gpu.h2d")
    plan = netbench("run", "gpu.loader_feed", "-p", "device=cuda,cpu", "--dry-run")
    assert plan.returncode == 0, plan.stderr
    cuda, cpu = plan.stdout.split("[2]")
    assert "would be skipped: torch" in cuda and "CPU-only build" in cuda
    assert "would be skipped" not in cpu
