"""netbench: one tool and one data model for interconnect benchmarks."""

__version__ = "0.1.0"
