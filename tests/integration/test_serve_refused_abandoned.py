"""`harness-serve`'s run directory accounts for every generation request it received: refused ones
(4xx before the deployment saw them), streams and non-streaming requests whose client hung up
(abandoned, not failures) and requests cut off by the stop (interrupted), in requests.parquet, in
summary.json and in the line it prints at exit. 127.0.0.1, port 0; waits end on events."""

from __future__ import annotations

import asyncio
import json
import time

import aiohttp
import pandas as pd

from harness.runs.serve import serve

_DEADLINE_S = 60.0  # a hang, not a timing


async def _until(predicate, what):
    end = time.monotonic() + _DEADLINE_S
    while not predicate():
        assert time.monotonic() < end, f"never happened: {what}"
        await asyncio.sleep(0.01)


def test_serve_records_refused_abandoned_and_interrupted_requests(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg(["server.port=0", "server.time_scale=20", "analysis.figures=false"])
    run_dir = tmp_path / "serve"
    model = str(cfg.model.name)

    async def main():
        stop, box = asyncio.Event(), {}
        task = asyncio.create_task(serve(cfg, run_dir, stop=stop, on_listening=lambda s: box.setdefault("s", s)))
        await _until(lambda: "s" in box or task.done(), "the server listens")
        server = box["s"]
        engine, url = server.engine, server.url + "/v1/completions"
        async with aiohttp.ClientSession() as s:

            async def post(rid, data):
                kw = {"data": data} if isinstance(data, bytes) else {"json": data}
                async with s.post(url, headers={"X-Request-Id": rid}, **kw) as r:
                    await r.read()
                    return r.status

            statuses = [await post("ok", {"model": model, "prompt": [1, 2, 3, 4], "max_tokens": 4}),
                        await post("bad_json", b"{not json"),
                        await post("unknown_model", {"model": "nope", "prompt": [1, 2], "max_tokens": 4}),
                        await post("bad_param", {"model": model, "prompt": [1, 2], "max_tokens": 0})]
            async with s.post(url, json={"model": model, "prompt": [1, 2, 3], "max_tokens": 4000, "stream": True},
                              headers={"X-Request-Id": "stream_gone"}) as r:
                await r.content.readuntil(b"\n\n")  # its first chunk, then hang up
                r.close()
            await _until(lambda: engine.metrics.disconnects == 1, "the stream's hang-up noticed")
            gone = asyncio.create_task(post("wait_gone", {"model": model, "prompt": [5, 6, 7], "max_tokens": 4000}))
            await _until(lambda: engine.metrics.received == 3, "the non-streaming request in the deployment")
            gone.cancel()
            await _until(lambda: engine.metrics.disconnects == 2, "the non-streaming hang-up noticed")
            cut = asyncio.create_task(post("cut", {"model": model, "prompt": [8, 9], "max_tokens": 4000}))
            await _until(lambda: engine.metrics.received == 4, "the last request in the deployment")
            stop.set()  # stop the server with it in flight
            await task
            statuses.append(await cut)
        return statuses

    statuses = asyncio.run(main())
    assert statuses == [200, 400, 404, 400, 503]
    df = pd.read_parquet(run_dir / "requests.parquet").set_index("client_id")
    assert sorted(df.index) == sorted(["ok", "bad_json", "unknown_model", "bad_param", "stream_gone", "wait_gone",
                                       "cut"])  # one row per request sent
    assert df["http_status"].to_dict() == {"ok": 200, "bad_json": 400, "unknown_model": 404, "bad_param": 400,
                                           "stream_gone": 200, "wait_gone": 499, "cut": 503}
    assert set(df.index[df["refused"]]) == {"bad_json", "unknown_model", "bad_param"}
    assert set(df.index[df["abandoned"]]) == {"stream_gone", "wait_gone"}
    assert set(df.index[df["interrupted"]]) == {"cut"}
    assert (df.loc[["stream_gone", "wait_gone"], "error"] == "client disconnected").all()
    assert df.loc[["bad_json", "unknown_model", "bad_param"], "error"].notna().all()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert {k: summary[k] for k in ("n_requests", "completed", "failed", "refused_requests", "abandoned_requests",
                                    "interrupted_requests", "num_prompts")} == {
        "n_requests": 7, "completed": 1, "failed": 3, "refused_requests": 3, "abandoned_requests": 2,
        "interrupted_requests": 1, "num_prompts": 7}
    assert summary["slo_attainment"] == 0.25  # ok met it, 3 refused missed; abandoned and interrupted left out
    out = capsys.readouterr().out
    assert ("served 7 requests: 1 completed, 3 failed (3 refused), 2 abandoned by their clients, "
            "1 interrupted by the stop") in out
