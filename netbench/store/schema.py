"""The rows' schema: the columns and their types, what a row's params are and how a case is
keyed, the run-level facts kept in a file's footer, and the checks every writer applies. One
module both stores (Parquet and JSON lines) and every reader share.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from netbench.errors import UsageError

MAX_STORED_SAMPLES = 100_000   # beyond this, samples are thinned evenly; n_samples stays true
# What one file may bring a reader (a clear warning names a file beyond it, and it is not
# read): one row of 10^8 samples, 110 KB of zeros on disk, had cost every reader 2.5 GB.
MAX_FILE_SAMPLES = 20_000_000
# Rows of one file a reader takes: netbench's largest run, a 16,384-host fabric sweep, stores
# ~1,000,000 rows (3 x 10^6 identical rows had cost a reader 3 GB).
MAX_FILE_ROWS = 2_000_000

# (column, arrow type name) in file order; env_* columns flatten the fingerprint.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("schema_version", "int32"), ("run_id", "string"), ("label", "string"),
    ("started_at", "timestamp"), ("host", "string"), ("peer", "string"), ("suite", "string"),
    ("case_index", "int32"), ("benchmark", "string"), ("family", "string"), ("op", "string"),
    ("transport", "string"), ("device", "string"), ("msg_size", "int64"), ("params", "string"),
    ("metric", "string"), ("value", "float64"), ("unit", "string"), ("better", "string"),
    ("n_samples", "int64"), ("samples", "list<double>"), ("status", "string"),
    ("reason", "string"), ("env_kernel", "string"), ("env_os", "string"),
    ("env_cpu", "string"), ("env_nic", "string"), ("env_rdma_device", "string"),
    ("env_gpu", "string"), ("env_netbench", "string"), ("env_python", "string"),
    ("env_torch", "string"), ("env_nccl", "string"), ("env_rdma_core", "string"),
    ("env_json", "string"),
    # Added within schema 1 (files without them read them as missing): when each case
    # started and how long it took, harness included.
    ("case_started_at", "timestamp"), ("case_seconds", "float64"),
    # The unit's qualifier ("half RTT"): the unit column spells each quantity one way ("us").
    ("unit_note", "string"),
    # A fabric sweep's far end: the peer's device (host and peer name the pair).
    ("peer_device", "string"),
    # How busy the host was outside netbench while the case ran (netbench.env.hostload).
    ("load_other_cores", "float64"), ("load_own_cores", "float64"),
    ("load_steal_cores", "float64"), ("load_avg1", "float64"), ("load_cpu_mhz", "float64"),
    ("load_throttle_events", "int64"),
    # What a case's ``auto`` params became on this machine (data_plane=auto -> compiled, a
    # size of 0 -> the size measured), JSON; ``params`` stays as planned: the case's identity.
    # Rows of files written before the two were kept apart have no resolved (their params
    # hold both): see case_identity.
    ("resolved", "string"),
    # What the case is, as its benchmark declared it (netbench.api.Traits), so a stored run is
    # read without the plugin's code: the headline metric, which way the data flows
    # (forward/reverse/both), bytes one operation moves, nccl-tests' bus factor, what
    # msg_size counts, and the reference tool's columns before and after its figures (JSON
    # [[name, value], ...]).
    # Files written before them read them as missing: readers fall back where they can.
    ("headline", "string"), ("flow", "string"), ("op_bytes", "int64"),
    ("bus_factor", "float64"), ("size_means", "string"), ("lead", "string"),
    ("trail", "string"),
    # The routers the case's data crossed, as traces of its own 5-tuples saw them (JSON: a
    # list of addresses a connection, null where a router did not answer): a fabric sweep
    # with --trace. Under ECMP the pair's path, which its two ends alone cannot tell.
    ("route", "string"),
    # A traced sweep's flow: the share of its links it could expect beside its round's other
    # flows, from their traced paths (max-min; 1: alone, 0: unknown, its trace failed beside
    # others). Its figure is judged as value / fair_share: a collision is not a fault.
    ("fair_share", "float64"),
    # What the NIC and the kernel counted while the case ran (netbench.env.counters): JSON
    # {"<source>/<object>/<name>": delta} of the counters that grew; "{}": read, none grew;
    # missing: not read. The names read are in the run's footer (netbench_counters).
    ("counters", "string"),
    # What the value summarises of its samples, as its Metric declared it (api.STATISTICS:
    # "max", "p99.9", ...; null: a figure of its own). A max rests on one sample of each
    # invocation: verdicts judge such extremes by run-level evidence only. Files written
    # before it read it as missing; the CLI fills it from the installed benchmarks.
    ("statistic", "string"),
    # The metric whose work this one is a cost of, as its Metric declared it (``per``):
    # compare judges it per unit of that work where the work changed. Files written before
    # it read it as missing; the CLI fills it from the installed benchmarks.
    ("per_metric", "string"),
    # 1 where the metric is a resource the case spent (its Metric's ``cost``, or ``per``):
    # the host's load may explain its change even where the case was not short of CPU.
    ("cost", "int32"),
    # Where the case's ends ran, as its benchmark measured it (api.Measurement.placement:
    # "ends on one CPU" / "ends on separate CPUs"): on an idle VM a loopback ping-pong reads
    # 2.5 us on one and 40 us on two, so compare names a change of placement, never judges it.
    ("placement", "string"),
)


# What each version of the format added to the one before (version 1: every column above up
# to env_json), so a file says which columns it can hold and a reader knows a file from a
# newer netbench. Files written before the version moved all say 1 and hold the columns of
# some later version: their missing columns read as missing, as before. A column added to
# COLUMNS without a version here fails tests/test_format_versions.py.
FORMATS: tuple[tuple[int, tuple[str, ...], str], ...] = (
    (2, ("case_started_at", "case_seconds"), "when each case started and how long it took"),
    (3, ("unit_note",), "a unit's qualifier apart from the unit"),
    (4, ("peer_device",), "a fabric sweep's far device"),
    (5, ("load_other_cores", "load_own_cores", "load_steal_cores", "load_avg1", "load_cpu_mhz",
         "load_throttle_events"), "how busy the host was while the case ran"),
    (6, ("resolved",), "what a case's auto params became, apart from its planned params"),
    (7, ("headline", "flow", "op_bytes", "bus_factor", "size_means", "lead", "trail"),
     "the benchmark's declared traits"),
    (8, ("route",), "the routers a traced flow crossed"),
    (9, ("fair_share",), "a traced flow's fair share beside its round"),
    (10, ("counters",), "the NIC's and kernel's counters that grew"),
    (11, ("statistic",), "what a value summarises of its samples"),
    (12, ("per_metric",), "the work a cost is per"),
    (13, ("cost",), "a metric that is a resource the case spent"),
    (14, ("placement",), "where the case's ends ran"),
)
SCHEMA_VERSION = FORMATS[-1][0]


def format_columns(version: int) -> tuple[str, ...]:
    """The columns a file of this format version may hold (version 1: also any a later
    version added, since files wrote 1 until the version moved)."""
    later = {c for v, added, _ in FORMATS if v > version for c in added}
    return tuple(name for name, _ in COLUMNS if version == 1 or name not in later)


def version_problem(text: str | bytes | None) -> str:
    """Why a file of this footer version cannot be read here, or "" (no version: a file from
    before footers, read as version 1)."""
    if text is None:
        return ""
    raw = text.decode(errors="replace") if isinstance(text, bytes) else str(text)
    if not raw.isascii() or not raw.isdigit() or len(raw) > 6 or int(raw) < 1:
        return f"its format version {raw[:20]!r} is none netbench wrote (1 to {SCHEMA_VERSION})"
    if int(raw) > SCHEMA_VERSION:
        return (f"it was written by a newer netbench (format version {int(raw)}; this one reads "
                f"1 to {SCHEMA_VERSION}): upgrade netbench to read it")
    return ""


# The run's environment: the same on every row of one host's run, so a file keeps it once, in
# its footer (ENVS: {host: {column: value}}), and ``ResultStore.read`` joins it back. The
# env_nic / env_rdma_device / env_gpu columns stay on the rows: they name the case's device.
RUN_ENV = ("env_kernel", "env_os", "env_cpu", "env_netbench", "env_python", "env_torch",
           "env_nccl", "env_rdma_core", "env_json")
ENVS = "netbench_envs"
_UNIT_NOTE = re.compile(r"^\s*(?P<unit>[^()]+?)\s*\((?P<note>[^()]*)\)\s*$")


def arrow_schema() -> Any:
    import pyarrow as pa

    types = {"int32": pa.int32(), "int64": pa.int64(), "float64": pa.float64(),
             "string": pa.string(), "timestamp": pa.timestamp("us", tz="UTC"),
             "list<double>": pa.list_(pa.float64())}
    return pa.schema([(name, types[kind]) for name, kind in COLUMNS],
                     metadata={"netbench_schema_version": str(SCHEMA_VERSION)})


def rows_table(rows: list[dict[str, Any]], schema: Any) -> Any:
    """Rows (dicts; missing keys are nulls, unknown ones ignored) as a table of ``schema``,
    built a column at a time: pyarrow's from_pylist converts a row's samples list through a
    generic path about 100x slower (0.25 s for 100,000 samples), work that grew with every
    sample a case kept."""
    import pyarrow as pa

    columns = []
    for f in schema:
        values = [r.get(f.name) for r in rows]
        columns.append(_samples_column(values, f.type) if f.type == pa.list_(pa.float64())
                       else pa.array(values, type=f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _samples_column(values: list[Any], kind: Any) -> Any:
    """A list<double> column through numpy, one copy a row: pa.array converts each float
    on its own, ~6x slower (16 ms per 100,000 samples) than the timed loop they came from
    was per sample. Anything numpy will not take as numbers goes pyarrow's way (and its
    error, if any)."""
    import pyarrow as pa

    try:
        import numpy as np

        arrays = [np.asarray(v) for v in values if v is not None]
        if any(a.ndim != 1 or (a.dtype.kind not in "fiu" and len(a)) for a in arrays):
            raise ValueError("not a flat list of numbers")
        arrays = [a.astype(np.float64, copy=False) for a in arrays]
    except (ImportError, ValueError, TypeError):
        return pa.array(values, type=kind)
    lengths = [0 if v is None else len(v) for v in values]
    if sum(lengths) >= 2 ** 31:                   # beyond list<double>'s int32 offsets
        return pa.array(values, type=kind)
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float64)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat),
                                    mask=pa.array([v is None for v in values], pa.bool_()))


class _RunFacts:
    """What a run's footer says about its rows, gathered row by row (an import streams)."""

    def __init__(self) -> None:
        self.first: Mapping[str, Any] | None = None
        self.hosts: set[str] = set()
        self.benchmarks: set[str] = set()
        self.ok_benchmarks: set[str] = set()
        self.by_case: dict[Any, set[str]] = {}

    def add(self, row: Mapping[str, Any]) -> None:
        if self.first is None:
            self.first = {k: row.get(k) for k in ("run_id", "label", "started_at", "suite")}
        if row.get("host"):
            self.hosts.add(str(row.get("host")))
        self.benchmarks.add(str(row.get("benchmark")))
        if row.get("status") == "ok":
            self.ok_benchmarks.add(str(row.get("benchmark")))
        self.by_case.setdefault(row.get("case_index"), set()).add(str(row.get("status")))

    def metadata(self) -> dict[str, str]:
        """Run-level facts kept in the file footer, so a store's index needs no column reads."""
        first = self.first
        if first is None:
            return {"netbench_schema_version": str(SCHEMA_VERSION)}
        started = first.get("started_at")
        hosts = sorted(self.hosts)       # a run of several hosts (a fabric sweep): how many
        return {
            "netbench_schema_version": str(SCHEMA_VERSION),
            "netbench_run_id": str(first.get("run_id") or ""),
            "netbench_label": str(first.get("label") or ""),
            "netbench_started_at": started.isoformat() if hasattr(started, "isoformat")
            else str(started),
            "netbench_suite": str(first.get("suite") or ""),
            "netbench_host": hosts[0] if len(hosts) == 1 else
            f"{len(hosts)} hosts" if hosts else "",
            "netbench_benchmarks": json.dumps(sorted(self.benchmarks)),
            "netbench_ok_benchmarks": json.dumps(sorted(self.ok_benchmarks)),
            "netbench_cases": json.dumps(_by_status(self.by_case)),
        }


def _run_metadata(rows: list[Mapping[str, Any]]) -> dict[str, str]:
    facts = _RunFacts()
    for row in rows:
        facts.add(row)
    return facts.metadata()


def case_counts(rows: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Cases (not rows) by status: a case is failed if any of its rows failed, skipped if all
    were skipped, else ok."""
    by_case: dict[Any, set[str]] = {}
    for row in rows:
        by_case.setdefault(row.get("case_index"), set()).add(str(row.get("status")))
    return _by_status(by_case)


def _by_status(by_case: Mapping[Any, set[str]]) -> dict[str, int]:
    counts = {"ok": 0, "skipped": 0, "failed": 0}
    for statuses in by_case.values():
        status = "failed" if "failed" in statuses else "ok" if "ok" in statuses else "skipped"
        counts[status] += 1
    return counts


MAX_COUNTER_KEYS = 8193      # a counters column's names (both ends', and far/unread)
MAX_COUNTER_NAME = 260       # characters in one


def counters_of(text: Any) -> dict[str, int] | None:
    """A row's ``counters`` (JSON text: names to whole numbers >= 0) as a dict; None where it
    is missing or is not that (a rank's or a file's garbage is not read, never a crash)."""
    if not isinstance(text, str) or len(text) > MAX_COUNTER_KEYS * (MAX_COUNTER_NAME + 24):
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or len(data) > MAX_COUNTER_KEYS or not all(
            isinstance(k, str) and len(k) <= MAX_COUNTER_NAME and type(v) is int and v >= 0
            for k, v in data.items()):
        return None
    return data


def params_json(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, separators=(",", ":"), default=str)


def params_of(text: Any) -> dict[str, Any]:
    """A row's ``params`` (or ``resolved``) as a dict: the one parser of them; {} where the
    text is missing or no JSON object."""
    if not isinstance(text, str) or not text:
        return {}
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def columns_of(text: Any) -> list[tuple[str, str]]:
    """A row's ``lead`` or ``trail`` (the reference tool's columns) as [(name, value)]; []
    where none was stored or it is not a JSON list of pairs."""
    if not isinstance(text, str) or not text:
        return []
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return []
    if not isinstance(value, list) or not all(
            isinstance(p, list) and len(p) == 2 for p in value):
        return []
    return [(str(name), str(shown)) for name, shown in value]


def measured_params(row: Mapping[str, Any]) -> dict[str, Any]:
    """What a row's case ran with on its machine: the planned params, ``auto`` resolved."""
    return {**params_of(row.get("params")), **params_of(row.get("resolved"))}


def keyed(*frames: Any) -> list[Any]:
    """``frames`` of rows with ``params`` made each row's case as compare, history and the
    fabric matrices match it: the params as planned (data_plane=auto on every machine,
    whatever auto became there). Rows of files written before params and resolved were
    kept apart (no ``resolved``: their params hold what auto became) can only be matched as
    measured, so where any frame holds one, every row of every frame is keyed by its params
    with resolved merged in (None frames pass through)."""
    present = [f for f in frames if f is not None and not f.empty]
    unsplit = any("resolved" not in f or f["resolved"].isna().any() for f in present)
    if not unsplit:
        return list(frames)
    cache: dict[tuple[Any, Any], Any] = {}

    def merged(params: Any, resolved: Any) -> Any:
        key = (params, resolved)
        if key not in cache:
            extra = params_of(resolved)
            cache[key] = params_json({**params_of(params), **extra}) if extra else params
        return cache[key]

    out = []
    for f in frames:
        if f is None or f.empty or "resolved" not in f:
            out.append(f)
            continue
        out.append(f.assign(params=[merged(p, r) for p, r in zip(f["params"],
                                                                 f["resolved"])]))
    return out


def thin(samples: Sequence[float], limit: int = MAX_STORED_SAMPLES) -> list[float]:
    if len(samples) > limit:
        step = len(samples) / limit
        samples = [samples[int(i * step)] for i in range(limit)]
    if getattr(samples, "dtype", None) is not None:     # numpy's: converted in one C loop
        return samples.astype("float64").tolist()       # type: ignore[attr-defined]
    return [float(s) for s in samples]


def clean_value(value: float | None) -> float | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


RUN_ID = re.compile(r"[A-Za-z0-9_]{1,64}")
RUN_ID_RULE = "1 to 64 ASCII letters, digits or underscores (netbench makes 12 hex digits)"
def _conform(table: Any, schema: Any) -> Any:
    """A stored table in the current schema: columns added since it was written become
    nulls (a run written by an older netbench and resumed by this one)."""
    import pyarrow as pa

    columns = [table.column(f.name) if f.name in table.column_names
               else pa.nulls(len(table), type=f.type) for f in schema]
    return pa.Table.from_arrays(columns, schema=schema.remove_metadata())


def _table(rows: list[dict[str, Any]], metadata: Mapping[str, str]) -> Any:
    """Rows as a table, the run's environment moved from its rows into the footer."""
    envs = _envs_of(rows)
    if envs:
        metadata = {**metadata, ENVS: json.dumps(envs, sort_keys=True)}
        blank = dict.fromkeys(RUN_ENV)
        rows = [{**r, **blank} for r in rows]
    rows = [{**r, **split_unit(r.get("unit"))} for r in rows]
    return rows_table(rows, arrow_schema().with_metadata(dict(metadata)))


def split_unit(unit: Any) -> dict[str, Any]:
    """The stored spelling: "us (half RTT)" -> unit "us", unit_note "half RTT"."""
    match = _UNIT_NOTE.match(unit) if isinstance(unit, str) else None
    return {"unit": match.group("unit"), "unit_note": match.group("note")} if match else \
        {"unit": unit}



def _envs_of(rows: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, Any]]:
    """{host: {env column: value}} from the first row of each host that carries them."""
    envs: dict[str, dict[str, Any]] = {}
    for row in rows:
        host = str(row.get("host") or "")
        if host not in envs and any(row.get(c) is not None for c in RUN_ENV):
            envs[host] = {c: row.get(c) for c in RUN_ENV}
    return envs


def env_of(text: Any) -> dict[str, Any]:
    """A row's env_json (or a footer's JSON) as a dict; {} where none was recorded (missing,
    NaN, not JSON, not an object)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if not isinstance(text, str) or not text:
        return {}
    try:
        env = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return env if isinstance(env, dict) else {}


def _footer_envs(metadata: Mapping[bytes, bytes] | None) -> dict[str, dict[str, Any]]:
    """Each host's environment the footer keeps; a host whose entry is no JSON object (a
    forged `{"vm": [1, 2]}`) is left out, never an AttributeError in every reader."""
    envs = env_of((metadata or {}).get(ENVS.encode()))
    return {str(host): env for host, env in envs.items() if isinstance(env, dict)}


def _missing(value: Any) -> bool:
    try:
        return value is None or bool(value != value)
    except (TypeError, ValueError):
        return False


def check_run_id(run_id: Any) -> str:
    """A run id that can name a file in the store, or a UsageError saying what is accepted."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        shown = repr(run_id)[:80] if isinstance(run_id, str) else \
            f"{type(run_id).__name__} {str(run_id)[:60]!r}"
        raise UsageError(f"run_id {shown} cannot name a run's file: a run id is {RUN_ID_RULE}")
    return run_id


