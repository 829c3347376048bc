"""Units of rate: where a figure meets a limit in another unit (a line rate in Gbit/s beside a
bus bandwidth in GB/s), it is converted here, never compared as it stands (11.91 GB/s is
95 Gbit/s, not 12% of a 100 Gbit/s link)."""
from __future__ import annotations

import math
import re

from netbench.errors import UsageError

# Gbit/s in one of each rate unit netbench stores (decimal, as NICs and nccl-tests count).
GBIT_PER = {"Gbit/s": 1.0, "Mbit/s": 1e-3, "Kbit/s": 1e-6, "bit/s": 1e-9,
            "GB/s": 8.0, "MB/s": 8e-3, "KB/s": 8e-6, "B/s": 8e-9,
            "GiB/s": 8 * 1.073741824, "MiB/s": 8 * 1.048576e-3}


def is_rate(unit: str | None) -> bool:
    """Whether ``unit`` moves bits or bytes per second (what a line rate bounds)."""
    return unit in GBIT_PER


def from_gbit(gbit: float, unit: str) -> float:
    """``gbit`` Gbit/s in ``unit`` (a rate unit: ``is_rate``); ValueError naming the unit
    and what is accepted otherwise."""
    if unit not in GBIT_PER:
        raise ValueError(f"{unit!r} is not a rate in bits or bytes per second "
                         f"({', '.join(GBIT_PER)})")
    return gbit / GBIT_PER[unit]


def parse_threshold(text: str | float) -> float:
    """A relative threshold as written in a suite, a file or a flag: 0.05 or "5%"; a
    UsageError naming it and what is accepted otherwise."""
    text = str(text).strip()
    try:
        value = finite(float(text[:-1]) / 100 if text.endswith("%") else float(text))
    except ValueError:
        value = -1.0
    if value < 0:
        raise UsageError(f"threshold {text!r}: use a finite, non-negative fraction (0.05) or "
                         "percentage (5%)")
    return value


# Microseconds in one of each time unit netbench stores (a latency's canonical unit is us).
US_PER = {"us": 1.0, "ms": 1e3, "s": 1e6, "ns": 1e-3}


def canonical(value: float, unit: str) -> tuple[float, str]:
    """``value`` in one unit per quantity, where one family of figures must not mix units
    (an exported gauge): rates in Gbit/s, times in us; anything else as it is."""
    if unit in GBIT_PER:
        return value * GBIT_PER[unit], "Gbit/s"
    if unit in US_PER:
        return value * US_PER[unit], "us"
    return value, unit


# A smaller unit for a rate under one of its own (0.1909 Gbit/s reads 190.9 Mbit/s, as iperf3
# writes it).
SMALLER = {"Gbit/s": ("Mbit/s", 1e3), "GB/s": ("MB/s", 1e3)}


def readable(values: list[float], unit: str) -> tuple[float, str]:
    """The factor and unit a column of ``values`` in ``unit`` reads best in: Mbit/s where
    every one is under 1 Gbit/s (one unit a column, never mixed)."""
    finite = [abs(v) for v in values if v == v]
    if unit in SMALLER and finite and max(finite) < 1.0:
        smaller, factor = SMALLER[unit]
        return factor, smaller
    return 1.0, unit


# --- sizes: what a param of kind "size" accepts, and how one is shown -------------------------

_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b)?\s*$", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


_DURATION = re.compile(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|min|h|d)?\s*")
_SECONDS = {"ms": 1e-3, "s": 1.0, None: 1.0, "m": 60.0, "min": 60.0, "h": 3600.0,
            "d": 86400.0}


def parse_duration(text: str | float, what: str = "duration") -> float:
    """Seconds from "4h", "90m", "10s", "500ms", "1.5h" or a number of seconds; a UsageError
    naming ``what`` and what is accepted otherwise."""
    match = _DURATION.fullmatch(str(text))
    seconds = float(match.group(1)) * _SECONDS[match.group(2)] if match else math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise UsageError(f"{what} {text!r}: a positive time: seconds (10, 2.5s), minutes (90m), "
                         "hours (4h) or days (1d)")
    return seconds


def finite(value: float) -> float:
    """``value`` if it is a finite number; NaN and infinities are never a user's number (NaN
    compares false with everything, so a gate given one would always pass)."""
    if not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return value


def parse_size(text: str | int) -> int:
    """'64K', '64KiB', '1M', '65536' -> bytes. Binary multiples, as iperf3 and perftest use."""
    if isinstance(text, bool):
        raise ValueError(f"{text!r} is not a size")
    if isinstance(text, int):
        return text
    match = _SIZE_RE.match(str(text))
    if not match:
        raise ValueError(f"{text!r} is not a size (use bytes or a suffix: 512, 64K, 1M, 2G)")
    number, unit = float(match.group(1)), match.group(2).lower()
    value = number * _SIZE_UNITS[unit]
    if value != int(value):
        raise ValueError(f"{text!r} is not a whole number of bytes")
    return int(value)


def format_size(n: int) -> str:
    """65536 -> '64K'; sizes that are not whole multiples stay in bytes."""
    for suffix, mult in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= mult and n % mult == 0:
            return f"{n // mult}{suffix}"
    return str(n)


MAX_SWEEP = 4096          # sizes one range may expand to


def size_range(text: str) -> list[int]:
    """'2..8M' -> powers of two from 2 B to 8 MiB, like perftest -a; nccl-tests' -b/-e/-f and
    -i as 'LO..HI:xF' (multiply by F each step) and 'LO..HI:+STEP' (add STEP bytes)."""
    span, _, step = text.partition(":")
    lo_text, hi_text = span.split("..", 1)
    lo, hi = parse_size(lo_text), parse_size(hi_text)
    if lo <= 0 or hi < lo:
        raise ValueError(f"{text!r}: a range needs 0 < low <= high")
    step = step.strip().lower()
    factor, increment = 2, 0
    if step.startswith(("x", "*")):
        factor = int(step[1:]) if step[1:].isdigit() else 0
        if factor < 2:
            raise ValueError(f"{text!r}: the factor after ':x' must be an integer >= 2")
    elif step.startswith("+"):
        increment = parse_size(step[1:])
        if increment <= 0:
            raise ValueError(f"{text!r}: the step after ':+' must be a positive size")
    elif step:
        raise ValueError(f"{text!r}: after ':' give xFACTOR (x4) or +STEP (+1M)")
    out, value = [], lo
    while value <= hi:
        out.append(value)
        if len(out) > MAX_SWEEP:
            raise ValueError(f"{text!r} expands to more than {MAX_SWEEP} sizes")
        value = value + increment if increment else value * factor
    return out
