"""What a test server sees of target.api_key / headers / extra_body, and what the client keeps of
the server's answer: its response id, the engine's `timings`, and its announced time scale."""

from __future__ import annotations

import asyncio
import json
import math

import aiohttp
import pytest
from aiohttp import web

from harness.errors import InputError
from harness.loadgen.client import OpenAIHttpTarget
from harness.loadgen.clock import MonotonicClock
from harness.loadgen.prompts import PromptBuilder
from harness.loadgen.records import RequestRecord
from harness.loadgen.timescale import announced_mismatch, detect_time_scale
from harness.workload.request import Request

TIMINGS = {"prompt_n": 11, "cache_n": 4, "prompt_ms": 12.5, "predicted_n": 3, "predicted_ms": 30.25,
           "predicted_per_token_ms": 10.08}


def _sse(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


def make_app(seen: list, *, announce: float | None = None, via: str = "header"):
    app = web.Application()

    async def completions(request):
        seen.append((request.headers.copy(), json.loads(await request.read())))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        if announce is not None and via == "header":
            resp.headers["X-Harness-Time-Scale"] = str(announce)
        await resp.prepare(request)
        await resp.write(_sse({"id": "cmpl-abc123", "choices": [{"index": 0, "text": " the"}]}))
        await resp.write(_sse({"id": "cmpl-abc123", "choices": [{"index": 0, "text": " the the",
                                                                 "finish_reason": "length"}], "timings": TIMINGS}))
        await resp.write(_sse({"id": "cmpl-abc123", "choices": [], "usage": {"prompt_tokens": 11,
                                                                             "completion_tokens": 3}}))
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def health(request):
        if announce is not None and via == "health":
            return web.json_response({"status": "ok", "time_scale": announce})
        return web.Response(status=200)

    async def models(request):
        item = {"id": "m"}
        if announce is not None and via == "models":
            item["time_scale"] = announce
        return web.json_response({"data": [item]})

    app.router.add_post("/v1/completions", completions)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    return app


async def _serve(app):
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}"


def _send(seen, **target_kw):
    async def go():
        runner, url = await _serve(make_app(seen, announce=7.0))
        try:
            async with aiohttp.ClientSession() as s:
                target = OpenAIHttpTarget(s, url, model="m", clock=MonotonicClock(), prompts=PromptBuilder(4),
                                          **target_kw)
                record = RequestRecord(5, 0, 6, 3)
                await target.send(target.prepare(Request(5, 0.0, 6, 3)), record)
                return record
        finally:
            await runner.cleanup()

    return asyncio.run(go())


def test_the_server_sees_the_api_key_headers_and_extra_body():
    seen: list = []
    _send(seen, api_key="sk-test", headers={"X-Tenant": "blue", "X-Trace": "1"},
          extra_body={"temperature": 0.7, "cache_prompt": False, "ignore_eos": False})
    headers, body = seen[0]
    assert headers["Authorization"] == "Bearer sk-test"
    assert headers["X-Tenant"] == "blue" and headers["X-Trace"] == "1"
    assert headers["X-Request-Id"] == "5"
    assert body["temperature"] == 0.7 and body["cache_prompt"] is False
    assert body["ignore_eos"] is False  # extra_body wins over the harness's own field
    assert body["max_tokens"] == 3 and len(body["prompt"]) == 6  # the rest is as the harness built it


def test_without_options_nothing_extra_is_sent():
    seen: list = []
    _send(seen)
    headers, body = seen[0]
    assert "Authorization" not in headers
    assert set(body) == {"prompt", "model", "max_tokens", "stream", "stream_options", "ignore_eos"}


def test_extra_body_may_not_replace_the_prompt():
    with pytest.raises(InputError, match="extra_body may not set prompt"):
        _send([], extra_body={"prompt": "x"})


def test_the_record_keeps_the_response_id_engine_timings_and_announced_scale():
    record = _send([])
    assert record.error is None and record.response_id == "cmpl-abc123"
    assert record.engine_timings == {k: float(TIMINGS[k]) for k in ("prompt_n", "cache_n", "prompt_ms",
                                                                     "predicted_n", "predicted_ms")}
    assert record.server_time_scale == 7.0
    row = record.to_row(0, 1.0, "d", "url")
    assert row["response_id"] == "cmpl-abc123"
    assert (row["engine_prompt_n"], row["engine_cache_n"], row["engine_prompt_ms"], row["engine_predicted_n"],
            row["engine_predicted_ms"]) == (11.0, 4.0, 12.5, 3.0, 30.25)


def test_engine_columns_are_nan_when_the_target_sends_no_timings():
    row = RequestRecord(1, 0, 6, 3).to_row(0, 1.0, "d", "url")
    assert all(math.isnan(row[f"engine_{k}"]) for k in ("prompt_n", "cache_n", "prompt_ms", "predicted_n",
                                                         "predicted_ms"))
    assert row["response_id"] is None


@pytest.mark.parametrize("via", ["health", "models"])
def test_the_time_scale_is_detected_from_health_or_models(via):
    async def go():
        runner, url = await _serve(make_app([], announce=10.0, via=via))
        try:
            async with aiohttp.ClientSession() as s:
                return (await detect_time_scale(s, url + "/v1"), await detect_time_scale(s, url, override=2.5))
        finally:
            await runner.cleanup()

    detected, overridden = asyncio.run(go())
    assert detected == (10.0, f"/{via}" if via == "health" else "/v1/models")
    assert overridden == (2.5, "target.time_scale")


def test_a_server_that_announces_nothing_runs_in_real_time():
    async def go():
        runner, url = await _serve(make_app([]))
        try:
            async with aiohttp.ClientSession() as s:
                return await detect_time_scale(s, url)
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == (1.0, "default")


def test_a_bad_override_is_refused_and_a_mismatch_is_named():
    async def go():
        async with aiohttp.ClientSession() as s:
            await detect_time_scale(s, "http://127.0.0.1:9", override=0.0)

    with pytest.raises(InputError, match=r"target.time_scale"):
        asyncio.run(go())
    rec = RequestRecord(1, 0, 1, 1)
    rec.server_time_scale = 10.0
    assert announced_mismatch([rec], 10.0) is None
    assert "announced time scale 10" in announced_mismatch([rec], 1.0)


def test_rows_keep_wall_and_emulated_latencies():
    """At time scale 10, 0.2 wall seconds to the first token is 2 emulated seconds; both are kept."""
    rec = RequestRecord(1, 0, 1, 2)
    rec.sent_ns, rec.first_token_ns, rec.last_token_ns = 0, 200_000_000, 300_000_000
    row = rec.to_row(0, 10.0, "d", "url")
    assert row["ttft_s"] == pytest.approx(2.0) and row["ttft_wall_s"] == pytest.approx(0.2)
    assert row["e2e_s"] == pytest.approx(3.0) and row["e2e_wall_s"] == pytest.approx(0.3)
