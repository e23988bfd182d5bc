"""A fake serving engine for the calibration's tests: OpenAI `/v1/completions` streamed over SSE with
token-id prompts, continuous batching up to `max_seqs` sequences in real time, and nothing of llama.cpp
(no `timings` in any response, no /props, no /slots). Its costs are known: a step that admits new prompts
takes the sum of `prefill_s(tokens)` over them (and makes their first tokens), a decode step of b
sequences takes `step_s(b)`. `/metrics` carries vLLM's per-request histograms' sums and counts, from the
steps' measured durations, as vLLM's do.

It runs on its own thread and event loop: the harness's probes block in `asyncio.run` of their own.
"""

from __future__ import annotations

import asyncio
import collections
import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web


@dataclass
class _Seq:
    prompt_tokens: int
    max_tokens: int
    tokens: asyncio.Queue = field(default_factory=asyncio.Queue)
    made: int = 0
    queued_s: float = 0.0
    prefill_s: float = 0.0
    first_s: float = 0.0


class FakeEngine:
    """`with FakeEngine(prefill_s, step_s) as engine:` serves at `engine.url`; `engine.bodies` are the
    request bodies it was sent."""

    def __init__(self, prefill_s: Callable[[int], float], step_s: Callable[[int], float], max_seqs: int = 4) -> None:
        self.prefill_s, self.step_s, self.max_seqs = prefill_s, step_s, max_seqs
        self.bodies: list[dict[str, Any]] = []
        self.sums = collections.Counter[str]()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.url = ""

    # -- the engine: one step at a time ------------------------------------------------------------
    async def _steps(self) -> None:
        waiting: collections.deque[_Seq] = self.waiting
        running: list[_Seq] = []
        end = time.perf_counter()
        while True:
            if not waiting and not running:
                self.wake.clear()
                await self.wake.wait()
                end = time.perf_counter()  # idle until now: the next step starts now
                continue
            new = []
            while waiting and len(running) + len(new) < self.max_seqs:
                new.append(waiting.popleft())
            # Steps run back to back on the engine's own timeline: a step late to wake (a busy test machine)
            # makes the next one start at its planned end, so lateness never adds up over a stream.
            t0 = end
            cost = sum(self.prefill_s(s.prompt_tokens) for s in new) if new else self.step_s(len(running))
            end = t0 + cost
            await asyncio.sleep(max(0.0, end - time.perf_counter()))
            now = end
            if new:  # a prompt step: the new prompts' work, their first tokens; the others wait for it
                for s in new:
                    s.prefill_s, s.first_s = cost, now
                    self.sums["queue"] += max(0.0, t0 - s.queued_s)
                running += new
                made = new
            else:
                made = running
            for s in made:
                s.made += 1
                if s.made >= s.max_tokens:  # its metrics are counted before its last chunk leaves
                    self.sums["prefill"] += s.prefill_s
                    self.sums["decode"] += now - s.first_s
                    self.sums["count"] += 1
                s.tokens.put_nowait(s.made)
            for s in [s for s in running if s.made >= s.max_tokens]:
                running.remove(s)
                s.tokens.put_nowait(None)

    # -- HTTP ---------------------------------------------------------------------------------------
    async def _completions(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.bodies.append(body)
        seq = _Seq(len(body["prompt"]), int(body["max_tokens"]), queued_s=time.perf_counter())
        self.waiting.append(seq)
        self.wake.set()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while (n := await seq.tokens.get()) is not None:
            done = "length" if n >= seq.max_tokens else None
            chunk = {"id": "cmpl-fake", "object": "text_completion", "model": "fake",
                     "choices": [{"index": 0, "text": f" t{n}", "finish_reason": done}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        if (body.get("stream_options") or {}).get("include_usage"):
            usage = {"prompt_tokens": seq.prompt_tokens, "completion_tokens": seq.made,
                     "total_tokens": seq.prompt_tokens + seq.made}
            await resp.write(b"data: " + json.dumps({"id": "cmpl-fake", "choices": [], "usage": usage}).encode()
                             + b"\n\n")
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def _metrics(self, request: web.Request) -> web.Response:
        lab = '{engine="0",model_name="fake"}'
        count = self.sums["count"]
        lines = ["# TYPE vllm:request_prefill_time_seconds histogram",
                 f"vllm:request_prefill_time_seconds_sum{lab} {self.sums['prefill']}",
                 f"vllm:request_prefill_time_seconds_count{lab} {count}",
                 f"vllm:request_decode_time_seconds_sum{lab} {self.sums['decode']}",
                 f"vllm:request_decode_time_seconds_count{lab} {count}",
                 f"vllm:request_queue_time_seconds_sum{lab} {self.sums['queue']}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.waiting = collections.deque()
        self.wake = asyncio.Event()
        app = web.Application()
        async def models(request: web.Request) -> web.Response:
            return web.json_response({"data": [{"id": "fake"}]})

        app.router.add_get("/v1/models", models)
        app.router.add_get("/health", models)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/v1/completions", self._completions)
        self.runner = web.AppRunner(app, access_log=None)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        host, port = self.runner.addresses[0][:2]
        self.url = f"http://{host}:{port}"
        task = self.loop.create_task(self._steps())
        self.ready.set()
        self.loop.run_forever()
        task.cancel()
        self.loop.run_until_complete(asyncio.gather(task, return_exceptions=True))
        self.loop.run_until_complete(self.runner.cleanup())

    def __enter__(self) -> FakeEngine:
        self.thread.start()
        assert self.ready.wait(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(30)
        self.loop.close()
