"""Fixtures every test directory may use. The test tiers (markers, `make test` / `make test-all`) are
described in docs/guides/testing.md; tests/commands.py runs the harness's commands for tests."""

from __future__ import annotations

import socket
from typing import Any

import pytest


@pytest.fixture
def closed_url():
    """A port bound on 127.0.0.1 that does not listen: connections to it are refused, and no one else gets it."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _one_error_line(proc: Any) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "crashed" not in proc.stderr
    return lines[0]


@pytest.fixture
def one_error_line():
    """one_error_line(proc) -> a command's one stderr line of bad input, after checking exit 2 and no traceback."""
    return _one_error_line
