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
from typing import Any

import numpy as np
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.errors import InputError
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


class ProbeRound:
    def __init__(self, url: str, target: DictConfig, loadgen: DictConfig, block_tokens: int, seed: int) -> None:
        self.tcfg, self.lg = _cfgs(target, loadgen, url)
        self.url, self.block = url, block_tokens
        self.salt = time.time_ns() // 1000
        self.ids = _Ids(seed, self.salt)
        self.rng = np.random.default_rng(seed)
        self.model: str | None = None

    def fresh(self, rid: int, at: float, tokens: int, out: int, prefix: tuple[int, ...] = ()) -> Request:
        own = self.ids.take(tokens, self.block)[len(prefix):]
        return Request(rid, at, tokens, out, prefix + own)

    async def send(self, requests: list[Request], *, one_at_a_time: bool) -> list[dict[str, Any]]:
        """The requests' requests.parquet rows (in request-id order)."""
        from harness.loadgen.run import client_rows, drive

        load = await drive(requests, self.url, self.tcfg, self.lg, mode="url",
                           concurrency=1 if one_at_a_time else None, model=self.model, label="probe",
                           block_tokens=self.block)
        self.model = load.model
        rows, _, _ = client_rows(load)
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
            return client_rows(load)[0]

        runs = await asyncio.gather(*(one(r, s) for r, s in zip(requests, slots, strict=True)))
        return sorted((row for rows in runs for row in rows), key=lambda r: r["request_id"])

    async def together(self, requests: list[Request], pin: bool) -> list[dict[str, Any]]:
        """The requests at their arrival times; `pin`: request i on slot i (one run of consecutive slots)."""
        if pin:
            return await self.send_pinned(requests, list(range(len(requests))))
        return await self.send(requests, one_at_a_time=False)


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
                      seed: int, max_sequences: int | None = None) -> dict[str, Any]:
    p = ProbeRound(url, target, loadgen, block_tokens, seed)
    await p.send([p.fresh(0, 0.0, 64, 4)], one_at_a_time=True)  # warm-up (and the model's name)
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
    decode = []
    for _ in range(int(cal.repeats)):
        for prompt in cal.decode_prompts:
            for b in cal.batches:
                reqs = [p.fresh(i, 0.0, int(prompt), int(cal.decode_tokens)) for i in range(int(b))]
                runs = await p.together(reqs, pin)
                per_token = [decode_step_s(r) for r in runs if _ok(r) and math.isfinite(decode_step_s(r))]
                if per_token:
                    decode.append({"batch": int(b), "prompt_tokens": int(prompt), "step_s": float(np.mean(per_token)),
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
        for i, warm in enumerate(prefixes):  # one at a time: each prefix alone on its slot
            await (p.send_pinned([warm], [i]) if pin else p.send([warm], one_at_a_time=True))
        for _ in range(int(cal.repeats)):
            for b in cal.batches:
                reqs = [p.fresh(i, 0.0, c + new, int(cal.decode_tokens), prefixes[i].hash_ids) for i in range(int(b))]
                runs = await p.together(reqs, pin)
                per_token = [decode_step_s(r) for r in runs if _ok(r) and math.isfinite(decode_step_s(r))]
                if per_token:
                    decode.append({"batch": int(b), "prompt_tokens": c + new, "cached_tokens": c,
                                   "server_cache_n": min(_ms(r, "cache_n") for r in runs),
                                   "step_s": float(np.mean(per_token)),
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
            "ids": {"seed": seed, "salt": p.salt}}


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
          max_sequences: int | None = None) -> dict[str, Any]:
    """One round of probes against `url` (blocking): {"prefill", "decode", "cached", "mixed"} rows."""
    cal = cal if isinstance(cal, DictConfig) else OmegaConf.create(cal)
    target = target if isinstance(target, DictConfig) else OmegaConf.create(target)
    loadgen = loadgen if isinstance(loadgen, DictConfig) else OmegaConf.create(loadgen)
    return asyncio.run(probe_round(url, cal, target, loadgen, block_tokens=block_tokens, seed=seed,
                                   max_sequences=max_sequences))
