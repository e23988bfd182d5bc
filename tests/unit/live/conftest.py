"""A fake deployment with a fixed timeline, and fixtures that serve it on 127.0.0.1, port 0.

Each request gets its first token `ttft_s` after it arrives, then one token every `tpot_s`
(emulated seconds); prompts longer than `refuse_over_tokens` are refused on arrival, as a
deployment refuses a request whose KV fits no decode instance.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections import deque
from dataclasses import dataclass

import aiohttp
import pytest
from aiohttp import web

from harness.live.app import HANDLER_CANCELLATION, ServeOptions, make_app
from harness.live.clock import ScheduledLoopClock
from harness.live.engine import LiveEngine, LiveJob
from harness.live.metrics import ServerMetrics
from harness.workload.request import Request


@dataclass
class FakeJob:
    request: object
    first_token_s: float = math.nan
    finish_s: float = math.nan
    error: str | None = None
    decode_instance: str = ""


class FakeDecode:
    """What the streaming handler may ask a decode instance: tokens done by any time `now`."""

    name = "d0"
    running = 0

    def __init__(self, tpot_s):
        self.tpot_s = tpot_s

    def tokens_done(self, job, now):
        if not math.isnan(job.finish_s):
            return job.request.output_tokens
        if math.isnan(job.first_token_s):
            return 0
        steps = math.floor((now - job.first_token_s) / self.tpot_s + 1e-9)
        return min(job.request.output_tokens, 1 + steps)


class FakeDeployment:
    def __init__(self, clock, ttft_s=0.05, tpot_s=0.01, refuse_over_tokens=10_000, expose_decode=True):
        self.clock, self.ttft_s, self.tpot_s, self.refuse_over = clock, ttft_s, tpot_s, refuse_over_tokens
        self.name = "fake"
        self.records, self.in_flight = [], {}
        self.on_record = self.on_first_token = None
        self.prefill = {"local": [], "prfaas": []}
        self._decode = FakeDecode(tpot_s)
        self.decode = [self._decode] if expose_decode else []
        self.waiting, self.cross_link = deque(), None

    def submit(self, request):
        job = FakeJob(request, decode_instance="d0")
        self.in_flight[request.request_id] = job
        if request.input_tokens > self.refuse_over:
            self._end(job, "KV of input+output exceeds every decode instance's memory")
        else:
            self.clock.call_at(self.clock.now() + self.ttft_s, lambda: self._first(job))
        return job

    def _first(self, job):
        if job.error is not None:
            return
        job.first_token_s = self.clock.now()
        self.on_first_token(job)
        end = job.first_token_s + (job.request.output_tokens - 1) * self.tpot_s
        self.clock.call_at(end, lambda: self._end(job, None))

    def tokens_done(self, job):
        return self._decode.tokens_done(job, self.clock.now())

    def _end(self, job, error):
        if job.request.request_id not in self.in_flight:
            return
        del self.in_flight[job.request.request_id]
        job.error = error
        job.finish_s = self.clock.now() if error is None else math.nan
        req = job.request
        record = {"request_id": req.request_id, "input_tokens": req.input_tokens,
                  "output_tokens": req.output_tokens if error is None else 0, "cached_tokens": 0,
                  "route": "local", "kv_bytes_sent": 0.0, "error": error,
                  "ttft_s": job.first_token_s - req.arrival_s, "tpot_s": self.tpot_s,
                  "e2e_s": job.finish_s - req.arrival_s}
        self.records.append(record)
        self.on_record(record)

    def cancel(self, job, reason="cancelled"):
        """The client left: the request ends now (its later timers find it ended and do nothing)."""
        if job.request.request_id not in self.in_flight:
            return False
        self._end(job, reason)
        return True

    def close(self, reason="closed"):
        for job in list(self.in_flight.values()):
            self._end(job, reason)


@contextlib.asynccontextmanager
async def _serve_fake(options: ServeOptions | None = None, *, time_scale=1.0, **fake):
    """Yield (base_url, engine) for a fake deployment behind the real app."""
    loop = asyncio.get_running_loop()
    clock = ScheduledLoopClock(loop, time_scale)
    engine = LiveEngine(FakeDeployment(clock, **fake), clock, loop, block_tokens=4)
    options = options or ServeOptions(served_model="fake-model", max_model_len=4096, stream_interval_tokens=1,
                                      max_body_bytes=64 * 1024)
    async with _serve_engine(engine, options) as url:
        try:
            yield url, engine
        finally:
            engine.close()  # fail what is in flight before the server shuts down


class StepEngine:
    """An engine whose token progress the test sets: no clock, no timers, nothing to race.

    The first token exists on submission. `wait_for_tokens(live, k)` returns k plus the next number in
    `late` (0 when the list is used up: the handler "woke" exactly on time; more: tokens that piled up
    while it slept), capped at max_tokens; the request ends (record set) once all tokens exist.
    """

    closed = False  # LiveEngine's: the server is stopping

    def __init__(self, late=()):
        self.loop = asyncio.get_running_loop()
        self.metrics = ServerMetrics()
        self.late = list(late)
        self.asked: list[int] = []
        self._ids = 0

    def submit(self, prompt_ids, max_tokens, client_id=None, *, stream=False):
        self._ids += 1
        live = LiveJob(Request(self._ids, 0.0, len(prompt_ids), max_tokens, ()), self.loop, client_id, stream)
        live.first_token.set_result(None)
        return live

    async def wait_for_tokens(self, live, target):
        await asyncio.sleep(0)
        self.asked.append(target)
        n = live.request.output_tokens
        done = min(n, target + (self.late.pop(0) if self.late else 0))
        if done >= n:
            live.record = {"request_id": live.request.request_id, "input_tokens": live.request.input_tokens,
                           "output_tokens": n, "cached_tokens": 0, "error": None}
            live.done.set_result(None)
        return done

    def record_unsubmitted(self, status, error, client_id=None, *, abandoned=False):
        pass

    def abandon(self, live):
        return False

    def close(self, reason="closed"):
        pass


@contextlib.asynccontextmanager
async def _serve_engine(engine, options: ServeOptions):
    """Yield the base url of the real app in front of `engine` (any object with LiveEngine's surface)."""
    runner = web.AppRunner(make_app(engine, options), access_log=None, shutdown_timeout=1.0,
                           handler_cancellation=HANDLER_CANCELLATION)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
def step_engine():
    """The StepEngine class (token progress set by the test)."""
    return StepEngine


@pytest.fixture
def serve_engine():
    """`async with serve_engine(engine, options) as url`."""
    return _serve_engine


async def _sse_events(resp: aiohttp.ClientResponse) -> list:
    """The `data:` payloads of an SSE response, JSON-decoded except the final [DONE]."""
    import json

    text = (await resp.read()).decode()
    out = []
    for event in text.split("\n\n"):
        for line in event.splitlines():
            if line.startswith("data: "):
                payload = line[6:]
                out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@contextlib.asynccontextmanager
async def _fake_runner(shutdown_timeout: float):
    """Yield (runner, engine): the real app over the fake deployment, set up and listening on
    127.0.0.1:0, for a test that stops it itself (engine.close(), then runner.cleanup(), as LiveServer.stop)."""
    loop = asyncio.get_running_loop()
    clock = ScheduledLoopClock(loop, 1.0)
    engine = LiveEngine(FakeDeployment(clock), clock, loop, block_tokens=4)
    options = ServeOptions(served_model="fake-model", max_model_len=4096, max_body_bytes=64 * 1024)
    runner = web.AppRunner(make_app(engine, options), access_log=None, shutdown_timeout=shutdown_timeout,
                           handler_cancellation=HANDLER_CANCELLATION)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield runner, engine
    finally:
        engine.close()
        await runner.cleanup()


@pytest.fixture
def fake_runner():
    """`async with fake_runner(shutdown_timeout) as (runner, engine)`."""
    return _fake_runner


@pytest.fixture
def serve_fake():
    """`async with serve_fake(options, time_scale=..., **fake) as (url, engine)`."""
    return _serve_fake


@pytest.fixture
def sse_events():
    """`await sse_events(response)`: the decoded `data:` payloads of an SSE response."""
    return _sse_events
