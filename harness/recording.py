"""Records on disk while a run is still going, so a crash or a kill keeps what was measured.

`RecordStream.add` buffers records and writes a Parquet part every `every` records or `every_s`
wall seconds (`requests.parquet.parts/part-NNNNNN.parquet`, each written atomically). When the run
ends normally its full `requests.parquet` replaces the parts; after a crash `harness-report` and
`read_parquet` read the parts. A SIGKILL loses at most one buffer; SIGINT/SIGTERM lose nothing
(the run stops, records every in-flight request as interrupted, and writes everything).
"""

from __future__ import annotations

import shutil
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.analysis.frames import append_records


class RecordStream:
    def __init__(self, path: Path | None, every: int = 5000, every_s: float = 5.0) -> None:
        self.path = path
        self.every, self.every_s = every, every_s
        self._buffer: list[dict] = []
        self._last = time.monotonic()
        self.written = 0

    def add(self, record: dict) -> None:
        if self.path is None:
            return
        self._buffer.append(record)
        if len(self._buffer) >= self.every or time.monotonic() - self._last >= self.every_s:
            self.flush()

    def flush(self) -> None:
        if self.path is None or not self._buffer:
            return
        append_records(self.path, self._buffer)
        self.written += len(self._buffer)
        self._buffer = []
        self._last = time.monotonic()

    def discard_parts(self) -> None:
        """The run finished and wrote its whole file: the parts are redundant."""
        if self.path is not None:
            shutil.rmtree(self.path.with_name(self.path.name + ".parts"), ignore_errors=True)


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt (as SIGINT already is) for the duration of a run."""
    def interrupt(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
