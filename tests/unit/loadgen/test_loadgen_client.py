"""The HTTP target against small servers that answer well, badly, or not at all.

One aiohttp app on 127.0.0.1, port 0, serves every behaviour under its own path prefix; each case
checks the record the client leaves behind (never an exception).
"""

from __future__ import annotations

import asyncio
import json
import socket

import aiohttp
import pytest
from aiohttp import web

from harness.loadgen.client import OpenAIHttpTarget, discover_model, v1_base
from harness.loadgen.clock import MonotonicClock
from harness.loadgen.prompts import PromptBuilder
from harness.loadgen.records import RequestRecord
from harness.workload.request import Request


def _chunk(text, usage=None, chat=False):
    choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
    return b"data: " + json.dumps({"choices": [choice] if text is not None else [], "usage": usage}).encode() + b"\n\n"


USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14, "prompt_tokens_details": {"cached_tokens": 8}}


async def _stream(request, parts, *, close_early=False, eol=b"\n"):
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    for part in parts:
        await resp.write(part.replace(b"\n", eol))
        await asyncio.sleep(0.002)
    if close_early:
        request.transport.close()
        return resp
    await resp.write_eof()
    return resp


def make_app():
    app = web.Application()

    async def ok(request):
        return await _stream(request, [_chunk("a"), _chunk(" b c"), _chunk(None, USAGE), b"data: [DONE]\n\n"])

    async def chat(request):
        return await _stream(request, [b": keep-alive\n\n", _chunk("", chat=True), _chunk("x", chat=True),
                                       _chunk("y", chat=True), b"data: [DONE]\n\n"])

    async def crlf(request):
        return await _stream(request, [_chunk("a"), _chunk("b"), b"data: [DONE]\n\n"], eol=b"\r\n")

    async def bad_request(request):
        return web.json_response({"error": {"message": "max_tokens must be >= 1", "type": "invalid_request_error",
                                            "param": "max_tokens", "code": None}}, status=400)

    async def stream_error(request):
        return await _stream(request, [_chunk("a"), b'data: {"error": {"message": "engine died"}}\n\n',
                                       b"data: [DONE]\n\n"])

    async def truncated(request):
        return await _stream(request, [_chunk("a")], close_early=True)

    async def no_done(request):
        return await _stream(request, [_chunk("a")])

    async def empty(request):
        return await _stream(request, [b"data: [DONE]\n\n"])

    async def slow(request):
        await asyncio.sleep(2)
        return web.Response()

    async def whole(request):
        return web.json_response({"choices": [{"index": 0, "text": "a b"}], "usage": USAGE})

    async def models(request):
        return web.json_response({"object": "list", "data": [{"id": "served-model"}]})

    for prefix, handler in (("ok", ok), ("chat", chat), ("crlf", crlf), ("bad", bad_request),
                            ("streamerr", stream_error), ("truncated", truncated), ("nodone", no_done),
                            ("empty", empty), ("slow", slow), ("whole", whole)):
        app.router.add_post(f"/{prefix}/v1/completions", handler)
        app.router.add_post(f"/{prefix}/v1/chat/completions", handler)
    app.router.add_get("/v1/models", models)
    return app


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def _send(prefix, *, api="completions", stream=True, timeout_s=5.0, refused=False):
    runner = web.AppRunner(make_app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = _free_port() if refused else runner.addresses[0][1]
    try:
        async with aiohttp.ClientSession() as session:
            target = OpenAIHttpTarget(session, f"http://127.0.0.1:{port}/{prefix}", model="m", clock=MonotonicClock(),
                                      prompts=PromptBuilder(4), api=api, stream=stream, timeout_s=timeout_s)
            request = Request(1, 0.0, 11, 3, (1, 2, 3))
            record = RequestRecord(1, 0, 11, 3)
            record.sent_ns = MonotonicClock().now_ns()
            await target.send(target.prepare(request), record)
            return record
    finally:
        await runner.cleanup()


def run(coro):
    return asyncio.run(coro)


def test_stream_with_usage_records_every_chunk_and_the_servers_counts():
    r = run(_send("ok"))
    assert r.error is None and r.http_status == 200
    assert len(r.chunk_ns) == 2 and r.first_token_ns == r.chunk_ns[0] and r.last_token_ns == r.chunk_ns[-1]
    assert r.first_token_ns >= r.sent_ns
    assert (r.input_tokens, r.output_tokens, r.cached_tokens, r.usage_reported) == (11, 3, 8, True)


def test_chat_deltas_comments_and_empty_role_chunks():
    """Keep-alive comments and a content-less first delta are not tokens."""
    r = run(_send("chat", api="chat"))
    assert r.error is None and len(r.chunk_ns) == 2
    assert (r.output_tokens, r.usage_reported) == (3, False)  # no usage: the requested count stays


def test_crlf_line_endings():
    r = run(_send("crlf"))
    assert r.error is None and len(r.chunk_ns) == 2


@pytest.mark.parametrize(("prefix", "kwargs", "expected"), [
    ("bad", {}, "HTTP 400: max_tokens must be >= 1"),
    ("streamerr", {}, "stream error: engine died"),
    ("truncated", {}, "ClientPayloadError"),
    ("nodone", {}, "stream ended before `data: [DONE]`"),
    ("empty", {}, "stream carried no output tokens"),
    ("slow", {"timeout_s": 0.2}, "timeout"),
    ("ok", {"refused": True}, "ClientConnectorError"),
])
def test_failures_become_the_records_error(prefix, kwargs, expected):
    r = run(_send(prefix, **kwargs))
    assert r.error is not None and expected in r.error


def test_non_streaming_response():
    r = run(_send("whole", stream=False))
    assert r.error is None and r.first_token_ns == r.last_token_ns and r.output_tokens == 3


@pytest.mark.parametrize(("url", "base"), [
    ("http://h:1", "http://h:1/v1"), ("http://h:1/", "http://h:1/v1"), ("http://h:1/v1/", "http://h:1/v1"),
])
def test_v1_base(url, base):
    assert v1_base(url) == base


def test_discover_model_takes_the_first_listed():
    async def go():
        runner = web.AppRunner(make_app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        try:
            async with aiohttp.ClientSession() as s:
                return await discover_model(s, f"http://127.0.0.1:{runner.addresses[0][1]}")
        finally:
            await runner.cleanup()

    assert run(go()) == "served-model"
