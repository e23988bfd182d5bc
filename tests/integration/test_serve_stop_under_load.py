"""`harness-serve` stopped with requests decoding writes exactly one row per request, its flags set.

Before: the requests cut off at the stop kept their emulator timers (a decode batch's next step, a
transfer's end), which fired while the server shut down and ended them a second time: rows with
`interrupted` null and `finish_s` after the stop (85 rows for 82 requests)."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pandas as pd

from .serving import serving

N = 48


def test_a_stop_under_load_writes_one_row_per_request(compose_cfg, tmp_path):
    cfg = compose_cfg(["server.port=0", "server.time_scale=100", "analysis.figures=false"])
    run_dir = tmp_path / "serve"

    async def one(session, url, i, first):
        # long and short prompts: some in a prefill queue or a KV transfer at the stop, some decoding
        prompt = list(range(1, 1000 + 600 * i))
        body = {"model": str(cfg.model.name), "prompt": prompt, "max_tokens": 4000, "stream": True}
        try:
            async with session.post(url + "/v1/completions", json=body, headers={"X-Request-Id": f"c{i}"}) as resp:
                async for _ in resp.content:
                    first.set()
        except aiohttp.ClientError:  # the stopping server cut the stream
            pass

    async def main():
        async with serving(cfg, run_dir) as server, aiohttp.ClientSession() as session:
            first = asyncio.Event()
            tasks = [asyncio.create_task(one(session, server.url, i, first)) for i in range(N)]
            await asyncio.wait_for(first.wait(), 60)  # decoding has begun
            server.engine.close()  # what the stop does first; then the server takes its time to shut down
            end = time.monotonic() + 1.5  # 150 s emulated: past the decodes cut off
            while time.monotonic() < end:  # the loop (and any timer left) runs on meanwhile
                await asyncio.sleep(0.01)
            await asyncio.gather(*tasks)

    asyncio.run(main())
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert len(df) == N and df["request_id"].is_unique and sorted(df["client_id"]) == sorted(f"c{i}" for i in range(N))
    assert df["interrupted"].notna().all() and df["interrupted"].any()
