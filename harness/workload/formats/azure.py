"""Azure-style CSV traces: `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure LLM inference traces).

TIMESTAMP is either a number of seconds from the start of the trace or an ISO-8601 datetime (the
Azure 2023/2024 files: `2023-11-16 18:15:46.6805900`), which becomes seconds after the first row.
The format has no block ids, so every request gets fresh unshared hash_ids (counted in the
report). Extra columns are ignored. Written files use seconds.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from harness.errors import InputError
from harness.workload.formats.common import Columns, FieldNames, LoadReport, open_text_for_write, progress, to_requests
from harness.workload.request import Request

NAMES = FieldNames(time="TIMESTAMP", input="ContextTokens", output="GeneratedTokens")
HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


Where = Callable[[int], str]  # data row index -> "file:line"


def _rows(path: Path) -> tuple[pd.DataFrame, Where]:
    """The data rows as strings, and where each one is in the file (blank lines skipped, counted)."""
    with open(path, newline="", encoding="utf-8") as f:
        reader = csv.reader(f, skipinitialspace=True)
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}: empty trace (no header, no requests)")
        width = len(header)
        rows, lines = [], []
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > width:
                raise InputError(f"{path}:{reader.line_num}: {len(row)} fields, but the header has {width}")
            rows.append(row + [""] * (width - len(row)))
            lines.append(reader.line_num)
    frame = pd.DataFrame(rows, columns=[str(c).strip() for c in header], dtype=str)
    return frame, lambda i: f"{path}:{lines[i]}"


def _integers(where: Where, frame: pd.DataFrame, column: str) -> np.ndarray:
    text = frame[column].str.strip()
    ok = text.str.fullmatch(r"[+-]?\d{1,18}")  # fits int64
    if not ok.all():
        i = int(np.argmax(~ok.to_numpy()))
        raise InputError(f"{where(i)}: field '{column}' must be an integer (at most 18 digits), "
                         f"got {frame[column].iloc[i]!r}")
    ints: np.ndarray = text.astype(np.int64).to_numpy()
    return ints


def _seconds(where: Where, frame: pd.DataFrame, report: LoadReport) -> np.ndarray:
    """Seconds if the first row is a number, else ISO-8601 datetimes; the first misfit row is named."""
    text = frame["TIMESTAMP"].str.strip()
    numeric = pd.to_numeric(text, errors="coerce")
    if len(text) == 0 or not np.isnan(numeric.iloc[0]):
        bad = numeric.isna().to_numpy()
        kind = "a number of seconds (as in the first row)"
        values: np.ndarray = numeric.to_numpy(dtype=np.float64)
    else:
        stamps = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
        bad = stamps.isna().to_numpy()
        kind = "an ISO-8601 datetime (as in the first row)"
        if not bad.any():
            report.rebased_from = stamps.iloc[0].isoformat()
            values = (stamps - stamps.iloc[0]).dt.total_seconds().to_numpy(dtype=np.float64)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{where(i)}: field 'TIMESTAMP' must be {kind}, got {frame['TIMESTAMP'].iloc[i]!r}")
    return values


def read(path: Path, block_tokens: int) -> tuple[list[Request], LoadReport]:
    report = LoadReport(str(path), "csv")
    try:
        frame, where = _rows(path)
    except FileNotFoundError as err:
        raise InputError(f"{path}: no such file") from err
    except (csv.Error, UnicodeDecodeError, OSError) as err:
        raise InputError(f"{path}: cannot parse as CSV ({str(err).strip().splitlines()[0]})") from err
    missing = [c for c in HEADER if c not in frame.columns]
    if missing:
        raise InputError(f"{path}:1: missing column(s) {', '.join(missing)} (header must have "
                         f"{','.join(HEADER)}; found {','.join(frame.columns)})")
    cols = Columns(_seconds(where, frame, report), _integers(where, frame, "ContextTokens"),
                   _integers(where, frame, "GeneratedTokens"))
    requests = to_requests(cols, NAMES, where, block_tokens, report)
    return requests, report


def write(requests: Sequence[Request], path: Path) -> None:
    """Write seconds (shortest round-trip float repr); hash_ids, sessions and turns are not kept."""
    with open_text_for_write(path) as f:
        f.write(",".join(HEADER) + "\n")
        f.writelines(f"{float(r.arrival_s)!r},{r.input_tokens},{r.output_tokens}\n"
                     for r in progress(requests, path.name))
