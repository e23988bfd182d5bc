"""Fixtures of the PD testbed's tier (`@pytest.mark.testbed`: root, iproute2; CI runs it as root).

Most tests run the testbed on `fake_engine.py` (llama-server's slot API, real-sized slot files) so they test
the namespaces, link, agents, router and records in seconds; the real-engine test uses `make engine`'s build.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

FAKE = Path(__file__).with_name("fake_engine.py")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _needs_root_and_iproute2():
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("the testbed tier needs root and iproute2 (CI runs it as root)")


@pytest.fixture(scope="session")
def fake_engine(tmp_path_factory) -> dict[str, str]:
    """testbed.engine_binary / engine_model overrides that run fake_engine.py in place of llama-server."""
    home = tmp_path_factory.mktemp("fake_engine")
    binary = home / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec {sys.executable} {FAKE} "$@"\n')
    binary.chmod(0o755)
    model = home / "model.gguf"
    model.write_bytes(b"")
    return {"engine_binary": str(binary), "engine_model": str(model)}
