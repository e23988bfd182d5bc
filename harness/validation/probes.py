"""One round of calibration probes, sent through the load generator itself.

Every probe is a `Request` offered by `harness.loadgen.run.drive`: the same prompt builder, request
body, HTTP client, connection pool and SSE parsing as the validation runs, so a probe's TTFT
carries exactly the client-side overhead a validation request's does (the fitted prefill curve
includes it). Probe prompts are never the validation workload: their hash ids live in their own
range (fresh prompts, nothing cached), except where a probe means to reuse its own prefix.

Rows (plain dicts, saved to calibration/<tag>/probes.json):
- prefill: one request in flight, max_tokens=1, lengths `lengths` (role fit) and `holdout_lengths`
  (role holdout: never fitted, predicted) and `tile_lengths` (role tile: lengths off the engine's attention
  tiles, for `calibrate.fit_tile`), interleaved in a seeded random order, back to back; then
  `idle.lengths` each after `idle.gap_s` of idle engine (role idle: what waking from idle adds);
- cached: a fresh prefix of c tokens, then that prefix + n new tokens;
- decode: b streams started together (b x prompt <= the engine's batch, so all b prompts go in one
  step and the b streams decode side by side); the step is the engine's own generation time per
  decode step (timings.predicted_ms / (predicted_n - 1): llama-server's first token comes from the
  prompt's batch and its generation clock starts there, `decode_step_s`), averaged over the b streams;
  `decode_cached.prompts` (whole blocks): the same at long contexts, each stream's prompt a prefix the
  engine holds on its slot (sent alone first) + `decode_cached.new_tokens` fresh tokens, so b streams
  of 1-2K tokens each still start together; they pin the context slope the short probes leave loose;
- mixed: m prompts of l tokens sent together while k streams decode (`mixed.decoders` x `mixed.prompts`,
  k + m <= the engine's slots so all m prompts enter one step): what prompts cost beside decodes and
  beside each other; one row per prompt.
With `pin_slots` the streams of a decode probe run on slots 0..b-1 and a mixed probe's decodes on
0..k-1, its prompts on k..k+m-1 (`id_slot`): llama-server costs a step by the runs of consecutive
slots it decodes (`harness.deploy.slot_layout`), so a probe's layout must be known to be fitted; then
`layouts` (lists of slots, e.g. [0, 2]) run streams on those slots: checked against the fitted steps
(one decode step per run of consecutive slots), never fitted.
"""

from __future__ import annotations

import asyncio
import copy
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace
from functools import partial
from typing import Any

import aiohttp
import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.engine.metrics import MetricDelta, MetricNames
from harness.engine.schema import TIMINGS
from harness.errors import InputError, choices
from harness.profiling.probes import decode_window
from harness.workload.request import Request, n_blocks

_PROBE_IDS = 0x7E57 << 44  # hash ids of probe prompts: far from any workload's
PIN_LEAD_S = 0.3  # pinned probes: their shared time origin is this far ahead of the call


class _Ids:
    """Fresh block ids: a prompt built from them shares no token run with anything sent before."""

    def __init__(self, seed: int, salt: int) -> None:
        # The engine's prefix cache outlives a run: the salt (the clock at the round's start) keeps a
        # round's prompts fresh on an engine that served an earlier round with the same seed.
        self.next = _PROBE_IDS + ((seed * 1_000_003 + salt) % (1 << 40)) * (1 << 20)

    def take(self, tokens: int, block_tokens: int) -> tuple[int, ...]:
        k = int(n_blocks(tokens, block_tokens))
        ids = tuple(range(self.next, self.next + k))
        self.next += k
        return ids


def _cfgs(target: DictConfig, loadgen: DictConfig, url: str) -> tuple[DictConfig, DictConfig]:
    tcfg, lg = copy.deepcopy(target), copy.deepcopy(loadgen)
    with open_dict(tcfg), open_dict(lg):
        tcfg.url, tcfg.time_scale = url, 1.0
        lg.warmup_s, lg.max_duration_s, lg.progress = 0.0, None, False
        lg.max_concurrency, lg.status_every_s = None, 0.0
    return tcfg, lg


def timings_source(engine: Any) -> str:
    """The engine preset's `timings` (engine | metrics | client); `engine` without a preset (llama-server)."""
    source = str((engine or {}).get("timings", "engine"))
    if source not in TIMINGS:
        raise InputError(f"engine.timings={source!r}; valid: {choices(TIMINGS)}")
    return source


class ProbeRound:
    """Probes of one round. `engine` (a conf/engine/ preset) says where a probe's own times come from: the
    response's `timings` (llama.cpp), the deltas of the engine's /metrics around a probe sent alone (vLLM:
    filled into the same engine_prompt_ms / engine_predicted_ms fields), or nowhere (client stamps only)."""

    def __init__(self, url: str, target: DictConfig, loadgen: DictConfig, block_tokens: int, seed: int,
                 engine: Any = None, session: aiohttp.ClientSession | None = None) -> None:
        self.tcfg, self.lg = _cfgs(target, loadgen, url)
        self.url, self.block = url, block_tokens
        self.salt = time.time_ns() // 1000
        self.ids = _Ids(seed, self.salt)
        self.rng, self.seed = np.random.default_rng(seed), seed
        self.model: str | None = None
        self.timings = timings_source(engine)
        self.takes_slot = bool(((engine or {}).get("request") or {}).get("id_slot", True))
        self.metrics = (MetricDelta(session, url, MetricNames.from_config((engine or {}).get("metrics")))
                        if self.timings == "metrics" and session is not None else None)

    def fresh(self, rid: int, at: float, tokens: int, out: int, prefix: tuple[int, ...] = ()) -> Request:
        own = self.ids.take(tokens, self.block)[len(prefix):]
        return Request(rid, at, tokens, out, prefix + own)

    async def send(self, requests: list[Request], *, one_at_a_time: bool) -> list[dict[str, Any]]:
        """The requests' requests.parquet rows (in request-id order). With metrics timings, one at a time
        means one load-generator run per request, the engine's /metrics read around each."""
        if one_at_a_time and self.metrics is not None:
            alone = [partial(self._drive, [replace(r, arrival_s=0.0)], True) for r in requests]
            return [row for sending in alone for row in await self.metered(sending)]
        return await self._drive(requests, one_at_a_time)

    async def metered(self, sending: Callable[[], Awaitable[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
        """The rows `sending()` gives, with the engine's own times from its /metrics when
        timings=metrics: a lone request's prompt and decode seconds; several requests' decode seconds summed
        (`engine_group_decode_s` on every row)."""
        if self.metrics is None:
            return await sending()
        await self.metrics.before()
        rows = await sending()
        moved = await self.metrics.after(sum(1 for r in rows if _ok(r)))
        for row in rows:
            row["engine_group_decode_s"] = moved["decode_s"]
            if len(rows) == 1 and _ok(row):
                row["engine_prompt_ms"] = moved["prompt_s"] * 1e3
                row["engine_predicted_ms"] = moved["decode_s"] * 1e3
                row["engine_predicted_n"] = float(row["output_tokens"])
        return rows

    async def _drive(self, requests: list[Request], one_at_a_time: bool) -> list[dict[str, Any]]:
        from harness.loadgen.run import client_rows, drive

        load = await drive(requests, self.url, self.tcfg, self.lg, mode="url",
                           concurrency=1 if one_at_a_time else None, model=self.model, label="probe",
                           block_tokens=self.block)
        self.model = load.model
        rows = _with_stamps(*client_rows(load)[:2])
        return sorted(rows, key=lambda r: r["request_id"])

    async def send_pinned(self, requests: list[Request], slots: list[int]) -> list[dict[str, Any]]:
        """The requests together, each on its engine slot (llama.cpp's `id_slot`, through
        `target.extra_body`): one load-generator run per request, on one shared time origin a little
        ahead (each run's set-up, a model lookup, takes a while: requests meant to arrive together
        must not be spread by it; a lone request needs no shared origin and goes at once)."""
        from harness.loadgen.clock import MonotonicClock
        from harness.loadgen.run import client_rows, drive

        start_ns = MonotonicClock().now_ns() + int(PIN_LEAD_S * 1e9) if len(requests) > 1 else None

        async def one(request: Request, slot: int) -> list[dict[str, Any]]:
            tcfg = copy.deepcopy(self.tcfg)
            with open_dict(tcfg):
                body: dict[str, Any] = dict(tcfg.get("extra_body") or {})
                body["id_slot"] = int(slot)
                tcfg.extra_body = body
            load = await drive([request], self.url, tcfg, self.lg, mode="url", concurrency=None, model=self.model,
                               label="probe", block_tokens=self.block, start_ns=start_ns)
            self.model = load.model
            return _with_stamps(*client_rows(load)[:2])

        runs = await asyncio.gather(*(one(r, s) for r, s in zip(requests, slots, strict=True)))
        return sorted((row for rows in runs for row in rows), key=lambda r: r["request_id"])

    async def together(self, requests: list[Request], pin: bool) -> list[dict[str, Any]]:
        """The requests at their arrival times; `pin`: request i on slot i (one run of consecutive slots)."""
        if pin:
            return await self.metered(lambda: self.send_pinned(requests, list(range(len(requests)))))
        return await self.metered(lambda: self._drive(requests, False))

    def step(self, rows: list[dict[str, Any]]) -> float:
        """The mean decode step of streams started together: with engine timings, each stream's own
        (`decode_step_s`); else the client's chunk stamps in the span where every stream decodes (from the
        last first token to the first last one, `profiling.probes.decode_window`): streams sent together
        still reach the engine a few ms apart, and one admitted late puts its prompt's step into the others'
        (+20% at 4 streams of 16 tokens on the fake engine, counted over their whole spans). Without such a
        span: the engine's /metrics decode seconds over the streams' n - 1 steps each (timings=metrics), or
        the streams' mean (last - first token) / (n - 1). nan when none measured."""
        ok = [r for r in rows if _ok(r)]
        if self.timings == "engine":
            per = [decode_step_s(r) for r in ok if math.isfinite(decode_step_s(r))]
            return float(np.mean(per)) if per else math.nan
        if ok and len(ok) == len(rows):
            window = decode_window([r["chunk_t_s"] for r in ok], [int(r["input_tokens"]) for r in ok],
                                   [int(r["output_tokens"]) / max(1, len(r["chunk_t_s"])) for r in ok])
            if window is not None:
                return window.step_s
        steps = sum(int(r["output_tokens"]) - 1 for r in ok)
        total = float(ok[0].get("engine_group_decode_s", math.nan)) if ok else math.nan
        if steps > 0 and math.isfinite(total):
            return total / steps
        per = [float(r["tpot_s"]) for r in ok if r.get("tpot_s") is not None and math.isfinite(r["tpot_s"])]
        return float(np.mean(per)) if per else math.nan


def _with_stamps(rows: list[dict[str, Any]], chunks: Any) -> list[dict[str, Any]]:
    """The rows, each with `chunk_t_s`: its token-bearing chunks' arrivals on the run clock (for `step`)."""
    stamps = chunks.groupby("request_id")["t_s"].apply(list).to_dict() if len(chunks) else {}
    return [{**r, "chunk_t_s": stamps.get(r["request_id"], [])} for r in rows]


def _ok(row: dict[str, Any]) -> bool:
    return row.get("error") is None and row.get("ttft_s") is not None and math.isfinite(float(row["ttft_s"]))


def _ms(row: dict[str, Any], key: str) -> float:
    value = row.get(f"engine_{key}")
    return float(value) if value is not None else math.nan


def decode_step_s(row: dict[str, Any]) -> float:
    """A stream's mean decode step on the engine's clock: timings.predicted_ms over its predicted_n - 1
    steps. llama-server samples the first token from the logits of the prompt's last batch and starts
    its generation clock there (server_slot_stats: t_gen = t_gen_last - t_prompt_last, n_gen_steps =
    n_gen - 1), so predicted_ms spans n - 1 decode steps; / n put the step 1/n low (1.6% at 64
    tokens). nan when the row has no timings or fewer than 2 tokens."""
    n = _ms(row, "predicted_n")
    return _ms(row, "predicted_ms") / 1e3 / (n - 1) if n >= 2 else math.nan


async def probe_round(url: str, cal: DictConfig, target: DictConfig, loadgen: DictConfig, *, block_tokens: int,
                      seed: int, max_sequences: int | None = None, engine: Any = None) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session:  # the engine's /metrics (timings=metrics)
        p = ProbeRound(url, target, loadgen, block_tokens, seed, engine, session)
        return await _round(p, cal, block_tokens, max_sequences)


def _missing(p: ProbeRound, rows: list[dict[str, Any]], field: str) -> None:
    """A preset that promises the engine's own times from a field no answered probe carries: one line."""
    answered = [r for r in rows if _ok(r)]
    if p.timings == "engine" and answered and not any(math.isfinite(_ms(r, field)) for r in answered):
        raise InputError(f"engine.timings=engine: the engine's responses carry no timings.{field} (llama.cpp's "
                         f"per-request timings); choose its preset (engine=vllm reads /metrics) or "
                         f"engine.timings=client")


async def _round(p: ProbeRound, cal: DictConfig, block_tokens: int, max_sequences: int | None) -> dict[str, Any]:
    (warm,) = await p.send([p.fresh(0, 0.0, 64, 4)], one_at_a_time=True)  # warm-up (and the model's name)
    _missing(p, [warm], "prompt_ms")
    _missing(p, [warm], "predicted_ms")
    # (1) prefill: fitted and held-out lengths, interleaved in a seeded random order
    plan = [(int(n), "fit") for n in cal.lengths for _ in range(int(cal.repeats))]
    plan += [(int(n), "holdout") for n in (cal.get("holdout_lengths") or []) for _ in range(int(cal.repeats))]
    plan += [(int(n), "tile") for n in (cal.get("tile_lengths") or []) for _ in range(int(cal.repeats))]
    order = p.rng.permutation(len(plan)).tolist()
    reqs = [p.fresh(i, float(i), plan[j][0], 1) for i, j in enumerate(order)]
    prefill = [{"input_tokens": plan[j][0], "role": plan[j][1],
                "ttft_s": float(r["ttft_s"]) if _ok(r) else math.nan,
                "server_prompt_s": _ms(r, "prompt_ms") / 1e3, "error": r.get("error")}
               for j, r in zip(order, await p.send(reqs, one_at_a_time=True), strict=True)]
    # (1b) the same, each after the engine sat idle `idle.gap_s` (a request at low load finds it so)
    idle = cal.get("idle") or {}
    for _ in range(int(cal.repeats)):
        for n in idle.get("lengths") or []:
            await asyncio.sleep(float(idle.get("gap_s", 1.5)))
            (r,) = await p.send([p.fresh(0, 0.0, int(n), 1)], one_at_a_time=True)
            prefill.append({"input_tokens": int(n), "role": "idle",
                            "ttft_s": float(r["ttft_s"]) if _ok(r) else math.nan,
                            "server_prompt_s": _ms(r, "prompt_ms") / 1e3, "error": r.get("error")})
    # (2) cached prefix + new tokens
    reqs, keys = [], []
    for _ in range(int(cal.repeats)):
        for c in cal.cached_prefixes:
            for n in cal.cached_new:
                seed_req = p.fresh(len(reqs), float(len(reqs)), int(c), 1)
                reqs.append(seed_req)
                reqs.append(p.fresh(len(reqs), float(len(reqs)), int(c) + int(n), 1, seed_req.hash_ids))
                keys.append((int(c), int(n)))
    rows = await p.send(reqs, one_at_a_time=True) if reqs else []
    cached = [{"cached_tokens": c, "new_tokens": n, "ttft_s": float(r["ttft_s"]) if _ok(r) else math.nan,
               "server_cache_n": r.get("engine_cache_n"), "server_prompt_s": _ms(r, "prompt_ms") / 1e3}
              for (c, n), r in zip(keys, rows[1::2], strict=True)]
    # (3) decode steps: b streams started together (`pin_slots`: on slots 0..b-1, one ubatch)
    pin = bool(cal.get("pin_slots", False))
    if pin and not p.takes_slot:
        raise InputError("experiment.calibration.pin_slots=true needs an engine that takes `id_slot` (llama.cpp); "
                         "this engine preset has engine.request.id_slot=false: set pin_slots=false")
    decode = []
    for _ in range(int(cal.repeats)):
        for prompt in cal.decode_prompts:
            for b in cal.batches:
                reqs = [p.fresh(i, 0.0, int(prompt), int(cal.decode_tokens)) for i in range(int(b))]
                runs = await p.together(reqs, pin)
                step = p.step(runs)
                if math.isfinite(step):
                    decode.append({"batch": int(b), "prompt_tokens": int(prompt), "step_s": step,
                                   "context_tokens": int(b) * (int(prompt) + int(cal.decode_tokens) / 2)})
    # (3a) long contexts: each stream's prompt a prefix of `decode_cached.prompts` tokens the engine already
    # holds (sent alone first, on the stream's slot) + `new_tokens` fresh ones, so b streams at 1-2K tokens
    # of context each still start in one step (b x prompt fresh tokens would not fit the engine's batch)
    long = cal.get("decode_cached") or {}
    new = int(long.get("new_tokens", 16))
    for prefix_tokens in long.get("prompts") or []:
        c = int(prefix_tokens)
        if c % block_tokens:
            raise InputError(f"experiment.calibration.decode_cached.prompts: {c} is not a whole number of blocks "
                             f"({block_tokens} tokens; a cached prefix is shared block by block)")
        width = max(int(b) for b in cal.batches)
        prefixes = [p.fresh(i, 0.0, c, 1) for i in range(width)]
        for i, seed_req in enumerate(prefixes):  # one at a time: each prefix alone on its slot
            await (p.send_pinned([seed_req], [i]) if pin else p.send([seed_req], one_at_a_time=True))
        for _ in range(int(cal.repeats)):
            for b in cal.batches:
                reqs = [p.fresh(i, 0.0, c + new, int(cal.decode_tokens), prefixes[i].hash_ids) for i in range(int(b))]
                runs = await p.together(reqs, pin)
                step = p.step(runs)
                if math.isfinite(step):
                    decode.append({"batch": int(b), "prompt_tokens": c + new, "cached_tokens": c,
                                   "server_cache_n": min(_ms(r, "cache_n") for r in runs),
                                   "step_s": step,
                                   "context_tokens": int(b) * (c + new + int(cal.decode_tokens) / 2)})
    # (3b) pinned streams in other layouts (`layouts`, lists of slots): checked, never fitted
    layouts = []
    for _ in range(int(cal.repeats)) if pin else ():
        for slots in cal.get("layouts") or []:
            if max_sequences is not None and max(slots) >= max_sequences:
                continue
            prompt = int(cal.decode_prompts[0])
            reqs = [p.fresh(i, 0.0, prompt, int(cal.decode_tokens)) for i in range(len(slots))]
            runs = await p.send_pinned(reqs, [int(s) for s in slots])
            per_token = [decode_step_s(r) for r in runs if _ok(r) and math.isfinite(decode_step_s(r))]
            if len(per_token) == len(slots):
                layouts.append({"slots": [int(s) for s in slots], "prompt_tokens": prompt,
                                "step_s": float(np.mean(per_token)),
                                "context_tokens": prompt + int(cal.decode_tokens) / 2})
    # (4) m prompts sent together while k streams decode (k + m <= max_sequences: all in one step)
    mixed = []
    mix = cal.get("mixed") or {}
    shapes = [(int(k), int(m)) for k in mix.get("decoders") or [] for m in mix.get("prompts") or [1]
              if max_sequences is None or int(k) + int(m) <= max_sequences]
    for _ in range(int(cal.repeats)):
        for k, m in shapes:
            for n in mix.get("lengths") or []:
                reqs = [p.fresh(i, 0.0, 64, int(mix.get("decode_tokens", 160))) for i in range(k)]
                reqs += [p.fresh(k + j, float(mix.get("delay_s", 0.15)), int(n), 1) for j in range(m)]
                rows = await p.together(reqs, pin)
                mixed += [{"decoders": k, "prompts": m, "input_tokens": int(n),
                           "ttft_s": float(r["ttft_s"]) if _ok(r) else math.nan,
                           "server_prompt_s": _ms(r, "prompt_ms") / 1e3} for r in rows[k:]]
    return {"prefill": prefill, "decode": decode, "cached": cached, "mixed": mixed, "layouts": layouts,
            "ids": {"seed": p.seed, "salt": p.salt}}


RESET_TOKENS = 16  # reset_slots: each slot's request (fresh ids, 1 token out)


async def _reset(url: str, target: DictConfig, loadgen: DictConfig, block_tokens: int, slots: int, seed: int) -> None:
    p = ProbeRound(url, target, loadgen, block_tokens, seed)
    for i, slot in enumerate(range(slots - 1, -1, -1)):
        await p.send_pinned([p.fresh(i, 0.0, RESET_TOKENS, 1)], [slot])


def reset_slots(url: str, target: Any, loadgen: Any, *, slots: int, block_tokens: int = 512, seed: int = 0) -> None:
    """Leave the engine's slots least recently used in the order the emulator's fresh instance takes
    them (slots-1, ..., 1, 0: `slot_layout.SlotTable`), holding nothing a workload shares: one short
    fresh request pinned to each slot, one after the other, highest slot first. llama-server picks the
    least recently released idle slot, so whatever ran before (probe rounds, an earlier load) would
    otherwise decide which slots a run's requests share (after the probe rounds here: 3, 0, 1, 2)."""
    target = target if isinstance(target, DictConfig) else OmegaConf.create(target)
    loadgen = loadgen if isinstance(loadgen, DictConfig) else OmegaConf.create(loadgen)
    asyncio.run(_reset(url, target, loadgen, block_tokens, slots, seed))


def probe(url: str, cal: Any, target: Any, loadgen: Any, *, block_tokens: int = 512, seed: int = 0,
          max_sequences: int | None = None, engine: Any = None) -> dict[str, Any]:
    """One round of probes against `url` (blocking): {"prefill", "decode", "cached", "mixed"} rows; `engine`:
    its preset (conf/engine/), null: llama-server's (timings in every response)."""
    cal = cal if isinstance(cal, DictConfig) else OmegaConf.create(cal)
    target = target if isinstance(target, DictConfig) else OmegaConf.create(target)
    loadgen = loadgen if isinstance(loadgen, DictConfig) else OmegaConf.create(loadgen)
    return asyncio.run(probe_round(url, cal, target, loadgen, block_tokens=block_tokens, seed=seed,
                                   max_sequences=max_sequences, engine=engine))
