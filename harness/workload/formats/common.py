"""Checks and fix-ups shared by every trace reader, and the report of what the loader changed.

Readers parse their format into `Columns` (one array per field, row order as in the file) and
call `to_requests`, so every format rejects the same bad input with the same messages, and every
row that is dropped, clipped or given synthetic hash_ids is counted in the `LoadReport`.
"""

from __future__ import annotations

import gzip
import io
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, cast

import numpy as np
from tqdm import tqdm

from harness.errors import InputError
from harness.workload.request import Request, n_blocks

MAX_TOKENS = 1 << 27  # 134M tokens per prompt or output: a sanity limit, far beyond any context


@dataclass
class LoadReport:
    """What loading a trace changed, so nothing is silently dropped, clipped or re-timed."""

    path: str
    fmt: str
    rows: int = 0  # request rows in the file
    dropped_empty_prompt: int = 0  # input length 0: nothing to prefill, no request to send
    clipped_output: int = 0  # output length 0 raised to 1: an engine always emits one token
    synthesised_hash_ids: int = 0  # rows without hash_ids got fresh, unshared block ids
    rebased_from: str | None = None  # datetime timestamps became seconds after this instant
    truncated: int = 0  # rows beyond workload.num_requests, not used
    retimed: int = 0  # requests moved by Replay.spread_ticks_s
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        """Human-readable notes, one per change; empty when the trace was used exactly as written."""
        out = []
        if self.dropped_empty_prompt:
            out.append(f"dropped {self.dropped_empty_prompt} row(s) with an empty prompt (input length 0)")
        if self.clipped_output:
            out.append(f"raised output length 0 to 1 in {self.clipped_output} row(s)")
        if self.synthesised_hash_ids:
            out.append(f"gave {self.synthesised_hash_ids} row(s) without hash_ids fresh unshared block ids "
                       f"(no prefix sharing)")
        if self.rebased_from is not None:
            out.append(f"timestamps are datetimes; offsets count seconds from the first row ({self.rebased_from})")
        if self.truncated:
            out.append(f"used the first {self.rows - self.dropped_empty_prompt - self.truncated} request(s); "
                       f"{self.truncated} later row(s) not used (workload.num_requests)")
        if self.retimed:
            out.append(f"re-timed {self.retimed} request(s) that shared a timestamp tick (Replay.spread_ticks_s)")
        out.extend(self.notes)
        return [f"{self.path}: {line}" for line in out]


@dataclass(frozen=True)
class FieldNames:
    """How the format names each field, for error messages."""

    time: str
    input: str
    output: str
    hash_ids: str = "hash_ids"


@dataclass
class Columns:
    """Parsed fields in file order; `hash_ids[i] is None` when row i has none."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    hash_ids: list[tuple[int, ...] | None] | None = None
    session_id: list[int | None] | None = None
    turn: list[int | None] | None = None
    request_id: np.ndarray | None = None


def _first(mask: np.ndarray) -> int:
    return int(np.argmax(mask))


def check_columns(cols: Columns, names: FieldNames, where: Callable[[int], str], block_tokens: int,
                  previous_t: float | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Validate parsed columns (all of a trace, or one chunk after a chunk that ended at `previous_t`).

    Returns the arrival times, input and output lengths as arrays and the blocks each prompt needs;
    raises InputError naming the row and field.
    """
    t = np.asarray(cols.arrival_s, dtype=np.float64)
    bad = ~np.isfinite(t) | (t < 0)
    if bad.any():
        i = _first(bad)
        raise InputError(f"{where(i)}: field '{names.time}' must be a finite, non-negative time, got {float(t[i])!r}")
    if previous_t is not None and len(t) and t[0] < previous_t:
        raise InputError(
            f"{where(0)}: field '{names.time}' goes back in time ({float(t[0])!r} after {float(previous_t)!r}); "
            f"timestamps must be non-decreasing"
        )
    back = np.diff(t) < 0
    if back.any():
        i = _first(back) + 1
        raise InputError(
            f"{where(i)}: field '{names.time}' goes back in time ({float(t[i])!r} after {float(t[i - 1])!r}); "
            f"timestamps must be non-decreasing"
        )
    inp = np.asarray(cols.input_tokens, dtype=np.int64)
    out = np.asarray(cols.output_tokens, dtype=np.int64)
    for values, name in ((inp, names.input), (out, names.output)):
        if (values < 0).any():
            i = _first(values < 0)
            raise InputError(f"{where(i)}: field '{name}' must be a non-negative integer, got {values[i]}")
        if (values > MAX_TOKENS).any():  # no model has such a context; and ids would be synthesised per block
            i = _first(values > MAX_TOKENS)
            raise InputError(f"{where(i)}: field '{name}' = {values[i]} is over the {MAX_TOKENS:,}-token sanity limit")

    expected = cast(np.ndarray, n_blocks(inp, block_tokens))
    for i, ids in enumerate(cols.hash_ids if cols.hash_ids is not None else ()):
        if ids is not None and len(ids) != expected[i]:
            raise InputError(
                f"{where(i)}: field '{names.hash_ids}' has {len(ids)} ids but {names.input}={inp[i]} needs "
                f"ceil({inp[i]}/{block_tokens}) = {expected[i]} (block_tokens={block_tokens}; set "
                f"--block-tokens or workload.block_tokens if the trace uses another block size)")
    return t, inp, out, expected


def to_requests(cols: Columns, names: FieldNames, where: Callable[[int], str], block_tokens: int,
                report: LoadReport) -> list[Request]:
    """Validate parsed columns and build requests; raises InputError naming the row and field."""
    n = len(cols.arrival_s)
    report.rows = n
    if n == 0:
        raise InputError(f"{report.path}: empty trace (no requests)")
    t, inp, out, expected = check_columns(cols, names, where, block_tokens)
    hash_ids: list[tuple[int, ...] | None] = list(cols.hash_ids) if cols.hash_ids is not None else [None] * n

    keep = inp > 0
    report.dropped_empty_prompt = int(n - keep.sum())
    report.clipped_output = int(((out == 0) & keep).sum())
    out = np.maximum(out, 1)
    missing = [i for i in range(n) if keep[i] and hash_ids[i] is None]
    if missing:
        report.synthesised_hash_ids = len(missing)
        used = [h for ids in hash_ids if ids for h in ids]
        needed = int(sum(int(expected[i]) for i in missing))
        next_id = max(used) + 1 if used else 0
        if next_id + needed > 2**63 - 1:  # fresh ids must stay int64 (Parquet): count down instead
            next_id = min(used) - needed
        for i in missing:
            c = int(expected[i])
            hash_ids[i] = tuple(range(next_id, next_id + c))
            next_id += c

    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise InputError(f"{report.path}: no usable requests (all {n} rows have an empty prompt)")
    rids = cols.request_id if cols.request_id is not None else np.arange(len(rows))
    if cols.request_id is not None:
        rids = np.asarray(rids)[rows]
    sessions = cols.session_id or [None] * n
    turns = cols.turn or [None] * n
    t_list, in_list, out_list, rid_list = t.tolist(), inp.tolist(), out.tolist(), np.asarray(rids).tolist()
    return [Request(rid_list[k], t_list[i], in_list[i], out_list[i], hash_ids[i],  # type: ignore[arg-type]
                    sessions[i], turns[i]) for k, i in enumerate(rows.tolist())]


def progress(requests: Sequence[Request], what: str) -> Iterable[Request]:
    """A tqdm bar on stderr for big traces (off when stderr is not a terminal)."""
    if len(requests) < 100_000:
        return requests
    bar: Iterable[Request] = tqdm(requests, desc=what, unit="req", unit_scale=True, file=sys.stderr, disable=None,
                                  leave=False)
    return bar


def open_text_for_read(path: Path, newline: str | None) -> IO[str]:
    """A UTF-8 text file for reading, gzip-decompressed when the name ends in .gz; a leading byte-order
    mark (as spreadsheet exports write) is dropped."""
    if path.name.lower().endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8-sig", newline=newline)
    return open(path, encoding="utf-8-sig", newline=newline)


def open_text_for_write(path: Path) -> IO[str]:
    """A text file for writing, gzip-compressed when the name ends in .gz.

    Implementation note: the gzip header carries no file name and mtime 0 (like `gzip -n`), so the
    same requests always give the same bytes.
    """
    if path.name.endswith(".gz"):
        raw = gzip.GzipFile(filename="", mode="wb", fileobj=open(path, "wb"), mtime=0, compresslevel=6)  # noqa: SIM115
        return _ClosingWrapper(raw)
    return open(path, "w", encoding="utf-8", newline="\n")


class _ClosingWrapper(io.TextIOWrapper):
    """TextIOWrapper over a GzipFile that also closes the underlying file object."""

    def __init__(self, gz: gzip.GzipFile) -> None:
        super().__init__(gz, encoding="utf-8", newline="\n")
        self._fileobj = gz.fileobj

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._fileobj is not None:
                self._fileobj.close()  # type: ignore[union-attr]  # the file open_text_for_write opened
