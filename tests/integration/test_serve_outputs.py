"""`harness-serve`'s run directory keeps the output contract: one `mode` (`serve`) in every file, and a
server stopped before any generation request came in still leaves a run directory that harness-report
reads (no rows, `n_requests` 0) and says `served 0 requests` (contract26 findings 2 and 3)."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pandas as pd

from harness.analysis import report as rep
from harness.runs.serve import serve

from .serving import serving


def _serve(cfg, run_dir, n_requests: int) -> None:
    async def main():
        async with serving(cfg, run_dir) as server, aiohttp.ClientSession() as session:
            url = server.url
            async with session.get(url + "/health") as resp:  # a probe: not a generation request
                assert resp.status == 200
            for _ in range(n_requests):
                body = {"model": str(cfg.model.name), "prompt": [11, 12, 13, 14], "max_tokens": 4}
                async with session.post(url + "/v1/completions", json=body) as resp:
                    assert resp.status == 200, await resp.text()
            bad = {"model": "no-such-model", "prompt": [1, 2], "max_tokens": 2}  # refused: a row too
            async with session.post(url + "/v1/completions", json=bad) as resp:
                assert resp.status >= 400

    asyncio.run(main())


def test_serve_records_and_summary_agree_on_mode(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg(["server.port=0", "server.time_scale=20", "analysis.figures=false"])
    run_dir = tmp_path / "serve"
    _serve(cfg, run_dir, 3)
    requests = pd.read_parquet(run_dir / "requests.parquet")
    assert len(requests) == 4 and int(requests["refused"].sum()) == 1
    assert set(requests["mode"]) == {"serve"}
    assert pd.read_parquet(run_dir / "summary.parquet")["mode"].tolist() == ["serve"]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mode"] == "serve"
    # vLLM's keys are all there: ITL and burstiness null (no chunk stamps; its clients' pacing is theirs)
    assert summary["mean_itl_ms"] is None and summary["p99_itl_ms"] is None and summary["burstiness"] is None
    assert summary["max_output_tokens_per_s"] > 0
    assert "served 4 requests" in capsys.readouterr().out


def test_serve_stopped_with_no_requests_writes_a_run_directory_report_reads(compose_cfg, tmp_path, capsys):
    cfg = compose_cfg(["server.port=0", "server.time_scale=20", "analysis.figures=false"])
    empty_dir = tmp_path / "idle"

    async def idle():
        stop = asyncio.Event()
        await serve(cfg, empty_dir, stop=stop, on_listening=lambda s: stop.set())

    asyncio.run(idle())
    out = capsys.readouterr().out
    assert f"served 0 requests (none came in before the stop); records: {empty_dir}" in out
    for name in ("requests.parquet", "timeseries.parquet", "summary.parquet", "summary.json"):
        assert (empty_dir / name).is_file(), name
    assert not (empty_dir / "requests.parquet.parts").exists()
    assert len(pd.read_parquet(empty_dir / "requests.parquet")) == 0
    summary = json.loads((empty_dir / "summary.json").read_text())
    assert (summary["mode"], summary["n_requests"], summary["completed"], summary["failed"]) == ("serve", 0, 0, 0)
    assert summary["mean_ttft_ms"] is None and summary["num_prompts"] == 0
    report, text = rep.write_report([empty_dir], out_dir=tmp_path / "report", figures=False)
    assert report["n_requests"].tolist() == [0] and report["mode"].tolist() == ["serve"]
    assert text.startswith("1 runs, 1 deployment(s)")
