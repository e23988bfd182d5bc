"""The harness's own trace format: Parquet with one column per `Request` field.

`hash_ids` is a list<int64> column; `session_id` and `turn` are nullable int64. Arrival times keep
full float precision (unlike the millisecond JSONL), so this is the lossless format.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from harness.errors import InputError
from harness.workload.formats.common import Columns, FieldNames, LoadReport, to_requests
from harness.workload.request import Request

NAMES = FieldNames(time="arrival_s", input="input_tokens", output="output_tokens")
ROW_GROUP_ROWS = 65_536  # requests per row group written (what the writer holds at once)
_GROUP_IDS = 2**30  # block ids per row group at most (list<int64> offsets are 32-bit)
_REQUIRED = ("request_id", "arrival_s", "input_tokens", "output_tokens")


def _at_row(path: Path, start: int, request_id: np.ndarray) -> Callable[[int], str]:
    return lambda i: f"{path}: row {start + i} (request_id {request_id[i]})"


_INT64_MAX = 2**63 - 1


def _too_big(path: Path, row: int, name: str, value: int) -> InputError:
    return InputError(f"{path}: row {row}: field '{name}' = {value} does not fit a 64-bit signed integer "
                      f"(at most {_INT64_MAX})")


def _int_column(path: Path, table: pa.Table, name: str, first_row: int = 0) -> np.ndarray:
    col = table.column(name)
    if not pa.types.is_integer(col.type):
        raise InputError(f"{path}: column '{name}' must hold integers, has type {col.type}")
    if col.null_count:
        i = int(np.argmax(col.is_null().to_numpy(zero_copy_only=False)))
        raise InputError(f"{path}: row {first_row + i}: field '{name}' is null")
    stored = col.to_numpy()
    if pa.types.is_uint64(col.type) and (stored > _INT64_MAX).any():
        i = int(np.argmax(stored > _INT64_MAX))
        raise _too_big(path, first_row + i, name, int(stored[i]))
    values: np.ndarray = stored.astype(np.int64)
    return values


def _optional_ints(path: Path, table: pa.Table, name: str, first_row: int = 0) -> list[int | None] | None:
    if name not in table.column_names:
        return None
    col = table.column(name)
    if not (pa.types.is_integer(col.type) or pa.types.is_null(col.type)):
        raise InputError(f"{path}: column '{name}' must hold integers or nulls, has type {col.type}")
    ints: list[int | None] = col.to_pylist()
    if pa.types.is_uint64(col.type):
        for i, value in enumerate(ints):
            if value is not None and value > _INT64_MAX:
                raise _too_big(path, first_row + i, name, value)
    return ints


def _hash_ids(path: Path, table: pa.Table, first_row: int = 0) -> list[tuple[int, ...] | None] | None:
    if "hash_ids" not in table.column_names:
        return None
    col = table.column("hash_ids")
    if not ((pa.types.is_list(col.type) or pa.types.is_large_list(col.type))
            and pa.types.is_integer(col.type.value_type)):
        raise InputError(f"{path}: column 'hash_ids' must be a list of integers, has type {col.type}")
    arr = col.combine_chunks()
    offsets = arr.offsets.to_numpy()
    used = arr.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])) if len(offsets) else arr.values

    def row_of(k: int) -> int:  # the row whose list holds element k of `used`
        return first_row + int(np.searchsorted(offsets, offsets[0] + k, side="right")) - 1

    if used.null_count:
        k = int(np.argmax(used.is_null().to_numpy(zero_copy_only=False)))
        raise InputError(f"{path}: row {row_of(k)}: field 'hash_ids' holds a null id "
                         f"(element {offsets[0] + k - offsets[row_of(k) - first_row]})")
    stored = used.to_numpy(zero_copy_only=False)
    if pa.types.is_uint64(used.type) and (stored > _INT64_MAX).any():
        k = int(np.argmax(stored > _INT64_MAX))
        raise _too_big(path, row_of(k), "hash_ids", int(stored[k]))
    values = stored.astype(np.int64).tolist()
    starts = (offsets - offsets[0]).tolist()
    nulls = arr.is_null().to_numpy(zero_copy_only=False).tolist()
    return [None if nulls[i] else tuple(values[starts[i]:starts[i + 1]]) for i in range(len(arr))]


def _open(path: Path, read: Callable[[], Any]) -> Any:
    try:
        return read()
    except FileNotFoundError as err:
        raise InputError(f"{path}: no such file") from err
    except (pa.ArrowException, OSError, UnicodeDecodeError) as err:
        first_line = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise InputError(f"{path}: cannot read as Parquet ({first_line})") from err


def _parse(path: Path, table: pa.Table, names: list[str], first_row: int = 0) -> tuple[Columns, np.ndarray]:
    missing = [c for c in _REQUIRED if c not in names]
    if missing:
        raise InputError(f"{path}: missing column(s) {', '.join(missing)} (required: {', '.join(_REQUIRED)}; "
                         f"optional: hash_ids, session_id, turn)")
    arrival = table.column("arrival_s")
    if not (pa.types.is_floating(arrival.type) or pa.types.is_integer(arrival.type)) or arrival.null_count:
        raise InputError(f"{path}: column 'arrival_s' must hold non-null numbers of seconds, has type "
                         f"{arrival.type} with {arrival.null_count} null(s)")
    request_id = _int_column(path, table, "request_id", first_row)
    cols = Columns(arrival.to_numpy().astype(np.float64), _int_column(path, table, "input_tokens", first_row),
                   _int_column(path, table, "output_tokens", first_row), _hash_ids(path, table, first_row),
                   _optional_ints(path, table, "session_id", first_row),
                   _optional_ints(path, table, "turn", first_row), request_id)
    return cols, request_id


def _unique_ids(path: Path, request_id: np.ndarray) -> None:
    if len(np.unique(request_id)) != len(request_id):
        raise InputError(f"{path}: column 'request_id' has duplicate ids")


def read(path: Path, block_tokens: int) -> tuple[list[Request], LoadReport]:
    report = LoadReport(str(path), "parquet")
    table = _open(path, lambda: pq.read_table(path))
    names = _open(path, lambda: table.column_names)  # decoding the footer's names can fail too
    cols, request_id = _parse(path, table, names)
    _unique_ids(path, request_id)
    requests = to_requests(cols, NAMES, lambda i: f"{path}: row {i} (request_id {request_id[i]})", block_tokens,
                           report)
    return requests, report


def chunks(path: Path, rows: int = 10_000,
           report: LoadReport | None = None) -> Iterator[tuple[Columns, Callable[[int], str]]]:
    """The file's rows as Columns of at most `rows` requests each (for statistics in bounded memory).

    Duplicate request ids are checked at the end (8 bytes per request are kept for it)."""
    file = _open(path, lambda: pq.ParquetFile(path))
    names = _open(path, lambda: file.schema_arrow.names)
    ids: list[np.ndarray] = []
    start = 0
    batches = _open(path, lambda: file.iter_batches(batch_size=rows))
    while True:
        batch = _open(path, lambda: next(batches, None))
        if batch is None:
            break
        cols, request_id = _parse(path, pa.Table.from_batches([batch]), names, start)
        ids.append(request_id)
        yield cols, _at_row(path, start, request_id)
        start += batch.num_rows
    if not ids:  # no row groups: the empty-trace check still runs on an empty chunk
        yield _parse(path, _open(path, lambda: pq.read_table(path)), names)[0], str
    _unique_ids(path, np.concatenate(ids) if ids else np.zeros(0, dtype=np.int64))


def to_table(requests: Sequence[Request]) -> pa.Table:
    """An Arrow table of the requests (also what `requests_to_frame` users can write themselves)."""
    n = len(requests)
    counts = np.fromiter((len(r.hash_ids) for r in requests), dtype=np.int64, count=n)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    total = int(offsets[-1])
    values = np.fromiter(chain.from_iterable(r.hash_ids for r in requests), dtype=np.int64, count=total)
    if total < 2**31 - 1:  # always, for a row group of `write`
        hash_ids = pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(values))
    else:
        hash_ids = pa.LargeListArray.from_arrays(pa.array(offsets, type=pa.int64()), pa.array(values))
    return pa.table({
        "request_id": pa.array(np.fromiter((r.request_id for r in requests), dtype=np.int64, count=n)),
        "arrival_s": pa.array(np.fromiter((r.arrival_s for r in requests), dtype=np.float64, count=n)),
        "input_tokens": pa.array(np.fromiter((r.input_tokens for r in requests), dtype=np.int64, count=n)),
        "output_tokens": pa.array(np.fromiter((r.output_tokens for r in requests), dtype=np.int64, count=n)),
        "hash_ids": hash_ids,
        "session_id": pa.array([r.session_id for r in requests], type=pa.int64()),
        "turn": pa.array([r.turn for r in requests], type=pa.int64()),
    })


def _row_groups(requests: Iterable[Request]) -> Iterator[list[Request]]:
    """The requests in batches of ROW_GROUP_ROWS, or fewer where their block ids would reach 2^30 (so a
    group's hash_ids fit list<int64>'s 32-bit offsets: every group has the same schema)."""
    batch: list[Request] = []
    ids = 0
    for request in requests:
        n = len(request.hash_ids)
        if batch and (len(batch) == ROW_GROUP_ROWS or ids + n >= _GROUP_IDS):
            yield batch
            batch, ids = [], 0
        batch.append(request)
        ids += n
    yield batch  # the last one (empty for no requests: the file still gets its schema)


def _columns_table(cols: dict[str, np.ndarray]) -> pa.Table:
    """`to_table` of a chunk of a synthetic stream's columns (RequestStream.column_chunks): the same
    table, each request's block ids made as the consecutive run they are, without a Python object each."""
    counts = cols["n_hash_ids"]
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    values = np.repeat(cols["first_hash_id"] - offsets[:-1], counts) + np.arange(int(offsets[-1]), dtype=np.int64)
    n = len(counts)
    return pa.table({
        **{name: pa.array(cols[name]) for name in ("request_id", "arrival_s", "input_tokens", "output_tokens")},
        "hash_ids": pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(values)),
        "session_id": pa.nulls(n, pa.int64()),
        "turn": pa.nulls(n, pa.int64()),
    })


def write(requests: Iterable[Request], path: Path) -> None:
    """Write a row group at a time (`_row_groups`; a synthetic stream's own chunks, as columns): a lazy
    stream goes to the file as it is generated, in memory bounded by one row group."""
    column_chunks = getattr(requests, "column_chunks", None)
    tables = (_columns_table(cols) for cols in column_chunks()) if callable(column_chunks) else \
        (to_table(batch) for batch in _row_groups(requests))
    writer: pq.ParquetWriter | None = None
    try:
        for table in tables:
            if writer is None:
                writer = pq.ParquetWriter(path, table.schema)
            writer.write_table(table)
    finally:
        if writer is not None:
            writer.close()
