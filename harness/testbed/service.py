"""The router front end running on a stood-up testbed: its HTTP server, client session and link monitor."""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from harness.deploy.router.base import LOCAL, PRFAAS, Router, ThresholdRouter
from harness.errors import InputError
from harness.testbed.cluster import Testbed
from harness.testbed.handoff import Handoff, Link
from harness.testbed.linkmon import LinkMonitor
from harness.testbed.router import FrontEnd, make_app

HOST = "127.0.0.1"


def build_router(router_cfg: Any, fallback_threshold: float | None) -> Router:
    """The deployment's router from its config (the emulator's classes), its threshold set: the config's,
    else `testbed.threshold_tokens`; the testbed has no planner to choose one."""
    from hydra.utils import instantiate

    router: Router = instantiate(router_cfg)
    if isinstance(router, ThresholdRouter) and getattr(router, "threshold_tokens", None) is None:
        if fallback_threshold is None:
            raise InputError("deployment.router.threshold_tokens is null and testbed.threshold_tokens is null: the "
                             "testbed has no planner, set one of them (e.g. testbed.threshold_tokens=1024)")
        router.configure(float(fallback_threshold))
    return router


@dataclass
class Service:
    url: str
    front: FrontEnd
    runner: web.AppRunner
    session: aiohttp.ClientSession
    monitor: LinkMonitor | None

    async def stop(self) -> None:
        if self.monitor is not None:
            await self.monitor.stop()
        await self.runner.cleanup()
        await self.session.close()


async def start_service(testbed: Testbed, router: Router, *, model_name: str, port: int = 0) -> Service:
    s, topo = testbed.settings, testbed.topology
    connector = aiohttp.TCPConnector(limit=0, force_close=True)  # llama-server closes after each stream anyway
    session = aiohttp.ClientSession(connector=connector)
    links = {PRFAAS: Link(testbed.agents["remote"].url, topo.local_link_addr, s.agent_data_port),
             LOCAL: Link(testbed.agents["local"].url, "127.0.0.1", s.agent_data_port)}
    monitor = None
    if testbed.layout.has_prfaas:
        monitor = LinkMonitor(testbed.agents["remote"].url + "/counters", topo.link_dev, testbed.link_gbps,
                              s.sample_s)
        monitor.start(session)
    handoff = Handoff(session, testbed.engines, links, s.slots, s.request_timeout_s, s.transfer_timeout_s,
                      s.recompute_locally, on_link=monitor)
    front = FrontEnd(router=router, handoff=handoff, monitor=monitor, layout=testbed.layout,
                     link_gbps=testbed.link_gbps, model_name=model_name, t0_ns=time.monotonic_ns())
    runner = web.AppRunner(make_app(front), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, HOST, port)
    await site.start()
    bound = runner.addresses[0][1]
    return Service(url=f"http://{HOST}:{bound}", front=front, runner=runner, session=session, monitor=monitor)


class ServiceThread:
    """The router on its own thread and event loop, so its work never delays the load generator's sends
    (a run's client measures the router as it would any endpoint). `start()` returns the URL."""

    def __init__(self, testbed: Testbed, router: Router, *, model_name: str, port: int = 0) -> None:
        self.testbed, self.router, self.model_name, self.port = testbed, router, model_name, port
        self.service: Service | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=self._main, name="testbed-router", daemon=True)

    def _main(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        try:
            self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
            self.service = await start_service(self.testbed, self.router, model_name=self.model_name,
                                               port=self.port)
        except BaseException as err:  # handed to start()'s caller
            self._error = err
            self._ready.set()
            return
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await self.service.stop()

    def start(self) -> str:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error
        assert self.service is not None
        return self.service.url

    def stop(self) -> None:
        if self._loop is not None and self._stop is not None and self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
