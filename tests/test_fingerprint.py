"""The fingerprint's record: what a reader gets of a real, an old and a forged one."""

import json

from conftest import ROOT

from netbench.env.probe import probe
from netbench.fingerprint import Fingerprint, Nic, RdmaDevice, host_facts, with_captured

FIXTURE = ROOT / "tests" / "fixtures" / "sysfs" / "firecracker-h200"


def test_a_probed_fingerprint_reads_back_the_same_from_its_stored_text():
    env = probe(FIXTURE)
    live, stored = Fingerprint(env), Fingerprint(json.dumps(env, sort_keys=True))
    assert live.nics == stored.nics and live.gpus == stored.gpus and stored.gpus
    assert [n.as_raw() for n in stored.nics] == env["nics"]          # written as it reads
    assert stored.gpu_summary(stored.gpus[0].pci_address).startswith("0000:00:06.0: NVIDIA H200")
    assert stored.pcie_path("0000:00:06.0").bottleneck_gbytes > 60
    assert stored.cpu_cores == env["cpu_cores"] and stored.versions["python"]


def test_an_old_or_forged_fingerprint_reads_as_unknown_never_raises():
    forged = {"nics": [{"name": "eth0", "speed_mbps": "fast"}, 7, None],
              "rdma_devices": {"mlx5_0": 1}, "cpu_cores": "8", "versions": ["x"],
              "cpu_cache": {"bytes": -1}, "pcie_paths": [{"hops": "no"}]}
    env = Fingerprint(forged)
    assert [n.name for n in env.nics] == ["eth0"] and env.nics[0].speed_mbps == "fast"
    assert env.line_rate_gbps("eth0") is None            # not a number: no rate
    assert env.rdma_devices == () and env.cpu_cores is None and env.versions == {}
    assert env.cpu_cache is None and env.pcie_paths[0].hops == ()
    for text in ("", "not json", "[1, 2]", b'{"host": 3}', None, "[" * 100000):
        assert Fingerprint(text).host is None and Fingerprint(text).facts() == {}


def test_the_link_rate_of_an_rdma_port_and_of_an_interface():
    env = Fingerprint({"rdma_devices": [RdmaDevice.of({"name": "mlx5_0", "ports": [
        {"port": 1, "rate": "200 Gb/sec (4X HDR)", "netdev": "ens1"}]}).as_raw()],
        "nics": [Nic(name="ens1", speed_mbps=100000).as_raw()]})
    assert env.line_rate_gbps("mlx5_0:1") == 200.0 and env.line_rate_gbps("mlx5_0") == 200.0
    assert env.line_rate_gbps("ens1") == 100.0 and env.line_rate_gbps("mlx5_0:2") is None
    assert env.rdma_netdevs() == {"mlx5_0:1": "ens1"}
    assert env.facts({"mlx5_0"})["mlx5_0:1 rate"] == "200 Gb/sec (4X HDR)"
    assert "ens1 speed_mbps" not in env.facts({"mlx5_0"})        # not a device the cases used


def test_a_captures_host_facts_replace_the_readers():
    captured = probe(FIXTURE)
    facts = host_facts({**captured, "kernel": "6.1-captured",
                        "nics": [Nic(name="eth0", firmware="fw-9").as_raw()]})
    changed = with_captured(captured, json.loads(json.dumps(facts)))
    assert changed["kernel"] == "6.1-captured" and changed["captured_host_facts"] is True
    assert Fingerprint({**captured, **changed}).nic("eth0").firmware == "fw-9"
    assert with_captured(captured, None) == {"captured_host_facts": False}


def test_a_stored_infinity_or_an_empty_text_reads_as_it_is_never_raises():
    env = Fingerprint('{"memory_bytes": 1e400, "cpu_cache": {"bytes": Infinity}, "os": "",'
                      ' "cpu_cores": NaN}')
    assert env.memory_bytes is None and env.cpu_cache is None and env.cpu_cores is None
    assert env.os == "" and env.kernel is None          # "" as stored; missing is None
