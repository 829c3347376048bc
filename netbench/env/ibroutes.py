"""InfiniBand's unicast forwarding tables as the subnet manager set them, read from the text
``dump_fts`` (infiniband-diags; ``dump_lfts.sh`` before it) and ``ibroute`` print: a block a
switch (``Unicast lids [0x0-0x4c] of switch Lid 7 guid 0x... (NAME):``), a line a destination
LID (``0x0012 004 : (Channel Adapter portguid 0x...: 'desc')``: the port it leaves by), closed
by ``18 valid lids dumped``. The blocks may follow ibnetdiscover's output in one file
(``{ ibnetdiscover; dump_fts; } > fabric.ib``); ``split`` takes them apart, and the topology
maps LIDs and ports onto hosts and switches with the cabling ibnetdiscover gave."""

from __future__ import annotations

import re

from netbench.errors import UsageError

ACCEPTED = ("dump_fts/dump_lfts.sh/ibroute blocks: a 'Unicast lids [...] of switch ... guid "
            "0x... (name):' line, the 'Lid Out Destination' heading, '0xLID PORT : (...)' "
            "lines and 'N valid lids dumped'")
MAX_LINE = 4096     # characters a line may hold (each pattern then costs a bounded time)
_HEADER = re.compile(r"Unicast lids \[[^\]]*\] of switch (?:Lid \d{1,5}|DR path [^(]*?) "
                     r"guid 0x([0-9a-fA-F]{1,16}) \(.*\):?\s*$")
_ENTRY = re.compile(r"0x([0-9a-fA-F]{1,4})\s+(\d{1,3})\s*:\s*\(.*\)\s*$")
_HEADING = re.compile(r"(Lid\s+Out\s+Destination|Port\s+Info)\s*$")
_FOOTER = re.compile(r"\d+\s+(valid\s+)?lids\s+dumped\b")


def split(text: str, source: str) -> tuple[list[tuple[int, str]], dict[str, dict[int, int]]]:
    """``text``'s lines outside the tables' blocks (number, line), and the tables: switch id
    as ibnetdiscover names it (``S-<16 hex digits>``) -> destination LID -> out port (0: the
    switch itself). A line inside a block that is none of its lines is an error naming it."""
    rest: list[tuple[int, str]] = []
    tables: dict[str, dict[int, int]] = {}
    table: dict[int, int] | None = None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if len(line) > MAX_LINE:
            raise UsageError(f"topology {source} line {number}: longer than {MAX_LINE} "
                             "characters")
        head = _HEADER.match(line) if line.startswith("Unicast") else None
        if head:
            table = tables.setdefault(f"S-{int(head.group(1), 16):016x}", {})
            continue
        if table is None:
            rest.append((number, raw))
            continue
        entry = _ENTRY.match(line)
        if entry:
            table[int(entry.group(1), 16)] = int(entry.group(2))
        elif _FOOTER.match(line):
            table = None
        elif line and not _HEADING.match(line) and not line.startswith("ibwarn:"):
            raise UsageError(f"topology {source} line {number}: {line[:60]!r} is not a line "
                             f"of a forwarding table (accepted: {ACCEPTED})")
    return rest, tables
