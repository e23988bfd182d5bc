"""Timed requests against an OpenAI-compatible `/v1/completions` endpoint, and what they measure.

Every probe sends a token-id prompt (`"prompt": [ids]`), streams the answer and stamps each chunk on
an injected clock; when the server sends its own `timings` (llama.cpp: prompt_n, cache_n, prompt_ms,
predicted_n, predicted_ms) they are kept beside the client's stamps. Errors are data: a failed probe
returns a result with `error` set, never raises.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import numpy as np
from scipy.stats import trim_mean

from harness.errors import InputError

Clock = Callable[[], float]


@dataclass
class ProbeResult:
    sent_s: float
    first_s: float | None = None  # first chunk carrying a token
    end_s: float | None = None
    chunk_s: list[float] = field(default_factory=list)  # every chunk carrying a token
    token_ms: list[float] = field(default_factory=list)  # server's timings.predicted_ms at each such chunk
    prompt_tokens: int | None = None  # usage
    completion_tokens: int | None = None  # usage
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens
    timings: dict[str, float] = field(default_factory=dict)  # the server's own, when it sends them
    error: str | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_s is None else self.first_s - self.sent_s

    @property
    def prompt_s(self) -> float | None:
        """The server's prefill time (timings.prompt_ms) when it sent one."""
        ms = self.timings.get("prompt_ms")
        return None if ms is None else float(ms) / 1e3


# The request fields llama-server takes (conf/engine/llama_server.yaml): what a probe sends without a preset.
LLAMA_FIELDS = {"cache_prompt": True, "timings_per_token": True, "id_slot": True, "ignore_eos": True,
                "min_tokens": False}


class Completions:
    """POST /v1/completions with token-id prompts, streamed, one request per call. `fields`: the request fields
    beyond the OpenAI ones that the engine takes (`engine.request`); a field it does not take is never sent."""

    def __init__(self, session: aiohttp.ClientSession, url: str, model: str, clock: Clock = time.perf_counter,
                 timeout_s: float = 300.0, fields: Mapping[str, Any] | None = None) -> None:
        self.session, self.url, self.model, self.clock = session, url.rstrip("/"), model, clock
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.fields = {k: bool(v) for k, v in (LLAMA_FIELDS if fields is None else fields).items()}

    def body(self, prompt: Sequence[int], max_tokens: int, *, cache_prompt: bool,
             slot: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": [int(t) for t in prompt],
                                "max_tokens": int(max_tokens), "stream": True,
                                "stream_options": {"include_usage": True}, "temperature": 0.0}
        take = self.fields.get
        if take("ignore_eos"):
            body["ignore_eos"] = True
        if take("min_tokens"):
            body["min_tokens"] = int(max_tokens)
        if take("cache_prompt"):
            body["cache_prompt"] = cache_prompt
        if take("timings_per_token"):
            body["timings_per_token"] = True  # llama.cpp: server-side stamps on every chunk
        if slot is not None:
            if not take("id_slot"):
                raise InputError("profile.decode.pin_slots=true needs an engine that takes `id_slot` (llama.cpp); "
                                 "this engine preset has engine.request.id_slot=false: set "
                                 "profile.decode.pin_slots=false")
            body["id_slot"] = int(slot)
        return body

    async def __call__(self, prompt: Sequence[int], max_tokens: int, *, cache_prompt: bool,
                       slot: int | None = None) -> ProbeResult:
        """`slot`: run on that engine slot (llama.cpp's `id_slot`, when the engine takes it)."""
        body = self.body(prompt, max_tokens, cache_prompt=cache_prompt, slot=slot)
        res = ProbeResult(sent_s=self.clock())
        try:
            async with self.session.post(self.url + "/v1/completions", json=body, timeout=self.timeout) as resp:
                if resp.status != 200:
                    res.error = f"HTTP {resp.status}: {(await resp.text())[:200]}"
                    return res
                async for raw in resp.content:
                    now = self.clock()
                    line = raw.strip()
                    if not line.startswith(b"data:"):
                        continue
                    data = line[5:].strip()
                    if data == b"[DONE]":
                        break
                    self._chunk(json.loads(data), now, res)
        except (TimeoutError, aiohttp.ClientError, ValueError) as err:
            res.error = f"{type(err).__name__}: {err}"[:300]
        res.end_s = self.clock()
        if res.error is None and res.first_s is None:
            res.error = "no token in the response"
        return res

    @staticmethod
    def _chunk(obj: dict[str, Any], now: float, res: ProbeResult) -> None:
        choices = obj.get("choices") or []
        timings = obj.get("timings") if isinstance(obj.get("timings"), dict) else None
        if choices and choices[0].get("text"):
            res.chunk_s.append(now)
            if res.first_s is None:
                res.first_s = now
            if timings is not None and isinstance(timings.get("predicted_ms"), int | float):
                res.token_ms.append(float(timings["predicted_ms"]))
        usage = obj.get("usage")
        if usage:
            res.prompt_tokens = usage.get("prompt_tokens")
            res.completion_tokens = usage.get("completion_tokens")
            res.cached_tokens = (usage.get("prompt_tokens_details") or {}).get("cached_tokens")
        if timings is not None:
            res.timings = {k: float(v) for k, v in timings.items() if isinstance(v, int | float)}


class ProcessCpu:
    """CPU seconds a local process has run, all its threads (Linux process CPU clock, ns resolution).

    For a single-threaded engine on a shared machine this is the time its work takes without the
    share other processes take: a clock that contention does not stretch.
    """

    def __init__(self, pid: int) -> None:
        self.clock_id = ((~int(pid)) << 3) | 2  # the kernel's CPUCLOCK_SCHED clock of a whole process
        try:
            time.clock_gettime(self.clock_id)
        except OSError as err:
            raise InputError(f"profile.engine_pid={pid}: cannot read its CPU clock ({err}); "
                             f"is it a running local process?") from err

    def __call__(self) -> float:
        return time.clock_gettime(self.clock_id)


def fresh_prompt(rng: np.random.Generator, n: int, id_min: int, id_max: int) -> list[int]:
    """n uniformly random token ids: a prompt no cache has seen (collisions ~ (1/span)^prefix)."""
    return rng.integers(id_min, id_max, size=n).tolist()


TRIM = 0.1  # share of the largest and of the smallest gaps left out of a stream's mean step


def server_step(token_ms: Sequence[float], trim: float = TRIM) -> float | None:
    """The decode step of one stream from the server's own stamps (ms since its first token, per token).

    Streams started together share one batch: most gaps between a stream's tokens are steps of the
    full batch; a few at the start also carry the others' prefills (the largest gaps) and a few at
    the end run after others finished (the smallest). The trimmed mean of the gaps leaves both out
    and keeps the slow steps a busy machine causes (a median would hide them). None under 5 gaps.
    """
    gaps = np.diff(np.asarray(token_ms, dtype=float))
    if len(gaps) < 5:
        return None
    return float(trim_mean(gaps, trim)) / 1e3


@dataclass(frozen=True)
class DecodeWindow:
    step_s: float  # mean time between tokens of one stream while every stream was decoding
    context_tokens: float  # context held by the whole batch during those steps (mean over them)
    steps: int  # steps (token gaps) the mean is taken over, per stream (the smallest)


def decode_window(chunk_s: Sequence[Sequence[float]], prompt_tokens: Sequence[int],
                  tokens_per_chunk: Sequence[float] | None = None) -> DecodeWindow | None:
    """The steady decode of streams started together: the span in which all of them were decoding.

    The window opens at the last stream's first token (every prefill done) and closes at the first
    stream's last token (nobody finished). In it, each stream's gaps between tokens are decode steps
    of the whole batch; the step is the mean over streams of (last - first) / gaps. A token at index
    j of a stream (0 = the first, made by the prefill) was made by a step reading prompt + j tokens,
    so the batch's context is the sum over streams of their mean prompt + j in the window. None if
    the window holds fewer than 2 gaps of some stream (make output_tokens larger).
    """
    if not chunk_s or any(len(c) < 2 for c in chunk_s):
        return None
    start = max(c[0] for c in chunk_s)
    end = min(c[-1] for c in chunk_s)
    steps, gaps, context = [], [], 0.0
    for i, c in enumerate(chunk_s):
        t = np.asarray(c, dtype=float)
        idx = np.nonzero((t >= start) & (t <= end))[0]
        if len(idx) < 3:
            return None
        per = tokens_per_chunk[i] if tokens_per_chunk is not None else 1.0
        steps.append((t[idx[-1]] - t[idx[0]]) / ((len(idx) - 1) * per))
        gaps.append(len(idx) - 1)
        context += prompt_tokens[i] + per * float(np.mean(idx))
    return DecodeWindow(float(np.mean(steps)), context, int(min(gaps)))
