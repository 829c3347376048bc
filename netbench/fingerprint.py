"""The environment fingerprint as a declared record: the one module that spells its keys.

A run's fingerprint is stored as JSON in every row (``env_json``) and in each file's footer,
and a site's hook may add facts of its own, so at run time it stays a plain dict (``Record``).
Everything that reads one does it through ``Fingerprint``: typed attributes and the few
questions readers ask (the link rate of a device, the facts whose change could move a figure,
one line naming a NIC). A stored fingerprint may be old, partial or forged: a reader gets
None or an empty tuple for what it lacks, never a KeyError or a TypeError.
(pyperf keeps its metadata the same way, in one table: ``_metadata.py``.)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, ClassVar, TypedDict


class Record(TypedDict, total=False):
    """A fingerprint as the probe writes it and every row stores it (JSON)."""

    host: str
    kernel: str
    os: str | None
    arch: str
    cpu_model: str | None
    cpu_cores: int | None
    cpu_physical_cores: int | None
    memory_bytes: int | None
    cpu_cache: dict[str, int] | None          # {"bytes", "level"}: cpu0's last-level cache
    sysfs_root: str
    nics: list[dict[str, Any]]                # Nic.as_raw()
    rdma_devices: list[dict[str, Any]]        # RdmaDevice.as_raw()
    gpus: list[dict[str, Any]]                # Gpu.as_raw()
    virtual_machine: str | None
    pcie_paths: list[dict[str, Any]]          # pcie_entry()
    versions: dict[str, str | None]
    hook_errors: list[str]                    # a site hook that raised, said per run
    read_on: str                              # a captured tree: the host that read it
    captured_host_facts: bool
    collective_env: dict[str, str]            # NCCL_*/GLOO_* settings the run had
    launcher: dict[str, Any]                  # Launcher
    resumes: list[dict[str, Any]]             # each --resume of the run
    no_counters: bool                         # run --no-counters: it read none
    softroce_error: str                       # the RDMA family could not make a device


class Launcher(TypedDict):
    name: str
    rank: int
    world_size: int
    job: str | None


class Cache(TypedDict):
    bytes: int
    level: int


def _text(value: Any) -> str | None:
    """A text as stored ("" stays ""), or None where it is none."""
    return value if isinstance(value, str) else None


def _count(value: Any) -> int | None:
    """A positive whole number, or None (a forged "8", -1 or 1e400 is no count)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value) and value > 0 and value == int(value) else None


def _objects(value: Any) -> list[Mapping[str, Any]]:
    return [v for v in value if isinstance(v, Mapping)] if isinstance(value, list) else []


@dataclass(frozen=True)
class _Part:
    """A part of the fingerprint (a NIC, an RDMA device...): read tolerantly, written with
    only the facts found (``OPTIONAL`` ones are left out when unknown, as the probe always
    has)."""

    OPTIONAL: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> Any:
        kept = {}
        for f in fields(cls):
            value = raw.get(f.name)
            kept[f.name] = cls._read(f.name, value)
        return cls(**kept)

    @classmethod
    def _read(cls, name: str, value: Any) -> Any:
        return value if isinstance(value, str | int | float | bool) or value is None else None

    def as_raw(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)
                if not (f.name in self.OPTIONAL and getattr(self, f.name) is None)}


@dataclass(frozen=True)
class Nic(_Part):
    name: str = "?"
    operstate: str | None = None
    mtu: int | None = None
    speed_mbps: int | None = None          # None when the link is down or unreadable
    virtual: bool = False
    driver: str | None = None
    pci_address: str | None = None
    model: str | None = None
    driver_version: str | None = None      # from the ethtool ioctl
    firmware: str | None = None
    bus_info: str | None = None
    OPTIONAL: ClassVar[tuple[str, ...]] = ("driver", "pci_address", "model", "driver_version",
                                           "firmware", "bus_info")
    ETHTOOL: ClassVar[tuple[str, ...]] = ("driver", "driver_version", "firmware", "bus_info")
    # What a captured tree keeps of each NIC beside it (sysfs cannot hold them).
    CAPTURED: ClassVar[tuple[str, ...]] = ("model", "driver", "driver_version", "firmware")
    # What `netbench probe` shows of it beside its name, state, MTU and speed.
    SHOWN: ClassVar[tuple[str, ...]] = ("model", "driver", "driver_version", "firmware",
                                        "pci_address")
    # Facts whose change could move a figure measured on it.
    FIGURE_FACTS: ClassVar[tuple[str, ...]] = ("driver", "driver_version", "firmware",
                                               "speed_mbps", "mtu", "model")

    def summary(self) -> str:
        """One line naming the NIC a result came from: model, driver, firmware, link speed."""
        parts = [self.model or ("virtual" if self.virtual else None), self.driver,
                 self.driver_version and f"drv {self.driver_version}",
                 self.firmware and f"fw {self.firmware}",
                 self.speed_mbps and f"{self.speed_mbps} Mb/s", self.mtu and f"mtu {self.mtu}"]
        return f"{self.name}: " + ", ".join(str(p) for p in parts if p)


@dataclass(frozen=True)
class RdmaPort(_Part):
    port: int | str = 1
    state: str | None = None
    phys_state: str | None = None
    link_layer: str | None = None
    rate: str | None = None                # "100 Gb/sec (4X EDR)"
    netdev: str | None = None

    def rate_gbps(self) -> float | None:
        match = re.search(r"([\d.]+)\s*Gb/sec", self.rate or "")
        return float(match.group(1)) if match else None


@dataclass(frozen=True)
class RdmaDevice(_Part):
    name: str = "?"
    fw_ver: str | None = None
    node_type: str | None = None
    node_desc: str | None = None
    hca_type: str | None = None
    parent_netdev: str | None = None       # software devices (rxe, siw) have one
    emulated: bool = False
    ports: tuple[RdmaPort, ...] = ()
    driver: str | None = None
    OPTIONAL: ClassVar[tuple[str, ...]] = ("driver",)

    @classmethod
    def _read(cls, name: str, value: Any) -> Any:
        if name == "ports":
            return tuple(RdmaPort.of(p) for p in _objects(value))
        return super()._read(name, value)

    def as_raw(self) -> dict[str, Any]:
        return {**super().as_raw(), "ports": [p.as_raw() for p in self.ports]}

    def port_of(self, port: str) -> RdmaPort | None:
        """Port ``port`` ("" is port 1)."""
        return next((p for p in self.ports if str(p.port) == (port or "1")), None)


@dataclass(frozen=True)
class Gpu(_Part):
    pci_address: str = "?"
    vendor_id: str | None = None
    device_id: str | None = None
    model: str | None = None
    driver: str | None = None
    numa_node: int | None = None
    driver_version: str | None = None
    OPTIONAL: ClassVar[tuple[str, ...]] = ("driver", "numa_node", "driver_version")


@dataclass(frozen=True)
class PciePath:
    """A device's PCIe path as the probe stored it (linkpath.LinkPath plus its kind)."""

    device: str | None
    kind: str | None                       # "gpu", "display", "rdma"
    summary: str
    bottleneck_gbytes: float | None
    virtualized: str | None                # the hypervisor, where the probe ran inside one
    hops: tuple[Mapping[str, Any], ...]

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> PciePath:
        bound = raw.get("bottleneck_gbytes")
        return cls(_text(raw.get("device")), _text(raw.get("kind")),
                   str(raw.get("summary") or ""),
                   float(bound) if isinstance(bound, int | float) and bound > 0 else None,
                   _text(raw.get("virtualized")), tuple(_objects(raw.get("hops"))))


def pcie_entry(kind: str, link: Mapping[str, Any], vm: str | None) -> dict[str, Any]:
    """A stored PCIe path: the walk's (``LinkPath.as_dict()``), its kind, the VM it was read
    in (whose link fields are the hypervisor's)."""
    entry = {"kind": kind, **link, "virtualized": vm}
    if vm:
        entry["summary"] += (f" [inside a VM ({vm}): link fields are what the hypervisor "
                             "shows, not necessarily the physical link]")
    return entry


# What a captured tree keeps beside it of the host that was captured (sysfs cannot hold it).
CAPTURED_FIELDS = ("host", "kernel", "os", "arch", "cpu_model", "cpu_cores",
                   "cpu_physical_cores", "memory_bytes", "versions")


def host_facts(env: Mapping[str, Any]) -> dict[str, Any]:
    """The facts of a live fingerprint that a sysfs copy cannot carry (hostname, kernel, OS,
    versions; each NIC's model, driver and the ethtool driver version and firmware), for
    ``probe --capture`` to keep beside the tree."""
    return {**{k: env.get(k) for k in CAPTURED_FIELDS},
            "nics": {n.name: {k: getattr(n, k) for k in Nic.CAPTURED if getattr(n, k)}
                     for n in Fingerprint(env).nics}}


def with_captured(env: Record, facts: Mapping[str, Any] | None) -> Record:
    """What a captured tree's own host facts (``host_facts``, read back) change in a
    fingerprint probed from it: they replace the reading machine's; None: an older capture,
    whose host facts are the reader's."""
    if facts is None:
        return Record(captured_host_facts=False)
    changed = Record(read_on=env.get("host"), captured_host_facts=True)
    changed.update({k: facts[k] for k in CAPTURED_FIELDS if facts.get(k) is not None})  # type: ignore[typeddict-item]
    extra = facts.get("nics") if isinstance(facts.get("nics"), Mapping) else {}
    nics = []
    for raw in env.get("nics", []):
        mine = extra.get(raw.get("name")) if isinstance(extra, Mapping) else None
        nics.append({**raw, **{k: v for k, v in (mine or {}).items()
                              if k in Nic.CAPTURED and v}} if isinstance(mine, Mapping) else raw)
    changed.update(nics=nics)
    return changed


class Fingerprint:
    """A read of one fingerprint: a Record, a row's env_json text, or nothing."""

    def __init__(self, raw: Mapping[str, Any] | str | bytes | None = None) -> None:
        if isinstance(raw, bytes):
            raw = raw.decode(errors="replace")
        if isinstance(raw, str):
            try:
                raw = json.loads(raw) if raw else None
            except (ValueError, RecursionError):
                raw = None
        self.raw: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}

    def __bool__(self) -> bool:
        return bool(self.raw)

    # --- the host --------------------------------------------------------------------------
    host = property(lambda self: _text(self.raw.get("host")))
    kernel = property(lambda self: _text(self.raw.get("kernel")))
    os = property(lambda self: _text(self.raw.get("os")))
    arch = property(lambda self: _text(self.raw.get("arch")))
    cpu_model = property(lambda self: _text(self.raw.get("cpu_model")))
    cpu_cores = property(lambda self: _count(self.raw.get("cpu_cores")))
    cpu_physical_cores = property(lambda self: _count(self.raw.get("cpu_physical_cores")))
    memory_bytes = property(lambda self: _count(self.raw.get("memory_bytes")))
    sysfs_root = property(lambda self: _text(self.raw.get("sysfs_root")))
    virtual_machine = property(lambda self: _text(self.raw.get("virtual_machine")))
    softroce_error = property(lambda self: _text(self.raw.get("softroce_error")))
    no_counters = property(lambda self: self.raw.get("no_counters") is True)

    @property
    def cpu_cache(self) -> tuple[int, int | None] | None:
        """cpu0's last-level data cache: (bytes, its level)."""
        cache = self.raw.get("cpu_cache")
        size = _count(cache.get("bytes")) if isinstance(cache, Mapping) else None
        return (size, _count(cache.get("level"))) if size and isinstance(cache, Mapping) \
            else None

    @property
    def versions(self) -> dict[str, str]:
        """Each library's version that was found (netbench, python, torch, nccl...)."""
        found = self.raw.get("versions")
        return {str(k): str(v) for k, v in found.items() if v} \
            if isinstance(found, Mapping) else {}

    @property
    def collective_env(self) -> dict[str, str]:
        found = self.raw.get("collective_env")
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}

    @property
    def hook_errors(self) -> list[str]:
        found = self.raw.get("hook_errors")
        return [str(e) for e in found] if isinstance(found, list) else []

    @property
    def resumes(self) -> list[Any]:
        found = self.raw.get("resumes")
        return list(found) if isinstance(found, list) else []

    def with_resume(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """This fingerprint with one more resume of its run recorded."""
        return {**self.raw, "resumes": [*self.resumes, dict(record)]}

    # --- its devices -----------------------------------------------------------------------
    @property
    def nics(self) -> tuple[Nic, ...]:
        return tuple(Nic.of(n) for n in _objects(self.raw.get("nics")))

    @property
    def rdma_devices(self) -> tuple[RdmaDevice, ...]:
        return tuple(RdmaDevice.of(d) for d in _objects(self.raw.get("rdma_devices")))

    @property
    def gpus(self) -> tuple[Gpu, ...]:
        return tuple(Gpu.of(g) for g in _objects(self.raw.get("gpus")))

    @property
    def pcie_paths(self) -> tuple[PciePath, ...]:
        return tuple(PciePath.of(p) for p in _objects(self.raw.get("pcie_paths")))

    def nic(self, name: str | None) -> Nic | None:
        return next((n for n in self.nics if n.name == name), None)

    def rdma(self, name: str | None) -> RdmaDevice | None:
        return next((d for d in self.rdma_devices if d.name == name), None)

    def gpu(self, pci_address: str | None) -> Gpu | None:
        return next((g for g in self.gpus if g.pci_address == pci_address), None)

    def pcie_path(self, pci_address: str | None) -> PciePath | None:
        return next((p for p in self.pcie_paths if p.device == pci_address), None)

    def line_rate_gbps(self, device: str | None) -> float | None:
        """Gbit/s of the link ``device`` (an RDMA port "mlx5_0:1", or an interface) ran on."""
        name, _, port = str(device or "").partition(":")
        rdma = self.rdma(name)
        found = rdma.port_of(port) if rdma else None
        if found is not None and found.rate_gbps() is not None:
            return found.rate_gbps()
        nic = self.nic(name)
        return nic.speed_mbps / 1000.0 if nic and isinstance(nic.speed_mbps, int | float) \
            and nic.speed_mbps > 0 else None

    def rdma_netdevs(self) -> dict[str, str]:
        """The netdev under each RDMA port (``rxe0:1`` -> ``eth0``)."""
        return {f"{d.name}:{p.port}": p.netdev for d in self.rdma_devices for p in d.ports
                if isinstance(p.netdev, str)}

    # --- what a reader is told ---------------------------------------------------------------
    def nic_summary(self, device: str | None) -> str | None:
        nic = self.nic(device)
        return nic.summary() if nic else None

    def rdma_summary(self, device: str | None) -> str | None:
        """One line naming the RDMA device a result came from ("mlx5_0:1" or "rxe0")."""
        if not device:
            return None
        name, _, port_text = device.partition(":")
        dev = self.rdma(name)
        if dev is None:
            return None
        port = dev.port_of(port_text)
        parts = [dev.hca_type or dev.node_desc, dev.fw_ver and f"fw {dev.fw_ver}",
                 port and port.link_layer, port and port.rate, port and port.state,
                 dev.emulated and f"emulated on {dev.parent_netdev or '?'}"]
        return f"{device}: " + ", ".join(str(p) for p in parts if p)

    def gpu_summary(self, pci_address: str | None) -> str | None:
        """One line naming the GPU a result came from: model, driver, its PCIe bottleneck."""
        if not pci_address:
            return None
        gpu, path = self.gpu(pci_address), self.pcie_path(pci_address)
        parts = [gpu and gpu.model, gpu and gpu.driver,
                 gpu and gpu.driver_version and f"drv {gpu.driver_version}",
                 path and path.summary.split(": ", 1)[-1]]
        return f"{pci_address}: " + ", ".join(str(p) for p in parts if p)

    def facts(self, used: set[str] | None = None) -> dict[str, str]:
        """The facts a change of could move a figure, flat ("eth0 firmware": "1.2");
        ``used``: the interfaces and RDMA devices the cases ran on (None: every one)."""
        flat: dict[str, str] = {}
        for key, value in (("kernel", self.kernel), ("os", self.os),
                           ("cpu_model", self.cpu_model)):
            if value:
                flat[key] = value
        for name, version in self.versions.items():
            flat[f"{name} version"] = version
        for nic in self.nics:
            if used is None or nic.name in used:
                for name in Nic.FIGURE_FACTS:
                    if getattr(nic, name) is not None:
                        flat[f"{nic.name} {name}"] = str(getattr(nic, name))
        for dev in self.rdma_devices:
            if used is not None and dev.name not in used:
                continue
            if dev.fw_ver:
                flat[f"{dev.name} firmware"] = str(dev.fw_ver)
            for port in dev.ports:
                for name in ("rate", "state", "link_layer"):
                    if getattr(port, name):
                        flat[f"{dev.name}:{port.port} {name}"] = str(getattr(port, name))
        for key, value in self.collective_env.items():
            flat[f"env {key}"] = value
        return flat
