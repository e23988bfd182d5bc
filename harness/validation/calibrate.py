"""A built-in calibration: probe an engine with designed requests and fit the cost model's forms.

Used when no profile file is given (`experiment.profile=null`); `harness-profile` writes the
same `profiles.<hardware>` block with more probes and residuals. Probes only, never the validation
workload: fresh random prompts (no cache hits) at fixed lengths, one in flight, for the prefill
curve (client TTFT, so the HTTP path is in it as it is in what we later predict); N concurrent
streams at two prompt lengths for the decode step (the engine's own generation time per token:
the N prompts fit one engine step, so the N streams decode side by side from first to last token).

Fits: prefill `T(l) = c0 + c1 l + c2 l^2` (least squares, relative); decode step
`base_s + per_seq_s * N + per_token_s * context` (least squares). Residuals are kept.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from typing import Any

import aiohttp
import numpy as np


async def _stream(session: aiohttp.ClientSession, url: str, prompt: list[int], max_tokens: int) -> dict[str, Any]:
    body = {"model": "engine", "prompt": prompt, "max_tokens": max_tokens, "stream": True, "ignore_eos": True,
            "temperature": 0.0}
    t0 = time.perf_counter()
    stamps: list[float] = []
    timings: dict[str, Any] = {}
    async with session.post(f"{url}/v1/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            event = json.loads(line[5:])
            if event.get("choices") and event["choices"][0].get("text") is not None:
                stamps.append(time.perf_counter() - t0)
            if event.get("timings"):
                timings = event["timings"]
    return {"stamps": stamps, "timings": timings}


def _prompt(rng: np.random.Generator, n: int) -> list[int]:
    return rng.integers(1000, 30000, n).tolist()


async def _probe(url: str, lengths: list[int], repeats: int, batches: list[int], decode_prompts: list[int],
                 decode_tokens: int, seed: int, cached_prefixes: list[int], cached_new: list[int]) -> dict[str, list]:
    rng = np.random.default_rng(seed)
    prefill, decode, cached = [], [], []
    connector = aiohttp.TCPConnector(force_close=True)  # llama-server may close a kept-alive connection
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600), connector=connector) as session:
        await _stream(session, url, _prompt(rng, 64), 4)  # warm-up
        for _ in range(repeats):
            for n in lengths:
                r = await _stream(session, url, _prompt(rng, n), 1)
                prefill.append({"input_tokens": n, "ttft_s": r["stamps"][0] if r["stamps"] else float("nan"),
                                "server_prompt_s": r["timings"].get("prompt_ms", float("nan")) / 1e3})
        for _ in range(repeats):  # a fresh prefix, then that prefix + new tokens: the engine reuses the prefix
            for c in cached_prefixes:
                for n in cached_new:
                    prefix = _prompt(rng, c)
                    await _stream(session, url, prefix, 1)
                    r = await _stream(session, url, prefix + _prompt(rng, n), 1)
                    cached.append({"cached_tokens": c, "new_tokens": n,
                                   "ttft_s": r["stamps"][0] if r["stamps"] else float("nan"),
                                   "server_cache_n": r["timings"].get("cache_n")})
        for _ in range(repeats):
            for p in decode_prompts:
                for b in batches:
                    runs = await asyncio.gather(*(_stream(session, url, _prompt(rng, p), decode_tokens)
                                                  for _ in range(b)))
                    # The engine's own clock: generation time per token of each stream. All b prompts
                    # fit one engine step (b * p <= its batch), so the b streams decode side by side
                    # from first token to last; the client's stamps jitter with its own scheduling.
                    per_token = [r["timings"]["predicted_ms"] / 1e3 / r["timings"]["predicted_n"]
                                 for r in runs if r["timings"].get("predicted_n")]
                    if per_token:
                        decode.append({"batch": b, "prompt_tokens": p, "step_s": float(np.mean(per_token)),
                                       "context_tokens": b * (p + decode_tokens / 2)})
    return {"prefill": prefill, "decode": decode, "cached": cached}


def _medians(rows: list[dict]) -> list[dict]:
    """One row per (batch, prompt) probe: the median over repeats (a busy machine has outliers)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["batch"], r["prompt_tokens"]), []).append(r)
    return [{**g[0], "step_s": float(np.median([r["step_s"] for r in g]))} for g in groups.values()]


def _fit_prefill(rows: list[dict]) -> tuple[list[float], float]:
    by_length: dict[int, list[float]] = {}
    for r in rows:
        if np.isfinite(r["ttft_s"]):
            by_length.setdefault(int(r["input_tokens"]), []).append(float(r["ttft_s"]))
    x = np.array(sorted(by_length), float)  # the median per length: one stalled probe cannot tilt the curve
    y = np.array([np.median(by_length[int(n)]) for n in x], float)
    a = np.vstack([np.ones_like(x), x, x * x]).T / y[:, None]  # relative least squares
    coef, *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    coef = np.maximum(coef, 0.0)
    rel = (a @ coef) - 1.0
    return coef.tolist(), float(np.sqrt(np.mean(rel**2)))


def _fit_decode(rows: list[dict]) -> tuple[list[float], float]:
    rows = _medians(rows)
    b = np.array([r["batch"] for r in rows], float)
    c = np.array([r["context_tokens"] for r in rows], float)
    y = np.array([r["step_s"] for r in rows], float)
    a = np.vstack([np.ones_like(b), b, c]).T
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    if coef[2] < 0:  # context does not slow the step measurably: drop the term
        coef2, *_ = np.linalg.lstsq(a[:, :2], y, rcond=None)
        coef = np.array([coef2[0], coef2[1], 0.0])
    coef = np.maximum(coef, 0.0)
    rel = (a @ coef) / y - 1.0
    return coef.tolist(), float(np.sqrt(np.mean(rel**2)))


def _fit_decode_per_batch(rows: list[dict]) -> tuple[list[float], float, float]:
    """(step at zero context per batch 1..max, per-token-of-context slope, relative RMS residual)."""
    rows = _medians(rows)
    batches = sorted({int(r["batch"]) for r in rows})
    nb = max(batches)
    a = np.zeros((len(rows), nb + 1))
    for i, r in enumerate(rows):
        a[i, int(r["batch"]) - 1] = 1.0
        a[i, nb] = r["context_tokens"]
    y = np.array([r["step_s"] for r in rows], float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    if coef[nb] < 0:
        coef[:nb], *_ = np.linalg.lstsq(a[:, :nb], y, rcond=None)
        coef[nb] = 0.0
    coef = np.maximum(coef, 0.0)
    steps = coef[:nb].tolist()
    for b in range(1, nb + 1):  # a batch size never probed: interpolate its neighbours
        if b not in batches:
            lo, hi = max(x for x in batches if x < b), min(x for x in batches if x > b)
            steps[b - 1] = steps[lo - 1] + (steps[hi - 1] - steps[lo - 1]) * (b - lo) / (hi - lo)
    rel = (a @ coef) / y - 1.0
    return steps, float(coef[nb]), float(np.sqrt(np.mean(rel**2)))


def probe(url: str, *, lengths: list[int], repeats: int, batches: list[int], decode_prompts: list[int],
          decode_tokens: int, seed: int, cached_prefixes: list[int], cached_new: list[int]) -> dict[str, list]:
    """One round of probes (fresh random prompts): {"prefill", "decode", "cached"} rows."""
    return asyncio.run(_probe(url, lengths, repeats, batches, decode_prompts, decode_tokens, seed, cached_prefixes,
                              cached_new))


def fit_prefix_attention(rounds: list[dict[str, list]], coefficients: list[float]) -> tuple[float, float]:
    """(gamma, relative RMS residual): TTFT of n new tokens on a cached prefix of c, as
    T(n) + gamma * [T(c + n) - T(c) + T(0) - T(n)] with the fitted curve T; gamma in [0, 1]
    (1: the cost model's marginal cost; 0: as if the prefix were not there)."""
    def t(x: float) -> float:
        return coefficients[0] + coefficients[1] * x + coefficients[2] * x * x

    groups: dict[tuple, list[float]] = {}
    for r in (row for rd in rounds for row in rd.get("cached", [])):
        if np.isfinite(r["ttft_s"]):
            groups.setdefault((r["cached_tokens"], r["new_tokens"]), []).append(r["ttft_s"])
    if not groups:
        return 1.0, math.nan
    keys = sorted(groups)
    y = np.array([np.median(groups[k]) for k in keys])
    fresh = np.array([t(n) for _, n in keys])
    extra = np.array([t(c + n) - t(c) + t(0) - t(n) for c, n in keys])
    gamma = float(np.clip(np.dot(y - fresh, extra) / max(float(np.dot(extra, extra)), 1e-18), 0.0, 1.0))
    rel = (fresh + gamma * extra) / y - 1.0
    return gamma, float(np.sqrt(np.mean(rel**2)))


def fit(rounds: list[dict[str, list]], *, hardware: str, slots: int, source: str,
        decode_kind: str = "per_batch") -> dict:
    """The profiles block {hardware: {...}} fitted to the probe rows of one or more rounds.

    decode_kind: `per_batch` (a step per batch size + a context slope: llama.cpp's step is not
    linear in the batch) or `linear` (base + per sequence + per context token)."""
    pre = [row for r in rounds for row in r["prefill"]]
    dec = [row for r in rounds for row in r["decode"]]
    (c0, c1, c2), pre_rms = _fit_prefill(pre)
    lengths = sorted({row["input_tokens"] for row in pre})
    batches = sorted({row["batch"] for row in dec})
    prompts = sorted({row["prompt_tokens"] for row in dec})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    how = (f"fitted {stamp} to the engine's generation time per token of N={batches} concurrent streams at "
           f"{prompts}-token prompts ({source})")
    if decode_kind == "per_batch":
        steps, per_tok, dec_rms = _fit_decode_per_batch(dec)
        decode = {"kind": "per_batch", "batch_step_s": steps, "per_token_s": per_tok}
    else:
        (base, per_seq, per_tok), dec_rms = _fit_decode(dec)
        decode = {"kind": "linear", "base_s": base, "per_seq_s": per_seq, "per_token_s": per_tok}
    decode.update({"bs_max": slots, "provenance": f"[M] {how}; relative RMS residual {dec_rms:.3f}; "
                                                  f"bs_max = the engine's slots"})
    return {hardware: {
        "gpus_per_instance": 1,
        "prefill": {"kind": "polynomial", "coefficients": [c0, c1, c2],
                    "provenance": f"[M] fitted {stamp} to client TTFT of {len(pre)} single fresh prompts at "
                                  f"{lengths} tokens ({source}); relative RMS residual {pre_rms:.3f}"},
        "decode": decode,
    }}
