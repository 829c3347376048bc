"""Where results live: the rows' schema (``schema``), the Parquet store, one file per run
(``parquet``), and JSON lines with their import (``jsonl``). Storage knows no verdicts.
"""

from netbench.store.jsonl import JsonlStore, NullStore, import_jsonl
from netbench.store.parquet import CATALOG, ResultStore, RunWriter, StoreWarning, load
from netbench.store.protocol import ReadableStore, Store
from netbench.store.schema import (
    COLUMNS,
    RUN_ENV,
    SCHEMA_VERSION,
    arrow_schema,
    case_counts,
    check_run_id,
    clean_value,
    columns_of,
    counters_of,
    env_of,
    keyed,
    measured_params,
    params_json,
    params_of,
    split_unit,
    thin,
)

__all__ = [
    "CATALOG", "COLUMNS", "RUN_ENV", "SCHEMA_VERSION", "JsonlStore", "NullStore", "ReadableStore",
    "ResultStore", "Store",
    "RunWriter", "StoreWarning", "arrow_schema", "case_counts", "check_run_id", "clean_value",
    "columns_of", "counters_of", "env_of", "import_jsonl", "keyed", "load", "measured_params",
    "params_json", "params_of", "split_unit", "thin",
]
