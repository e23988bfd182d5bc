"""Mooncake JSONL traces (kvcache-ai/Mooncake FAST'25): one request per line.

`{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, ...]}`,
timestamp in integer milliseconds from the start of the trace. `hash_ids` is optional here (rows
without it get unique ids, counted in the report); `session_id` and `turn`, which the harness
writes for agentic workloads, are read back when present. `.jsonl.gz` is read and written
transparently; written gzip files carry no name or mtime, so equal traces give equal bytes.
"""

from __future__ import annotations

import json
import math
import zlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import numpy as np

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

NAMES = FieldNames(time="timestamp", input="input_length", output="output_length")
_REQUIRED = ("timestamp", "input_length", "output_length")
_OPTIONAL = ("hash_ids", "session_id", "turn")
_INT64 = range(-(2**63), 2**63)
_MAX_TIMESTAMP_MS = 1e15  # ~31,700 years: beyond it a "timestamp" is not one


def _open_text(path: Path) -> IO[str]:
    return open_text_for_read(path, newline="\n")  # JSON Lines ends lines with \n only; \r is whitespace


def _int(obj: dict[str, Any], key: str, where: str, optional: bool = False) -> int | None:
    value = obj.get(key)
    if value is None and optional:
        return None
    if type(value) is not int or value not in _INT64:
        raise InputError(f"{where}: field '{key}' must be a 64-bit integer, got {json.dumps(value)[:40]}")
    return value


Row = tuple[int, float, int, int, "tuple[int, ...] | None", "int | None", "int | None"]


def _rows(path: Path) -> Iterator[Row]:
    """(line number, seconds, input, output, hash_ids, session_id, turn) of each request line, in order."""
    try:
        with _open_text(path) as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as err:
                    raise InputError(f"{where}: invalid JSON ({err.msg} at column {err.colno})") from err
                except (ValueError, RecursionError) as err:  # e.g. a 5,000-digit number, [[[[... nesting
                    raise InputError(f"{where}: invalid JSON ({str(err).splitlines()[0][:80]})") from err
                if not isinstance(obj, dict):
                    raise InputError(f"{where}: expected a JSON object with fields {', '.join(_REQUIRED)}")
                for key in _REQUIRED:
                    if key not in obj:
                        raise InputError(f"{where}: missing field '{key}' (required: {', '.join(_REQUIRED)}; "
                                         f"optional: {', '.join(_OPTIONAL)})")
                ts = obj["timestamp"]
                if (isinstance(ts, bool) or not isinstance(ts, (int, float)) or abs(ts) > _MAX_TIMESTAMP_MS
                        or not math.isfinite(ts)):
                    raise InputError(f"{where}: field 'timestamp' must be a number of milliseconds, "
                                     f"got {json.dumps(ts)[:40]}")
                ids = obj.get("hash_ids")
                if ids is not None:
                    if not isinstance(ids, list) or not all(type(h) is int and h in _INT64 for h in ids):
                        raise InputError(f"{where}: field 'hash_ids' must be a list of 64-bit integers")
                    ids = tuple(ids)
                yield (lineno, ts / 1000.0, _int(obj, "input_length", where), _int(obj, "output_length", where),  # type: ignore[misc]
                       ids, _int(obj, "session_id", where, optional=True), _int(obj, "turn", where, optional=True))
    except (OSError, EOFError, UnicodeDecodeError, zlib.error) as err:
        if isinstance(err, FileNotFoundError):
            raise InputError(f"{path}: no such file") from err
        raise InputError(f"{path}: cannot read as {'gzip-compressed ' if path.name.endswith('.gz') else ''}"
                         f"UTF-8 JSONL ({err})") from err


def _columns(path: Path, rows: list[Row]) -> tuple[Columns, Callable[[int], str]]:
    linenos, times, inputs, outputs, hash_ids, sessions, turns = (
        (list(c) for c in zip(*rows, strict=False)) if rows else ([], [], [], [], [], [], [])
    )
    cols = Columns(np.asarray(times, dtype=np.float64), np.asarray(inputs, dtype=np.int64),
                   np.asarray(outputs, dtype=np.int64), hash_ids,
                   sessions if any(s is not None for s in sessions) else None,
                   turns if any(t is not None for t in turns) else None)
    return cols, lambda i: f"{path}:{linenos[i]}"


def read(path: Path, block_tokens: int) -> tuple[list[Request], LoadReport]:
    report = LoadReport(str(path), "jsonl")
    cols, where = _columns(path, list(_rows(path)))
    requests = to_requests(cols, NAMES, where, block_tokens, report)
    return requests, report


def chunks(path: Path, rows: int = 10_000,
           report: LoadReport | None = None) -> Iterator[tuple[Columns, Callable[[int], str]]]:
    """The file's rows as Columns of at most `rows` requests each (for statistics in bounded memory)."""
    batch: list[Row] = []
    for row in _rows(path):
        batch.append(row)
        if len(batch) >= rows:
            yield _columns(path, batch)
            batch = []
    if batch:
        yield _columns(path, batch)


def rounds_time(arrival_s: float) -> bool:
    """Whether writing `arrival_s` (as whole milliseconds) and reading it back gives another time."""
    return round(arrival_s * 1000.0) / 1000.0 != arrival_s


def _line(r: Request) -> str:
    # Implementation note: formatted by hand (json.dumps' default separators) because it is ~5x
    # faster for 100k-row traces and gives byte-identical output to the Mooncake files.
    ms = round(r.arrival_s * 1000.0)
    ids = ", ".join(map(str, r.hash_ids))
    extra = ""
    if r.session_id is not None:
        extra += f', "session_id": {r.session_id}'
    if r.turn is not None:
        extra += f', "turn": {r.turn}'
    return (f'{{"timestamp": {ms}, "input_length": {r.input_tokens}, "output_length": {r.output_tokens}, '
            f'"hash_ids": [{ids}]{extra}}}\n')


def write(requests: Sequence[Request], path: Path) -> None:
    """Write JSONL (gzip when the name ends in .gz); arrival times are rounded to whole milliseconds."""
    with open_text_for_write(path) as f:
        f.writelines(map(_line, progress(requests, path.name)))
