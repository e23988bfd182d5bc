"""The validation's built-in calibration: fit the cost model's forms to one or more probe rounds.

Used when no profile file is given (`experiment.profile=null`); the probes (`probes.py`) go through
the load generator itself, never with the validation workload. `harness-profile` writes the same
`profiles.<hardware>` block from its own designed experiment.

Fits (residuals kept in the provenance):
- prefill, `table` (default): a non-decreasing piecewise-linear curve with corners at `knots`,
  fitted to the median client TTFT per probe length (the cost model's `kind: table`). llama.cpp prefills in
  ubatches of 512 tokens and its short prompts cost little more than their tokens, which a
  quadratic through 64..2048 misses (its intercept came out ~20 ms where a 72-token prompt took
  24 ms in all). `polynomial`: T(l) = c0 + c1 l + c2 l^2 (relative least squares).
- decode, `per_batch` (default): a step per batch size + a per-context-token slope; `linear`:
  base_s + per_seq_s N + per_token_s context.
- prefix attention: what extending a cached prefix costs, from the cached probes.
- wake: what a prompt costs beyond the back-to-back curve when the engine sat idle before it
  (the project's llama-server on 2 vCPUs: ~10-35 ms more after 0.6-1.5 s idle, none after 0.3 s).
- mixed: m prompts sent together beside k decoding streams, fitted as the aggregated instance's
  step with `mixed_prompt_factor` (`mixed_parts`, its form set by `deployment.separate_passes`).
- prompt cache saves (`fit_cache_save`): llama-server copies the KV of the slot the previous probe
  released into its host-memory prompt cache when it launches the next one, before its prompt
  (`harness.deploy.slot_layout`); so a back-to-back probe's client TTFT - the engine's prompt_ms
  grows with the previous probe's tokens: fitted as h + c x those tokens (Theil-Sen), c is
  `deployment.cache_save_token_s` and h, the client's own part, replaces the median overhead.
- attention tiles (`fit_tile`): llama.cpp's CPU flash attention computes query tiles of 64 rows and pads a
  partial last tile, so a prompt just past a whole tile costs more than the curve through whole-tile lengths
  says (engine CPU 39.7 ms at 128 tokens, 44.0 at 130). Probes at `tile_lengths` (role tile), each against
  the fitted length just below it, fit `deployment.tile_fill`: the share of the empty rows' work paid.
Checks (reported, never fitted): held-out prefill lengths; the mixed probes at factor 1, by both
step forms (shared pass, separate passes); streams pinned to other slot layouts (e.g. slots 0 and 2)
against one decode step per run of consecutive slots (`slot_layout.decode_cost`) and against one
step of the whole batch.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from harness.costmodel.curves import PiecewiseLinear, Polynomial
from harness.deploy.aggregated_instance import padded_tokens
from harness.deploy.slot_layout import decode_cost
from harness.errors import InputError
from harness.validation.decode_fit import fit_decode, fit_decode_per_batch

PREFILL_KINDS = ("table", "polynomial")


WARMUP_HELD_TOKENS = 64 + 4 - 1  # probes.py's warm-up request (64-token prompt, 4 tokens out) leaves this on its slot


def prefill_rows(rounds: list[dict[str, list]]) -> list[dict]:
    """The rounds' prefill probe rows (in the order sent, one at a time), each with `prev_tokens`: what
    the request before it left on its slot (prompt + output - 1: the warm-up's for a round's first row,
    else the previous probe's prompt, max_tokens 1) and the engine copies into its prompt cache when it
    launches this one."""
    out = []
    for rd in rounds:
        prev = WARMUP_HELD_TOKENS
        for row in rd["prefill"]:
            out.append({**row, "prev_tokens": prev})
            prev = int(row["input_tokens"])
    return out


def client_overhead(rows: list[dict], save_token_s: float = 0.0) -> float:
    """What the client adds to the engine's own prompt time: the median over the back-to-back prefill
    probes of client TTFT - the engine's timings.prompt_ms (0 when the engine sends no timings), less
    `save_token_s` x the tokens the engine copied into its prompt cache before the probe (`prev_tokens`,
    `prefill_rows`), which the emulator charges as such."""
    gaps = [float(r["ttft_s"]) - float(r["server_prompt_s"]) - save_token_s * float(r.get("prev_tokens", 0))
            for r in rows if r.get("role", "fit") == "fit" and _served(r) and np.isfinite(r["ttft_s"])]
    return max(0.0, float(np.median(gaps))) if gaps else 0.0


def fit_cache_save(rounds: list[dict[str, list]]) -> tuple[float, float, int]:
    """(seconds per token, intercept, pairs): client TTFT - the engine's prompt_ms of the back-to-back
    prefill probes (fitted and held-out lengths) against the tokens the previous probe left on its slot,
    which the engine copies into its prompt cache before this probe's prompt: the Theil-Sen line (the
    median of pairwise slopes, then the median intercept; a stalled probe moves neither), slope >= 0."""
    rows = [r for r in prefill_rows(rounds)
            if r.get("role", "fit") in ("fit", "holdout") and _served(r) and np.isfinite(r["ttft_s"])]
    x = np.array([float(r["prev_tokens"]) for r in rows])
    y = np.array([float(r["ttft_s"]) - float(r["server_prompt_s"]) for r in rows])
    if len(x) < 3 or np.ptp(x) == 0:
        return 0.0, float(np.median(y)) if len(y) else 0.0, len(x)
    i, j = np.triu_indices(len(x), 1)
    keep = x[i] != x[j]
    slope = max(0.0, float(np.median((y[j] - y[i])[keep] / (x[j] - x[i])[keep])))
    return slope, float(np.median(y - slope * x)), len(x)


def _served(row: dict) -> bool:
    v = row.get("server_prompt_s")
    return v is not None and bool(np.isfinite(v)) and v > 0


def _time(row: dict, overhead: float | None) -> float:
    """A probe's prompt time: with `overhead` (clock server) the engine's own prompt time + the median
    client overhead, so a stall of the client or the machine between send and the engine's start
    (up to 250 ms seen right after a validation load, the engine's own time unmoved) does not enter
    the fit; else (or without engine timings) the client TTFT."""
    if overhead is not None and _served(row):
        return float(row["server_prompt_s"]) + overhead
    return float(row["ttft_s"])


def _by_length(rows: list[dict], role: str = "fit", overhead: float | None = None) -> dict[int, float]:
    """The median prompt time per probe length (one stalled probe cannot tilt the curve)."""
    by: dict[int, list[float]] = {}
    for r in rows:
        if r.get("role", "fit") == role and np.isfinite(_time(r, overhead)):
            by.setdefault(int(r["input_tokens"]), []).append(_time(r, overhead))
    return {n: float(np.median(v)) for n, v in sorted(by.items())}


def _fit_prefill(rows: list[dict], overhead: float | None = None) -> tuple[list[float], float]:
    med = _by_length(rows, overhead=overhead)
    x = np.array(list(med), float)
    y = np.array(list(med.values()), float)
    a = np.vstack([np.ones_like(x), x, x * x]).T / y[:, None]  # relative least squares
    coef, *_ = np.linalg.lstsq(a, np.ones_like(y), rcond=None)
    coef = np.maximum(coef, 0.0)
    rel = (a @ coef) - 1.0
    return coef.tolist(), float(np.sqrt(np.mean(rel**2)))


def _fit_prefill_table(rows: list[dict], knots: list[int] | None = None,
                       overhead: float | None = None) -> tuple[list[int], list[float], float]:
    """(tokens, seconds, relative RMS residual): a non-decreasing piecewise-linear T with corners at
    `knots` (default: the probe lengths), fitted to the median TTFT per length by non-negative least
    squares on relative error: T(l) = y0 + sum_j d_j * clip((l - x_{j-1}) / (x_j - x_{j-1}), 0, 1),
    y0, d_j >= 0. With fewer knots than lengths, neighbouring lengths smooth each other's noise."""
    from scipy.optimize import nnls

    med = _by_length(rows, overhead=overhead)
    x = np.array(list(med), float)
    y = np.array(list(med.values()), float)
    lo, hi = min(med), max(med)  # corners outside the probed lengths are dropped; both ends are corners
    k = np.array(sorted({lo, hi, *(int(v) for v in (knots if knots is not None else med) if lo <= v <= hi)}), float)
    basis = [np.ones_like(x)] + [np.clip((x - k[j - 1]) / (k[j] - k[j - 1]), 0.0, 1.0) for j in range(1, len(k))]
    a = np.vstack(basis).T / y[:, None]
    coef, _ = nnls(a, np.ones_like(y))
    rel = a @ coef - 1.0
    return k.astype(int).tolist(), np.cumsum(coef).tolist(), float(np.sqrt(np.mean(rel**2)))


def prefill_curve(block: dict) -> Callable[[float], float]:
    """T(l) of a fitted prefill block (`table` or `polynomial`)."""
    if block["kind"] == "table":
        return PiecewiseLinear(block["tokens"], block["seconds"], "calibration prefill")
    return Polynomial(block["coefficients"], "calibration prefill")


def fit_prefix_attention(rounds: list[dict[str, list]], t: Callable[[float], float]) -> tuple[float, float]:
    """(gamma, relative RMS residual): TTFT of n new tokens on a cached prefix of c, as
    T(n) + gamma * [T(c + n) - T(c) + T(0) - T(n)] with the fitted curve T; gamma in [0, 1]
    (1: the cost model's marginal cost; 0: as if the prefix were not there)."""
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


def fit_wake(rounds: list[dict[str, list]], t: Callable[[float], float],
             save_token_s: float = 0.0) -> tuple[float, list[dict]]:
    """(wake_s, per length): what a prompt sent to an engine idle for a while takes beyond the
    back-to-back curve T, the median over lengths of median(idle TTFT) - T(l), at least 0 (less
    `save_token_s` x the tokens the engine copied into its prompt cache first, charged as such)."""
    rows = [{**row, "ttft_s": float(row["ttft_s"]) - save_token_s * float(row["prev_tokens"])}
            for row in prefill_rows(rounds)]
    idle = _by_length(rows, "idle")
    rows = [{"input_tokens": n, "idle_s": m, "busy_s": t(n), "extra_s": m - t(n)} for n, m in idle.items()]
    return (max(0.0, float(np.median([r["extra_s"] for r in rows]))) if rows else 0.0), rows


def tiled(t: Callable[[float], float], n: int, tile_fill: float, tile_tokens: int, ubatch_tokens: int) -> float:
    """T(n) of a fresh prompt with its partial attention tile: T(n) + f x (T(n') - T(n)), n' the rows the engine
    computes (`aggregated_instance.padded_tokens`), as the aggregated instance charges it."""
    base = t(n)
    if not tile_fill or not tile_tokens:
        return base
    return base + tile_fill * (t(padded_tokens(n, tile_tokens, ubatch_tokens)) - base)


def fit_tile(rounds: list[dict[str, list]], t: Callable[[float], float], *, tile_tokens: int, ubatch_tokens: int,
             overhead: float | None = None, roles: tuple[str, ...] = ("tile",)) -> tuple[float, list[dict]]:
    """(tile_fill, per length): back-to-back probes of n tokens off the attention tiles (`roles`, default the
    `tile_lengths` probes), each against the fitted (role fit) length n0 just below it at a whole tile
    (n0 = n - n mod tile; the curve T where n0 was not probed): excess = y(n) - y(n0) - (T(n) - T(n0)), what n
    costs beyond the curve's step from n0, against the empty rows' work T(n') - T(n) (`padded_tokens`);
    relative least squares over the per-length medians, f in [0, 1]. (0, []) without such probes."""
    pre = prefill_rows(rounds)
    base = _by_length(pre, "fit", overhead)
    rows = []
    for role in roles:
        for n, y in _by_length(pre, role, overhead).items():
            padded = padded_tokens(n, tile_tokens, ubatch_tokens)
            if padded == n:
                continue
            n0 = n - n % tile_tokens
            y0 = base.get(n0, t(n0))
            rows.append({"input_tokens": n, "measured_s": y, "base_tokens": n0, "base_s": y0,
                         "excess_s": y - y0 - (t(n) - t(n0)), "empty_rows_s": t(padded) - t(n)})
    if not rows:
        return 0.0, []
    w = np.array([1.0 / r["measured_s"] for r in rows])
    x = np.array([r["empty_rows_s"] for r in rows]) * w
    e = np.array([r["excess_s"] for r in rows]) * w
    fill = float(np.clip(np.dot(e, x) / max(float(np.dot(x, x)), 1e-18), 0.0, 1.0))
    for r in rows:
        predicted = r["base_s"] + t(r["input_tokens"]) - t(r["base_tokens"]) + fill * r["empty_rows_s"]
        r["rel_error"] = predicted / r["measured_s"] - 1.0
    return fill, rows


def _decode_step(block: dict) -> Callable[[int, float], float]:
    from harness.costmodel.decode import LinearDecode, PerBatchDecode

    dec = block["decode"]
    return (PerBatchDecode(dec["batch_step_s"], dec["per_token_s"]) if dec["kind"] == "per_batch"
            else LinearDecode(dec["base_s"], dec["per_seq_s"], dec["per_token_s"]))


def mixed_parts(block: dict, decoders: int, prompts: int, tokens: int, *, separate: bool,
                layout: bool = False) -> tuple[float, float]:
    """(fixed, work): the aggregated instance's step with `prompts` fresh prompts of `tokens` tokens
    beside `decoders` decoding probe streams is fixed + mixed_prompt_factor * work (the factor applies
    only when decoders > 0), timed from the step's start as the engine's prompt time is (a prompt also
    waits for the step running when it arrives, which the emulator has as such). `separate`
    (deployment.separate_passes): the decodes' step plus each prompt's own T(0); else one shared pass,
    max(T(0), decode step) + the prompts' marginal work. `layout` (deployment.slot_layout, pinned probes:
    decodes on slots 0..k-1, prompts on k..k+m-1): the decode ubatch also carries each prompt's first
    token (`slot_layout.decode_cost`), plus each prompt's own T(0)."""
    t = prefill_curve(block["prefill"])
    t0 = t(0)
    work = prompts * (t(tokens) - t0)
    if decoders == 0:
        return (prompts * t0 if separate else t0), work
    if layout:
        held = decode_cost([(i, 64.0 + 20.0) for i in range(decoders)],
                           [(decoders + j, tokens) for j in range(prompts)], _decode_step(block))
        return held + prompts * t0, work
    step = _decode_step(block)(decoders, decoders * (64 + 20))  # 64-token prompts, ~20 tokens in at 0.15 s
    return (step + prompts * t0 if separate else max(t0, step)), work


def _mixedmedians(rounds: list[dict[str, list]], clock: str = "server",
                   save_token_s: float = 0.0) -> dict[tuple[int, int, int], float]:
    """The median prompt time per (decoders, prompts, length) of the mixed probes (rows without
    `prompts`: 1): the engine's own prompt time + the client overhead (clock server, `_time`)."""
    overhead = client_overhead(prefill_rows(rounds), save_token_s) if clock == "server" else None
    groups: dict[tuple[int, int, int], list[float]] = {}
    for row in (row for r in rounds for row in r.get("mixed", [])):
        if np.isfinite(_time(row, overhead)):
            key = (int(row["decoders"]), int(row.get("prompts", 1)), int(row["input_tokens"]))
            groups.setdefault(key, []).append(_time(row, overhead))
    return {k: float(np.median(v)) for k, v in sorted(groups.items())}


def fit_mixed(rounds: list[dict[str, list]], block: dict, *, separate: bool = False,
              clock: str = "server", layout: bool = False, save_token_s: float = 0.0) -> tuple[float, float]:
    """(factor, relative RMS residual): m prompts of n tokens sent together beside k decoding streams
    (k > 0), as fixed + factor * work (`mixed_parts`, the aggregated instance's step with
    `mixed_prompt_factor`), relative least squares over the medians, factor >= 1 (1: prompt work beside
    decodes costs what it costs alone)."""
    med = {k: v for k, v in _mixedmedians(rounds, clock, save_token_s).items() if k[0] > 0}
    if not med:
        return 1.0, math.nan
    parts = np.array([mixed_parts(block, k, m, n, separate=separate, layout=layout) for k, m, n in med])
    base, work = parts[:, 0], parts[:, 1]
    y = np.array(list(med.values()))
    w = 1.0 / y  # relative least squares: a 1,024-token probe weighs what a 256-token one does
    factor = max(1.0, float(np.dot((y - base) * w, work * w) / max(float(np.dot(work * w, work * w)), 1e-18)))
    rel = (base + factor * work) / y - 1.0
    return factor, float(np.sqrt(np.mean(rel**2)))


def checks(rounds: list[dict[str, list]], block: dict, *, separate: bool = False,
           clock: str = "server", layout: bool = False, save_token_s: float = 0.0,
           tile: tuple[float, int, int] = (0.0, 0, 512)) -> dict[str, list[dict]]:
    """Predictions of what no fit saw: held-out prefill lengths (with a partial attention tile's cost, `tile`
    = (tile_fill, tile_tokens, ubatch_tokens)); m prompts beside k decoding streams at factor 1, by the
    configured step form (`separate`) and by the other one ('other')."""
    t = prefill_curve(block["prefill"])
    pre = prefill_rows(rounds)
    overhead = client_overhead(pre, save_token_s) if clock == "server" else None
    held = []
    for n, m in _by_length(pre, "holdout", overhead).items():
        p = tiled(t, n, *tile)
        held.append({"input_tokens": n, "measured_s": m, "predicted_s": p, "rel_error": p / m - 1.0})
    mixed = []
    for (k, m, n), y in _mixedmedians(rounds, clock, save_token_s).items():
        model = sum(mixed_parts(block, k, m, n, separate=separate, layout=layout))
        other = sum(mixed_parts(block, k, m, n, separate=not separate))
        mixed.append({"decoders": k, "prompts": m, "input_tokens": n, "measured_s": y, "predicted_s": model,
                      "rel_error": model / y - 1.0, "other_form_s": other, "other_form_rel_error": other / y - 1.0})
    step = _decode_step(block)
    layouts = []
    groups: dict[tuple[int, ...], list[dict]] = {}
    for row in (row for r in rounds for row in r.get("layouts", [])):
        groups.setdefault(tuple(row["slots"]), []).append(row)
    for slots, rows in sorted(groups.items()):
        y = float(np.median([r["step_s"] for r in rows]))
        ctx = float(np.mean([r["context_tokens"] for r in rows]))
        model = decode_cost([(s, ctx) for s in slots], [], step)
        flat = step(len(slots), ctx * len(slots))
        layouts.append({"slots": list(slots), "measured_s": y, "predicted_s": model, "rel_error": model / y - 1.0,
                        "one_ubatch_s": flat, "one_ubatch_rel_error": flat / y - 1.0})
    return {"prefill_holdout": held, "mixed": mixed, "layouts": layouts}


def fit(rounds: list[dict[str, list]], *, hardware: str, slots: int, source: str,
        decode_kind: str = "per_batch", prefill_kind: str = "table", knots: list[int] | None = None,
        clock: str = "server", save_token_s: float = 0.0) -> dict:
    """The profiles block {hardware: {...}} fitted to the probe rows of one or more rounds (the
    `fit` rows; held-out and mixed probes are only checked, see `checks`)."""
    pre = prefill_rows(rounds)
    dec = [row for r in rounds for row in r["decode"]]
    if not dec:  # every decode probe failed, or no clock timed one: say so, never max() of nothing
        raise InputError(f"experiment.calibration: no decode probe of {source} measured a step (each failed or "
                         f"carried no time on the engine preset's clock; see calibration/*/probes.json)")
    if not any(row.get("role", "fit") == "fit" and np.isfinite(_time(row, None)) for row in pre):
        raise InputError(f"experiment.calibration: no prefill probe of {source} was answered "
                         f"(see calibration/*/probes.json)")
    lengths = sorted({row["input_tokens"] for row in pre if row.get("role", "fit") == "fit"})
    batches = sorted({row["batch"] for row in dec})
    prompts = sorted({row["prompt_tokens"] for row in dec})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    overhead = client_overhead(pre, save_token_s) if clock == "server" else None
    saves = (f" - {save_token_s * 1e6:.2f} us x the tokens the engine copied into its prompt cache before it"
             if save_token_s else "")
    timed = (f"the engine's own prompt time (timings.prompt_ms) + the median client overhead "
             f"({(overhead or 0.0) * 1e3:.1f} ms: client TTFT - prompt_ms{saves}, the load generator's own client)"
             if clock == "server" else "the client TTFT (the load generator's own client)")
    what = f"[M] fitted {stamp} to the median of {timed} of single fresh prompts at {lengths} tokens ({source})"
    if prefill_kind == "table":
        tokens, seconds, pre_rms = _fit_prefill_table(pre, knots, overhead)
        prefill: dict = {"kind": "table", "tokens": tokens, "seconds": seconds,
                         "provenance": f"{what}; non-decreasing piecewise-linear, corners at {tokens}, relative "
                                       f"least squares; relative RMS residual {pre_rms:.3f}"}
    else:
        coefficients, pre_rms = _fit_prefill(pre, overhead)
        prefill = {"kind": "polynomial", "coefficients": coefficients,
                   "provenance": f"{what}; relative RMS residual {pre_rms:.3f}"}
    how = (f"fitted {stamp} to the engine's generation time per token of N={batches} concurrent streams at "
           f"{prompts}-token prompts ({source})")
    if decode_kind == "per_batch":
        steps, per_tok, dec_rms = fit_decode_per_batch(dec)
        decode = {"kind": "per_batch", "batch_step_s": steps, "per_token_s": per_tok}
    else:
        (base, per_seq, per_tok), dec_rms = fit_decode(dec)
        decode = {"kind": "linear", "base_s": base, "per_seq_s": per_seq, "per_token_s": per_tok}
    decode.update({"bs_max": slots, "provenance": f"[M] {how}; relative RMS residual {dec_rms:.3f}; "
                                                  f"bs_max = the engine's slots"})
    return {hardware: {"gpus_per_instance": 1, "prefill": prefill, "decode": decode}}
