"""Azure-style CSV traces: `TIMESTAMP,ContextTokens,GeneratedTokens` (Azure LLM inference traces).

TIMESTAMP is either a number of seconds from the start of the trace or an ISO-8601 datetime (the
Azure 2023/2024 files: `2023-11-16 18:15:46.6805900`), which becomes seconds after the first row.
The format has no block ids, so every request gets fresh unshared hash_ids (counted in the
report). Extra columns are ignored. Written files use seconds;
`.csv.gz` is read and written gzip-compressed.
"""

from __future__ import annotations

import csv
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from harness.errors import InputError
from harness.workload.formats.common import (
    Columns,
    FieldNames,
    LoadReport,
    open_text_for_read,
    open_text_for_write,
    progress,
    to_requests,
)
from harness.workload.request import Request

NAMES = FieldNames(time="TIMESTAMP", input="ContextTokens", output="GeneratedTokens")
HEADER = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


Where = Callable[[int], str]  # data row index -> "file:line"


def _at_lines(path: Path, lines: list[int]) -> Where:
    return lambda i: f"{path}:{lines[i]}"


def _row_chunks(path: Path, size: int | None = None) -> Iterator[tuple[pd.DataFrame, Where]]:
    """The data rows as strings, `size` rows at a time (all at once when None), and where each one is
    in the file (blank lines skipped, counted). A header-only file gives one empty chunk."""
    with open_text_for_read(path, newline="") as f:
        reader = csv.reader(f, skipinitialspace=True)
        header = next(reader, None)
        if header is None:
            raise InputError(f"{path}: empty trace (no header, no requests)")
        width = len(header)
        columns = [str(c).strip() for c in header]
        repeated = [c for c in HEADER if columns.count(c) > 1]
        if repeated:
            raise InputError(f"{path}:1: column '{repeated[0]}' appears {columns.count(repeated[0])} times in "
                             f"the header (found {','.join(columns)})")
        rows: list[list[str]] = []
        lines: list[int] = []
        sent = False
        for row in reader:
            if not any(cell.strip() for cell in row):
                continue
            if len(row) > width:
                raise InputError(f"{path}:{reader.line_num}: {len(row)} fields, but the header has {width}")
            rows.append(row + [""] * (width - len(row)))
            lines.append(reader.line_num)
            if size is not None and len(rows) >= size:
                yield pd.DataFrame(rows, columns=columns, dtype=str), _at_lines(path, lines)
                rows, lines, sent = [], [], True
        if rows or not sent:
            yield pd.DataFrame(rows, columns=columns, dtype=str), _at_lines(path, lines)


def _rows(path: Path) -> tuple[pd.DataFrame, Where]:
    """The data rows as strings, and where each one is in the file (blank lines skipped, counted)."""
    return next(_row_chunks(path))


def _integers(where: Where, frame: pd.DataFrame, column: str) -> np.ndarray:
    text = frame[column].str.strip()
    ok = text.str.fullmatch(r"[+-]?\d{1,18}")  # fits int64
    if not ok.all():
        i = int(np.argmax(~ok.to_numpy()))
        raise InputError(f"{where(i)}: field '{column}' must be an integer (at most 18 digits), "
                         f"got {frame[column].iloc[i]!r}")
    ints: np.ndarray = text.astype(np.int64).to_numpy()
    return ints


def _check_order(where: Where, stamps: pd.Series, text: pd.Series, state: dict[str, Any]) -> None:
    """Datetimes must not go back (checked here, where the stored text is at hand: as offsets from the
    first row an earlier one would only show as a negative time). `state` carries the previous chunk's last."""
    if not len(stamps):
        return
    ns = pd.DatetimeIndex(stamps).asi8
    if "last_ns" in state and ns[0] < state["last_ns"]:
        raise InputError(f"{where(0)}: field 'TIMESTAMP' goes back in time ({text.iloc[0]!r} after "
                         f"{state['last_text']!r}); timestamps must be non-decreasing")
    back = np.diff(ns) < 0
    if back.any():
        i = int(np.argmax(back)) + 1
        raise InputError(f"{where(i)}: field 'TIMESTAMP' goes back in time ({text.iloc[i]!r} after "
                         f"{text.iloc[i - 1]!r}); timestamps must be non-decreasing")
    state["last_ns"], state["last_text"] = int(ns[-1]), text.iloc[-1]


def _seconds(where: Where, frame: pd.DataFrame, report: LoadReport, state: dict[str, Any] | None = None) -> np.ndarray:
    """Seconds if the first row is a number, else ISO-8601 datetimes; the first misfit row is named.

    `state` carries the first row's kind and datetime across the chunks of one file."""
    state = {} if state is None else state
    text = frame["TIMESTAMP"].str.strip()
    numeric = pd.to_numeric(text, errors="coerce")
    if "numeric" not in state and len(text):
        state["numeric"] = not np.isnan(numeric.iloc[0])
    if len(text) == 0 or state["numeric"]:
        bad = numeric.isna().to_numpy()
        kind = "a number of seconds (as in the first row)"
        values: np.ndarray = numeric.to_numpy(dtype=np.float64)
    else:
        stamps = pd.to_datetime(text, format="ISO8601", utc=True, errors="coerce")
        bad = stamps.isna().to_numpy()
        kind = "an ISO-8601 datetime (as in the first row)"
        if not bad.any():
            _check_order(where, stamps, frame["TIMESTAMP"], state)
            base = state.setdefault("base", stamps.iloc[0])
            report.rebased_from = base.isoformat()
            values = (stamps - base).dt.total_seconds().to_numpy(dtype=np.float64)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{where(i)}: field 'TIMESTAMP' must be {kind}, got {frame['TIMESTAMP'].iloc[i]!r}")
    return values


def _open_rows(path: Path, size: int | None) -> Iterator[tuple[pd.DataFrame, Where]]:
    try:
        yield from _row_chunks(path, size)
    except FileNotFoundError as err:
        raise InputError(f"{path}: no such file") from err
    except (csv.Error, UnicodeDecodeError, OSError, EOFError, zlib.error) as err:
        what = "gzip-compressed CSV" if path.name.lower().endswith(".gz") else "CSV"
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(f"{path}: cannot parse as {what} ({first_line})") from err


def _parse(path: Path, frame: pd.DataFrame, where: Where, report: LoadReport, state: dict[str, Any]) -> Columns:
    missing = [c for c in HEADER if c not in frame.columns]
    if missing:
        raise InputError(f"{path}:1: missing column(s) {', '.join(missing)} (header must have "
                         f"{','.join(HEADER)}; found {','.join(frame.columns)})")
    return Columns(_seconds(where, frame, report, state), _integers(where, frame, "ContextTokens"),
                   _integers(where, frame, "GeneratedTokens"))


def read(path: Path, block_tokens: int) -> tuple[list[Request], LoadReport]:
    report = LoadReport(str(path), "csv")
    frame, where = next(_open_rows(path, None))
    cols = _parse(path, frame, where, report, {})
    requests = to_requests(cols, NAMES, where, block_tokens, report)
    return requests, report


def chunks(path: Path, rows: int = 10_000, report: LoadReport | None = None) -> Iterator[tuple[Columns, Where]]:
    """The file's rows as Columns of at most `rows` requests each (for statistics in bounded memory)."""
    report = report if report is not None else LoadReport(str(path), "csv")
    state: dict[str, Any] = {}
    for frame, where in _open_rows(path, rows):
        yield _parse(path, frame, where, report, state), where


def write(requests: Sequence[Request], path: Path) -> None:
    """Write seconds (shortest round-trip float repr); hash_ids, sessions and turns are not kept."""
    with open_text_for_write(path) as f:
        f.write(",".join(HEADER) + "\n")
        f.writelines(f"{float(r.arrival_s)!r},{r.input_tokens},{r.output_tokens}\n"
                     for r in progress(requests, path.name))
