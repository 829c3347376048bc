"""The PCIe path from a device (GPU, RDMA NIC) up to its root port, and its bottleneck.

Every hop reports its current and maximum link speed and width from sysfs. The bound of a hop
is what its link can train to (the lower of both ends' maxima): GPUs drop their link to Gen1
when idle, so the state read at rest is no bound. The narrowest hop bounds what any copy or
DMA through the path can reach; a hop running below what both its ends can do is flagged as
downgraded ("running at 8 GT/s x4, capable of 16 GT/s x16") -- for a GPU at rest that may be
power saving, so the GPU benchmarks read the path again while their copies run.
Behind a Thunderbolt/USB4 tunnel (a hop the kernel marks ``removable``: attached through an
external-facing port) the PCIe link fields of the tunnelled hop describe a virtual link, so
that hop is bounded by the Thunderbolt link instead (generation, lanes x Gb/s per lane, from
/sys/bus/thunderbolt as the kernel ABI documents it) and never flagged as downgraded.
Works on a captured tree (``netbench probe --capture DIR``, read back with ``--sysfs-root``);
missing or unreadable files and unknown speed strings leave that figure unknown, never crash.
"""

from __future__ import annotations

import os
import re
import stat
import warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from netbench.errors import UsageError
from netbench.fingerprint import pcie_entry

BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# Line-code efficiency per signalling rate: 8b/10b up to Gen2, 128b/130b Gen3-5, FLIT at Gen6.
ENCODING = {2.5: 8 / 10, 5.0: 8 / 10, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130,
            64.0: 242 / 256}
GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_ATTRS = ("class", "vendor", "device", "current_link_speed", "current_link_width",
          "max_link_speed", "max_link_width", "removable", "numa_node")
_ROUTER = re.compile(r"^(\d+)-([0-9a-f]+)$")        # 0-1, 0-301: a router; 0-0 is the host
_ROUTER_ATTRS = ("generation", "rx_speed", "rx_lanes", "tx_speed", "tx_lanes", "device_name",
                 "vendor_name", "authorized")
TB_NAMES = {1: "Thunderbolt 1", 2: "Thunderbolt 2", 3: "Thunderbolt 3", 4: "USB4"}
# What a tunnel carries of PCIe, which is less than its link (the rest is DisplayPort, USB and
# the tunnelling itself), in Gbit/s per direction: (generation, link at least Gb/s) -> ceiling,
# and where the figure comes from. Thunderbolt 3 hosts move PCIe at about 22 Gbit/s (published
# host-to-device copies 2.4-2.75 GB/s; the TB3 spec requires only 16); Thunderbolt 4 and USB4
# require 32 Gbit/s of PCIe; USB4 v2 / Thunderbolt 5 (80 Gb/s links) tunnel PCIe Gen4 x4,
# 64 Gbit/s. Sources in docs/expectations.md.
TUNNEL_PCIE = ((3, 0.0, 22.0, "Thunderbolt 3 hosts carry PCIe at about 22 Gbit/s"),
               (4, 80.0, 64.0, "USB4 v2 / Thunderbolt 5 tunnel PCIe at 64 Gbit/s (Gen4 x4)"),
               (4, 0.0, 32.0, "Thunderbolt 4 / USB4 guarantee 32 Gbit/s of PCIe"))


def parse_speed(text: str | None) -> float | None:
    """'16.0 GT/s PCIe' -> 16.0; 'Unknown', '', or an unknown rate -> None."""
    match = re.match(r"\s*([\d.]+)\s*GT/s", text or "")
    if not match:
        return None
    value = float(match.group(1))
    return value if value in ENCODING else None


def lane_gbytes(speed: float | None, width: int | None) -> float | None:
    """Theoretical payload-side GB/s per direction of a link (line coding only)."""
    if speed is None or not width:
        return None
    return speed * ENCODING[speed] * width / 8


MAX_ATTR_BYTES = 4 << 20      # a sysfs attribute is a page; /proc/cpuinfo of 1,000 cores ~2 MB


def read_attr(path: Path) -> str | None:
    """A sysfs attribute, stripped; None where missing or unreadable (the probe's one reader).
    Only a regular file of at most MAX_ATTR_BYTES is read: in a captured tree a FIFO would hang
    the probe and a link to /dev/zero or a huge file would be read into memory whole; those
    read as unknown, with a warning naming the file."""
    from netbench.textfile import file_kind

    def unknown(why: str) -> None:
        warnings.warn(f"{path}: {why}; read as unknown", stacklevel=3)

    try:
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            return unknown(f"{file_kind(mode)}, not a regular file")
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(fd).st_mode
            if not stat.S_ISREG(mode):
                return unknown(f"{file_kind(mode)}, not a regular file")
            data = f.read(MAX_ATTR_BYTES + 1)
    except OSError:
        return None
    if len(data) > MAX_ATTR_BYTES:
        return unknown(f"larger than {MAX_ATTR_BYTES >> 20} MiB, which no attribute is")
    return data.decode(errors="replace").strip()


def read_int(path: Path) -> int | None:
    text = read_attr(path)
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


@dataclass
class Hop:
    address: str
    pci_class: str | None
    speed: float | None          # GT/s now
    width: int | None            # lanes now
    max_speed: float | None
    max_width: int | None
    gbytes: float | None         # GB/s per direction now
    max_gbytes: float | None     # this end's maximum
    bound_gbytes: float | None = None   # what the link can train to: both ends' maxima
    tunnelled: bool = False      # its link crosses a Thunderbolt/USB4 tunnel
    role: str = ""               # device, switch downstream/upstream port, root port

    bound: tuple[float | None, int | None] = (None, None)   # (GT/s, lanes) it can train to

    def describe(self, speed: float | None, width: int | None) -> str:
        gen = f"Gen{GENERATION[speed]} " if speed in GENERATION else ""
        s = f"{speed:g} GT/s" if speed else "? GT/s"
        return f"{gen}{s} x{width if width else '?'}"


@dataclass
class LinkPath:
    device: str
    hops: list[Hop]
    bottleneck: str | None       # the hop's address
    bottleneck_gbytes: float | None     # its bound: the path's theoretical GB/s per direction
    downgraded: list[str]        # human-readable, one per downgraded hop
    tunnel: dict[str, Any] | None = None   # the Thunderbolt/USB4 link the path crosses
    switches: int = 0            # PCIe switches between the device and its root port
    now_gbytes: float | None = None     # the narrowest hop as the links run at this moment
    idle_gpu: bool = False       # a GPU whose own link runs below its bound (maybe power saving)

    def summary(self) -> str:
        if self.bottleneck is None:
            text = f"{self.device}: link speed unknown"
        else:
            hop = next(h for h in self.hops if h.address == self.bottleneck)
            what = (describe_tunnel(self.tunnel) if hop.tunnelled and self.tunnel
                    else hop.describe(*hop.bound))
            text = (f"{self.device}: bottleneck {what} at {self.bottleneck} = "
                    f"{self.bottleneck_gbytes:.2f} GB/s per direction")
        if self.tunnel and not (self.bottleneck and next(
                h for h in self.hops if h.address == self.bottleneck).tunnelled):
            text += f"; through {describe_tunnel(self.tunnel)}"
        if self.switches:
            text += f"; behind {self.switches} PCIe switch{'es' if self.switches > 1 else ''}"
        if self.downgraded:
            text += "; DOWNGRADED: " + "; ".join(self.downgraded)
            if self.idle_gpu:
                text += (" (GPUs lower their link speed when idle: gpu.h2d/d2h read the link "
                         "again under load)")
        return text

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


def walk(sysfs: Path, address: str) -> LinkPath | None:
    """Hops from the PCI function ``address`` up through bridges to its root port."""
    link = sysfs / "bus" / "pci" / "devices" / address
    if not link.exists():
        return None
    path = Path(os.path.realpath(link))
    hops = []
    removable = []
    while BDF.match(path.name):
        removable.append(read_attr(path / "removable") == "removable")
        speed = parse_speed(read_attr(path / "current_link_speed"))
        width = read_int(path / "current_link_width")
        max_speed = parse_speed(read_attr(path / "max_link_speed"))
        max_width = read_int(path / "max_link_width")
        hops.append(Hop(path.name, read_attr(path / "class"), speed, width or None, max_speed,
                        max_width or None, lane_gbytes(speed, width),
                        lane_gbytes(max_speed, max_width)))
        path = path.parent
    # Up from the device: each switch is a downstream port under an upstream port; the last
    # bridge is the root port (a device alone sits on the root complex itself).
    for i, hop in enumerate(hops):
        if i == 0:
            hop.role = "device" if len(hops) > 1 else "device on the root complex"
        elif i == len(hops) - 1:
            hop.role = "root port"
        else:
            hop.role = "switch downstream port" if i % 2 else "switch upstream port"
    switches = max(len(hops) - 2, 0) // 2
    # The tunnelled link joins the top-most removable hop to the external-facing port above
    # it: a virtual PCIe link carried over Thunderbolt/USB4, which both of its ends report
    # (Intel Thunderbolt 3 controllers read 2.5 GT/s x4 on both). Both are bounded by the
    # tunnel, neither by its virtual fields.
    tunnel = None
    top = max((i for i, r in enumerate(removable) if r), default=None)
    if top is not None:
        tunnel = thunderbolt_link(sysfs, [h.address for h in hops]) or {
            "kind": "thunderbolt", "generation": None, "gbytes": None,
            "note": "attached through an external-facing port; no thunderbolt bus in sysfs"}
        for hop in hops[top:top + 2]:
            hop.tunnelled = True
            hop.gbytes = tunnel["gbytes"]
            hop.max_gbytes = hop.gbytes
    # A link joins a function below (a device, a switch's upstream port) and the port above
    # it (a switch downstream port, a root port); both report it. It can train to the lower of
    # both ends' maxima and is downgraded only when it runs below that: a root port that
    # could run x16 above an x1 device is a narrow device, not a degraded link. A tunnelled
    # hop's fields are virtual: bounded by the tunnel, never a limit on its partner.
    downgraded = []
    for i, hop in enumerate(hops):
        if hop.tunnelled:
            hop.bound_gbytes = hop.gbytes
            continue
        port_side = hop.role in ("switch downstream port", "root port")   # the link below it
        partner = hops[i - 1] if port_side else hops[i + 1] if i + 1 < len(hops) else None
        if partner is not None and partner.tunnelled:
            partner = None
        cap_speed = _least(hop.max_speed, partner.max_speed if partner else None) or hop.speed
        cap_width = _least(hop.max_width, partner.max_width if partner else None) or hop.width
        hop.bound = (cap_speed, int(cap_width) if cap_width else None)
        hop.bound_gbytes = lane_gbytes(*hop.bound)
        if port_side or partner is None:      # each link is judged once, from below
            continue
        slower = hop.speed is not None and cap_speed is not None and hop.speed < cap_speed
        narrower = hop.width is not None and cap_width is not None and hop.width < cap_width
        if slower or narrower:
            downgraded.append(f"link {partner.address} -> {hop.address} running at "
                              f"{hop.describe(hop.speed, hop.width)}, capable of "
                              f"{hop.describe(cap_speed, cap_width)}")
    bounded = [h for h in hops if h.bound_gbytes is not None]
    narrowest = min(bounded, key=lambda h: h.bound_gbytes) if bounded else None
    now = [h.gbytes for h in hops if h.gbytes is not None]
    device = hops[0]
    idle_gpu = bool(device.pci_class and device.pci_class.startswith("0x03")
                    and device.speed and device.bound[0] and device.speed < device.bound[0])
    return LinkPath(address, hops, narrowest.address if narrowest else None,
                    narrowest.bound_gbytes if narrowest else None, downgraded, tunnel,
                    switches, min(now) if now else None, idle_gpu)


def parse_gbps(text: str | None) -> float | None:
    """'20.0 Gb/s' (per lane, as the thunderbolt bus reports it) -> 20.0; else None."""
    match = re.match(r"\s*([\d.]+)\s*Gb/s\s*$", text or "")
    return float(match.group(1)) if match else None


def thunderbolt_routers(sysfs: Path) -> list[dict[str, Any]]:
    """Device routers (not host routers) on the thunderbolt bus, with their upstream link."""
    bus = sysfs / "bus" / "thunderbolt" / "devices"
    routers = []
    for entry in sorted(bus.iterdir()) if bus.is_dir() else []:
        match = _ROUTER.match(entry.name)
        if not match or int(match.group(2), 16) == 0:
            continue
        real = Path(os.path.realpath(entry))
        if not (real / "authorized").exists() and not (real / "generation").exists():
            continue                    # an XDomain (another host), not a router
        speeds = [parse_gbps(read_attr(real / f"{d}_speed")) for d in ("rx", "tx")]
        lanes = [read_int(real / f"{d}_lanes") for d in ("rx", "tx")]
        per_direction = [s * n for s, n in zip(speeds, lanes) if s and n]
        domain = sysfs / "bus" / "thunderbolt" / "devices" / f"domain{match.group(1)}"
        nhi = Path(os.path.realpath(domain)).parent.name if domain.exists() else None
        routers.append({
            "router": entry.name, "domain": int(match.group(1)),
            "nhi": nhi if nhi and BDF.match(nhi) else None,
            "generation": read_int(real / "generation"),
            "device_name": read_attr(real / "device_name"),
            "vendor_name": read_attr(real / "vendor_name"),
            "gbps_per_lane": min((s for s in speeds if s), default=None),
            "lanes": min((n for n in lanes if n), default=None),
            "gbps": min(per_direction) if per_direction else None,
        })
    return routers


def thunderbolt_link(sysfs: Path, pci_chain: list[str]) -> dict[str, Any] | None:
    """The Thunderbolt/USB4 link a PCIe chain (device .. root port) is tunnelled over.

    With one domain it is that domain's routers; with several, the domain whose host
    interface (NHI) shares a bridge with the chain. A daisy chain is bounded by its slowest
    router link, since sysfs does not say which router a PCIe device sits behind."""
    routers = thunderbolt_routers(sysfs)
    if not routers:
        return None
    domains = {r["domain"] for r in routers}
    if len(domains) > 1:
        chain = set(pci_chain)
        for r in routers:
            nhi = sysfs / "bus" / "pci" / "devices" / (r["nhi"] or "?")
            ancestors = {p.name for p in Path(os.path.realpath(nhi)).parents}
            if r["nhi"] and ancestors & chain:
                domains = {r["domain"]}
                break
        else:
            return {"kind": "thunderbolt", "routers": [r["router"] for r in routers],
                    "generation": None, "gbytes": None,
                    "note": "several Thunderbolt domains; which one carries this path is unknown"}
    mine = [r for r in routers if r["domain"] in domains]
    slowest = min(mine, key=lambda r: r["gbps"] if r["gbps"] else float("inf"))
    gbps = slowest["gbps"]
    ceiling, why = pcie_ceiling(slowest["generation"], gbps)
    carried = min(g for g in (gbps, ceiling) if g) if gbps or ceiling else None
    return {"kind": "thunderbolt", "routers": [r["router"] for r in mine],
            "generation": slowest["generation"], "device_name": slowest["device_name"],
            "vendor_name": slowest["vendor_name"], "lanes": slowest["lanes"],
            "gbps_per_lane": slowest["gbps_per_lane"], "gbps": gbps,
            "pcie_gbps": ceiling, "pcie_ceiling": why,
            "gbytes": carried / 8 if carried else None}


def pcie_ceiling(generation: int | None, link_gbps: float | None) -> tuple[float | None, str]:
    """The PCIe a Thunderbolt/USB4 tunnel of this generation carries (Gbit/s per direction),
    and why; (None, "") for a generation with no published figure (its link then bounds)."""
    for gen, at_least, ceiling, why in TUNNEL_PCIE:
        if generation == gen and (link_gbps or 0.0) >= at_least:
            return ceiling, why
    return None, ""


def describe_tunnel(tunnel: dict[str, Any]) -> str:
    """'Thunderbolt 3 tunnel, 2 lanes x 20 Gb/s (Razer Core X)'."""
    name = TB_NAMES.get(tunnel.get("generation") or 0, "Thunderbolt/USB4")
    text = f"{name} tunnel"
    if tunnel.get("lanes") and tunnel.get("gbps_per_lane"):
        text += f", {tunnel['lanes']} lanes x {tunnel['gbps_per_lane']:g} Gb/s"
    if tunnel.get("pcie_gbps"):
        text += f", PCIe at most {tunnel['pcie_gbps']:g} Gbit/s"
    device = " ".join(p for p in (tunnel.get("vendor_name"), tunnel.get("device_name")) if p)
    return text + (f" ({device})" if device else "")


def hop_line(hop: Mapping[str, Any]) -> str:
    """One hop of a path (as the fingerprint stores it): its link now, its maximum, its role."""
    return (f"{hop['address']}  now {hop['speed'] or '?'} GT/s x{hop['width'] or '?'}"
            f"  max {hop['max_speed'] or '?'} GT/s x{hop['max_width'] or '?'}"
            f"  {hop['role']}" + ("  (Thunderbolt/USB4 tunnel)" if hop["tunnelled"] else ""))


def _least(a: float | None, b: float | None) -> float | None:
    """The lower of two capabilities; an unknown end does not limit the other."""
    if a is None:
        return b
    return a if b is None else min(a, b)


def interesting_devices(sysfs: Path) -> dict[str, str]:
    """PCI addresses of GPUs (display / 3D controllers) and RDMA NICs -> what they are."""
    found: dict[str, str] = {}
    devices = sysfs / "bus" / "pci" / "devices"
    for entry in sorted(devices.iterdir()) if devices.is_dir() else []:
        cls = read_attr(entry / "class") or ""
        if cls.startswith("0x03"):
            found[entry.name] = "gpu" if cls.startswith(("0x0300", "0x0302")) else "display"
    ib = sysfs / "class" / "infiniband"
    for dev in sorted(ib.iterdir()) if ib.is_dir() else []:
        target = Path(os.path.realpath(dev / "device"))
        if BDF.match(target.name):
            found[target.name] = f"rdma {dev.name}"
    return found


# DMI system vendors (and products) of virtual machines: inside one, the PCIe hops above a
# passed-through device are the hypervisor's emulation, and their link fields say nothing
# about the physical link (a guest may read 2.5 GT/s under full load).
VM_VENDORS = ("QEMU", "KVM", "VMware", "Xen", "innotek", "Parallels", "Firecracker",
              "Amazon EC2", "Google", "OpenStack", "Red Hat")


def virtual_machine(sysfs: Path, cpuinfo: Path | None = None) -> str | None:
    """The hypervisor this sysfs belongs to (by DMI, or by the CPU's hypervisor flag when the
    host is live), or None on bare metal."""
    dmi = sysfs / "class" / "dmi" / "id"
    vendor, product = read_attr(dmi / "sys_vendor") or "", read_attr(dmi / "product_name") or ""
    for name in VM_VENDORS:
        if name.lower() in vendor.lower() or name.lower() in product.lower():
            return f"{vendor} {product}".strip()
    if vendor.startswith("Microsoft") and "Virtual Machine" in product:
        return f"{vendor} {product}"
    flags = next((line for line in (read_attr(cpuinfo) or "").splitlines()
                  if line.startswith("flags")), "") if cpuinfo else ""
    return "a hypervisor (cpu flag)" if " hypervisor" in flags else None


def probe_paths(sysfs: Path, devices: dict[str, str] | None = None,
                vm: str | None = None) -> list[dict[str, Any]]:
    """Link paths of ``devices`` (default: interesting_devices(sysfs))."""
    out = []
    for address, kind in (devices if devices is not None else interesting_devices(sysfs)).items():
        path = walk(sysfs, address)
        if path is not None:
            out.append(pcie_entry(kind, path.as_dict(), vm))
    return out


CAPTURED_PROC = "_proc"      # beside a captured tree: the /proc facts the probe reads


def capture(sysfs: Path, dest: Path, proc: Path | None = None) -> int:
    """Copy what the probe reads (PCI link attributes, net and infiniband classes), keeping
    symlinks relative, so ``--sysfs-root dest`` sees the same tree. With ``proc`` (a live
    /proc), also the facts it reads there into dest/_proc: the CPU's model and hypervisor
    flag (a link read inside a VM is the hypervisor's), the NVIDIA driver version and GPU
    names. Returns files copied."""
    copied = 0
    root = sysfs.resolve()
    # Into a new or empty directory only: a link planted in an existing one
    # (_proc/cpuinfo -> a file of root's) would steer root's writes onto its target.
    if dest.is_dir() and any(dest.iterdir()):
        raise UsageError(f"--capture {dest}: not empty; capture into a new or empty "
                         "directory")
    if proc is not None:
        copied += _capture_proc(proc, dest / CAPTURED_PROC)

    def copy_file(src: Path) -> None:
        nonlocal copied
        if not Path(os.path.abspath(src)).is_relative_to(root):
            return            # a sysfs entry linking outside the tree: not the tree's
        text = read_attr(src)
        if text is None:
            return
        target = dest / Path(os.path.abspath(src)).relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text + "\n")
        copied += 1

    def copy_link(link: Path) -> None:
        target = dest / link.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_symlink():
            os.symlink(os.readlink(link), target)

    for device_root in sorted((root / "devices").glob("pci*")):
        for dirpath, dirnames, _ in os.walk(device_root):
            here = Path(dirpath)
            dirnames[:] = [d for d in dirnames if BDF.match(d)]
            if BDF.match(here.name):
                for attr in _ATTRS:
                    copy_file(here / attr)
                if (here / "driver").is_symlink():
                    copy_link(here / "driver")
    for kind in ("bus/pci/devices", "class/net", "class/infiniband"):
        folder = root / kind
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            if entry.is_symlink():
                copy_link(entry)
    for dev in sorted((root / "class" / "net").glob("*")):
        real = Path(os.path.realpath(dev))
        for attr in ("mtu", "operstate", "speed"):
            copy_file(real / attr)
        if (real / "device").is_symlink():
            copy_link(real / "device")
            driver = Path(os.path.realpath(real / "device")) / "driver"
            if driver.is_symlink():
                copy_link(driver)
    for attr in ("sys_vendor", "product_name"):
        copy_file(root / "class" / "dmi" / "id" / attr)
    thunderbolt = root / "bus" / "thunderbolt" / "devices"
    for entry in sorted(thunderbolt.iterdir()) if thunderbolt.is_dir() else []:
        if entry.is_symlink():
            copy_link(entry)
            for attr in _ROUTER_ATTRS:
                copy_file(Path(os.path.realpath(entry)) / attr)
    for dev in sorted((root / "class" / "infiniband").glob("*")):
        real = Path(os.path.realpath(dev))
        for attr in ("fw_ver", "node_type", "node_desc", "hca_type", "parent"):
            copy_file(real / attr)
        if (real / "device").is_symlink():
            copy_link(real / "device")
        for port in sorted((real / "ports").glob("*")):
            for attr in ("state", "phys_state", "link_layer", "rate"):
                copy_file(port / attr)
    return copied


def _capture_proc(proc: Path, dest: Path) -> int:
    copied = 0
    lines = (read_attr(proc / "cpuinfo") or "").split("\n\n")[0].splitlines()
    kept = [line for line in lines if line.startswith(("model name", "flags", "Hardware"))]
    if kept:
        dest.mkdir(parents=True, exist_ok=True)
        (dest / "cpuinfo").write_text("\n".join(kept) + "\n")
        copied += 1
    nvidia = proc / "driver" / "nvidia"
    for src in [nvidia / "version", *sorted(nvidia.glob("gpus/*/information"))]:
        text = read_attr(src)
        if text is not None:
            target = dest / src.relative_to(proc)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text + "\n")
            copied += 1
    return copied
