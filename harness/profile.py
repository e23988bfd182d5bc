"""`harness-profile target.url=... [profile.*]` / `python -m harness.profile`: calibrate a profile from
any OpenAI-compatible endpoint by a designed experiment, and write it as a model config.

The design (conf/profile.yaml, `profile.*`): every prompt is fresh random token ids, so nothing is
cached unless a probe means it to be; fitted and held-out probes run interleaved in a seeded random
order, so a machine that drifts moves both alike.
  (d) slots: from /props or /slots when the server has them; probed (concurrency at which TTFT jumps
      by a queueing step) when `profile.slot_probe.probe`;
  (a) cold prefill vs input length, one request in flight, max_tokens=1: the server's
      timings.prompt_ms when it sends them (else client TTFT); fitted as `kind: polynomial`
      (c0 + c1*l + c2*l^2); held-out lengths are never fitted;
  (b) prefill on a cached prefix (a prompt, then that prefix + new tokens): compared with the fitted
      profile's cached-prefill prediction, not fitted;
  (c) decode step vs batch and context: N streams started together, the step measured while all N
      decode; fitted as `kind: linear` (base_s + per_seq_s*batch + per_token_s*context tokens);
      held-out batch sizes are never fitted.
Writes to the run dir: probes.parquet (one row per request sent), profile.json (fits, residuals,
held-out checks), and the model config `<profile.out_dir or run dir>/model/<profile.name>.yaml`.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any, cast

import aiohttp
import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness.errors import InputError, require
from harness.hydra_entry import CONF_DIR, hydra_entry
from harness.profiling import fit as fitting
from harness.profiling.probes import (
    Completions,
    ProbeResult,
    ProcessCpu,
    decode_window,
    fresh_prompt,
    server_step,
)
from harness.profiling.writer import (
    architecture_from_gguf,
    check_architecture,
    model_config,
    write_model_config,
)

CLOCKS = ("server", "client", "cpu")


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

    def __init__(self, complete: Completions, cfg: DictConfig, rng: np.random.Generator) -> None:
        self.complete, self.p, self.rng = complete, cfg.profile, rng
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
        res = await self.complete(prompt, max_tokens, cache_prompt=cache_prompt)
        return res, self.cpu_now() - c0

    async def concurrent(self, n: int, prompt_tokens: int, max_tokens: int) -> list[ProbeResult]:
        return list(await asyncio.gather(*(self.complete(self.prompt(prompt_tokens), max_tokens, cache_prompt=False)
                                           for _ in range(n))))

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
        dd = self.p.decode
        batches, holdout = decode_batches(slots, dd.batches, dd.holdout_batches)
        m = int(dd.output_tokens)
        plan = [(b, int(p), role) for role, bs in (("fit", batches), ("holdout", holdout)) for b in bs
                for p in dd.prompt_tokens for _ in range(int(dd.repeats))]
        for k, i in enumerate(self.rng.permutation(len(plan))):
            b, p, role = plan[i]
            base_cpu = math.nan
            if self.cpu is not None:  # the same prefills without the decode: their CPU is subtracted
                c0 = self.cpu_now()
                base = await self.concurrent(b, p, 1)
                base_cpu = self.cpu_now() - c0
                for s, res in enumerate(base):
                    self.rows.append(_row("decode", "prefill_only", res, group=k, batch=b, stream=s, input_tokens=p,
                                          max_tokens=1, cpu_s=base_cpu))
            c0 = self.cpu_now()
            results = await self.concurrent(b, p, m)
            cpu_s = self.cpu_now() - c0
            step, ctx, how = self.decode_step(results, p)
            server_step = step
            if self.cpu is not None and not any(r.error for r in results):
                step, ctx, how = (cpu_s - base_cpu) / (m - 1), b * (p + m / 2), "cpu"
            for s, res in enumerate(results):
                self.rows.append(_row("decode", role, res, group=k, batch=b, stream=s, input_tokens=p, max_tokens=m,
                                      step_s=step, context_tokens=ctx, step_source=how, cpu_s=cpu_s,
                                      wall_step_s=server_step))

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


async def _measure(cfg: DictConfig) -> tuple[pd.DataFrame, dict[str, Any], int, int | None]:
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
        complete = Completions(session, url, info["model"], time.perf_counter, float(cfg.target.timeout_s))
        exp = Experiment(complete, cfg, np.random.default_rng(cfg.seed))
        await exp.warmup()
        probed = await exp.probe_slots() if p.slot_probe.probe else None
        slots = p.slots or info["declared_slots"] or probed
        require(slots is not None, "profile: the server does not say its slot count and probing found none "
                                   f"up to {p.slot_probe.max_concurrency}; set profile.slots")
        await exp.prefill()
        await exp.cached()
        await exp.decode(int(cast(int, slots)))
    return pd.DataFrame(exp.rows), info, int(cast(int, slots)), probed


def _median_by(df: pd.DataFrame, key: str, value: str) -> dict[int, float]:
    return {int(k): float(v) for k, v in df.groupby(key)[value].median().items()}


def analyse(rows: pd.DataFrame, tolerance: float) -> dict[str, Any]:
    """Fits on the `fit` rows, predictions of the `holdout` and `check` rows; no measured value of a
    held-out probe enters a fit."""
    ok = rows[rows["error"].isna()]
    pre = ok[(ok["probe"] == "prefill") & ok["prefill_s"].notna()]
    pre_fit, pre_hold = pre[pre["role"] == "fit"], pre[pre["role"] == "holdout"]
    prefill = fitting.fit_prefill(pre_fit["input_tokens"], pre_fit["prefill_s"])
    dec = ok[(ok["probe"] == "decode") & ok["step_s"].notna()].drop_duplicates("group")
    dec_fit, dec_hold = dec[dec["role"] == "fit"], dec[dec["role"] == "holdout"]
    decode = fitting.fit_decode(dec_fit["batch"], dec_fit["context_tokens"], dec_fit["step_s"])
    sources = sorted(set(dec["step_source"]))
    step_source = {"server": "server per-token timings, trimmed mean of gaps",
                   "client": "client chunk stamps in the span where all streams decode",
                   "cpu": "engine CPU seconds of N streams minus the same prefills alone, per step"}.get(
        sources[0] if len(sources) == 1 else "", f"mixed: {', '.join(sources)}")
    checks: list[dict[str, Any]] = []
    for n, measured in _median_by(pre_hold, "input_tokens", "prefill_s").items():
        predicted = float(fitting.predict_prefill(prefill, n))
        checks.append({"probe": "prefill", "input_tokens": n, "measured_s": measured, "predicted_s": predicted})
    for (b, pt), grp in dec_hold.groupby(["batch", "input_tokens"]):
        measured = float(grp["step_s"].median())
        predicted = float(fitting.predict_decode(decode, b, grp["context_tokens"].median()))
        checks.append({"probe": "decode", "batch": int(b), "input_tokens": int(pt), "measured_s": measured,
                       "predicted_s": predicted})
    for c in checks:
        c["rel_error"] = fitting.rel_error(c["predicted_s"], c["measured_s"])
        c["pass"] = abs(c["rel_error"]) <= tolerance
    cached = []
    for _, r in ok[(ok["probe"] == "cached") & (ok["role"] == "check")].iterrows():
        hit = r["server_cache_n"] if pd.notna(r["server_cache_n"]) else r["cached_prefix_tokens"]
        new = r["server_prompt_n"] if pd.notna(r["server_prompt_n"]) else r["input_tokens"] - r["cached_prefix_tokens"]
        # The cost model's cached prefill: T(cached + new) - T(cached) + T(0) (InstanceProfile.prefill_s).
        predicted = float(fitting.predict_prefill(prefill, hit + new) - fitting.predict_prefill(prefill, hit)
                          + prefill.params["c0"])
        cached.append({"input_tokens": int(r["input_tokens"]), "cache_n": int(hit), "new_tokens": int(new),
                       "measured_s": float(r["prefill_s"]), "predicted_s": predicted,
                       "rel_error": fitting.rel_error(predicted, float(r["prefill_s"]))})
    both = pre[pre["server_prompt_ms"].notna() & pre["ttft_s"].notna()]
    overhead = float((both["ttft_s"] - both["server_prompt_ms"] / 1e3).median()) if len(both) else None
    return {
        "prefill": {
            "kind": "polynomial",
            **prefill.params,
            "rms_rel": prefill.rms_rel,
            "max_rel": prefill.max_rel,
            "n": prefill.n,
            "median_s": _median_by(pre_fit, "input_tokens", "prefill_s"),
        },
        "decode": {
            "kind": "linear",
            "step_source": step_source,
            **decode.params,
            "rms_rel": decode.rms_rel,
            "max_rel": decode.max_rel,
            "n": decode.n,
            "median_step_s": {
                f"{int(b)}x{int(t)}": float(g["step_s"].median())
                for (b, t), g in dec_fit.groupby(["batch", "input_tokens"])
            },
        },
        "holdout": checks,
        "cached": cached,
        "client_minus_server_prefill_s": overhead,
        "errors": int(rows["error"].notna().sum()),
    }


def _design_text(p: DictConfig, slots: int) -> str:
    batches, held = decode_batches(slots, p.decode.batches, p.decode.holdout_batches)
    return (
        f"prefill: lengths {list(p.prefill.lengths)} x {p.prefill.repeats}, held out {list(p.prefill.holdout_lengths)}"
        f" x {p.prefill.holdout_repeats}, max_tokens=1, fresh ids, cache_prompt=false; decode: batches "
        f"{batches}, held out {held}, prompts {list(p.decode.prompt_tokens)}, {p.decode.output_tokens} tokens,"
        f" x {p.decode.repeats}; interleaved in a seeded random order"
    )


def profile_documents(cfg: DictConfig, rows: pd.DataFrame, info: dict[str, Any], slots: int,
                      probed: int | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(profile.json document, model config document, its header comment)."""
    p = cfg.profile
    result = analyse(rows, float(p.tolerance))
    arch = p.architecture
    if arch is None:
        path = info.get("model_path")
        require(path is not None and bool(path) and Path(path).is_file(),
                f"profile.architecture is not set and the server's model file ({path}) is not on this machine; "
                f"give profile.architecture={{hidden_size: ..., layers: ..., q_heads: ..., kv_heads: ..., "
                f"head_dim: ..., params_b: ..., weight_dtype_bytes: ..., kv_dtype_bytes: ...}}")
        arch = architecture_from_gguf(cast(str, path))
        arch_source = f"read from the GGUF file {path}"
    else:
        arch = check_architecture(OmegaConf.to_container(arch, resolve=True))
        arch_source = "given as profile.architecture"
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    engine = f"{info.get('server_header') or 'unknown server'} at {info['url']}, build {info.get('build_info')}"
    pre, dec = result["prefill"], result["decode"]
    source = {"server": "server timings.prompt_ms", "client": "client TTFT",
              "cpu": f"engine CPU seconds (pid {p.engine_pid})"}[str(p.clock)]
    holdout = "; ".join(f"{c['probe']} {c.get('input_tokens')}{' tok' if c['probe'] == 'prefill' else ''}"
                        f"{' batch ' + str(c['batch']) if 'batch' in c else ''}: {100 * c['rel_error']:+.1f}%"
                        for c in result["holdout"])
    prefill_block = {"kind": "polynomial", "coefficients": [pre["c0"], pre["c1"], pre["c2"]],
                     "provenance": f"[M] measured by harness-profile {when}: NNLS relative fit to {pre['n']} cold "
                                   f"prefills ({source}); RMS relative residual {100 * pre['rms_rel']:.1f}%"}
    decode_block = {"kind": "linear", "base_s": dec["base_s"], "per_seq_s": dec["per_seq_s"],
                    "per_token_s": dec["per_token_s"], "bs_max": int(slots),
                    "provenance": f"[M] measured by harness-profile {when}: NNLS relative fit to {dec['n']} "
                                  f"decode probes ({result['decode']['step_source']}); RMS relative residual "
                                  f"{100 * dec['rms_rel']:.1f}%; bs_max = the engine's slots"}
    provenance = {
        "engine": engine, "model_file": str(info.get("model_path") or info["model"]), "date": when,
        "machine": machine, "architecture": f"[M] {arch_source}",
        "prefill": f"RMS rel residual {pre['rms_rel']:.4f} (max {pre['max_rel']:.4f}) over {pre['n']} probes",
        "decode": f"RMS rel residual {dec['rms_rel']:.4f} (max {dec['max_rel']:.4f}) over {dec['n']} probes",
        "bs_max": f"slots: declared {info.get('declared_slots')}, probed {probed}, used {slots}",
        "holdout": holdout or "none",
        "design": _design_text(p, slots),
    }
    name = str(p.name)
    doc = model_config(name, str(p.hardware), arch, prefill_block, decode_block, provenance,
                       display_name=f"{info['model']} (profiled)")
    header = (f"Written by harness-profile on {when}: {engine}.\nMachine: {machine}.\n"
              f"Use it by name: python -m harness --config-dir <dir holding model/> model={name} ...\n"
              f"(or copy this file to conf/model/{name}.yaml). Prefill/decode were measured on this machine;\n"
              f"the hardware's specs ({p.hardware}) only feed the roofline, which this profile overrides.")
    document = {"server": info, "slots": {"declared": info.get("declared_slots"), "probed": probed, "used": slots},
                "architecture": arch, "design": OmegaConf.to_container(p, resolve=True), **result}
    return document, doc, header


def check_loads(model_path: Path, hardware: str) -> Any:
    """Build the written profile the way a deployment does (schema, then build_profile)."""
    from harness.costmodel import build_profile
    from harness.costmodel.schema import HardwareConfig, ModelConfig

    node = OmegaConf.load(model_path)
    model = OmegaConf.merge(OmegaConf.structured(ModelConfig), {k: v for k, v in node.items() if k != "defaults"})
    hw_path = Path(CONF_DIR) / "hardware" / f"{hardware}.yaml"
    require(hw_path.is_file(), f"profile.hardware={hardware}: no conf/hardware/{hardware}.yaml to check the profile on")
    hw_node = OmegaConf.load(hw_path)
    hw = OmegaConf.merge(OmegaConf.structured(HardwareConfig), {k: v for k, v in hw_node.items() if k != "defaults"})
    return build_profile(model, hw, gpus_per_instance=1)


def _table(document: dict[str, Any]) -> str:
    pre, dec = document["prefill"], document["decode"]
    lines = [
        "prefill (median s by input tokens): " + ", ".join(f"{k}: {v:.4f}" for k, v in pre["median_s"].items()),
        f"  fit T(l) = {pre['c0']:.4g} + {pre['c1']:.4g}*l + {pre['c2']:.4g}*l^2   RMS rel residual "
        f"{100 * pre['rms_rel']:.1f}% (n={pre['n']})",
        "decode step (median s by batch x prompt): "
        + ", ".join(f"{k}: {v:.4f}" for k, v in dec["median_step_s"].items()),
        f"  fit step = {dec['base_s']:.4g} + {dec['per_seq_s']:.4g}*batch + {dec['per_token_s']:.4g}*ctx   "
        f"RMS rel residual {100 * dec['rms_rel']:.1f}% (n={dec['n']})",
        f"slots: {document['slots']}",
    ]
    for c in document["holdout"]:
        what = f"{c['input_tokens']} tokens" if c["probe"] == "prefill" else f"batch {c['batch']} x {c['input_tokens']}"
        lines.append(f"held out {c['probe']:<7} {what:<18} measured {c['measured_s']:.4f} s  predicted "
                     f"{c['predicted_s']:.4f} s  {100 * c['rel_error']:+.1f}%  {'ok' if c['pass'] else 'FAIL'}")
    for c in document["cached"]:
        lines.append(f"cached prefix {c['cache_n']} + {c['new_tokens']} new: measured {c['measured_s']:.4f} s  "
                     f"predicted {c['predicted_s']:.4f} s  {100 * c['rel_error']:+.1f}%")
    return "\n".join(lines)


def profile_endpoint(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    require(bool(cfg.target.url), "harness-profile needs target.url=http://HOST:PORT (an OpenAI-compatible endpoint)")
    require(
        int(cfg.profile.decode.output_tokens) >= 8,
        "profile.decode.output_tokens must be >= 8 (a step is timed from the gaps), "
        f"got {cfg.profile.decode.output_tokens}",
    )
    require(int(cfg.profile.slot_probe.output_tokens) >= 2,
            f"profile.slot_probe.output_tokens must be >= 2, got {cfg.profile.slot_probe.output_tokens}")
    require(cfg.profile.clock in CLOCKS, f"profile.clock={cfg.profile.clock!r}; valid: {', '.join(CLOCKS)}")
    rows, info, slots, probed = asyncio.run(_measure(cfg))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(out_dir / "probes.parquet", index=False)
    document, model_doc, header = profile_documents(cfg, rows, info, slots, probed)
    target_dir = Path(cfg.profile.out_dir) if cfg.profile.out_dir else out_dir
    path = write_model_config(model_doc, target_dir, header)
    prof = check_loads(path, str(cfg.profile.hardware))
    document["model_config"] = str(path)
    document["loads_as"] = repr(prof)
    (out_dir / "profile.json").write_text(json.dumps(document, indent=2, default=str))
    print(_table(document))
    print(f"wrote {path} (loads as {prof!r})\nuse it: python -m harness --config-dir {path.parent.parent.resolve()} "
          f"model={model_doc['name']} ...")
    if not all(c["pass"] for c in document["holdout"]):
        print(f"warning: a held-out check is off by more than {100 * cfg.profile.tolerance:g}% (see above)")
    return document


@hydra_entry(config_name="profile")
def main(cfg: DictConfig) -> dict[str, Any]:
    return profile_endpoint(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
