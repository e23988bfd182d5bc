"""Trace readers and writers: Mooncake JSONL, Azure-style CSV and the harness's own Parquet.

The format follows from the file name (`.jsonl`, `.jsonl.gz`, `.csv`, `.csv.gz`, `.parquet`)
unless `fmt` names it. Bad input raises InputError naming the file, line (or row) and field.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from harness.errors import InputError, choices
from harness.workload.formats import azure, mooncake, parquet
from harness.workload.formats.common import LoadReport
from harness.workload.request import Request

__all__ = ["FORMATS", "LoadReport", "detect_format", "load_trace", "open_chunks", "read_trace", "write_trace"]

_log = logging.getLogger(__name__)

FORMATS = {"jsonl": mooncake, "csv": azure, "parquet": parquet}
_SUFFIXES = {".jsonl": "jsonl", ".jsonl.gz": "jsonl", ".csv": "csv", ".csv.gz": "csv", ".parquet": "parquet"}


def detect_format(path: str | Path, fmt: str | None = None) -> str:
    """The format name for `path`: `fmt` if given (checked), else from the extension."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise InputError(f"unknown trace format {fmt!r}; choose one of {choices(FORMATS)}")
        return fmt
    name = Path(path).name.lower()
    for suffix, found in sorted(_SUFFIXES.items(), key=lambda kv: -len(kv[0])):
        if name.endswith(suffix):
            return found
    raise InputError(f"{path}: cannot tell the trace format from the file name; use one of "
                     f"{choices(_SUFFIXES)} (or name the format: {choices(FORMATS)})")


def _check_block_tokens(block_tokens: int) -> int:
    if isinstance(block_tokens, bool) or not isinstance(block_tokens, int) or block_tokens < 1:
        raise InputError(f"block_tokens must be a positive integer, got {block_tokens!r}")
    return block_tokens


def load_trace(path: str | Path, fmt: str | None = None, block_tokens: int = 512) -> tuple[list[Request], LoadReport]:
    """Read a trace and report what the loader changed (dropped, clipped, synthesised rows)."""
    path = Path(path)
    module = FORMATS[detect_format(path, fmt)]
    _check_block_tokens(block_tokens)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    if not path.exists():
        raise InputError(f"{path}: no such file")
    loaded: tuple[list[Request], LoadReport] = module.read(path, block_tokens)
    return loaded


def open_chunks(path: str | Path, fmt: str | None = None, block_tokens: int = 512) -> tuple[ModuleType, LoadReport]:
    """The reader module of `path` (its `chunks(path, rows, report)` yields Columns) and an empty report;
    the same up-front checks as `load_trace`."""
    path = Path(path)
    name = detect_format(path, fmt)
    _check_block_tokens(block_tokens)
    if path.is_dir():
        raise InputError(f"{path}: is a directory, not a trace file")
    if not path.exists():
        raise InputError(f"{path}: no such file")
    return FORMATS[name], LoadReport(str(path), name)


def read_trace(path: str | Path, fmt: str | None = None, block_tokens: int = 512) -> list[Request]:
    """Read a trace; any change the loader made is logged as a warning (never silent)."""
    requests, report = load_trace(path, fmt, block_tokens)
    for line in report.lines():
        _log.warning("%s", line)
    return requests


def write_trace(requests: Sequence[Request], path: str | Path, fmt: str | None = None) -> None:
    """Write requests in the format named by `fmt` or the extension (see module docstring)."""
    path = Path(path)
    module = FORMATS[detect_format(path, fmt)]
    if not path.parent.exists():
        raise InputError(f"{path}: directory {path.parent} does not exist")
    # A temp name beside the output (same suffix, so .gz still compresses), then a rename: a reader
    # sees the old file or the whole new one, never a truncated one, and the input is never touched.
    tmp = path.with_name(f".tmp-{os.getpid()}-{path.name}")
    try:
        module.write(requests, tmp)
        os.replace(tmp, path)
    except OSError as err:
        raise InputError(f"{path}: cannot write the trace ({err.strerror or err}); nothing was written") from err
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # a read-only filesystem refuses even this
            pass
