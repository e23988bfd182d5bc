"""The tidy per-request and time-series frames: column schema declared once, typed, written atomically.

Every run directory's `requests.parquet` and `timeseries.parquet` go through `requests_frame` /
`timeseries_frame`, so a column has one dtype and one unit everywhere. Columns not declared here
(a new emulator counter, the load generator's own stamps) are kept as they come, never dropped.
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Callable, Iterable, Mapping
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
    "cached_tokens": Column("int64", "tokens", doc="prefix the prefill skipped (usable hit or fetched)"),
    "cache_hit_tokens": Column("int64", "tokens", doc="block-level KV hit in the prefilling cluster's pool"),
    "fetched_tokens": Column("int64", "tokens", doc="prefix moved across clusters before the prefill"),
    "output_tokens": Column("int64", "tokens", True),
    "route": Column("string", "", doc="local | prfaas | '' if never routed"),
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

# Fill values for integer columns that may be absent from the records.
_INT_DEFAULTS = {"cached_tokens": 0, "cache_hit_tokens": 0, "fetched_tokens": 0}


def _to_frame(records: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    if isinstance(records, pd.DataFrame):
        return records.copy(deep=False)  # copy-on-write: what is assigned below never reaches `records`
    return pd.DataFrame.from_records(list(records))


def _typed(records: Iterable[Mapping[str, Any]] | pd.DataFrame, schema: Mapping[str, Column],
           what: str) -> pd.DataFrame:
    df = _to_frame(records)
    missing = [name for name, col in schema.items() if col.required and name not in df.columns]
    if missing and len(df) > 0:
        raise InputError(f"{what} records lack required column(s) {choices(missing)}; required: "
                         f"{choices(n for n, c in schema.items() if c.required)}")
    for name, col in schema.items():
        if name not in df.columns:
            if name in _ADD_IF_MISSING_SKIP:
                continue
            df[name] = _INT_DEFAULTS.get(name, 0) if col.dtype == "int64" else None
        elif name in _INT_DEFAULTS and df[name].dtype.kind not in "iu":  # optional counts: a record
            # without one has none (an integer column has no missing value to fill)
            df[name] = [_INT_DEFAULTS[name] if _is_missing(v) else v for v in df[name]]
        df[name] = _cast(df[name], col.dtype, name, what)
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
    return _typed(records, REQUEST_COLUMNS, "requests")


def timeseries_frame(records: Iterable[Mapping[str, Any]] | pd.DataFrame) -> pd.DataFrame:
    """Time-series records (one row per bin) -> the typed frame of TIMESERIES_COLUMNS, sorted by t_s."""
    df = _typed(records, TIMESERIES_COLUMNS, "timeseries")
    if df["t_s"].is_monotonic_increasing:  # the stable sort would keep every row in place: no copy
        return df
    return df.sort_values("t_s", kind="stable").reset_index(drop=True)


def units(schema: Mapping[str, Column] = REQUEST_COLUMNS) -> dict[str, str]:
    """Column name -> unit, e.g. for axis labels."""
    return {name: col.unit for name, col in schema.items()}


def arrow_safe(df: pd.DataFrame) -> pd.DataFrame:
    """Make object columns writable by pyarrow: all-number columns become numeric, mixed ones text."""
    out = df.copy(deep=False)  # copy-on-write: only the columns replaced below are new
    for name in out.columns:
        if out[name].dtype != object:
            continue
        values = [v for v in out[name] if not _is_missing(v)]
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
    """Read a Parquet file; if only its append parts exist (an interrupted run), read those."""
    path = Path(path)
    if path.exists():
        return read_table(path)
    parts = _parts(path)
    if parts:
        return pd.concat([read_table(p) for p in parts], ignore_index=True)
    raise InputError(f"no Parquet file at {path}")


def _parts_dir(path: Path) -> Path:
    return path.with_name(path.name + ".parts")


def _parts(path: Path) -> list[Path]:
    return sorted(_parts_dir(path).glob("part-*.parquet"))


def append_records(
    path: str | os.PathLike[str],
    records: Iterable[Mapping[str, Any]] | pd.DataFrame,
    frame: Callable[[Any], pd.DataFrame] = requests_frame,
) -> Path:
    """Append a batch of records to `path` as one more Parquet part (`<path>.parts/part-NNNNNN.parquet`).

    Long runs call this every few thousand records so a crash loses one batch, not the run;
    `consolidate(path)` then merges the parts into `path`.
    """
    path = Path(path)
    existing = _parts(path)
    index = int(existing[-1].stem.split("-")[1]) + 1 if existing else 0
    return write_parquet(frame(records), _parts_dir(path) / f"part-{index:06d}.parquet")


def consolidate(path: str | os.PathLike[str], frame: Callable[[Any], pd.DataFrame] = requests_frame) -> pd.DataFrame:
    """Merge the parts written by `append_records` into `path` (atomically) and delete the parts."""
    path = Path(path)
    parts = _parts(path)
    if not parts:
        raise InputError(f"no parts to consolidate in {_parts_dir(path)}")
    df = frame(pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True))
    write_parquet(df, path)
    for part in parts:
        part.unlink()
    _parts_dir(path).rmdir()
    return df
