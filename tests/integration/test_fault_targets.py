"""url runs against targets that misbehave: every failure is a row with an error, and the run
finishes and writes its directory (requests/timeseries/summary .parquet) as any run does.

The faulty target is a small aiohttp server on 127.0.0.1, port 0, in a background thread; which
fault a request meets is fixed by its X-Request-Id (the load generator sends the trace's id).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading

import pandas as pd
import pytest
from aiohttp import web

from harness.cli import run

FAULTS = {1: "refuse_500", 2: "break_stream", 3: "hang", 4: "bad_json", 5: "no_done"}


def _app() -> web.Application:
    app = web.Application()

    async def completions(request: web.Request) -> web.StreamResponse:
        rid = int(request.headers["X-Request-Id"])
        body = await request.json()
        fault = FAULTS.get(rid % 6)
        if fault == "refuse_500":
            return web.json_response({"error": {"message": "overloaded", "type": "server_error", "param": None,
                                                "code": 500}}, status=500)
        if fault == "hang":
            await asyncio.sleep(30)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = body["max_tokens"]
        for i in range(n):
            await resp.write(b'data: {"choices":[{"index":0,"text":" t"}]}\n\n')
            if fault == "break_stream" and i == 1:
                request.transport.close()
                return resp
            if fault == "bad_json" and i == 1:
                await resp.write(b"data: {not json\n\n")
        if fault != "no_done":
            usage = {"prompt_tokens": len(body["prompt"]), "completion_tokens": n, "total_tokens": 0}
            await resp.write(b"data: " + json.dumps({"choices": [], "usage": usage}).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app.router.add_post("/v1/completions", completions)
    return app


async def _cancel_the_rest() -> None:
    """Cancel the handlers still running (a `hang` outlives the runner's shutdown timeout) and wait for
    them, so no pending task is destroyed with the loop ("Task was destroyed but it is pending!")."""
    rest = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
    for task in rest:
        task.cancel()
    await asyncio.gather(*rest, return_exceptions=True)


@pytest.fixture(scope="module")
def faulty_url():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = web.AppRunner(_app(), access_log=None, shutdown_timeout=0.5)

    async def start():
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return runner.addresses[0][1]

    port = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    yield f"http://127.0.0.1:{port}"
    asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    asyncio.run_coroutine_threadsafe(_cancel_the_rest(), loop).result(10)  # the hung handlers outlive cleanup
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def _url_run(compose_cfg, tmp_path, url, n=24, extra=()):
    cfg = compose_cfg(["mode=url", f"target.url={url}", "target.model=m", "target.timeout_s=1.0",
                       "workload=fixed", "workload.input_tokens=600", "workload.output_tokens=4",
                       f"workload.num_requests={n}", "loadgen.rate_rps=40", "analysis.figures=false",
                       f"out_dir={tmp_path}", *extra])
    summary = run(cfg)
    return summary, pd.read_parquet(tmp_path / "requests.parquet")


def test_each_fault_is_recorded_and_the_run_finishes(compose_cfg, tmp_path, faulty_url):
    summary, df = _url_run(compose_cfg, tmp_path, faulty_url)
    assert len(df) == 24 and sorted(df["request_id"]) == list(range(24))
    err = dict(zip(df["request_id"], df["error"], strict=False))
    expected = {0: None, 1: "HTTP 500: overloaded", 2: "ClientPayloadError", 3: "timeout",
                4: "malformed response", 5: "stream ended before"}
    for rid, e in err.items():
        want = expected[rid % 6]
        if want is None:
            assert pd.isna(e)
        else:
            assert want in e, (rid, e)
    assert summary["completed"] == 4 and summary["failed"] == 20
    assert summary["mode"] == "url" and summary["deployment"] == "url:m"
    ok = df[df["error"].isna()]
    assert (ok["output_tokens"] == 4).all() and (ok["input_tokens"] == 600).all() and ok["usage_reported"].all()
    for name in ("timeseries.parquet", "summary.parquet", "summary.json", "chunks.parquet"):
        assert (tmp_path / name).exists()


def test_a_target_that_refuses_connections(compose_cfg, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again before the run: nobody listens there
    summary, df = _url_run(compose_cfg, tmp_path, f"http://127.0.0.1:{port}", n=5)
    assert summary["failed"] == 5 and df["error"].str.contains("ClientConnectorError").all()
