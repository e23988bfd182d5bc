"""`harness-profile`'s designed experiment against one endpoint: what it asks the server about itself,
and the probes it sends (see harness/profile.py for the design). Every request sent ends in exactly
one row of probes.parquet.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any, cast

import aiohttp
import numpy as np
import pandas as pd
from omegaconf import DictConfig

from harness.engine.metrics import MetricDelta, MetricNames
from harness.errors import InputError, require
from harness.profiling.design import CLOCKS, check_against_server
from harness.profiling.probes import (
    Completions,
    ProbeResult,
    ProcessCpu,
    decode_window,
    fresh_prompt,
    server_step,
)


async def _get_json(session: aiohttp.ClientSession, url: str) -> tuple[dict[str, Any] | list | None, dict]:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None, dict(resp.headers)
            return await resp.json(content_type=None), dict(resp.headers)
    except (TimeoutError, aiohttp.ClientError, ValueError):
        return None, {}


async def server_info(session: aiohttp.ClientSession, url: str, model: str | None) -> dict[str, Any]:
    """What the endpoint says about itself: model id, slots, per-slot context, build, model file."""
    models, headers = await _get_json(session, url + "/v1/models")
    if models is None:
        raise InputError(f"target.url={url}: no answer at /v1/models; is the server up?")
    entries = models.get("data") or [] if isinstance(models, dict) else []
    require(bool(entries) or bool(model), f"target.url={url}: /v1/models lists no model; set target.model")
    info: dict[str, Any] = {"url": url, "model": model or str(entries[0]["id"]),
                            "server_header": headers.get("Server")}
    meta = (entries[0].get("meta") if entries else None) or {}
    props, _ = await _get_json(session, url + "/props")
    props = props if isinstance(props, dict) else {}
    slots, _ = await _get_json(session, url + "/slots")
    gen = props.get("default_generation_settings") or {}
    info.update({
        "declared_slots": props.get("total_slots") or (len(slots) if isinstance(slots, list) and slots else None),
        "slot_context_tokens": gen.get("n_ctx") or (slots[0].get("n_ctx") if isinstance(slots, list) and slots
                                                     else None),
        "build_info": props.get("build_info"),
        "model_path": props.get("model_path"),
        "n_params": meta.get("n_params"),
    })
    return info


def _row(probe: str, role: str, res: ProbeResult, **extra: Any) -> dict[str, Any]:
    t = res.timings
    return {"probe": probe, "role": role, **extra, "ttft_s": res.ttft_s,
            "e2e_s": None if res.end_s is None else res.end_s - res.sent_s,
            "prompt_tokens": res.prompt_tokens, "completion_tokens": res.completion_tokens,
            "chunks": len(res.chunk_s), "server_prompt_n": t.get("prompt_n"), "server_cache_n": t.get("cache_n"),
            "server_prompt_ms": t.get("prompt_ms"), "server_predicted_n": t.get("predicted_n"),
            "server_predicted_ms": t.get("predicted_ms"), "error": res.error}


def decode_batches(slots: int, batches: Any, holdout: Any) -> tuple[list[int], list[int]]:
    """(fitted, held-out) batch sizes: by default powers of two up to the slots plus the slots, and 3
    held out (between 2 and 4) when there are at least 4 slots."""
    held = [int(b) for b in holdout] if holdout is not None else ([3] if slots >= 4 else [])
    if batches is None:
        fit = sorted({*(2**k for k in range(slots.bit_length()) if 2**k <= slots), slots} - set(held))
    else:
        fit = [int(b) for b in batches]
    for b in [*fit, *held]:
        require(1 <= b <= slots, f"profile.decode: batch {b} is outside 1..{slots} (the engine's slots)")
    require(not set(fit) & set(held), f"profile.decode: batches {sorted(set(fit) & set(held))} are both fitted and "
                                      f"held out")
    require(len(fit) >= 2, f"profile.decode: fit needs at least 2 batch sizes, got {fit}")
    return fit, held


class Experiment:
    """Runs the design against one endpoint; every request sent ends in exactly one row."""

    def __init__(self, complete: Completions, cfg: DictConfig, rng: np.random.Generator,
                 metrics: MetricDelta | None = None) -> None:
        """`metrics` (clock server, an engine preset with timings=metrics): the engine's own prompt and decode
        seconds from its /metrics, read around each probe (`one`) and each decode group."""
        self.complete, self.p, self.rng, self.metrics = complete, cfg.profile, rng, metrics
        self.id_min, self.id_max = int(cfg.target.token_id_min), int(cfg.target.token_id_max)
        self.rows: list[dict[str, Any]] = []
        self.clock = str(self.p.clock)
        require(self.clock in CLOCKS, f"profile.clock={self.clock!r}; valid: {', '.join(CLOCKS)}")
        self.cpu = None
        if self.clock == "cpu":
            require(
                self.p.engine_pid is not None, "profile.clock=cpu needs profile.engine_pid (the local engine's pid)"
            )
            self.cpu = ProcessCpu(int(self.p.engine_pid))

    def prompt(self, n: int) -> list[int]:
        return fresh_prompt(self.rng, n, self.id_min, self.id_max)

    def cpu_now(self) -> float:
        return self.cpu() if self.cpu is not None else math.nan

    def prefill_time(self, res: ProbeResult, cpu_s: float) -> float | None:
        if self.clock == "cpu":
            return cpu_s if res.error is None else None
        if self.clock == "server" and res.prompt_s is not None:
            return res.prompt_s
        return res.ttft_s

    async def one(self, prompt: list[int], max_tokens: int, cache_prompt: bool) -> tuple[ProbeResult, float]:
        """One request alone, and the engine CPU seconds it took (nan unless clock=cpu)."""
        c0 = self.cpu_now()
        if self.metrics is not None:
            await self.metrics.before()
        res = await self.complete(prompt, max_tokens, cache_prompt=cache_prompt)
        cpu_s = self.cpu_now() - c0
        if self.metrics is not None:
            moved = await self.metrics.after(0 if res.error else 1)
            if res.error is None and math.isfinite(moved["prompt_s"]):
                res.timings = {**res.timings, "prompt_ms": moved["prompt_s"] * 1e3}
        return res, cpu_s

    async def concurrent(self, n: int, prompt_tokens: int, max_tokens: int, pin: bool = False) -> list[ProbeResult]:
        """n requests together; `pin`: on slots 0..n-1 (one run of consecutive slots, see `decode`)."""
        return list(await asyncio.gather(*(self.complete(self.prompt(prompt_tokens), max_tokens, cache_prompt=False,
                                                         slot=i if pin else None)
                                           for i in range(n))))

    async def warmup(self) -> None:
        res = await self.complete(self.prompt(256), 8, cache_prompt=False)
        self.rows.append(_row("warmup", "none", res, input_tokens=256, max_tokens=8))
        if res.error:
            raise InputError(f"target.url: the warm-up request failed: {res.error}")

    async def probe_slots(self) -> int | None:
        """The smallest concurrency at which a request waits for a slot, minus one.

        C requests sent together: while C <= slots every one gets its first token before any of them
        finishes; one beyond the slots waits in the queue until a request completes.
        """
        sp = self.p.slot_probe
        for c in range(1, int(sp.max_concurrency) + 1):
            results = await self.concurrent(c, int(sp.prompt_tokens), int(sp.output_tokens))
            for i, res in enumerate(results):
                self.rows.append(_row("slots", "probe", res, concurrency=c, stream=i,
                                      input_tokens=int(sp.prompt_tokens), max_tokens=int(sp.output_tokens)))
            if any(r.first_s is None or r.end_s is None for r in results):
                return None
            if max(cast(float, r.first_s) for r in results) > min(cast(float, r.end_s) for r in results):
                return c - 1
        return None

    async def prefill(self) -> None:
        pre = self.p.prefill
        plan = [(int(l), "fit") for l in pre.lengths for _ in range(int(pre.repeats))]
        plan += [(int(l), "holdout") for l in pre.holdout_lengths for _ in range(int(pre.holdout_repeats))]
        for i in self.rng.permutation(len(plan)):
            n, role = plan[i]
            res, cpu_s = await self.one(self.prompt(n), 1, cache_prompt=False)
            self.rows.append(_row("prefill", role, res, input_tokens=n, max_tokens=1, cpu_s=cpu_s,
                                  prefill_s=self.prefill_time(res, cpu_s)))

    async def cached(self) -> None:
        cp = self.p.cached
        for prefix in cp.prefix_tokens:
            for new in cp.new_tokens:
                for _ in range(int(cp.repeats)):
                    first = self.prompt(int(prefix))
                    res = await self.complete(first, 1, cache_prompt=True)
                    self.rows.append(_row("cached", "seed", res, input_tokens=int(prefix), max_tokens=1))
                    res, cpu_s = await self.one(first + self.prompt(int(new)), 1, cache_prompt=True)
                    self.rows.append(_row("cached", "check", res, input_tokens=int(prefix) + int(new),
                                          cached_prefix_tokens=int(prefix), max_tokens=1, cpu_s=cpu_s,
                                          prefill_s=self.prefill_time(res, cpu_s)))

    async def decode(self, slots: int) -> None:
        """N streams started together, fitted and held-out sizes alike. With `decode.pin_slots` they run
        on slots 0..N-1: llama.cpp (kv_unified off, its server's default) splits a batch into one
        ubatch per run of consecutive slot ids and rebuilds its compute graph whenever the ubatch shape
        changes, so 3 streams on slots {0,1,3} cost ubatch(2) + ubatch(1) + two rebuilds (10.4-12.8 ms a
        token measured here, more than 4 streams' 9.9) while {0,1,2} cost one ubatch of 3 (7.7-8.6 ms).
        Unpinned, the slots the engine picks (least recently used) decide which of the two a probe
        measures. Pinned, the step per batch size is that of one ubatch of N sequences."""
        dd = self.p.decode
        pin = bool(dd.get("pin_slots", False))
        batches, holdout = decode_batches(slots, dd.batches, dd.holdout_batches)
        m = int(dd.output_tokens)
        plan = [(b, int(p), role) for role, bs in (("fit", batches), ("holdout", holdout)) for b in bs
                for p in dd.prompt_tokens for _ in range(int(dd.repeats))]
        for k, i in enumerate(self.rng.permutation(len(plan))):
            b, p, role = plan[i]
            base_cpu = math.nan
            if self.cpu is not None:  # the same prefills without the decode: their CPU is subtracted
                c0 = self.cpu_now()
                base = await self.concurrent(b, p, 1, pin)
                base_cpu = self.cpu_now() - c0
                for s, res in enumerate(base):
                    self.rows.append(_row("decode", "prefill_only", res, group=k, batch=b, stream=s, input_tokens=p,
                                          max_tokens=1, cpu_s=base_cpu))
            c0 = self.cpu_now()
            if self.metrics is not None:
                await self.metrics.before()
            results = await self.concurrent(b, p, m, pin)
            cpu_s = self.cpu_now() - c0
            step, ctx, how = self.decode_step(results, p)
            if self.metrics is not None:
                moved = await self.metrics.after(sum(1 for r in results if r.error is None))
                step, ctx, how = metered_step(results, p, m, moved["decode_s"], (step, ctx, how))
            server_step = step
            if self.cpu is not None and not any(r.error for r in results):
                step, ctx, how = (cpu_s - base_cpu) / (m - 1), b * (p + m / 2), "cpu"
            for s, res in enumerate(results):
                self.rows.append(_row("decode", role, res, group=k, batch=b, stream=s, input_tokens=p, max_tokens=m,
                                      slot=s if pin else None, step_s=step, context_tokens=ctx, step_source=how,
                                      cpu_s=cpu_s, wall_step_s=server_step))

    @staticmethod
    def decode_step(results: list[ProbeResult], prompt_tokens: int) -> tuple[float | None, float | None, str]:
        """(step, batch context tokens, source): the server's per-token stamps when every stream has
        them (trimmed mean of its gaps), else the client's stamps in the span where all decode."""
        if any(r.error for r in results):
            return None, None, "error"
        if all(len(r.token_ms) == len(r.chunk_s) and len(r.token_ms) > 5 for r in results):
            steps = [cast(float, server_step(r.token_ms)) for r in results]  # > 5 tokens: not None
            ctx = sum(prompt_tokens + len(r.token_ms) / 2 for r in results)
            return float(np.mean(steps)), float(ctx), "server"
        per = [(r.completion_tokens or len(r.chunk_s)) / max(len(r.chunk_s), 1) for r in results]
        window = decode_window([r.chunk_s for r in results], [prompt_tokens] * len(results), per)
        if window is None:
            return None, None, "client: no steady window"
        return window.step_s, window.context_tokens, "client"


def metered_step(results: list[ProbeResult], prompt_tokens: int, max_tokens: int, decode_s: float,
                 fallback: tuple[float | None, float | None, str]) -> tuple[float | None, float | None, str]:
    """(step, batch context tokens, source): the decode seconds the engine's /metrics moved by over the streams'
    decode steps (n - 1 each: a stream's first token comes from its prompt's step); `fallback` without them."""
    steps = sum((r.completion_tokens or len(r.chunk_s)) - 1 for r in results)
    if any(r.error for r in results) or steps <= 0 or not math.isfinite(decode_s):
        return fallback
    return decode_s / steps, len(results) * (prompt_tokens + max_tokens / 2), "metrics"


async def measure(cfg: DictConfig) -> tuple[pd.DataFrame, dict[str, Any], int, int | None]:
    url = str(cfg.target.url).rstrip("/")
    p = cfg.profile
    # A new connection per request: llama-server may close a kept-alive connection after a stream.
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as session:
        info = await server_info(session, url, cfg.target.model)
        ctx = info["slot_context_tokens"]
        longest = max([*p.prefill.lengths, *p.prefill.holdout_lengths,
                       *(int(a) + int(b) for a in p.cached.prefix_tokens for b in p.cached.new_tokens),
                       *(int(t) + int(p.decode.output_tokens) for t in p.decode.prompt_tokens)])
        require(ctx is None or longest < int(ctx), f"profile: the longest probe needs {longest} tokens but a slot "
                                                  f"of {url} holds {ctx}; start the server with a larger -c "
                                                  f"or shorten profile.prefill / profile.decode")
        check_against_server(cfg, info)  # the model file, the batch sizes vs the declared slots: before any probe
        engine = cfg.get("engine") or {}
        complete = Completions(session, url, info["model"], time.perf_counter, float(cfg.target.timeout_s),
                               fields=engine.get("request"))
        metrics = None
        if str(p.clock) == "server" and engine.get("timings") == "metrics":
            metrics = MetricDelta(session, url, MetricNames.from_config(engine.get("metrics")))
            await metrics.before()  # a missing series is named before any probe is sent
        exp = Experiment(complete, cfg, np.random.default_rng(cfg.seed), metrics)
        await exp.warmup()
        probed = await exp.probe_slots() if p.slot_probe.probe else None
        slots = p.slots or info["declared_slots"] or probed
        require(slots is not None, "profile: the server does not say its slot count and probing found none "
                                   f"up to {p.slot_probe.max_concurrency}; set profile.slots")
        decode_batches(int(cast(int, slots)), p.decode.batches, p.decode.holdout_batches)  # before the prefills
        await exp.prefill()
        await exp.cached()
        await exp.decode(int(cast(int, slots)))
    return pd.DataFrame(exp.rows), info, int(cast(int, slots)), probed


