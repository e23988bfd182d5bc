"""`harness-serve` keeps no records in memory: each one streams to requests.parquet.parts/ as it
ends (with the client's X-Request-Id), and the run directory is written from the parts at the end."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pandas as pd

from .serving import serving


def test_served_records_go_to_disk_not_to_memory(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg(["server.port=0", "server.time_scale=20", "recording.flush_s=0.1", "analysis.figures=false"])
    run_dir = tmp_path / "serve"

    async def main():
        end = time.monotonic() + 60
        async with serving(cfg, run_dir) as server:
            async with aiohttp.ClientSession() as session:
                for i in range(5):
                    body = {"model": str(cfg.model.name), "prompt": [11, 12, 13, 14], "max_tokens": 4}
                    async with session.post(server.url + "/v1/completions", json=body,
                                            headers={"X-Request-Id": f"c{i}"}) as resp:
                        assert resp.status == 200, await resp.text()
            kept = (list(server.built.deployment.records), dict(server.engine.client_ids))
            parts = run_dir / "requests.parquet.parts"
            while len(list(parts.glob("part-*.parquet"))) == 0:  # the interval flush, before any stop
                assert time.monotonic() < end
                await asyncio.sleep(0.02)
        return kept

    records, client_ids = asyncio.run(main())
    assert records == [] and client_ids == {}
    df = pd.read_parquet(run_dir / "requests.parquet")
    assert sorted(df["client_id"]) == [f"c{i}" for i in range(5)] and df["error"].isna().all()
    assert not (run_dir / "requests.parquet.parts").exists()
    assert "served 5 requests" in capsys.readouterr().out
