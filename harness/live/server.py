"""Start and stop the live emulator: build the deployment on a scaled wall clock, serve it over HTTP.

Used by `harness-serve` (until interrupted) and by live runs (`python -m harness mode=live`,
`harness-load` without `target.url`), which bind port 0 on 127.0.0.1 and drive it in-process.
"""

from __future__ import annotations

import asyncio
import math
from dataclasses import dataclass

from aiohttp import web
from omegaconf import DictConfig

from harness.deploy.build import Built, build
from harness.errors import InputError, require
from harness.live.app import HANDLER_CANCELLATION, ProtocolErrorLog, ServeOptions, make_app
from harness.live.clock import ScheduledLoopClock
from harness.live.engine import LiveEngine
from harness.live.tokens import TextTokenizer


@dataclass
class LiveServer:
    built: Built
    engine: LiveEngine
    runner: web.AppRunner
    options: ServeOptions
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def clock(self) -> ScheduledLoopClock:
        return self.engine.clock

    async def stop(self) -> None:
        """Fail what is still in flight (so every request gets its record), then close the server."""
        self.engine.close()
        await self.runner.cleanup()


def serve_options(cfg: DictConfig) -> ServeOptions:
    server = cfg.server
    require(server.time_scale is not None and math.isfinite(server.time_scale) and server.time_scale > 0,
            f"server.time_scale must be a finite number > 0, got {server.time_scale}")
    interval = server.stream_interval_tokens
    if interval is None:
        interval = max(1, round(float(server.time_scale)))
    require(interval >= 1, f"server.stream_interval_tokens must be >= 1 (or null), got {interval}")
    require(server.max_model_len >= 2, f"server.max_model_len must be >= 2, got {server.max_model_len}")
    require(server.default_max_tokens >= 1,
            f"server.default_max_tokens must be >= 1, got {server.default_max_tokens}")
    require(server.max_body_bytes >= 1024, f"server.max_body_bytes must be >= 1024, got {server.max_body_bytes}")
    require(0 <= server.port <= 65535, f"server.port must be in [0, 65535], got {server.port}")
    tpw = float(server.get("tokens_per_word", 1.0))
    require(math.isfinite(tpw) and tpw > 0, f"server.tokens_per_word must be a finite number > 0, got {tpw}")
    try:
        tokenizer = TextTokenizer(tpw, server.get("tokenizer_file"))
    except ValueError as err:
        raise InputError(str(err)) from err
    return ServeOptions(
        served_model=str(server.model_name or cfg.model.name),
        max_model_len=int(server.max_model_len),
        default_max_tokens=int(server.default_max_tokens),
        stream_interval_tokens=int(interval),
        max_body_bytes=int(server.max_body_bytes),
        time_scale=float(server.time_scale),
        tokenizer=tokenizer,
    )


async def start_server(cfg: DictConfig, *, host: str | None = None, port: int | None = None) -> LiveServer:
    """Build `cfg.deployment` on the running loop's clock and listen on host:port (defaults: cfg.server)."""
    options = serve_options(cfg)
    loop = asyncio.get_running_loop()
    clock = ScheduledLoopClock(loop, float(cfg.server.time_scale))
    built = build(cfg, clock, mode="live")
    engine = LiveEngine(built.deployment, clock, loop, block_tokens=int(cfg.workload.get("block_tokens", 512)))
    runner = web.AppRunner(make_app(engine, options), access_log=None, shutdown_timeout=2.0,
                           handler_cancellation=HANDLER_CANCELLATION, logger=ProtocolErrorLog(engine))
    await runner.setup()
    host = str(cfg.server.host if host is None else host)
    port = int(cfg.server.port if port is None else port)
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as err:
        await runner.cleanup()
        raise InputError(f"server.host/server.port: cannot listen on {host}:{port}: {err}") from err
    bound = runner.addresses[0]
    return LiveServer(built, engine, runner, options, str(bound[0]), int(bound[1]))
