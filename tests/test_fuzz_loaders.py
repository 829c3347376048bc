"""Every file netbench reads, fuzzed: random TOML shapes built from the real keys, random
JSON rows and random bytes. No exception escapes the loaders but NetbenchError, which the CLI
turns into one `netbench: error:` line."""

from __future__ import annotations

import json
import random
import string
from pathlib import Path

import pytest

from netbench.analysis.accept import load_spec
from netbench.analysis.compare import load_thresholds
from netbench.errors import NetbenchError
from netbench.run.suite import load_suite
from netbench.store import COLUMNS, ResultStore, import_jsonl

KEYS = ["suite", "case", "accept", "check", "thresholds", "name", "benchmark", "metric",
        "timeout", "msg_size", "iterations", "min", "max", "min_line_rate", "line_rate",
        "params", "msg_size_min", "msg_size_max", "softroce", "description", "streams",
        "bw_avg", "default", "mem.copy:bw", "x"]
BENCHES = ["mem.copy", "tcp.stream", "rdma.write_bw", "nosuch", ""]


def _scalar(rng: random.Random):
    return rng.choice([
        rng.randint(-3, 1 << 40), rng.random() * 1e3, float("nan"), float("inf"), True, "",
        rng.choice(BENCHES), rng.choice(["64K", "1M..8M", "all", "probe", "5%", "nan", "bw"]),
        "".join(rng.choice(string.printable) for _ in range(rng.randint(0, 8))),
    ])


def _value(rng: random.Random, depth: int = 0):
    roll = rng.random()
    if depth < 3 and roll < 0.2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if depth < 3 and roll < 0.4:
        return {rng.choice(KEYS): _value(rng, depth + 1) for _ in range(rng.randint(0, 4))}
    return _scalar(rng)


def _toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(value, repr(value)) \
            if value == value else "nan"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_value(v)}" for k, v in value.items()) + "}"


def _toml_doc(rng: random.Random) -> str:
    lines = []
    for _ in range(rng.randint(0, 5)):
        key = rng.choice(KEYS)
        shape = rng.random()
        if shape < 0.4 and key in ("case", "check"):
            for _ in range(rng.randint(1, 3)):
                lines.append(f"[[{key}]]")
                for _ in range(rng.randint(0, 5)):
                    lines.append(f"{json.dumps(rng.choice(KEYS))} = "
                                 f"{_toml_value(_value(rng, 1))}")
        elif shape < 0.7:
            lines.append(f"[{json.dumps(key)}]")
            for _ in range(rng.randint(0, 4)):
                lines.append(f"{json.dumps(rng.choice(KEYS))} = {_toml_value(_value(rng, 1))}")
        else:
            lines.insert(0, f"{json.dumps(key)} = {_toml_value(_value(rng))}")
    return "\n".join(lines) + "\n"


def _bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))


def _only_netbench_errors(call, path: Path) -> None:
    try:
        call(path)
    except NetbenchError:
        pass
    except Exception as exc:  # noqa: BLE001 - the point of the test
        pytest.fail(f"{type(exc).__name__}: {exc} escaped for {path.read_bytes()[:400]!r}")


@pytest.mark.parametrize("seed", range(4))
def test_toml_loaders_raise_only_netbench_errors(tmp_path, seed):
    rng = random.Random(seed)
    path = tmp_path / "f.toml"
    loaders = [load_suite, load_spec, lambda p: load_thresholds([], str(p))]
    for i in range(150):
        data = _bytes(rng) if i % 10 == 0 else _toml_doc(rng).encode()
        path.write_bytes(data)
        for loader in loaders:
            _only_netbench_errors(loader, path)


def test_jsonl_import_raises_only_netbench_errors(tmp_path):
    rng = random.Random(7)
    names = [name for name, _ in COLUMNS]
    store = ResultStore(tmp_path / "store")
    path = tmp_path / "rows.jsonl"
    good = {name: None for name in names}
    good.update(schema_version=1, run_id="r1", started_at="2026-12-01T00:00:00+00:00",
                benchmark="mem.copy", metric="bw", value=1.0, status="ok", case_index=0)
    for i in range(200):
        row = dict(good)
        for _ in range(rng.randint(1, 3)):
            row[rng.choice(names)] = _value(rng)
        text = _bytes(rng) if i % 10 == 0 else (json.dumps(row) + "\n").encode()
        path.write_bytes(text)
        _only_netbench_errors(lambda p: import_jsonl(p, store), path)
