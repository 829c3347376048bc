"""Units of rate: where a figure meets a limit in another unit (a line rate in Gbit/s beside a
bus bandwidth in GB/s), it is converted here, never compared as it stands (11.91 GB/s is
95 Gbit/s, not 12% of a 100 Gbit/s link)."""
from __future__ import annotations

from netbench.api import finite
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
