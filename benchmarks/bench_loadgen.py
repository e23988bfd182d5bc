"""Load-generator overhead, throughput and CPU cost against a local server; and sim/live agreement.

    .venv/bin/python benchmarks/bench_loadgen.py                 # overhead + throughput + CPU (about 40 s)
    .venv/bin/python benchmarks/bench_loadgen.py overhead [--rate 200 --delay-ms 20 --requests 2000]
    .venv/bin/python benchmarks/bench_loadgen.py throughput [--concurrency 64 --requests 6000]
    .venv/bin/python benchmarks/bench_loadgen.py agreement [--time-scale 1 --requests 300]

Anchors (issue 6), on a 2-core machine:
- overhead: with a server (its own process) that sends the first token after a delay, at 200 req/s
  with ~50 streams open, the reported TTFT exceeds the server's true first-token delay (its own
  stamps, handler start to first write) by at most 1 ms at P50 and 5 ms at P99;
- throughput: at least 600 short streamed requests/s (16 output tokens) against an instant server;
- CPU: CPU time per request within 2x of a bare aiohttp client loop on the same load, same run;
- agreement: `python -m harness` in sim and live mode on the same trace: throughput within 3%,
  TTFT P50/P90 within 5%.
The server here is a plain aiohttp app (`serve`), not the emulator, so only the generator is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import numpy as np
from aiohttp import web

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.loadgen.client import OpenAIHttpTarget
from harness.loadgen.clock import MonotonicClock
from harness.loadgen.engine import run_load
from harness.loadgen.prompts import PromptBuilder, request_body
from harness.workload.request import Request

INPUT_TOKENS, OUTPUT_TOKENS = 256, 16


# -- the server (a separate process) ------------------------------------------------------------
def serve(delay_ms: float, interval_ms: float) -> None:
    """First token `delay_ms` after the handler starts, then one every `interval_ms` (0: all at once).
    Stamps (handler start, first write) per X-Request-Id are served at GET /timings."""
    timings: dict[str, tuple[int, int]] = {}
    chunk = b'data: {"choices":[{"index":0,"text":" t","finish_reason":null}]}\n\n'
    tail = (b'data: {"choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":0}}\n\n'
            b"data: [DONE]\n\n" % (INPUT_TOKENS, OUTPUT_TOKENS))

    async def completions(request: web.Request) -> web.StreamResponse:
        t_in = time.monotonic_ns()
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        if delay_ms > 0:
            await asyncio.sleep(delay_ms / 1e3)
        if interval_ms <= 0:
            t_first = time.monotonic_ns()
            await resp.write(chunk * OUTPUT_TOKENS + tail)
        else:
            t_first = time.monotonic_ns()
            await resp.write(chunk)
            for k in range(1, OUTPUT_TOKENS):
                await asyncio.sleep(max(0.0, (t_first + k * interval_ms * 1e6 - time.monotonic_ns()) / 1e9))
                await resp.write(chunk)
            await resp.write(tail)
        timings[request.headers.get("X-Request-Id", "")] = (t_in, t_first)
        await resp.write_eof()
        return resp

    async def get_timings(request: web.Request) -> web.Response:
        return web.json_response(timings)

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/v1/completions", completions)
        app.router.add_get("/timings", get_timings)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"listening on http://127.0.0.1:{runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


class Server:
    def __init__(self, delay_ms: float, interval_ms: float) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "serve", "--delay-ms", str(delay_ms),
                                      "--interval-ms", str(interval_ms)], stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("listening on "):
            raise RuntimeError(f"server did not start: {line!r}")
        self.url = line.split()[-1]

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc) -> None:
        self.proc.terminate()
        self.proc.wait(10)


def trace(n: int, rate_rps: float | None) -> list[Request]:
    return [Request(i, i / rate_rps if rate_rps else 0.0, INPUT_TOKENS, OUTPUT_TOKENS, (i,)) for i in range(n)]


async def generator(url: str, requests: list[Request], concurrency: int | None):
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        target = OpenAIHttpTarget(session, url, model="m", clock=MonotonicClock(), prompts=PromptBuilder())
        return await run_load(requests, target, concurrency=concurrency)


async def bare(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """The floor: aiohttp posting the same bodies and draining the streams, nothing recorded."""
    body = request_body(PromptBuilder(), trace(1, None)[0], api="completions", model="m", stream=True,
                        ignore_eos=True)
    left = iter(range(n))
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        async def worker() -> None:
            for _ in left:
                async with session.post(url + "/v1/completions", data=body,
                                        headers={"Content-Type": "application/json"}) as resp:
                    async for _ in resp.content.iter_any():
                        pass

        wall0, cpu0 = time.perf_counter(), time.process_time()
        async with asyncio.TaskGroup() as tg:
            for _ in range(concurrency):
                tg.create_task(worker())
        return time.perf_counter() - wall0, time.process_time() - cpu0


# -- the measurements ---------------------------------------------------------------------------
def overhead(rate: float, delay_ms: float, interval_ms: float, n: int) -> None:
    with Server(delay_ms, interval_ms) as server:
        result = asyncio.run(generator(server.url, trace(n, rate), None))
        stamps = asyncio.run(fetch_json(server.url + "/timings"))
    extra_ms = []
    for r in result.records:
        t_in, t_first = stamps[str(r.request_id)]
        extra_ms.append(((r.first_token_ns - r.sent_ns) - (t_first - t_in)) / 1e6)
    sent = np.array([r.sent_ns for r in result.records])
    done = np.array([r.done_ns for r in result.records])
    open_streams = [int(((sent <= t) & (done > t)).sum()) for t in np.linspace(sent.min(), sent.max(), 200)]
    errors = sum(r.error is not None for r in result.records)
    lateness = np.array([(r.sent_ns - r.scheduled_ns) / 1e6 for r in result.records])
    extra = np.array(extra_ms)
    print(f"overhead  rate={rate:g}/s requests={n} delay={delay_ms:g}ms errors={errors} "
          f"mean_open_streams={np.mean(open_streams):.1f} "
          f"ttft_minus_true_ms p50={np.percentile(extra, 50):.3f} p99={np.percentile(extra, 99):.3f} "
          f"max={extra.max():.3f}  lateness_ms p50={np.percentile(lateness, 50):.3f} "
          f"p99={np.percentile(lateness, 99):.3f}  cpu_ms_per_req={result.cpu_s / n * 1e3:.3f}")


async def fetch_json(url: str):
    async with aiohttp.ClientSession() as session, session.get(url) as resp:
        return await resp.json()


def throughput(concurrency: int, n: int) -> None:
    with Server(0.0, 0.0) as server:
        result = asyncio.run(generator(server.url, trace(n, None), concurrency))
        bare_wall, bare_cpu = asyncio.run(bare(server.url, n, concurrency))
    errors = sum(r.error is not None for r in result.records)
    ours = result.cpu_s / n * 1e3
    floor = bare_cpu / n * 1e3
    print(f"throughput concurrency={concurrency} requests={n} errors={errors} "
          f"loadgen={n / result.wall_s:.0f} req/s  bare_aiohttp={n / bare_wall:.0f} req/s")
    print(f"cpu        loadgen={ours:.3f} ms/req  bare_aiohttp={floor:.3f} ms/req  ratio={ours / floor:.2f}")


def agreement(time_scale: float, n: int, extra: list[str]) -> None:
    from hydra import compose, initialize_config_dir

    from harness.analysis import metrics as m
    from harness.runs.http import run_live
    from harness.runs.sim import run_sim
    from harness.schema import register_configs

    register_configs()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose("config", overrides=["workload=paper_lognormal", f"workload.num_requests={n}",
                                           f"server.time_scale={time_scale}", "loadgen.progress=false", *extra])
    sim = run_sim(cfg)
    t0 = time.perf_counter()
    live = run_live(cfg)
    wall = time.perf_counter() - t0
    health, server = live.meta["loadgen"], live.meta["server"]
    print(f"agreement time_scale={time_scale:g} requests={n} live_wall={wall:.1f}s valid={health['valid']} "
          f"loop_lag_p99={health['loop_lag_p99_ms']:.2f}ms server_lag_p99={server['lag_p99_ms']:.2f}ms "
          f"stream_interval={server['stream_interval_tokens']}")
    for name, fn in (("throughput_rps", m.throughput_rps), ("ttft_p50_s", lambda d: m.ttft(d, "p50")),
                     ("ttft_p90_s", lambda d: m.ttft(d, "p90")), ("tpot_mean_s", lambda d: m.tpot(d, "mean"))):
        a, b = fn(sim.requests), fn(live.requests)
        print(f"  {name:15s} sim={a:.4f} live={b:.4f} diff={(b - a) / a * 100:+.2f}%")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", default="all", choices=("all", "overhead", "throughput", "agreement",
                                                                   "serve"))
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--interval-ms", type=float, default=15.0, help="overhead: token interval of the server")
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--time-scale", type=float, default=10.0)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    if args.what == "serve":
        serve(args.delay_ms, args.interval_ms)
        return
    if args.what in ("all", "overhead"):
        overhead(args.rate, args.delay_ms, args.interval_ms, args.requests or 2000)
    if args.what in ("all", "throughput"):
        throughput(args.concurrency, args.requests or 6000)
    if args.what == "agreement":
        agreement(args.time_scale, args.requests or 300, args.overrides)


if __name__ == "__main__":
    main()
