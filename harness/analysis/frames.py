"""The run files' frames: column schema declared once per file kind, typed, written atomically.

Every run directory's `requests.parquet` and `timeseries.parquet` go through `requests_frame` /
`timeseries_frame`, so a column has one dtype and one unit everywhere. Columns not declared here
(a new emulator counter, the load generator's own stamps) are kept as they come, never dropped;
the known mode-specific ones (REQUEST_EXTRA_DTYPES: live/url/serve stamps) are typed when present.
`summary.parquet` and `report.parquet` go through `summary_frame` (SUMMARY_DTYPES and its rules).

So the files of any set of runs, of any modes, read together (`pd.read_parquet([...])`): a column
has one Arrow type in every file. Counts are int64 (pandas `Int64`, nullable, where a mode may not
know one), measures float64 (NaN when unknown), text large_string and flags bool. No column is
written with Arrow's `null` type: a column nothing declares and no row fills is written as float64
(all NaN); declare a text column here to keep it text when empty (`write_parquet`, `_RULES`).
"""

from __future__ import annotations

import math
import numbers
import os
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import InputError, choices


@dataclass(frozen=True)
class Column:
    """One declared column: pandas dtype, unit ("" when dimensionless) and whether records must carry it."""

    dtype: str
    unit: str
    required: bool = False
    doc: str = ""


_NAN = float("nan")

# Per-request columns. Times named *_start_s .. finish_s are absolute run-clock seconds (NaN when the
# request never reached that point); arrival_s is the offset from run start on the same clock.
REQUEST_COLUMNS: dict[str, Column] = {
    "deployment": Column("string", "", True),
    "mode": Column("string", ""),
    "request_id": Column("int64", "", True),
    "session_id": Column("Int64", ""),
    "arrival_s": Column("float64", "s", True, "offset from run start"),
    "input_tokens": Column("int64", "tokens", True),
    "cached_tokens": Column("Int64", "tokens", doc="prefix the prefill skipped (usable hit or fetched); null "
                                                  "in url mode when the target reports no cached count"),
    "cache_hit_tokens": Column("Int64", "tokens", doc="block-level KV hit in the prefilling cluster's pool; "
                                                       "null in url mode (the client cannot see it)"),
    "fetched_tokens": Column("Int64", "tokens", doc="prefix moved across clusters before the prefill; null in "
                                                   "url mode"),
    "output_tokens": Column("int64", "tokens", True),
    "route": Column("string", "", doc="local | prfaas | null if never routed"),
    "prefill_instance": Column("string", ""),
    "decode_instance": Column("string", ""),
    "prefill_start_s": Column("float64", "s"),
    "prefill_end_s": Column("float64", "s"),
    "kv_ready_s": Column("float64", "s"),
    "first_token_s": Column("float64", "s"),
    "finish_s": Column("float64", "s"),
    "ttft_s": Column("float64", "s"),
    "tpot_s": Column("float64", "s"),
    "e2e_s": Column("float64", "s"),
    "kv_bytes_sent": Column("float64", "bytes", doc="KV moved for this request (cross-DC if prfaas)"),
    "fetch_bytes": Column("float64", "bytes", doc="cross-cluster prefix fetched before the prefill"),
    "error": Column("string", "", doc="null when the request completed"),
    "scheduled_s": Column("float64", "s", doc="live/url: target send time"),
    "sent_s": Column("float64", "s", doc="live/url: actual send time"),
    "lateness_s": Column("float64", "s", doc="live/url: sent_s - scheduled_s"),
}

# One row per time bin; t_s is the bin start on the run clock.
TIMESERIES_COLUMNS: dict[str, Column] = {
    "deployment": Column("string", "", True),
    "t_s": Column("float64", "s", True),
    "bin_s": Column("float64", "s", doc="width of the bin: analysis.timeseries.bin_s, widened on long spans"),
    "egress_gbps": Column("float64", "Gbps", True, "cross-DC KV egress, 1e9 bit/s"),
    "link_capacity_gbps": Column("float64", "Gbps"),
    "prefill_queue_local": Column("float64", "requests"),
    "prefill_queue_prfaas": Column("float64", "requests"),
    "decode_waiting": Column("float64", "requests"),
    "decode_running": Column("float64", "requests"),
    "util_prefill_local": Column("float64", ""),
    "util_prefill_prfaas": Column("float64", ""),
    "util_decode": Column("float64", ""),
}

# Optional columns absent from the records that we do not add: the live/url-only stamps. A sim run
# without them is not a run with NaN lateness.
_ADD_IF_MISSING_SKIP = {"scheduled_s", "sent_s", "lateness_s"}

# Fill values for integer columns that may be absent from the records: a record without the key
# has none. A record that carries the key as None does not know it (url mode): null (Int64 columns).
_INT_DEFAULTS = {"cached_tokens": 0, "cache_hit_tokens": 0, "fetched_tokens": 0}

# Text columns where '' would mean "none": written null, so `route.isna()` means one thing.
_EMPTY_IS_NULL = ("route", "prefill_instance", "decode_instance")

# Columns of requests.parquet that only some modes write (live/url stamps, the emulator's view joined
# in live runs, harness-serve's outcome), typed when present, never added: dtype and the value of a
# row without one (None: null). `retries`: a request that never reached the deployment made none.
# `interrupted` is not here: a stopped sim run's parts hold it from the stop on, null before, and
# `write_sorted(fill=...)` writes the whole file's as bool.
REQUEST_EXTRA_DTYPES: dict[str, tuple[str, Any]] = {
    "retries": ("int64", 0),
    "queue_s": ("float64", None), "done_s": ("float64", None), "n_chunks": ("int64", 0),
    "itl_max_s": ("float64", None), "usage_reported": ("bool", False),
    "http_status": ("Int64", None),  # null: no HTTP status was received (the run stopped first)
    "refused": ("bool", False), "abandoned": ("bool", False),
    "abandoned_s": ("float64", None), "ended_s": ("float64", None), "response_id": ("string", None),
    "client_id": ("string", None),
    "ttft_wall_s": ("float64", None), "e2e_wall_s": ("float64", None),
    **{f"engine_{k}": ("float64", None) for k in ("prompt_n", "cache_n", "prompt_ms", "predicted_n", "predicted_ms")},
    **{f"server_{k}": ("float64", None) for k in ("arrival_s", "first_token_s", "finish_s", "ttft_s", "tpot_s",
                                                  "e2e_s", "prefill_s")},
    "server_error": ("string", None),
    # a modelled KV hand-off (harness/deploy/handoff.py) or the testbed: save, time on the link, restore
    "kv_save_s": ("float64", None), "kv_transfer_s": ("float64", None), "kv_restore_s": ("float64", None),
}


def _to_frame(records: Iterable[Mapping[str, Any]] | pd.DataFrame, defaults: Mapping[str, Any]) -> pd.DataFrame:
    if isinstance(records, pd.DataFrame):
        return records.copy(deep=False)  # copy-on-write: what is assigned below never reaches `records`
    rows = list(records)
    if defaults:  # a row without one of these keys gets its default; a row with the key as None keeps None
        rows = [row if all(name in row for name in defaults) else {**row, **{k: v for k, v in defaults.items()
                                                                           if k not in row}}
                for row in rows]
    return pd.DataFrame.from_records(rows)


def _typed(records: Iterable[Mapping[str, Any]] | pd.DataFrame, schema: Mapping[str, Column],
           what: str, extras: Mapping[str, tuple[str, Any]] | None = None) -> pd.DataFrame:
    df = _to_frame(records, {k: v for k, v in _INT_DEFAULTS.items() if k in schema})
    missing = [name for name, col in schema.items() if col.required and name not in df.columns]
    if missing and len(df) > 0:
        raise InputError(f"{what} records lack required column(s) {choices(missing)}; required: "
                         f"{choices(n for n, c in schema.items() if c.required)}")
    for name, col in schema.items():
        if name not in df.columns:
            if name in _ADD_IF_MISSING_SKIP:
                continue
            df[name] = _INT_DEFAULTS.get(name, 0 if col.dtype == "int64" else None)
        elif name in _INT_DEFAULTS and col.dtype == "int64" and df[name].dtype.kind not in "iu":
            # optional counts: a record without one has none (an integer column has no missing value)
            df[name] = [_INT_DEFAULTS[name] if _is_missing(v) else v for v in df[name]]
        df[name] = _cast(df[name], col.dtype, name, what)
        if name in _EMPTY_IS_NULL and len(df) and (df[name] == "").any():
            df[name] = df[name].mask(df[name] == "")
    for name, (dtype, default) in (extras or {}).items():
        if name not in df.columns or str(df[name].dtype) == dtype:
            continue
        series = df[name]
        if default is not None and series.isna().any():
            series = series.astype(object).where(series.notna(), default)
        df[name] = _cast(series, dtype, name, what)
    declared = [n for n in schema if n in df.columns]
    extra = [c for c in df.columns if c not in schema]
    return df[declared + extra].reset_index(drop=True)


def _cast(series: pd.Series, dtype: str, name: str, what: str) -> pd.Series:
    try:
        if dtype == "string":
            if isinstance(series.dtype, pd.StringDtype):  # strings already (pandas' "str" has NaN for
                return series.astype("string")  # missing, "string" pd.NA): in bulk, the same values
            if series.dtype == object and pd.api.types.infer_dtype(series, skipna=True) in ("string", "empty"):
                # str or missing only (the records' own columns): the same strings and NAs, converted in bulk
                return pd.Series(series.to_numpy(), index=series.index, dtype="string")
            # Missing stays missing (pd.NA); str() would turn None into the text "None".
            values = [None if _is_missing(v) else str(v) for v in series]
            return pd.Series(values, index=series.index, dtype="string")
        if dtype == "int64":
            if series.isna().any():
                raise InputError(f"{what} column {name!r} has missing values; it must be an integer in every row")
            return series.astype("int64")
        if dtype == "Int64":
            return pd.to_numeric(series, errors="raise").astype("Int64")
        if dtype in ("bool", "boolean"):
            if series.isna().any() and dtype == "bool":
                raise InputError(f"{what} column {name!r} has missing values; it must be true or false in every row")
            return series.astype(dtype)
        return pd.to_numeric(series, errors="raise").astype(dtype)
    except (TypeError, ValueError) as err:
        if isinstance(err, InputError):
            raise
        raise InputError(f"{what} column {name!r} cannot be read as {dtype}: {err}") from err


def _is_missing(value: Any) -> bool:
    if value is None or value is pd.NA:
        return True
    return isinstance(value, float) and math.isnan(value)


def requests_frame(records: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Per-request records (dicts or a frame) -> the typed requests frame of REQUEST_COLUMNS."""
    return _typed(records, REQUEST_COLUMNS, "requests", REQUEST_EXTRA_DTYPES)


def timeseries_frame(records: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Time-series records (one row per bin) -> the typed frame of TIMESERIES_COLUMNS, sorted by t_s."""
    df = _typed(records, TIMESERIES_COLUMNS, "timeseries")
    if df["t_s"].is_monotonic_increasing:  # the stable sort would keep every row in place: no copy
        return df
    return df.sort_values("t_s", kind="stable").reset_index(drop=True)


# summary.parquet / report.parquet: one dtype per key, whatever the mode and the runs in the file.
# Declared: the text keys, the flags and the counts (nullable Int64: url mode knows no instance
# counts, harness-serve no seed). Every other key is a measure: float64, NaN when unknown (an int
# value, `threshold_tokens` of prfaas_pd, is written as a float). A key nothing declares keeps its
# values' kind (text -> string, true/false -> boolean, numbers or nothing -> float64), so a
# new key is never written with Arrow's null type; report.parquet's override columns (`a.b`) follow
# the same rule per report (`loadgen.rate_rps=1,2,inf` is float64: 1.0, 2.0, inf).
_SUMMARY_TEXT = ("deployment", "mode", "workload", "model", "served_model", "target_url", "time_scale_source",
                 "time_scale_warning", "loadgen_invalid_reason", "plan_deployment", "plan_model",
                 "plan_service_time", "plan_bound", "plan_notes", "saturation_in_flight_source",
                 "saturation_route", "saturation_counted_in", "saturation_warning", "run_dir", "run_name")
_SUMMARY_FLAGS = ("interrupted", "loadgen_valid", "incomplete", "capacity_converged")
_SUMMARY_COUNTS = ("n_requests", "completed", "failed", "interrupted_requests", "refused_requests",
                   "abandoned_requests", "n_prfaas", "n_prefill", "n_decode", "seed", "concurrency",
                   "max_concurrency", "offered", "sim_events", "rebalances", "loadgen_requests_sent",
                   "vllm_max_concurrent_requests", "server_events", "server_stream_interval_tokens",
                   "saturation_in_flight", "plan_n_prfaas", "plan_n_prefill", "plan_n_decode", "plan_bs_max",
                   "capacity_runs")
SUMMARY_DTYPES: dict[str, str] = {**dict.fromkeys(_SUMMARY_TEXT, "string"), **dict.fromkeys(_SUMMARY_FLAGS, "boolean"),
                                  **dict.fromkeys(_SUMMARY_COUNTS, "Int64")}
# Undeclared keys by their name's ending: text.
_TEXT_SUFFIXES = ("_warning", "_reason", "_source", "_url")


def summary_dtype(name: str, values: pd.Series | None = None) -> str:
    """The dtype of summary/report key `name`: declared, else by its name, else by its values."""
    if name in SUMMARY_DTYPES:
        return SUMMARY_DTYPES[name]
    if name.endswith(_TEXT_SUFFIXES):
        return "string"
    present = [] if values is None else [v for v in values if not _is_missing(v)]
    if present and all(isinstance(v, (bool, np.bool_)) for v in present):
        return "boolean"
    return "float64" if all(_number(v) for v in present) else "string"


def _number(value: Any) -> bool:
    """A number, or text that is one ('1', '0.5', 'inf': an override's value), not a bool."""
    if isinstance(value, (bool, np.bool_)):
        return False
    if isinstance(value, numbers.Real):
        return True
    return isinstance(value, str) and re.fullmatch(r"\s*[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?\s*|\s*[+-]?inf\s*",
                                                    value) is not None


def summary_frame(rows: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Summary rows (one per run; a report's too) -> a frame with one declared dtype per key."""
    df = _to_frame(rows, {})
    columns = {}  # built apart and joined once: a frame's column assignment costs ~0.3 ms (170 keys a run)
    for name in df.columns:
        dtype = summary_dtype(name, df[name])
        series = df[name]
        if dtype == "float64" and series.dtype == object:
            series = pd.Series([np.nan if _is_missing(v) else float(v) for v in series], index=df.index)
        elif dtype == "boolean" and series.dtype == object:
            series = pd.Series([pd.NA if _is_missing(v) else bool(v) for v in series], index=df.index, dtype=object)
        elif dtype == "Int64" and series.dtype.kind == "f" and not np.all(series.isna() | (series == series.round())):
            dtype = "float64"  # a count with a fraction: keep the value (never round data away)
        columns[name] = _cast(series, dtype, str(name), "summary")
    return pd.DataFrame(columns, index=df.index) if columns else df


def units(schema: Mapping[str, Column] = REQUEST_COLUMNS) -> dict[str, str]:
    """Column name -> unit, e.g. for axis labels."""
    return {name: col.unit for name, col in schema.items()}


def arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Make object columns writable by pyarrow: all-number columns become numeric, mixed ones text,
    and columns with no value at all float64 (NaN), never Arrow's `null` type: a reader of several
    files could not cast it to the type another file has."""
    out = df.copy(deep=False)  # copy-on-write: only the columns replaced below are new
    for name in out.columns:
        if out[name].dtype != object:
            continue
        values = [v for v in out[name] if not _is_missing(v)]
        if not values:
            out[name] = pd.Series(np.nan, index=out.index, dtype="float64")
            continue
        if all(isinstance(v, (bool, np.bool_)) for v in values) or all(isinstance(v, str) for v in values):
            continue  # pyarrow writes these (with nulls) as they are
        if all(isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_)) for v in values):
            out[name] = pd.to_numeric(out[name])
            continue
        out[name] = pd.Series([None if _is_missing(v) else str(v) for v in out[name]], index=out.index, dtype="string")
    return out


def write_parquet(df: pd.DataFrame, path: str | os.PathLike[str]) -> Path:
    """Write df to path atomically: a reader sees the old file or the whole new one, never half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        arrow_safe(df).to_parquet(tmp, index=False)
        os.replace(tmp, path)
    except OSError as err:  # a full or read-only disk: name the file we meant to write, not the temp one
        code = err.errno
        if code is None:  # pyarrow: "... Detail: [errno 28] No space left on device"
            found = re.search(r"\[errno (\d+)\]", str(err))
            code = int(found.group(1)) if found else None
        raise OSError(code, os.strerror(code) if code else str(err), str(path)) from err
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only filesystem refuses even this
            pass
    return path


def read_table(path: str | os.PathLike[str]) -> pd.DataFrame:
    """`pd.read_parquet`, with a missing, corrupt or unreadable file as an InputError that names it."""
    try:
        return pd.read_parquet(path)
    except FileNotFoundError as err:
        raise InputError(f"no Parquet file at {path}") from err
    except (OSError, ValueError, ImportError) as err:  # pyarrow's ArrowInvalid / ArrowIOError are among these
        detail = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(f"{path}: not a readable Parquet file ({detail[:200]}); re-create it or move it "
                         f"out of the results folder") from err


def read_parquet(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a Parquet file; if only its parts exist (an interrupted run: harness/runs/recording.py), read those."""
    path = Path(path)
    if path.exists():
        return read_table(path)
    parts = _parts(path)
    if not parts:
        raise InputError(f"no Parquet file at {path}")
    frames, bad = [], []
    for part in parts:  # a part cut short by a kill (or damaged since) costs its own rows, not the run's
        try:
            frames.append(read_table(part))
        except InputError as err:
            bad.append(err)
    if not frames:
        raise bad[0]
    for problem in bad:
        print(f"warning: {problem} (read {path} without it: {len(parts) - len(bad)} of {len(parts)} parts)",
              file=sys.stderr, flush=True)
    return pd.concat(frames, ignore_index=True)


def _parts(path: Path) -> list[Path]:
    return sorted(path.with_name(path.name + ".parts").glob("part-*.parquet"))
