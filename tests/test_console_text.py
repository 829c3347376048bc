"""What the console prints, read as a new user reads it: numbers plainly, a reason said once,
a size with its unit, a resume hint that names the command, and bad input as usage errors."""

import json
import os
import re

from conftest import assert_clean_error, netbench


def test_list_prints_bounds_plainly_and_sizes_with_units():
    proc = netbench("list")
    assert proc.returncode == 0, proc.stderr
    assert not re.search(r"\de[+-]\d", proc.stdout), re.findall(r".*\de[+-]\d.*", proc.stdout)
    assert "<= 1000000" in proc.stdout                     # iterations: a plain number
    assert "<= 1048576" in proc.stdout                     # batch_size: 1 << 20, plainly
    assert "<= 16G" in proc.stdout                         # mem.copy's size bound: a size


def _virtio_tree(root):
    """A sysfs tree as a KVM guest's: eth0 a virtio NIC on PCI function 0000:00:03.0, eth1 a
    virtio-mmio NIC on no PCI bus (Firecracker)."""
    pci = root / "devices" / "pci0000:00" / "0000:00:03.0"
    mmio = root / "devices" / "platform" / "LNRO0005:00"
    for parent, virtio, name in ((pci, "virtio2", "eth0"), (mmio, "virtio0", "eth1")):
        dev = parent / virtio
        (dev / "net" / name).mkdir(parents=True)
        (dev / "vendor").write_text("0x1af4\n")
        (dev / "device").write_text("0x0001\n")
        (dev / "net" / name / "device").symlink_to(f"../../../{virtio}")
        (dev / "net" / name / "mtu").write_text("1500\n")
        (dev / "net" / name / "operstate").write_text("up\n")
    (pci / "vendor").write_text("0x1af4\n")
    (pci / "device").write_text("0x1000\n")
    (root / "class" / "net").mkdir(parents=True)
    (root / "bus").mkdir()
    (root / "class" / "net" / "eth0").symlink_to(
        "../../devices/pci0000:00/0000:00:03.0/virtio2/net/eth0")
    (root / "class" / "net" / "eth1").symlink_to(
        "../../devices/platform/LNRO0005:00/virtio0/net/eth1")


def test_probe_names_a_virtio_nics_pci_function_not_the_virtio_device(tmp_path):
    _virtio_tree(tmp_path)
    nics = {n["name"]: n for n in json.loads(netbench("probe", "--json", "--sysfs-root",
                                                      str(tmp_path)).stdout)["nics"]}
    assert nics["eth0"]["pci_address"] == "0000:00:03.0"
    assert "pci_address" not in nics["eth1"]                 # virtio-mmio: on no PCI bus
    text = netbench("probe", "--sysfs-root", str(tmp_path)).stdout
    assert "virtio2" not in text and "virtio0" not in text
    assert "pci_address 0000:00:03.0" in text


def test_resume_with_changed_params_is_a_usage_error_naming_the_change(tmp_path):
    res = str(tmp_path / "res")
    run = netbench("run", "mem.copy", "-p", "msg_size=64K,128K", "-p", "iterations=2",
                   "--results", res, "--json")
    assert run.returncode == 0, run.stderr
    run_id = json.loads(run.stdout)[0]["run_id"]
    proc = netbench("run", "mem.copy", "-p", "msg_size=64K,256K", "-p", "iterations=2",
                    "--results", res, "--resume", run_id)
    assert proc.returncode == 2, proc.stderr
    assert_clean_error(proc, "the suite changed", "case 2 (mem.copy): msg_size was 128K, "
                       "now 256K")
    assert "now 'mem.copy'" not in proc.stderr


def test_history_names_both_changes_and_lists_one_run_metrics_once(tmp_path):
    import pandas as pd

    res = str(tmp_path / "res")
    for sizes in ("1M,2M,4M", "1M", "1M"):
        assert netbench("run", "mem.copy", "-p", f"msg_size={sizes}", "-p", "iterations=2",
                        "--results", res).returncode == 0
    proc = netbench("history", "--results", res, "--metric", "bw")
    assert proc.returncode in (0, 1), proc.stderr
    lines = proc.stdout.splitlines()
    header = next(line for line in lines if line.startswith("benchmark"))
    assert "vs window" in header and "vs first" in header
    row = next(line for line in lines if line.startswith("mem.copy") and "1M" in line)
    rows = pd.read_parquet(res).sort_values("started_at")
    values = rows[(rows.metric == "bw") & (rows.msg_size == 1 << 20)]["value"].tolist()
    assert f"{(values[-1] - values[0]) / values[0]:+.1%}" in row, row
    once = next(line for line in lines if "measured in one run only" in line)
    assert once.endswith("mem.copy bw (2 cases)"), once


def test_accept_names_sizes_with_units_tells_cases_apart_and_says_a_lost_rate_once(tmp_path):
    res = str(tmp_path / "res")
    assert netbench("run", "tcp.stream", "-p", "msg_size=64K", "-p", "streams=1,2", "-p",
                    "duration=0.3", "-p", "warmup=0", "--results", res).returncode == 0
    spec = tmp_path / "spec.toml"
    spec.write_text('[[check]]\nname = "near line rate"\nbenchmark = "tcp.stream"\n'
                    'metric = "goodput"\nmin_line_rate = 0.9\n'
                    '[[check]]\nname = "some goodput"\nbenchmark = "tcp.stream"\n'
                    'metric = "goodput"\nmin = 0.001\n')
    xml = tmp_path / "accept.xml"
    proc = netbench("accept", str(spec), "--results", res, "--junit", str(xml))
    out = proc.stdout
    assert "65536" not in out, out
    assert "msg_size=64K streams=1: " in out and "msg_size=64K streams=2: " in out, out
    assert " Gbit/s" in out.split("some goodput", 1)[1].splitlines()[0]
    # loopback has no probed line rate: said once for the check, not once per case
    for line in out.splitlines():
        assert line.count("line rate unknown") <= 1, line
    assert "line rate unknown for 2 of 2 case(s)" in out, out
    # JUnit XML, read by CI, in the console's words: sizes with units, cases told apart.
    from xml.etree import ElementTree

    cases = ElementTree.parse(xml).getroot().findall("testcase")
    failure = cases[0].find("failure")
    assert failure is not None and cases[1].find("failure") is None
    assert failure.get("message") == ("line rate unknown for 2 of 2 case(s) (set [accept] "
                                      "line_rate)"), failure.get("message")
    assert "65536" not in xml.read_text() and "msg_size=64K streams=2: " in failure.text
    assert re.search(r"msg_size=64K streams=1: [\d.]+ Gbit/s, msg_size=64K streams=2: "
                     r"[\d.]+ Gbit/s$", failure.text), failure.text


def test_a_run_says_each_skip_reason_once_whole_and_a_skipped_table_has_no_iterations(tmp_path):
    suite = tmp_path / "s.toml"
    suite.write_text('[[case]]\nbenchmark = "gpu.h2d"\nmsg_size = ["1M", "2M", "4M"]\n'
                     '[[case]]\nbenchmark = "rdma.write_bw"\nmsg_size = ["64K", "1M"]\n')
    proc = netbench("run", str(suite), "--results", str(tmp_path / "res"),
                    env={**os.environ, "CI": "true"})
    assert proc.returncode == 0, proc.stderr
    progress = [line for line in proc.stderr.splitlines() if line.lstrip().startswith("-> ")]
    assert len(progress) == 5, proc.stderr
    reasons = {line.split("-> skipped: ", 1)[1].rsplit(" (", 1)[0] for line in progress
               if "the reason given at" not in line}
    assert len(reasons) == 2, progress                     # one line each, said whole
    assert not any(r.endswith("...") for r in reasons)
    assert "the reason given at [1]" in progress[1] and "the reason given at [4]" in progress[4]
    for reason in reasons:          # live once, and once in the end-of-run list of skips
        assert proc.stderr.count(reason) == 2, reason
    table = proc.stdout.split("rdma.write_bw", 1)[1]
    assert "#iterations" not in table and "skipped" in table, proc.stdout
