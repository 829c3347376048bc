"""Soft-RoCE (rdma_rxe): make an emulated RDMA device on a netdev, and remove it afterwards.

For hosts without RDMA hardware. Needs root, a kernel with the rdma_rxe module and iproute2's
`rdma` tool; each failure says which of those is missing and what to do instead. Figures
measured on rxe are functional, never hardware performance, and are marked so in the store.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from netbench.errors import NetbenchError, UsageError

VM_HINT = ("`make bench-softroce` runs the RDMA suite in a throw-away VM with a stock kernel "
           "and a real rxe device")


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NetbenchError(f"`{cmd[0]}` is not installed (apt-get install "
                            f"{'kmod' if cmd[0] == 'modprobe' else 'iproute2'})") from None
    except subprocess.TimeoutExpired:
        raise NetbenchError(f"`{' '.join(cmd)}` did not finish within 30 s") from None


def soft_devices(sysfs: Path = Path("/sys")) -> dict[str, str]:
    """Existing software RDMA devices (rxe, siw) and the netdev each sits on."""
    out = {}
    root = sysfs / "class" / "infiniband"
    for dev in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            parent = (dev / "parent").read_text().strip()
        except OSError:
            continue
        out[dev.name] = parent
    return out


def pick_netdev() -> str:
    """The first UP netdev that is not loopback, else lo (rxe on lo works on 6.x kernels)."""
    net = Path("/sys/class/net")
    for dev in sorted(net.iterdir()):
        if dev.name == "lo":
            continue
        try:
            if (dev / "operstate").read_text().strip() == "up":
                return dev.name
        except OSError:
            continue
    return "lo"


def add(netdev: str = "auto", name: str = "rxe0") -> str:
    """Create ``name`` on ``netdev``; returns the netdev used. Raises with the exact reason."""
    if os.geteuid() != 0:
        raise NetbenchError("creating a soft-RoCE device needs root (modprobe, rdma link add); "
                            f"or {VM_HINT}")
    netdev = pick_netdev() if netdev == "auto" else netdev
    if not Path(f"/sys/class/net/{netdev}").exists():
        known = ", ".join(sorted(p.name for p in Path("/sys/class/net").iterdir()))
        raise UsageError(f"no network interface {netdev!r}; this host has {known}")
    if name in soft_devices():
        raise UsageError(f"RDMA device {name!r} already exists")
    if not shutil.which("rdma"):
        raise NetbenchError("iproute2's `rdma` tool is missing (apt-get install iproute2)")
    probe = _run(["modprobe", "rdma_rxe"])
    if probe.returncode != 0:
        detail = (probe.stderr or probe.stdout).strip().splitlines()
        raise NetbenchError(f"cannot load rdma_rxe ({detail[-1] if detail else 'modprobe failed'})"
                            f": this kernel has no soft-RoCE support; {VM_HINT}")
    made = _run(["rdma", "link", "add", name, "type", "rxe", "netdev", netdev])
    if made.returncode != 0:
        raise NetbenchError(f"`rdma link add {name} type rxe netdev {netdev}` failed: "
                            f"{made.stderr.strip()}")
    return netdev


def remove(name: str) -> None:
    if name not in soft_devices():
        raise UsageError(f"no soft RDMA device {name!r}; existing: "
                         f"{', '.join(soft_devices()) or 'none'}")
    done = _run(["rdma", "link", "delete", name])
    if done.returncode != 0:
        raise NetbenchError(f"`rdma link delete {name}` failed: {done.stderr.strip()}")
