"""Fixtures for live-mode integration tests: composed configs and a live server in a thread.

Servers bind 127.0.0.1 on port 0 only; every test stops what it starts.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parents[2] / "conf")


def _compose_cfg(overrides: list[str]):
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=[*overrides, "loadgen.progress=false"])


class _ThreadedServer:
    """The live emulator on its own event loop in a background thread (for synchronous clients)."""

    def __init__(self, cfg) -> None:
        self.cfg = cfg
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.server = None

    def __enter__(self) -> _ThreadedServer:
        from harness.live.server import start_server

        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(start_server(self.cfg, port=0), self.loop).result(30)
        return self

    @property
    def url(self) -> str:
        return self.server.url

    def __exit__(self, *exc) -> None:
        asyncio.run_coroutine_threadsafe(self.server.stop(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


@pytest.fixture(scope="session")
def compose_cfg():
    """`compose_cfg([overrides...])`: the composed run config (progress bars off)."""
    return _compose_cfg


@pytest.fixture(scope="session")
def threaded_server():
    """`with threaded_server(cfg) as srv:` the live emulator for synchronous clients (`srv.url`)."""
    return _ThreadedServer
