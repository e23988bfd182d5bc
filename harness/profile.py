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
import os
import platform
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np
import pandas as pd
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from harness.errors import InputError, require
from harness.hydra_entry import CONF_DIR, hydra_entry
from harness.profiling import fit as fitting
from harness.profiling.probes import Completions, ProbeResult, decode_window, fresh_prompt
from harness.profiling.writer import architecture_from_gguf, check_architecture, model_config, write_model_config


async def _get_json(session: aiohttp.ClientSession, url: str) -> tuple[dict[str, Any] | list | None, dict]:
    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as resp:
            if resp.status != 200:
                return None, dict(resp.headers)
            return await resp.json(content_type=None), dict(resp.headers)
    except (aiohttp.ClientError, asyncio.TimeoutError, ValueError):
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


class Experiment:
    """Runs the design against one endpoint; every request sent ends in exactly one row."""

    def __init__(self, complete: Completions, cfg: DictConfig, rng: np.random.Generator) -> None:
        self.complete, self.p, self.rng = complete, cfg.profile, rng
        self.id_min, self.id_max = int(cfg.target.token_id_min), int(cfg.target.token_id_max)
        self.rows: list[dict[str, Any]] = []

    def prompt(self, n: int) -> list[int]:
        return fresh_prompt(self.rng, n, self.id_min, self.id_max)

    def prefill_time(self, res: ProbeResult) -> float | None:
        if self.p.prefill.source == "server" and res.prompt_s is not None:
            return res.prompt_s
        return res.ttft_s

    async def concurrent(self, n: int, prompt_tokens: int, max_tokens: int) -> list[ProbeResult]:
        return list(await asyncio.gather(*(self.complete(self.prompt(prompt_tokens), max_tokens, cache_prompt=False)
                                           for _ in range(n))))

    async def warmup(self) -> None:
        res = await self.complete(self.prompt(256), 8, cache_prompt=False)
        self.rows.append(_row("warmup", "none", res, input_tokens=256, max_tokens=8))
        if res.error:
            raise InputError(f"target.url: the warm-up request failed: {res.error}")

    async def probe_slots(self) -> int | None:
        """The concurrency at which one request's TTFT jumps by about half a request's decode time."""
        sp = self.p.slot_probe
        step1 = None
        for c in range(1, int(sp.max_concurrency) + 1):
            results = await self.concurrent(c, int(sp.prompt_tokens), int(sp.output_tokens))
            for i, res in enumerate(results):
                self.rows.append(_row("slots", "probe", res, concurrency=c, stream=i,
                                      input_tokens=int(sp.prompt_tokens), max_tokens=int(sp.output_tokens)))
            ttfts = [r.ttft_s for r in results if r.ttft_s is not None]
            if len(ttfts) < c:
                return None
            if c == 1:
                chunks = results[0].chunk_s
                require(len(chunks) > 2, "profile.slot_probe.output_tokens must be > 2 (the step is timed from it)")
                step1 = (chunks[-1] - chunks[0]) / (len(chunks) - 1)
                continue
            if max(ttfts) - min(ttfts) > 0.5 * (int(sp.output_tokens) - 1) * step1:
                return c - 1
        return None

    async def prefill(self) -> None:
        pre = self.p.prefill
        plan = [(int(l), "fit") for l in pre.lengths for _ in range(int(pre.repeats))]
        plan += [(int(l), "holdout") for l in pre.holdout_lengths for _ in range(int(pre.holdout_repeats))]
        for i in self.rng.permutation(len(plan)):
            n, role = plan[i]
            res = await self.complete(self.prompt(n), 1, cache_prompt=False)
            self.rows.append(_row("prefill", role, res, input_tokens=n, max_tokens=1,
                                  prefill_s=self.prefill_time(res)))

    async def cached(self) -> None:
        cp = self.p.cached
        for prefix in cp.prefix_tokens:
            for new in cp.new_tokens:
                for _ in range(int(cp.repeats)):
                    first = self.prompt(int(prefix))
                    res = await self.complete(first, 1, cache_prompt=True)
                    self.rows.append(_row("cached", "seed", res, input_tokens=int(prefix), max_tokens=1))
                    res = await self.complete(first + self.prompt(int(new)), 1, cache_prompt=True)
                    self.rows.append(_row("cached", "check", res, input_tokens=int(prefix) + int(new),
                                          cached_prefix_tokens=int(prefix), max_tokens=1,
                                          prefill_s=self.prefill_time(res)))

    async def decode(self, slots: int) -> None:
        dd = self.p.decode
        holdout = [int(b) for b in dd.holdout_batches]
        batches = [int(b) for b in dd.batches] if dd.batches is not None else [b for b in range(1, slots + 1)
                                                                                 if b not in holdout]
        for b in [*batches, *holdout]:
            require(1 <= b <= slots, f"profile.decode: batch {b} is outside 1..{slots} (the engine's slots)")
        m = int(dd.output_tokens)
        plan = [(b, int(p), role) for role, bs in (("fit", batches), ("holdout", holdout)) for b in bs
                for p in dd.prompt_tokens for _ in range(int(dd.repeats))]
        for k, i in enumerate(self.rng.permutation(len(plan))):
            b, p, role = plan[i]
            results = await self.concurrent(b, p, m)
            per = [(r.completion_tokens or len(r.chunk_s)) / max(len(r.chunk_s), 1) for r in results]
            window = None if any(r.error for r in results) else decode_window([r.chunk_s for r in results],
                                                                               [p] * b, per)
            for s, res in enumerate(results):
                self.rows.append(_row("decode", role, res, group=k, batch=b, stream=s, input_tokens=p, max_tokens=m,
                                      step_s=None if window is None else window.step_s,
                                      context_tokens=None if window is None else window.context_tokens,
                                      window_steps=None if window is None else window.steps))


async def _measure(cfg: DictConfig) -> tuple[pd.DataFrame, dict[str, Any], int, int | None]:
    url = str(cfg.target.url).rstrip("/")
    p = cfg.profile
    async with aiohttp.ClientSession() as session:
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
        await exp.decode(int(slots))
    return pd.DataFrame(exp.rows), info, int(slots), probed


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
    checks = []
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
        "prefill": {"kind": "polynomial", **prefill.params, "rms_rel": prefill.rms_rel, "max_rel": prefill.max_rel,
                    "n": prefill.n, "median_s": _median_by(pre_fit, "input_tokens", "prefill_s")},
        "decode": {"kind": "linear", **decode.params, "rms_rel": decode.rms_rel, "max_rel": decode.max_rel,
                   "n": decode.n, "median_step_s": {f"{int(b)}x{int(t)}": float(g["step_s"].median())
                                                    for (b, t), g in dec_fit.groupby(["batch", "input_tokens"])}},
        "holdout": checks,
        "cached": cached,
        "client_minus_server_prefill_s": overhead,
        "errors": int(rows["error"].notna().sum()),
    }


def _design_text(p: DictConfig) -> str:
    return (f"prefill: lengths {list(p.prefill.lengths)} x {p.prefill.repeats}, held out {list(p.prefill.holdout_lengths)}"
            f" x {p.prefill.holdout_repeats}, max_tokens=1, fresh ids, cache_prompt=false; decode: batches "
            f"{'1..slots' if p.decode.batches is None else list(p.decode.batches)}, held out "
            f"{list(p.decode.holdout_batches)}, prompts {list(p.decode.prompt_tokens)}, {p.decode.output_tokens} tokens,"
            f" x {p.decode.repeats}; interleaved in a seeded random order")


def profile_documents(cfg: DictConfig, rows: pd.DataFrame, info: dict[str, Any], slots: int,
                      probed: int | None) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(profile.json document, model config document, its header comment)."""
    p = cfg.profile
    result = analyse(rows, float(p.tolerance))
    arch = p.architecture
    if arch is None:
        path = info.get("model_path")
        require(bool(path) and Path(path).is_file(),
                f"profile.architecture is not set and the server's model file ({path}) is not on this machine; "
                f"give profile.architecture={{hidden_size: ..., layers: ..., q_heads: ..., kv_heads: ..., "
                f"head_dim: ..., params_b: ..., weight_dtype_bytes: ..., kv_dtype_bytes: ...}}")
        arch = architecture_from_gguf(path)
        arch_source = f"read from the GGUF file {path}"
    else:
        arch = check_architecture(OmegaConf.to_container(arch, resolve=True))
        arch_source = "given as profile.architecture"
    when = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}"
    engine = f"{info.get('server_header') or 'unknown server'} at {info['url']}, build {info.get('build_info')}"
    pre, dec = result["prefill"], result["decode"]
    source = "server timings.prompt_ms" if p.prefill.source == "server" else "client TTFT"
    holdout = "; ".join(f"{c['probe']} {c.get('input_tokens')}{' tok' if c['probe'] == 'prefill' else ''}"
                        f"{' batch ' + str(c['batch']) if 'batch' in c else ''}: {100 * c['rel_error']:+.1f}%"
                        for c in result["holdout"])
    prefill_block = {"kind": "polynomial", "coefficients": [pre["c0"], pre["c1"], pre["c2"]],
                     "provenance": f"[M] measured by harness-profile {when}: NNLS relative fit to {pre['n']} cold "
                                   f"prefills ({source}); RMS relative residual {100 * pre['rms_rel']:.1f}%"}
    decode_block = {"kind": "linear", "base_s": dec["base_s"], "per_seq_s": dec["per_seq_s"],
                    "per_token_s": dec["per_token_s"], "bs_max": int(slots),
                    "provenance": f"[M] measured by harness-profile {when}: NNLS relative fit to {dec['n']} "
                                  f"steady-decode windows (client chunk stamps); RMS relative residual "
                                  f"{100 * dec['rms_rel']:.1f}%; bs_max = the engine's slots"}
    provenance = {
        "engine": engine, "model_file": str(info.get("model_path") or info["model"]), "date": when,
        "machine": machine, "architecture": f"[M] {arch_source}",
        "prefill": f"RMS rel residual {pre['rms_rel']:.4f} (max {pre['max_rel']:.4f}) over {pre['n']} probes",
        "decode": f"RMS rel residual {dec['rms_rel']:.4f} (max {dec['max_rel']:.4f}) over {dec['n']} probes",
        "bs_max": f"slots: declared {info.get('declared_slots')}, probed {probed}, used {slots}",
        "holdout": holdout or "none",
        "design": _design_text(p),
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
    lines = ["prefill (median s by input tokens): " + ", ".join(f"{k}: {v:.4f}" for k, v in pre["median_s"].items()),
             f"  fit T(l) = {pre['c0']:.4g} + {pre['c1']:.4g}*l + {pre['c2']:.4g}*l^2   RMS rel residual "
             f"{100 * pre['rms_rel']:.1f}% (n={pre['n']})",
             "decode step (median s by batch x prompt): " + ", ".join(f"{k}: {v:.4f}"
                                                                       for k, v in dec["median_step_s"].items()),
             f"  fit step = {dec['base_s']:.4g} + {dec['per_seq_s']:.4g}*batch + {dec['per_token_s']:.4g}*ctx   "
             f"RMS rel residual {100 * dec['rms_rel']:.1f}% (n={dec['n']})",
             f"slots: {document['slots']}"]
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
    require(cfg.profile.prefill.source in ("server", "client"),
            f"profile.prefill.source={cfg.profile.prefill.source!r}; valid: server, client")
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
