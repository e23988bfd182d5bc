"""Every generation request ends in exactly one record: refused ones (an error status before the
deployment saw them) and abandoned ones (the client hung up first) too, each marked as such.

The app runs over the fake deployment of conftest.py (first token after 50 ms, then one every 10 ms)
on 127.0.0.1, port 0; the records are caught by the engine's `record_sink`, as harness-serve's are.
Waits are on events (a record arrived, a request is in flight), bounded by a generous deadline.
"""

from __future__ import annotations

import asyncio
import json
import math
import time

import aiohttp

from harness.live.app import ServeOptions
from harness.live.engine import CLIENT_LEFT

_DEADLINE_S = 30.0  # a hang, not a timing: every wait below ends on an event long before


def run(coro):
    return asyncio.run(coro)


async def _until(predicate, what):
    end = time.monotonic() + _DEADLINE_S
    while not predicate():
        assert time.monotonic() < end, f"never happened: {what}"
        await asyncio.sleep(0.005)


async def _post(session, url, data, rid):
    headers = {"Content-Type": "application/json", "X-Request-Id": rid}
    async with session.post(url, data=data if isinstance(data, bytes) else json.dumps(data).encode(),
                            headers=headers) as resp:
        await resp.read()
        return resp.status


def test_every_refused_request_is_a_record_with_its_status_and_error(serve_fake):
    options = ServeOptions(served_model="fake-model", max_model_len=4096, max_body_bytes=2048)
    cases = {  # X-Request-Id -> (body, the status the client gets)
        "ok": ({"prompt": [1, 2, 3], "max_tokens": 2}, 200),
        "bad_json": (b"{not json", 400),
        "unknown_model": ({"model": "other", "prompt": [1, 2], "max_tokens": 2}, 404),
        "bad_param": ({"prompt": [1, 2], "max_tokens": 0}, 400),
        "too_long": ({"prompt": [1, 2], "max_tokens": 5000}, 400),
        "too_big": (b'{"prompt": "' + b"a " * 2000 + b'"}', 413),
        "unservable": ({"prompt": list(range(20)), "max_tokens": 2}, 400),  # the fake refuses > 10 tokens
    }

    async def body():
        records = []
        async with serve_fake(options, refuse_over_tokens=10) as (url, engine), aiohttp.ClientSession() as s:
            engine.record_sink = records.append
            statuses = {rid: await _post(s, url + "/v1/completions", data, rid) for rid, (data, _) in cases.items()}
            async with s.get(url + "/metrics") as r:
                text = await r.text()
        return statuses, records, text

    statuses, records, text = run(body())
    assert statuses == {rid: status for rid, (_, status) in cases.items()}
    by_client = {r["client_id"]: r for r in records}
    assert len(records) == len(cases) and set(by_client) == set(cases)  # one record each, none twice
    assert len({r["request_id"] for r in records}) == len(records)
    for rid, (_, status) in cases.items():
        rec = by_client[rid]
        assert rec["http_status"] == status, rid
        assert rec["refused"] is (status != 200), rid
        assert rec["abandoned"] is False and rec["interrupted"] is False, rid
        assert (rec["error"] is None) is (status == 200), rid
    assert "not valid JSON" in by_client["bad_json"]["error"]
    assert "`other` does not exist" in by_client["unknown_model"]["error"]
    assert "maximum context length" in by_client["too_long"]["error"]
    assert 'harness_requests_refused_total{code="400"} 4' in text
    assert 'harness_requests_refused_total{code="404"} 1' in text
    assert 'harness_requests_refused_total{code="413"} 1' in text


def test_a_stream_abandoned_after_its_first_chunk_is_recorded_as_abandoned(serve_fake):
    async def body():
        records = []
        async with serve_fake() as (url, engine), aiohttp.ClientSession() as s:
            engine.record_sink = records.append
            async with s.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 30, "stream": True},
                              headers={"X-Request-Id": "gone"}) as r:
                await r.content.readuntil(b"\n\n")  # the first chunk is here
                t_chunk = engine.clock.now()
                r.close()  # hang up mid-stream
            await _until(lambda: records, "the abandoned request's record")  # written when it is cancelled
            status = await _post(s, url + "/v1/completions", {"prompt": "b", "max_tokens": 2}, "next")
            await _until(lambda: len(records) == 2, "the next request's record")
        return records, status, engine.metrics, t_chunk

    records, status, metrics, t_chunk = run(body())
    gone, after = records
    assert gone["client_id"] == "gone" and gone["abandoned"] is True and gone["error"] == CLIENT_LEFT
    assert gone["http_status"] == 200 and gone["refused"] is False
    assert 1 <= gone["output_tokens"] < 30  # decoded up to the hang-up: the chunk read at least, not all asked
    assert gone["abandoned_s"] >= t_chunk  # when it left, on the emulated clock
    assert math.isnan(gone["e2e_s"])  # cancelled when its client left: it never finished
    assert after["error"] is None and after["abandoned"] is False and status == 200
    assert metrics.finished["abandoned", "local"] == 1 and metrics.finished["completed", "local"] == 1


def test_a_client_leaving_a_non_streaming_request_is_noticed_and_recorded(serve_fake):
    async def body():
        records = []
        async with serve_fake() as (url, engine), aiohttp.ClientSession() as s:
            engine.record_sink = records.append
            client = asyncio.create_task(_post(s, url + "/v1/completions", {"prompt": "a", "max_tokens": 30}, "gone"))
            await _until(lambda: engine.metrics.received == 1, "the request reached the deployment")
            t_sent = engine.clock.now()
            client.cancel()  # the client gives up: its connection closes
            await _until(lambda: engine.metrics.disconnects == 1, "the server noticed")
            await _until(lambda: records, "the abandoned request's record")
        return records, t_sent

    (rec,), t_sent = run(body())
    assert rec["abandoned"] is True and rec["error"] == CLIENT_LEFT and rec["output_tokens"] < 30  # decoded by then
    assert rec["http_status"] == 499  # no status line was sent: nginx's "client closed request"
    assert rec["abandoned_s"] >= t_sent and rec["client_id"] == "gone"


def test_a_client_hanging_up_mid_body_leaves_an_abandoned_record(serve_fake):
    async def body():
        records = []
        async with serve_fake() as (url, engine):
            engine.record_sink = records.append
            host, port = url.removeprefix("http://").split(":")
            _, writer = await asyncio.open_connection(host, int(port))
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"X-Request-Id: half\r\nContent-Length: 60000\r\n\r\n" + b'{"prompt": "a a a')
            await writer.drain()
            writer.close()
            await _until(lambda: records, "the record of the half-sent request")
        return records, engine.metrics

    (rec,), metrics = run(body())
    assert rec["client_id"] == "half" and rec["abandoned"] is True and rec["refused"] is False
    assert rec["http_status"] == 499 and "while sending" in rec["error"] and rec["input_tokens"] == 0
    assert math.isnan(rec["finish_s"]) and metrics.disconnects_mid_body == 1 and metrics.received == 0


def test_requests_in_flight_when_the_server_stops_are_interrupted_not_abandoned(serve_fake):
    async def body():
        records = []
        async with serve_fake() as (url, engine), aiohttp.ClientSession() as s:
            engine.record_sink = records.append
            client = asyncio.create_task(_post(s, url + "/v1/completions", {"prompt": "a", "max_tokens": 300}, "cut"))
            await _until(lambda: engine.metrics.received == 1, "the request reached the deployment")
            engine.close("server shut down before the request completed")
            status = await client
        return records, status

    (rec,), status = run(body())
    assert status == 503 and rec["interrupted"] is True and rec["abandoned"] is False
    assert rec["error"] == "server shut down before the request completed" and rec["http_status"] == 503
    assert rec["ended_s"] > 0  # cut off then: where its time series intervals end


def test_a_request_arriving_after_the_server_began_to_stop_is_refused_503_and_interrupted(serve_fake):
    """LiveServer.stop closes the engine, then aiohttp's cleanup still accepts and runs handlers for a
    while: a request that arrives then is not submitted (the deployment is closed), it is answered 503
    and recorded as interrupted by the stop, not as abandoned by its client nor as a refusal."""
    async def body():
        records = []
        async with serve_fake() as (url, engine), aiohttp.ClientSession() as s:
            engine.record_sink = records.append
            engine.close()  # LiveServer.stop's first step; the server still listens
            statuses = [await _post(s, url + "/v1/completions", {"prompt": "a", "max_tokens": 3, "stream": stream},
                                    f"late{int(stream)}") for stream in (False, True)]
        return records, statuses, engine

    records, statuses, engine = run(body())
    assert statuses == [503, 503] and len(records) == 2
    for rec in records:
        assert rec["interrupted"] is True and rec["abandoned"] is False and rec["refused"] is False
        assert rec["http_status"] == 503 and rec["error"] == "server shutting down"
        assert rec["ended_s"] == rec["arrival_s"]
    assert engine.metrics.received == 0 and not engine.metrics.refused
    assert engine.metrics.disconnects == 0 and engine.metrics.disconnects_mid_body == 0


def test_a_request_still_arriving_when_the_server_stops_is_interrupted_not_a_disconnect(fake_runner):
    """Its handler waits for the rest of the body when the server stops; aiohttp stops reading and, after
    its grace, cancels the handler. The client did not leave: the record says interrupted, not
    abandoned, and no client disconnect is counted."""
    async def body():
        records = []
        async with fake_runner(0.2) as (runner, engine):
            engine.record_sink = records.append
            host, port = runner.addresses[0][:2]
            _, writer = await asyncio.open_connection(host, port)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"X-Request-Id: half\r\nContent-Length: 60000\r\n\r\n" + b'{"prompt": "a a a')
            await writer.drain()
            await _until(lambda: runner.server.requests_count == 1, "the handler started (reading the body)")
            engine.close()
            await runner.cleanup()  # LiveServer.stop's second step: the handler is cut off
            writer.close()
        return records, engine.metrics

    (rec,), metrics = run(body())
    assert rec["client_id"] == "half" and rec["interrupted"] is True and rec["abandoned"] is False
    assert rec["refused"] is False and rec["http_status"] == 503 and "server shut down" in rec["error"]
    assert metrics.disconnects_mid_body == 0 and metrics.disconnects == 0 and metrics.received == 0
