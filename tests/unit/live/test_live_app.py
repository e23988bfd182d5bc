"""The OpenAI-compatible app over a fake deployment: shapes, streaming, and errors as 4xx objects.

Each test starts the app on 127.0.0.1, port 0, and ends it; the fake deployment's timeline is in
conftest.py (first token after 50 ms, then a token every 10 ms).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from harness.live.app import ServeOptions


def run(coro):
    return asyncio.run(coro)


async def _post(session, url, body, **kw):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url, data=data, headers={"Content-Type": "application/json"}, **kw) as resp:
        return resp.status, await resp.read()


def test_models_health_and_metrics(serve_fake):
    async def body():
        async with serve_fake() as (url, _), aiohttp.ClientSession() as s:
            async with s.get(url + "/health") as r:
                assert r.status == 200
            async with s.get(url + "/v1/models") as r:
                models = await r.json()
            async with s.get(url + "/metrics") as r:
                text = await r.text()
                assert r.content_type == "text/plain"
        assert models["data"][0]["id"] == "fake-model" and models["object"] == "list"
        assert "harness_requests_received_total 0" in text

    run(body())


def test_completion_non_streaming_has_usage_and_all_tokens(serve_fake):
    async def body():
        async with serve_fake() as (url, engine), aiohttp.ClientSession() as s:
            status, raw = await _post(s, url + "/v1/completions", {"model": "fake-model", "prompt": [1, 2, 3, 4, 5],
                                                                    "max_tokens": 7, "ignore_eos": True})
            return status, json.loads(raw), engine

    status, out, engine = run(body())
    assert status == 200
    assert out["object"] == "text_completion" and out["choices"][0]["finish_reason"] == "length"
    assert out["choices"][0]["text"].split() == ["the"] * 7
    assert out["usage"] == {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12,
                            "prompt_tokens_details": {"cached_tokens": 0}}
    assert engine.metrics.finished["completed", "local"] == 1


@pytest.mark.parametrize(("n_tokens", "interval", "expected_token_chunks"), [
    (1, 1, [1]),
    (5, 1, [1, 1, 1, 1, 1]),
    (10, 4, [1, 4, 4, 1]),
    (9, 4, [1, 4, 4]),
])
def test_streaming_chunks_follow_the_stream_interval(n_tokens, interval, expected_token_chunks, serve_engine,
                                                    step_engine, sse_events):
    """First token alone, then `interval` tokens per chunk, the rest with the finish reason, then
    the usage chunk and [DONE]. Token progress is the test's (StepEngine): no wall-clock race."""
    options = ServeOptions(served_model="fake-model", stream_interval_tokens=interval)

    async def body():
        engine = step_engine()
        async with serve_engine(engine, options) as url, aiohttp.ClientSession() as s:
            req = {"prompt": "a b c", "max_tokens": n_tokens, "stream": True,
                   "stream_options": {"include_usage": True}}
            async with s.post(url + "/v1/completions", json=req) as resp:
                assert resp.headers["Content-Type"].startswith("text/event-stream")
                return await sse_events(resp)

    events = run(body())
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == n_tokens
    token_chunks = events[:-2]
    assert [len(c["choices"][0]["text"].split()) for c in token_chunks] == expected_token_chunks
    assert [c["choices"][0]["finish_reason"] for c in token_chunks] == [None] * (len(token_chunks) - 1) + ["length"]
    assert all(c["usage"] is None for c in token_chunks)


def test_a_late_wake_sends_every_token_that_exists_in_one_chunk(serve_engine, step_engine, sse_events):
    """When more tokens piled up than the interval while the handler slept, the chunk carries all of
    them and the next target counts from there: 10 tokens, interval 4, 2 extra at the second wake."""
    options = ServeOptions(served_model="fake-model", stream_interval_tokens=4)

    async def body():
        engine = step_engine(late=[0, 2])
        body = {"prompt": "a", "max_tokens": 10, "stream": True}
        async with serve_engine(engine, options) as url, aiohttp.ClientSession() as s, \
                s.post(url + "/v1/completions", json=body) as r:
            return await sse_events(r), engine.asked

    events, asked = run(body())
    assert [len(c["choices"][0]["text"].split()) for c in events[:-1]] == [1, 6, 3]
    assert asked == [1, 5, 10]


def test_chat_stream_first_delta_has_the_role(serve_engine, step_engine, sse_events):
    """The first chat chunk carries the assistant role, no later one does. Token progress is the
    test's (StepEngine, interval 1: one token per chunk), so there are always three token chunks;
    on a fake deployment's real-clock timers a late loop sent all three in one chunk."""
    options = ServeOptions(served_model="fake-model", stream_interval_tokens=1)

    async def body():
        async with serve_engine(step_engine(), options) as url, aiohttp.ClientSession() as s:
            req = {"model": "fake-model", "messages": [{"role": "user", "content": "hello there"}],
                   "max_tokens": 3, "stream": True}
            async with s.post(url + "/v1/chat/completions", json=req) as resp:
                return await sse_events(resp)

    events = run(body())
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert [len(c["choices"][0]["delta"]["content"].split()) for c in chunks] == [1, 1, 1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:])
    assert "".join(c["choices"][0]["delta"]["content"] for c in chunks).split() == ["the"] * 3
    assert "usage" not in chunks[0]  # not asked for


@pytest.mark.parametrize(("method", "path", "body", "status", "code"), [
    ("POST", "/v1/completions", b"{not json", 400, "invalid_json"),
    ("POST", "/v1/completions", {"prompt": "hi", "max_tokens": -5}, 400, None),
    ("POST", "/v1/completions", {"prompt": list(range(5000))}, 400, "context_length_exceeded"),
    ("POST", "/v1/completions", {"model": "gpt-x", "prompt": "hi"}, 404, "model_not_found"),
    ("POST", "/v1/completions", b'{"prompt": "' + b"x " * 40_000 + b'"}', 413, "request_too_large"),
    ("POST", "/v1/chat/completions", {"messages": "hi"}, 400, None),
    ("GET", "/v1/nothing", None, 404, "not_found"),
    ("GET", "/v1/completions", None, 405, "method_not_allowed"),
])
def test_bad_input_gets_an_openai_error_and_the_server_keeps_serving(method, path, body, status, code, serve_fake):
    async def go():
        async with serve_fake() as (url, _engine), aiohttp.ClientSession() as s:
            if method == "POST":
                got_status, raw = await _post(s, url + path, body)
            else:
                async with s.get(url + path) as r:
                    got_status, raw = r.status, await r.read()
            ok_status, _ = await _post(s, url + "/v1/completions", {"prompt": "still up", "max_tokens": 2})
            return got_status, json.loads(raw), ok_status

    got_status, err, ok_status = run(go())
    assert got_status == status
    assert set(err["error"]) == {"message", "type", "param", "code"} and err["error"]["message"]
    if code is not None:
        assert err["error"]["code"] == code
    assert ok_status == 200


def test_refused_on_arrival_is_a_400_naming_the_reason(serve_fake):
    async def go():
        async with serve_fake(refuse_over_tokens=3) as (url, _), aiohttp.ClientSession() as s:
            return await _post(s, url + "/v1/completions", {"prompt": [1, 2, 3, 4], "max_tokens": 2})

    status, raw = run(go())
    assert status == 400 and "decode instance" in json.loads(raw)["error"]["message"]


def test_shutdown_mid_stream_ends_the_stream_with_an_error_event(serve_fake):
    """Requests in flight when the server stops get an in-stream error, then [DONE]."""

    async def go():
        async with (serve_fake() as (url, engine), aiohttp.ClientSession() as s,
                    s.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 1000, "stream": True}) as r):
            await r.content.readuntil(b"\n\n")  # the first token is out
            engine.close("server shut down")
            rest = (await r.read()).decode()
        return rest

    rest = run(go())
    assert '"error"' in rest and "server shut down" in rest and rest.endswith("data: [DONE]\n\n")


def test_client_disconnect_is_counted_and_the_server_keeps_serving(serve_fake):
    async def go():
        async with serve_fake() as (url, engine), aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 30, "stream": True}) as r:
                await r.content.readuntil(b"\n\n")
                r.close()  # hang up mid-stream
            await asyncio.sleep(0.4)  # the fake finishes the request (30 x 10 ms)
            status, _ = await _post(s, url + "/v1/completions", {"prompt": "b", "max_tokens": 2})
            finished = engine.metrics.finished
            return engine.metrics.disconnects, status, finished["completed", "local"], finished["abandoned", "local"]

    disconnects, status, completed, abandoned = run(go())
    assert disconnects == 1 and status == 200 and completed == 1 and abandoned == 1  # the one left is no completion


def test_streaming_without_a_predictable_decode_instance_still_delivers_every_token(serve_fake, sse_events):
    """A deployment whose decode instances cannot be asked about future times is polled instead."""
    options = ServeOptions(served_model="fake-model", stream_interval_tokens=3)

    async def body():
        async with (serve_fake(options, time_scale=5.0, expose_decode=False) as (url, _),
                    aiohttp.ClientSession() as s,
                    s.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 12, "stream": True}) as r):
            return await sse_events(r)

    events = run(body())
    texts = [c["choices"][0]["text"] for c in events[:-1]]
    # (chunk sizes depend on when the polling handler wakes; they are tested on StepEngine above)
    assert "".join(texts).split() == ["the"] * 12
    assert events[-2]["choices"][0]["finish_reason"] == "length"
