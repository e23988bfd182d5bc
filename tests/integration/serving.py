"""`harness-serve` in the test's own process: `serve` as the command runs it, on its own task."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from harness.runs.serve import serve


@contextlib.asynccontextmanager
async def serving(cfg: Any, run_dir: Path, timeout_s: float = 60.0) -> AsyncIterator[Any]:
    """The live server once it listens (`.url`, `.clock`, `.engine`, `.built`); leaving the block stops
    it as SIGINT does (`stop`) and waits until it has written its run directory."""
    stop, box = asyncio.Event(), {}
    task = asyncio.create_task(serve(cfg, run_dir, stop=stop, on_listening=lambda s: box.setdefault("s", s)))
    deadline = time.monotonic() + timeout_s
    while "s" not in box:
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    try:
        yield box["s"]
    finally:
        stop.set()
        await task
