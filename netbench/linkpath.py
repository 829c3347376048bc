"""The PCIe path from a device (GPU, RDMA NIC) up to its root port, and its bottleneck.

Every hop reports its current and maximum link speed and width from sysfs; the narrowest hop
bounds what any copy or DMA through the path can reach, and a hop running below what both its
ends can do is flagged as downgraded ("running at 8 GT/s x4, capable of 16 GT/s x16").
Works on a captured tree (``netbench probe --capture DIR``, read back with ``--sysfs-root``);
missing or unreadable files and unknown speed strings leave that figure unknown, never crash.
"""

from __future__ import annotations

import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
# Line-code efficiency per signalling rate: 8b/10b up to Gen2, 128b/130b Gen3-5, FLIT at Gen6.
ENCODING = {2.5: 8 / 10, 5.0: 8 / 10, 8.0: 128 / 130, 16.0: 128 / 130, 32.0: 128 / 130,
            64.0: 242 / 256}
GENERATION = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
_ATTRS = ("class", "vendor", "device", "current_link_speed", "current_link_width",
          "max_link_speed", "max_link_width")


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


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
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
    max_gbytes: float | None

    def describe(self, speed: float | None, width: int | None) -> str:
        gen = f"Gen{GENERATION[speed]} " if speed in GENERATION else ""
        s = f"{speed:g} GT/s" if speed else "? GT/s"
        return f"{gen}{s} x{width if width else '?'}"


@dataclass
class LinkPath:
    device: str
    hops: list[Hop]
    bottleneck: str | None       # the hop's address
    bottleneck_gbytes: float | None
    downgraded: list[str]        # human-readable, one per downgraded hop

    def summary(self) -> str:
        if self.bottleneck is None:
            return f"{self.device}: link speed unknown"
        hop = next(h for h in self.hops if h.address == self.bottleneck)
        text = (f"{self.device}: bottleneck {hop.describe(hop.speed, hop.width)} at "
                f"{self.bottleneck} = {self.bottleneck_gbytes:.2f} GB/s per direction")
        return text + ("; DOWNGRADED: " + "; ".join(self.downgraded) if self.downgraded else "")

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "summary": self.summary()}


def walk(sysfs: Path, address: str) -> LinkPath | None:
    """Hops from the PCI function ``address`` up through bridges to its root port."""
    link = sysfs / "bus" / "pci" / "devices" / address
    if not link.exists():
        return None
    path = Path(os.path.realpath(link))
    hops = []
    while BDF.match(path.name):
        speed = parse_speed(_read(path / "current_link_speed"))
        width = _int(_read(path / "current_link_width"))
        max_speed = parse_speed(_read(path / "max_link_speed"))
        max_width = _int(_read(path / "max_link_width"))
        hops.append(Hop(path.name, _read(path / "class"), speed, width or None, max_speed,
                        max_width or None, lane_gbytes(speed, width),
                        lane_gbytes(max_speed, max_width)))
        path = path.parent
    known = [h for h in hops if h.gbytes is not None]
    narrowest = min(known, key=lambda h: h.gbytes) if known else None
    # A link joins a function (its status says the link's state now) and the bridge port
    # above it: it is downgraded only when it runs below what BOTH ends can do. A root port
    # that could run x16 above an x1 device is a narrow device, not a degraded link.
    downgraded = []
    for child, port in zip(hops, hops[1:]):
        cap_speed = _least(child.max_speed, port.max_speed)
        cap_width = _least(child.max_width, port.max_width)
        slower = child.speed is not None and cap_speed is not None and child.speed < cap_speed
        narrower = child.width is not None and cap_width is not None and child.width < cap_width
        if slower or narrower:
            downgraded.append(f"link {port.address} -> {child.address} running at "
                              f"{child.describe(child.speed, child.width)}, capable of "
                              f"{child.describe(cap_speed, cap_width)}")
    return LinkPath(address, hops, narrowest.address if narrowest else None,
                    narrowest.gbytes if narrowest else None, downgraded)


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
        cls = _read(entry / "class") or ""
        if cls.startswith("0x03"):
            found[entry.name] = "gpu" if cls.startswith(("0x0300", "0x0302")) else "display"
    ib = sysfs / "class" / "infiniband"
    for dev in sorted(ib.iterdir()) if ib.is_dir() else []:
        target = Path(os.path.realpath(dev / "device"))
        if BDF.match(target.name):
            found[target.name] = f"rdma {dev.name}"
    return found


def probe_paths(sysfs: Path) -> list[dict[str, Any]]:
    out = []
    for address, kind in interesting_devices(sysfs).items():
        path = walk(sysfs, address)
        if path is not None:
            out.append({"kind": kind, **path.as_dict()})
    return out


def capture(sysfs: Path, dest: Path) -> int:
    """Copy what the probe reads (PCI link attributes, net and infiniband classes), keeping
    symlinks relative, so ``--sysfs-root dest`` sees the same tree. Returns files copied."""
    copied = 0
    root = sysfs.resolve()

    def copy_file(src: Path) -> None:
        nonlocal copied
        text = _read(src)
        if text is None:
            return
        target = dest / src.relative_to(root)
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
