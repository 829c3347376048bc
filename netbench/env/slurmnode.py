"""A Slurm node's state, and draining it with a reason or resuming it, through ``scontrol``,
as a node health check run as Slurm's ``HealthCheckProgram`` or in a prolog does (NHC's
rule): a failing check drains its node with ``netbench: <what failed>``; a passing one
resumes only a node netbench itself drained, never one an admin drained for another reason.

Every call is bounded (``TIMEOUT``), and every failure (scontrol missing, the controller
down, a node Slurm does not know) is a ``SlurmError`` with scontrol's own words: the caller
says it and drains nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

TIMEOUT = 15.0                     # seconds a scontrol call may take
PREFIX = "netbench:"               # the reason of a node netbench drained
MAX_REASON = 250                   # characters of a reason (scontrol keeps what it is given)
SERVING = {"IDLE", "MIXED", "ALLOCATED", "COMPLETING"}        # base states a check may act on
# NOT_RESPONDING is not held: it is the controller's view of a missed ping (a loaded node), which
# clears at the next one, and a check running on the node shows its host is up.
HELD = {"DOWN", "FAIL", "FAILING", "MAINT", "REBOOT_REQUESTED", "REBOOT_ISSUED", "POWERED_DOWN",
        "POWERING_DOWN", "POWER_DOWN", "RESERVED_FOR_MAINT"}
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# "Reason=text [user@2026-12-06T07:18:37]", then possibly more fields (Comment=, Extra=).
_REASON = re.compile(r" Reason=(.*?) \[[^\]@]*@[^\]]*\]")


class SlurmError(Exception):
    pass


@dataclass(frozen=True)
class NodeState:
    name: str
    state: str                     # "IDLE", "MIXED+DRAIN" ...
    reason: str                    # "" when none

    @property
    def drained(self) -> bool:
        return "DRAIN" in self.state.upper()

    @property
    def drained_by_us(self) -> bool:
        return self.drained and self.reason.startswith(PREFIX)

    @property
    def in_service(self) -> bool:
        """Up and scheduling but for a drain: not DOWN, FAIL, MAINT, REBOOT, powered down or
        unknown (an admin's or Slurm's own state, which a health check never changes)."""
        parts = self.state.upper().replace("*", "").split("+")
        return parts[0] in SERVING and not set(parts[1:]) & HELD


def _scontrol(*args: str) -> str:
    tool = shutil.which("scontrol")
    if tool is None:
        raise SlurmError("scontrol is not installed (Debian: apt-get install slurm-client)")
    try:
        done = subprocess.run([tool, *args], capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise SlurmError(f"scontrol {args[0]} took more than {TIMEOUT:g} s (is slurmctld "
                         "up?)") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SlurmError(f"scontrol {' '.join(args[:3])}: "
                         f"{said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout


def node_state(name: str) -> NodeState:
    """``scontrol show node NAME``: its state and reason."""
    if not _NAME.fullmatch(name):
        raise SlurmError(f"node name {name!r}: one node's name (letters, digits, '.', '_', "
                         "'-'), not a host list")
    text = _scontrol("show", "node", name, "--oneliner")
    fields = {}
    line = text.strip().splitlines()[0] if text.strip() else ""
    found = _REASON.search(line)
    head = line[:found.start()] if found else line.partition(" Reason=")[0]
    reason = found.group(1) if found else line.partition(" Reason=")[2]
    for part in head.split():
        key, _, value = part.partition("=")
        fields[key] = value
    if "State" not in fields:
        raise SlurmError(f"scontrol show node {name}: no State in {line[:200]!r}")
    return NodeState(fields.get("NodeName", name), fields["State"], reason.strip())


def drain(name: str, why: str) -> str:
    """Drain ``name`` with ``netbench: why`` (a node already draining for another reason is
    left as the admin set it); returns what was done, in words."""
    now = node_state(name)
    if now.reason and not now.reason.startswith(PREFIX) or not now.in_service:
        return (f"{name} is {now.state} already ({now.reason or 'no reason'}): left as it "
                "is")
    reason = f"{PREFIX} {' '.join(why.split())}"[:MAX_REASON]
    _scontrol("update", f"NodeName={name}", "State=DRAIN", f"Reason={reason}")
    return f"drained {name}: {reason}"


def resume(name: str) -> str:
    """Resume ``name`` where netbench drained it; any other state is not touched."""
    now = node_state(name)
    if not now.drained and now.in_service:
        return ""
    if not now.drained_by_us or not now.in_service:
        return f"{name} stays {now.state} ({now.reason or 'no reason'}: not netbench's)"
    _scontrol("update", f"NodeName={name}", "State=RESUME")
    return f"resumed {name} (netbench had drained it: {now.reason})"


def this_node() -> str:
    """The node a check runs on, as Slurm names it: slurmd's SLURMD_NODENAME (a prolog's),
    else the short host name (Slurm's default NodeName, as NHC takes it)."""
    import socket

    return os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


def act(node: str | None, failed: bool, why: str) -> str:
    """What a node check does in Slurm: drain ``node`` (default: this one) with ``why`` when
    it failed, else resume it where netbench drained it; Slurm out of reach is said, and
    nothing is drained."""
    node = node or this_node()
    try:
        return drain(node, why) if failed else (resume(node) or f"{node} left as it is")
    except SlurmError as exc:
        return f"{exc}: " + ("nothing drained" if failed else "nothing resumed")
