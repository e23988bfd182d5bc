"""A pooled keep-alive connection the server has already closed must not cost a request.

llama-server answers a streamed completion with keep-alive headers and then closes the connection;
aiohttp puts it back in its pool, and the next request written to it fails with "Can not write
request body". The target sends such a request once more on a new connection, because none of it
reached the server; a request the server did receive is never sent twice.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
from aiohttp import web

from harness.loadgen import client as client_module
from harness.loadgen.client import OpenAIHttpTarget
from harness.loadgen.clock import MonotonicClock
from harness.loadgen.prompts import PromptBuilder
from harness.loadgen.records import RequestRecord
from harness.workload.request import Request

N = 24  # back-to-back requests on one session (bounded; each one a few ms on loopback)


def _event(text: str | None) -> bytes:
    return b"data: " + json.dumps({"choices": [{"index": 0, "text": text}] if text else []}).encode() + b"\n\n"


def _app(received: list[int]) -> web.Application:
    async def closes_after_stream(request: web.Request) -> web.StreamResponse:
        received.append(int(request.headers["X-Request-Id"]))
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})  # keep-alive, as llama-server
        await resp.prepare(request)
        await resp.write(_event("a") + _event("b") + b"data: [DONE]\n\n")
        await resp.write_eof()
        assert request.transport is not None
        request.transport.close()  # ... and then closes, without `Connection: close`
        return resp

    async def reads_then_drops(request: web.Request) -> web.StreamResponse:
        received.append(int(request.headers["X-Request-Id"]))
        await request.read()
        assert request.transport is not None
        request.transport.close()  # the request arrived; no response
        return web.StreamResponse()

    app = web.Application()
    app.router.add_post("/stream/v1/completions", closes_after_stream)
    app.router.add_post("/drop/v1/completions", reads_then_drops)
    return app


async def _run(prefix: str, n: int, received: list[int]) -> list[RequestRecord]:
    runner = web.AppRunner(_app(received), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    port = runner.addresses[0][1]
    records = []
    try:
        async with aiohttp.ClientSession() as session:  # a pooling connector, as the load generator's
            target = OpenAIHttpTarget(session, f"http://127.0.0.1:{port}/{prefix}", model="m",
                                      clock=MonotonicClock(), prompts=PromptBuilder(4), timeout_s=10.0)
            for i in range(n):
                record = RequestRecord(i, 0, 5, 2)
                await target.send(target.prepare(Request(i, 0.0, 5, 2, (i,))), record)
                records.append(record)
    finally:
        await runner.cleanup()
    return records


def test_no_request_is_lost_to_a_connection_the_server_closed():
    received: list[int] = []
    records = asyncio.run(_run("stream", N, received))
    assert [r.error for r in records] == [None] * N
    assert all(len(r.chunk_ns) == 2 for r in records)
    assert sorted(received) == list(range(N))  # each request reached the server exactly once


def test_the_race_happens_here_without_the_retry(monkeypatch):
    """The server above does make the client write to closed connections (so the test above tests
    the retry): with it switched off, some requests fail with aiohttp's write error."""
    monkeypatch.setattr(client_module, "_never_sent", lambda err, record: False)
    received: list[int] = []
    records = asyncio.run(_run("stream", N, received))
    failed = [r.error for r in records if r.error]
    assert failed and all("Can not write request body" in e for e in failed)
    assert len(received) == N - len(failed)  # the failed ones never reached the server


def test_a_request_the_server_received_is_not_sent_again():
    received: list[int] = []
    records = asyncio.run(_run("drop", 1, received))
    assert records[0].error is not None and "ServerDisconnected" in records[0].error
    assert received == [0]
