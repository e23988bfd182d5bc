"""What the server tells clients and monitors: its time scale, vLLM-named metrics, disconnects."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging

import aiohttp
import pytest

from harness.live.app import TIME_SCALE_HEADER, ServeOptions

prometheus_parser = pytest.importorskip("prometheus_client.parser")


def run(coro):
    return asyncio.run(coro)


def test_the_time_scale_is_announced_in_health_models_and_every_response(serve_fake):
    options = ServeOptions(served_model="fake-model", stream_interval_tokens=1, time_scale=7.5)

    async def body():
        async with serve_fake(options, time_scale=7.5) as (url, _), aiohttp.ClientSession() as s:
            async with s.get(url + "/health") as r:
                health, h1 = await r.json(), r.headers.get(TIME_SCALE_HEADER)
            async with s.get(url + "/v1/models") as r:
                models, h2 = await r.json(), r.headers.get(TIME_SCALE_HEADER)
            async with s.post(url + "/v1/completions", json={"prompt": "a", "max_tokens": 2, "stream": True}) as r:
                await r.read()
                h3 = r.headers.get(TIME_SCALE_HEADER)
            async with s.get(url + "/nope") as r:
                h4 = r.headers.get(TIME_SCALE_HEADER)
        return health, models, (h1, h2, h3, h4)

    health, models, headers = run(body())
    assert health == {"status": "ok", "time_scale": 7.5}
    assert models["data"][0]["time_scale"] == 7.5
    assert all(float(h) == 7.5 for h in headers)


def _scrape(text: str) -> dict[str, float]:
    """{sample name + labels: value} from the Prometheus text format, via prometheus_client's parser."""
    out = {}
    for family in prometheus_parser.text_string_to_metric_families(text):
        for sample in family.samples:
            out[sample.name + json.dumps(sample.labels, sort_keys=True)] = sample.value
    return out


def test_metrics_carry_vllm_names_parse_and_counters_never_decrease(serve_fake):
    async def body():
        scrapes = []
        async with serve_fake() as (url, _), aiohttp.ClientSession() as s:
            for n in (0, 2, 3):
                for _ in range(n):
                    async with s.post(
                        url + "/v1/completions", json={"prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 3}
                    ) as r:
                        assert r.status == 200
                async with s.get(url + "/metrics") as r:
                    scrapes.append(await r.text())
        return scrapes

    scrapes = [_scrape(t) for t in run(body())]
    last = scrapes[-1]
    label = '{"model_name": "fake-model"}'
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:prompt_tokens_total",
                 "vllm:generation_tokens_total", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:time_to_first_token_seconds_count", "vllm:time_per_output_token_seconds_count",
                 "vllm:e2e_request_latency_seconds_count"):
        assert name + label in last, name
    assert last["vllm:prompt_tokens_total" + label] == 5 * 6
    assert last["vllm:generation_tokens_total" + label] == 5 * 3
    assert last["vllm:e2e_request_latency_seconds_count" + label] == 5
    assert any(k.startswith("harness_requests_received_total") for k in last)  # the harness's own, beside
    counters = [k for k in last if k.split("{")[0].endswith(("_total", "_count", "_bucket", "_sum"))]
    assert len(counters) > 20
    for before, after in itertools.pairwise(scrapes):
        for key in counters:
            assert after[key] >= before.get(key, 0.0), key
    assert scrapes[1]["vllm:prompt_tokens_total" + label] < last["vllm:prompt_tokens_total" + label]


def test_a_client_hanging_up_mid_body_is_a_disconnect_not_a_500(serve_fake, caplog):
    """The body is announced as 60 kB (within the limit), 1 kB is sent, the socket closes: no traceback, no 500."""

    async def body():
        async with serve_fake() as (url, engine):
            host, port = url.removeprefix("http://").split(":")
            for _ in range(3):
                _, writer = await asyncio.open_connection(host, int(port))
                writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                             b"Content-Length: 60000\r\n\r\n" + b'{"prompt": "' + b"a " * 500)
                await writer.drain()
                await asyncio.sleep(0.05)
                writer.close()
            for _ in range(200):  # until the server has noticed all three
                if engine.metrics.disconnects_mid_body == 3:
                    break
                await asyncio.sleep(0.01)
            async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
                text = await r.text()
            return engine.metrics, text

    with caplog.at_level(logging.ERROR):
        metrics, text = run(body())
    assert metrics.disconnects_mid_body == 3
    assert not any(code == 500 for (_, code) in metrics.http)
    assert 'harness_client_disconnects_total{phase="body"} 3' in text
    assert not [r for r in caplog.records if r.exc_info]
