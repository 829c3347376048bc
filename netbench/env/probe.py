"""The environment fingerprint stored with every run, so a number always says where it came from.

Everything is read, never assumed: sysfs for NICs and RDMA devices (under ``sysfs_root``, so a
captured tree can stand in for /sys), the ethtool ioctl for driver and firmware versions,
package metadata for library versions. What cannot be read is left out or ``None``, never
guessed, and a missing or unreadable file never raises.
"""

from __future__ import annotations

import ctypes
import fcntl
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import socket
import struct
import subprocess
import warnings
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from netbench import __version__, hooks
from netbench.env import linkpath
from netbench.env.linkpath import read_attr as _read
from netbench.env.linkpath import read_int as _read_int
from netbench.errors import UsageError
from netbench.fingerprint import (
    CAPTURED_FIELDS,
    Cache,
    Gpu,
    Nic,
    RdmaDevice,
    RdmaPort,
    Record,
    with_captured,
)

SIOCETHTOOL = 0x8946
ETHTOOL_GDRVINFO = 0x00000003
_DRVINFO = struct.Struct("I32s32s32s32s32s12s5I")


def ethtool_drvinfo(ifname: str) -> dict[str, str]:
    """Driver, version, firmware and bus of a netdev via the ethtool ioctl ({} if refused)."""
    buf = ctypes.create_string_buffer(_DRVINFO.pack(ETHTOOL_GDRVINFO, *(b"",) * 6,
                                                    *(0,) * 5))
    ifreq = struct.pack("16sP", ifname.encode()[:15], ctypes.addressof(buf))
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq)
    except OSError:
        return {}
    fields = _DRVINFO.unpack(buf.raw[:_DRVINFO.size])
    out = {}
    for key, raw in zip(Nic.ETHTOOL, fields[1:5]):     # the struct's order
        text = raw.split(b"\0", 1)[0].decode(errors="replace").strip()
        if text and text != "N/A":
            out[key] = text
    return out


@lru_cache(maxsize=2)
def _pci_ids(path: str) -> tuple[str, ...]:
    """The pci.ids database, read once per process however many devices ask."""
    try:
        return tuple(Path(path).read_text(errors="replace").splitlines())
    except OSError:
        return ()


def _pci_name(vendor: str | None, device: str | None) -> str | None:
    """Vendor and device names from the pci.ids database where the system has one."""
    if not vendor or not device:
        return None
    vendor, device = vendor.lower().removeprefix("0x"), device.lower().removeprefix("0x")
    for db in ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids"):
        lines = _pci_ids(db)
        if not lines:
            continue
        vendor_name = None
        for line in lines:
            if not line or line.startswith("#"):
                continue
            if not line.startswith("\t"):
                if vendor_name is not None:
                    break
                if line[:4].lower() == vendor:
                    vendor_name = line[4:].strip()
            elif vendor_name is not None and line.startswith("\t") and not line.startswith(
                    "\t\t") and line[1:5].lower() == device:
                return f"{vendor_name} {line[5:].strip()}"
        if vendor_name:
            return f"{vendor_name} device {device}"
    return None


_PCI_ADDRESS = re.compile(r"[0-9a-fA-F]{4,}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]")


def _pci_function(device: Path, sysfs: Path) -> Path | None:
    """The PCI function a netdev's device is or sits under: a virtio NIC's device is
    ``virtio2``, a child of its PCI function. None on no PCI bus (virtio-mmio, platform)."""
    here, top = Path(os.path.realpath(device)), Path(os.path.realpath(sysfs))
    while here != top and here != here.parent:
        if _PCI_ADDRESS.fullmatch(here.name):
            return here
        here = here.parent
    return None


def probe_nics(sysfs: Path, use_ioctl: bool = True) -> list[dict[str, Any]]:
    nics = []
    net = sysfs / "class" / "net"
    try:
        names = sorted(os.listdir(net))
    except OSError:
        return []
    for name in names:
        base = net / name
        dev = base / "device"
        driver_link = dev / "driver"
        speed = _read_int(base / "speed")          # -1 or unreadable when the link is down
        nic = Nic(name=name, operstate=_read(base / "operstate"), mtu=_read_int(base / "mtu"),
                  speed_mbps=speed if speed is not None and speed >= 0 else None,
                  virtual=not dev.exists())
        if driver_link.exists():
            nic = replace(nic, driver=os.path.basename(os.path.realpath(driver_link)))
        function = _pci_function(dev, sysfs) if dev.exists() else None
        if function is not None:
            nic = replace(nic, pci_address=function.name,
                          model=_pci_name(_read(function / "vendor"), _read(function / "device")))
        if use_ioctl:
            info = ethtool_drvinfo(name)
            nic = replace(nic, **{k: v for k, v in info.items() if not getattr(nic, k)})
        nics.append(nic.as_raw())
    return nics


def probe_gpus(sysfs: Path, proc: Path | None, devices: dict[str, str]) -> list[dict[str, Any]]:
    """GPUs among ``devices`` (linkpath.interesting_devices), with the NVIDIA driver's own view
    from /proc where the host is live (``proc`` None for a captured tree)."""
    version = (_read(proc / "driver" / "nvidia" / "version") or "") if proc else ""
    nvidia = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", version)
    gpus = []
    for address, kind in devices.items():
        if kind not in ("gpu", "display"):
            continue
        dev = sysfs / "bus" / "pci" / "devices" / address
        vendor, device = _read(dev / "vendor"), _read(dev / "device")
        gpu = Gpu(pci_address=address, vendor_id=vendor, device_id=device,
                  model=_pci_name(vendor, device))
        if (dev / "driver").is_symlink():    # in a capture the driver's folder is not kept
            gpu = replace(gpu, driver=os.path.basename(os.readlink(dev / "driver")))
        numa = _read_int(dev / "numa_node")
        if numa is not None and numa >= 0:
            gpu = replace(gpu, numa_node=numa)
        if proc is not None:
            info = _read(proc / "driver" / "nvidia" / "gpus" / address / "information") or ""
            for line in info.splitlines():
                key, _, value = line.partition(":")
                if key.strip() == "Model" and value.strip():
                    gpu = replace(gpu, model=value.strip())
            if nvidia and gpu.driver == "nvidia":
                gpu = replace(gpu, driver_version=nvidia.group(1))
        gpus.append(gpu.as_raw())
    return gpus


def probe_rdma(sysfs: Path) -> list[dict[str, Any]]:
    devices = []
    root = sysfs / "class" / "infiniband"
    try:
        names = sorted(os.listdir(root))
    except OSError:
        return []
    for name in names:
        base = root / name
        parent = _read(base / "parent")          # software devices (rxe, siw) have one
        driver = base / "device" / "driver"
        try:
            ports = sorted(os.listdir(base / "ports"), key=lambda p: int(p) if p.isdigit() else 0)
        except OSError:
            ports = []
        found = []
        for port in ports:
            pbase = base / "ports" / port
            netdevs = []
            try:
                netdevs = sorted(os.listdir(pbase / "gid_attrs" / "ndevs"))
            except OSError:
                pass
            found.append(RdmaPort(
                port=int(port) if port.isdigit() else port, state=_read(pbase / "state"),
                phys_state=_read(pbase / "phys_state"), link_layer=_read(pbase / "link_layer"),
                rate=_read(pbase / "rate"),
                netdev=_read(pbase / "gid_attrs" / "ndevs" / "0") if netdevs else None))
        devices.append(RdmaDevice(
            name=name, fw_ver=_read(base / "fw_ver") or None,
            node_type=_read(base / "node_type"), node_desc=_read(base / "node_desc"),
            hca_type=_read(base / "hca_type"), parent_netdev=parent,
            emulated=parent is not None or (_read(base / "node_desc") or "") in ("rxe", "siw"),
            ports=tuple(found),
            driver=os.path.basename(os.path.realpath(driver)) if driver.exists() else None,
        ).as_raw())
    return devices


def _dist_version(*names: str) -> str | None:
    for name in names:
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return None


def _dpkg_version(package: str) -> str | None:
    try:
        out = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", package],
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def probe_versions() -> dict[str, str | None]:
    """Versions from package metadata: nothing heavy (torch, pyverbs) is imported here."""
    return {
        "netbench": __version__,
        "python": platform.python_version(),
        "torch": _dist_version("torch"),
        "nccl": _dist_version("nvidia-nccl-cu13", "nvidia-nccl-cu12", "nvidia-nccl-cu11"),
        "rdma_core": _dpkg_version("rdma-core"),
        "pyverbs": ("present" if importlib.util.find_spec("pyverbs") else None),
        "pyarrow": _dist_version("pyarrow"),
    }


def _cpu_model(proc: Path) -> str | None:
    text = _read(proc / "cpuinfo") or ""
    for line in text.splitlines():
        if line.lower().startswith(("model name", "hardware", "cpu model")):
            return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _last_level_cache(root: Path) -> dict[str, int] | None:
    """cpu0's last-level data cache ({"bytes", "level"}): what a memory bound must exceed."""
    from netbench.api import last_level_cache

    found = last_level_cache(root)
    return Cache(bytes=found[0], level=found[1]) if found else None


def _os_name() -> str | None:
    text = _read(Path("/etc/os-release")) or ""
    for line in text.splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip().strip('"')
    return None


def probe(sysfs_root: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """The full fingerprint; ``sysfs_root`` (or NETBENCH_SYSFS_ROOT) replaces /sys."""
    root = Path(sysfs_root or os.environ.get("NETBENCH_SYSFS_ROOT") or "/sys")
    live = root == Path("/sys")
    if not live and not any((root / part).is_dir() for part in ("bus", "class", "devices")):
        # A mistyped path would read as a host with nothing on it: say so instead.
        raise UsageError(f"sysfs root {root}: no bus/, class/ or devices/ under it; give a "
                         "tree captured with `netbench probe --capture DIR` (or /sys)")
    try:
        import psutil
        memory = psutil.virtual_memory().total
        physical = psutil.cpu_count(logical=False)
    except Exception:
        memory, physical = None, None
    uname = platform.uname()
    # A capture keeps the /proc facts the probe needs beside the tree (linkpath.capture).
    proc = Path("/proc") if live else root / linkpath.CAPTURED_PROC
    proc = proc if proc.is_dir() else None
    vm = linkpath.virtual_machine(root, proc / "cpuinfo" if proc else None)
    devices = linkpath.interesting_devices(root)      # GPUs and RDMA NICs, scanned once
    env = Record(
        host=socket.gethostname(), kernel=uname.release, os=_os_name(), arch=uname.machine,
        cpu_model=_cpu_model(Path("/proc")), cpu_cores=os.cpu_count(),
        cpu_physical_cores=physical, memory_bytes=memory, cpu_cache=_last_level_cache(root),
        sysfs_root=str(root), nics=probe_nics(root, use_ioctl=live),
        rdma_devices=probe_rdma(root), gpus=probe_gpus(root, proc, devices),
        virtual_machine=vm, pcie_paths=linkpath.probe_paths(root, devices, vm),
        versions=probe_versions())
    if not live:
        env.update(captured_host(env, root))
    errors = [*hooks.load()[1], *hooks.call("update_env", env)]   # a site's own facts
    if errors:
        env.update(hook_errors=errors)
    return dict(env)


CAPTURED_HOST = "netbench-host.json"   # in a capture's _proc/: what sysfs cannot hold


def captured_host(env: Record, root: Path) -> Record:
    """A captured tree's fingerprint is the captured host's: its own facts (beside the tree,
    ``probe --capture`` wrote them) replace those of the machine reading the capture (which are
    only what that one happens to run)."""
    path = root / linkpath.CAPTURED_PROC / CAPTURED_HOST
    text = _read(path)               # bounded: a regular file of a sane size, or None
    try:
        facts = json.loads(text) if text is not None else None
    except (ValueError, RecursionError):
        facts = None
    if text is not None and not _flat_facts(facts):
        warnings.warn(f"{path}: not a JSON object of host facts "
                      f"({', '.join(CAPTURED_FIELDS)}, nics); the reading host's facts are used",
                      stacklevel=2)
        facts = None
    return with_captured(env, facts if isinstance(facts, dict) else None)


def _flat_facts(facts: Any, depth: int = 3) -> bool:
    """Host facts as ``probe --capture`` writes them: an object of scalars and tables (the
    versions, each NIC's facts) a few levels deep, never deeper (they are stored in every
    run's fingerprint, and a deep one would exhaust whatever reads it next)."""
    if isinstance(facts, str | int | float | None):
        return depth < 3                 # the top level is an object
    if isinstance(facts, dict | list) and depth > 0:
        return all(_flat_facts(v, depth - 1)
                   for v in (facts.values() if isinstance(facts, dict) else facts))
    return False
