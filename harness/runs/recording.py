"""Records on disk while a run is still going, the one recording path of every mode.

`RecordStream.add` buffers rows; a background writer turns them into one Parquet part
(`<file>.parts/part-NNNNNN.parquet`, each written to a temp name and renamed) every `every` rows
or `every_s` wall seconds, whichever comes first, so a run killed at any moment (SIGKILL included)
keeps every row added more than one interval before. When the run ends normally its whole file is
written (atomically) and only then are the parts removed; after a kill, `harness-report` and
`read_parquet` read the parts. A full disk or an unwritable directory becomes one `OutputError`
(one line naming the path, exit status 2); the parts already written stay readable.
"""

from __future__ import annotations

import math
import os
import shutil
import signal
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harness.analysis.frames import requests_frame, write_parquet
from harness.errors import InputError
from harness.runs.signals import SignalHold, deliver, on_main_thread, outer_hold


class OutputError(InputError):
    """The run directory cannot take what the run must write (full disk, read-only, no permission)."""


def output_error(path: Path | str, err: OSError) -> OutputError:
    reason = err.strerror or str(err) or type(err).__name__
    return OutputError(f"cannot write {path}: {reason}")


_no_hold = nullcontext()


class RecordStream:
    """Rows of one file (`requests.parquet`, `chunks.parquet`), streamed to its parts as they come.

    `add` never writes on the caller's thread; it raises the first write failure (as OutputError)
    so a run stops at once, and `on_error` (if given) is called from the writer when one happens,
    for runs whose caller is an event loop that must be told.
    """

    def __init__(
        self,
        path: Path | None,
        frame: Callable[[Any], pd.DataFrame] = requests_frame,
        *,
        every: int = 5000,
        every_s: float = 1.0,
        on_error: Callable[[OutputError], object] | None = None,
    ) -> None:
        if every < 1 or not every_s > 0:
            raise InputError(f"recording.flush_every must be >= 1 and recording.flush_s > 0, got {every}, {every_s}")
        self.path = path
        self.frame = frame
        self.every, self.every_s = int(every), float(every_s)
        self.on_error = on_error
        self.written = 0
        self.error: OutputError | None = None
        self._buffer: list[dict] = []
        self._lock = threading.Lock()  # one writer at a time (the part numbering)
        self._swap = threading.Lock()  # held only to append a row or take the buffer
        self._kick = threading.Event()
        self._closed = False
        self._index = 0
        self._thread: threading.Thread | None = None
        if path is not None:
            self._thread = threading.Thread(target=self._writer, name=f"record-stream:{path.name}", daemon=True)
            self._thread.start()

    @property
    def parts_dir(self) -> Path | None:
        return self.path.with_name(self.path.name + ".parts") if self.path is not None else None

    def add(self, row: dict) -> None:
        if self.path is None:
            return
        if self.error is not None:
            raise self.error
        with self._swap:
            self._buffer.append(row)
            n = len(self._buffer)
        if n >= self.every:
            self._kick.set()

    def _writer(self) -> None:
        while not self._closed:
            self._kick.wait(self.every_s)
            self._kick.clear()
            try:
                self.flush()
            except OutputError as err:
                if self.on_error is not None:
                    self.on_error(err)
                return

    def flush(self) -> None:
        """Write what is buffered as one more part (on the calling thread)."""
        parts_dir = self.parts_dir
        if parts_dir is None:
            return
        with self._lock, SignalHold() if on_main_thread() else _no_hold:
            if self.error is not None:
                raise self.error
            with self._swap:
                batch = self._buffer[:]
            if not batch:
                return
            part = parts_dir / f"part-{self._index:06d}.parquet"
            try:
                write_parquet(self.frame(batch), part)
            except OSError as err:
                self.error = output_error(part, err)
                raise self.error from err
            # The rows leave the buffer only once their part is in place (and with the part's number, under
            # the hold): interrupted before, the next flush writes them again, to the same part name.
            self._index += 1
            self.written += len(batch)
            with self._swap:
                del self._buffer[:len(batch)]

    def close(self) -> None:
        """Stop the writer and write what is left; raises OutputError if anything could not be written."""
        self._closed = True
        self._kick.set()
        if self._thread is not None:
            self._thread.join()
        self.flush()

    def abort(self) -> None:
        """Stop the writer without raising (the run is failing for another reason): write what it can."""
        try:
            self.close()
        except OutputError:
            pass

    def read(self) -> pd.DataFrame:
        """Everything streamed so far (after `close`), read back from the parts."""
        parts = sorted(self.parts_dir.glob("part-*.parquet")) if self.parts_dir is not None else []
        if not parts:
            return self.frame([])
        return self.frame(pd.concat([pd.read_parquet(p) for p in parts], ignore_index=True))

    def parts(self) -> list[Path]:
        return sorted(self.parts_dir.glob("part-*.parquet")) if self.parts_dir is not None else []

    def write_sorted(self, key: str = "request_id", fill: Mapping[str, Any] | None = None) -> bool:
        """Write the whole file from the parts (after `close`), sorted by `key`, in bounded memory.

        Parts hold rows in the order requests ended, which is close to `key` order: a part's rows
        are written once no later part holds a smaller key, so only the rows still out of order
        are in memory at once. Returns False (nothing written) when the parts disagree on their
        columns' types (but for the columns of `fill`, see `write_sorted`) or repeat a key (the
        order of ties would be the sort's): then the caller sorts in memory as before.
        """
        if self.path is None:
            return False
        return write_sorted(self.parts(), self.path, key, fill)

    def discard_parts(self) -> None:
        """The run finished and wrote its whole file: the parts are redundant."""
        if self.parts_dir is not None:
            shutil.rmtree(self.parts_dir, ignore_errors=True)


# Rows per row group of a file merged from parts: a fixed size, so the file's bytes do not depend on
# where the parts happened to be cut (a wall-clock flush), and the merge holds at most one group.
ROW_GROUP_ROWS = 16_384


def write_sorted(parts: list[Path], path: Path, key: str = "request_id", fill: Mapping[str, Any] | None = None) -> bool:
    """Rows of `parts` as one Parquet file at `path` (atomically), sorted by the unique `key`.

    Two passes over the parts, neither holding every key: the first notes each part's smallest key,
    the second takes each part's rows below every later part's smallest key, sorted, checks that
    the keys strictly increase (a repeated key: nothing written, False returned) and writes them in
    row groups of ROW_GROUP_ROWS.

    `fill` (column -> value): columns a run may add midway, as a stopped sim run's `interrupted`: the
    parts written before have no such column and the rows recorded without it hold nulls; the file
    has the column (after the others, as it came), those rows the value given. Parts that differ in
    any other way: nothing written, False returned. Parts without any of these columns are written
    exactly as without `fill`."""
    if not parts:
        return False
    schema = pq.read_schema(parts[0])
    if key not in schema.names or not pa.types.is_integer(schema.field(key).type):
        return False
    fill = fill or {}
    smallest = []
    for part in parts:
        part_schema = pq.read_schema(part)
        if not part_schema.equals(schema, check_metadata=False):
            widened = _widened(schema, part_schema, fill)
            if widened is None:
                return False
            schema = widened
        keys = pq.ParquetFile(part).read(columns=[key], use_threads=False).column(key)
        if keys.null_count:
            return False
        low = pc.min(keys).as_py()
        smallest.append(math.inf if low is None else int(low))
    later_min = [math.inf] * (len(parts) + 1)  # smallest key in parts[i:]
    for i in range(len(parts) - 1, -1, -1):
        later_min[i] = min(later_min[i + 1], smallest[i])
    filled = any(name in schema.names for name in fill)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    last: int | None = None  # the last key written
    try:
        with pq.ParquetWriter(tmp, schema) as writer:
            pending = None
            out: pa.Table | None = None  # sorted rows not yet written (less than one row group)
            for i, part in enumerate(parts):
                table = pq.ParquetFile(part).read(use_threads=False)
                if filled:
                    table = _filled(table, schema, fill)
                table = table.replace_schema_metadata(schema.metadata)
                pending = table if pending is None else pa.concat_tables([pending, table])
                bound = later_min[i + 1]
                if math.isfinite(bound):
                    ready = pending.filter(pc.less(pending.column(key), bound))
                    pending = pending.filter(pc.greater_equal(pending.column(key), bound))
                else:
                    ready, pending = pending, None
                if ready.num_rows:
                    ready = ready.take(pc.sort_indices(ready, [(key, "ascending")]))
                    keys = ready.column(key).to_numpy()
                    if (last is not None and keys[0] <= last) or (keys.size > 1 and not (keys[1:] > keys[:-1]).all()):
                        return False  # a repeated key: the order of ties would be the sort's
                    last = int(keys[-1])
                    out = ready if out is None else pa.concat_tables([out, ready])
                    full = out.num_rows // ROW_GROUP_ROWS * ROW_GROUP_ROWS
                    if full:
                        writer.write_table(out.slice(0, full), row_group_size=ROW_GROUP_ROWS)
                        out = out.slice(full)
                del table, ready
                pa.default_memory_pool().release_unused()
            if out is not None and out.num_rows:
                writer.write_table(out, row_group_size=ROW_GROUP_ROWS)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
        pa.default_memory_pool().release_unused()
    return True


def _widened(schema: pa.Schema, other: pa.Schema, fill: Mapping[str, Any]) -> pa.Schema | None:
    """`schema` with the `fill` columns `other` adds, or None if the two differ in any other way."""
    if [f for f in schema if f.name not in fill] != [f for f in other if f.name not in fill]:
        return None
    for field in other:
        if field.name not in fill:
            continue
        if field.name in schema.names:
            if not schema.field(field.name).equals(field):
                return None
        elif pa.types.is_null(field.type):
            return None  # no type to give the column (every row of the part without a value)
        else:
            schema = schema.append(field)
    return schema


def _filled(table: pa.Table, schema: pa.Schema, fill: Mapping[str, Any]) -> pa.Table:
    """`table` with `schema`'s columns: the `fill` columns it lacks added, their nulls filled."""
    for name, value in fill.items():
        if name not in schema.names:
            continue
        scalar = pa.scalar(value, type=schema.field(name).type)
        if name in table.column_names:
            i = table.column_names.index(name)
            table = table.set_column(i, schema.field(name), pc.fill_null(table.column(i), scalar))
        else:
            table = table.append_column(schema.field(name), pa.array([value] * table.num_rows, type=scalar.type))
    return table.select(schema.names)


def read_columns(path: Path, drop: tuple[str, ...] = (), only: tuple[str, ...] | None = None) -> pd.DataFrame:
    """A Parquet file's frame (the columns in `only`, else all but those in `drop`), equal to what
    `pd.read_parquet` reads, built one column at a time so Arrow's buffers are freed as it goes."""
    names = [n for n in pq.read_schema(path).names if n not in drop and (only is None or n in only)]
    source = pq.ParquetFile(path)
    pool = pa.default_memory_pool()
    columns = {}
    for name in names:
        columns[name] = source.read(columns=[name]).to_pandas(self_destruct=True)[name]  # dtypes from pandas metadata
        pool.release_unused()
    return pd.DataFrame(columns, copy=False) if columns else pd.read_parquet(path, columns=[])


@contextmanager
def writing_to(path: Path | str) -> Iterator[None]:
    """Writing the run's final files: an OSError (full disk, read-only directory) is one OutputError."""
    try:
        yield
    except OSError as err:
        raise output_error(getattr(err, "filename", None) or path, err) from err


def streams_from(
    cfg: Any,
    run_dir: Path | None,
    *names: str,
    frames: dict[str, Callable[[Any], pd.DataFrame]] | None = None,
    on_error: Callable[[OutputError], object] | None = None,
) -> dict[str, RecordStream]:
    """One stream per file name (`requests`, `chunks`, ...) in run_dir, flushed as `recording.*` says."""
    rec = cfg.get("recording") if hasattr(cfg, "get") else None
    every = int(rec.flush_every) if rec is not None else 5000
    every_s = float(rec.flush_s) if rec is not None else 1.0
    frames = frames or {}
    return {name: RecordStream(run_dir / f"{name}.parquet" if run_dir is not None else None,
                               frames.get(name, requests_frame), every=every, every_s=every_s, on_error=on_error)
            for name in names}


@contextmanager
def stop_on_signals(clock: Any | None = None) -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt (as SIGINT already is) for the duration of a run.

    With a virtual `clock` (`fire_at`), SIGINT and SIGTERM raise it between two of the clock's events,
    from a timer due at once, not wherever the signal lands: raised inside an event, it could leave a
    request half moved between the emulator's queues, in none of them, and the run without its record.
    Inside a `SignalHold` (harness/runs/signals.py), a signal the hold noted before the clock started
    stops the run at its first event, and one that came too late for the clock (its last event had run)
    goes back to the hold, which delivers it once the run's files are written.
    """
    pending: list[int] = []

    def stop() -> None:
        if len(pending) == 1:  # once, however many signals came
            pending.append(0)
            raise KeyboardInterrupt(f"signal {pending[0]}")

    def interrupt(signum, frame):
        if clock is None:
            raise KeyboardInterrupt(f"signal {signum}")
        if not pending:
            pending.append(signum)
            clock.fire_at(clock.now(), stop)  # after the events due now, before any later one

    signals: tuple[int, ...] = (signal.SIGTERM,) if clock is None else (signal.SIGTERM, signal.SIGINT)
    previous: dict[int, Any] = {}
    try:
        for sig in signals:
            if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                continue  # started with SIGINT ignored (`nohup ... &`): keep ignoring it
            previous[sig] = signal.signal(sig, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    hold = next((h for h in map(outer_hold, previous.values()) if h is not None), None)
    early = hold.take_pending() if hold is not None else None
    if early is not None:  # came while the run was being built: stop before its first request
        interrupt(early, None)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        if len(pending) == 1:  # noted, never raised (the clock ran out first): the handler before has it
            deliver(previous.get(pending[0], signal.SIG_DFL), pending[0])
