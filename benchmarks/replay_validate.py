"""Re-run the emulator's side of a saved validate_engine sweep offline, against its saved engine runs.

    .venv/bin/python benchmarks/replay_validate.py SWEEP_DIR [SWEEP_DIR ...] [--fit-cache-save]
        [--slot-order engine] [--tile-tokens 64 [--tile-roles tile,holdout]] [--set KEY=VALUE ...]
    .venv/bin/python benchmarks/replay_validate.py SWEEP_DIR [...] --round-speed   # no emulator runs

A sweep written by `benchmarks/bench_validate.py` (or `python -m harness -m experiment=validate_engine`)
keeps every probe round (`calibration/<tag>/probes.json`), each load's engine run (`engine/load<i>`) and
its emulator job's config (`<i>_*/.hydra/config.yaml`). This refits each load's calibration from the
probe rounds that bracket it (as the suite does: `start` + `after_load0` for load 0, and so on) with the
current code and the options given, runs the emulator on that load's arrivals (same seed, rate and hash
ids), and prints predicted vs measured beside what the sweep itself predicted. Nothing measured on the
validation workload enters the fit: only the probe rounds do. The engine's rates stay what the sweep
offered; the capacity the refitted `start` round gives is printed for reference.

- `--fit-cache-save`: fit `deployment.cache_save_token_s` (llama-server's prompt cache copies at launch,
  `harness.deploy.slot_layout`) from the probes, as `experiment.calibration.fit_cache_save=true` does.
- `--slot-order engine`: start the emulator's slots in the least-recently-used order the engine's slots
  had when the load began (read from the sweep's engine.log: the last release of each slot before the
  load's first launch); a sweep run with `experiment.reset_slots=true` starts the engine in the
  emulator's own order, so this is what that would have done.
- `--tile-tokens N`: model the engine's partial attention tiles (`deployment.tile_tokens`) and fit
  `deployment.tile_fill` from the probes off the tiles, as validate_engine does; `--tile-roles` the probe
  roles it uses (default `tile`, the `tile_lengths` probes; sweeps from before them have only the 96-token
  held-out probes off the tiles: `--tile-roles holdout`, which then are no longer held out for the tile).
- `--set deployment.KEY=VALUE`: any other override of the emulator's jobs (e.g. `deployment.slot_layout=false`);
  `--set experiment.calibration.KEY=VALUE` (e.g. `knots=[...]`) also applies to the refit.
- `--round-speed`: instead of replaying, how fast each probe round ran against the profile its load's
  prediction uses (the fit of the two rounds around it): per round the median over its decode probes of
  the engine's step / the profile's step, over its fitted prefill probes of >= 128 tokens of prompt time /
  the curve, and over its mixed probes (last in a round, so nearest the next engine run) of prompt time /
  the mixed step at the fitted factor. With `--repeat` sweeps it prints beside them how much the engine's
  own clock moved from a load's first run to its repeat on the same workload (summed `timings.prompt_ms`,
  `predicted_ms` per decoded token): the first run follows the round before, the repeat precedes the
  round after, so a probe round that saw the engine's speed level would shift with it (the decode shift also
  carries the batch mix: a slower run queues more). On the three sweeps of 14:00-14:50 UTC, 1 Dec (the
  README's, /tmp/bv22a-c) it did not: decode per token moved -8.5..+8.6% between first run and repeat, the
  rounds' indices -8.3..+9.5% with it on the busy sweep but within +-3% on the two quiet ones (correlation
  of the two shifts 0.49 over nine loads, -0.11 over the quiet sweeps' six).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from omegaconf import OmegaConf, open_dict

from harness.validation import callback as cb
from harness.validation.compare import TARGETS

_TS = re.compile(r"^(\d+)\.(\d+)\.(\d+)\.(\d+) ")
_SLOT = re.compile(r"id +(\d+) \| task (-?\d+) \| (.*)")
_EVAL = re.compile(r"prompt eval time = +([\d.]+) ms / +(\d+) tokens")


def engine_slot_order(log: Path, engine_dir: Path, slots: int) -> list[int]:
    """The slots least recently used first when the engine run in `engine_dir` began, from llama-server's
    log (verbosity 3 prints each task's launch, prompt timings and release with its slot): the launch of
    the run's first request (matched by its prompt tokens and the engine's prompt_ms to 0.01 ms), and
    each slot's last release before it (never released: first, highest id first, as the engine's LRU
    scan takes them)."""
    launch: dict[int, float] = {}
    evals: list[tuple[int, int, int]] = []  # (task, prompt tokens, prompt ms x 100)
    releases: list[tuple[float, int]] = []
    for line in log.read_text(errors="replace").splitlines():
        ts, m = _TS.match(line), _SLOT.search(line)
        if not ts or not m:
            continue
        mi, sec, ms, us = (int(x) for x in ts.groups())
        t = mi * 60 + sec + ms / 1e3 + us / 1e6
        slot, task, rest = int(m.group(1)), int(m.group(2)), m.group(3)
        if rest.startswith("processing task"):
            launch[task] = t
        elif rest.startswith("stop processing"):
            releases.append((t, slot))
        elif (e := _EVAL.search(rest)) is not None:
            evals.append((task, int(e.group(2)), round(float(e.group(1)) * 100)))
    frame = pd.read_parquet(engine_dir / "requests.parquet", columns=["sent_s", "engine_prompt_n", "engine_prompt_ms"])
    first = frame.sort_values("sent_s").iloc[0]
    key = (int(first["engine_prompt_n"]), round(float(first["engine_prompt_ms"]) * 100))
    tasks = [task for task, n, ms in evals if (n, ms) == key]
    if not tasks:
        raise SystemExit(f"{engine_dir}: its first request is not in {log}")
    t0 = launch[tasks[-1] if len(tasks) == 1 else tasks[0]]
    last = {slot: t for t, slot in releases if t < t0}
    return sorted(range(slots), key=lambda s: (last.get(s, -1.0), -s))


SPEED_MIN_PROMPT = 128  # --round-speed: shorter prefill probes are mostly the client overhead


def round_speed(rd: dict, block: dict, state: dict, config) -> dict[str, float]:
    """One probe round's speed indices against a fitted profile block (1.0: as the profile says; see
    `--round-speed`). `state` is the callback's fitted state for that profile (client overhead, mixed factor)."""
    import numpy as np

    from harness.validation.calibrate import _decode_step, _time, mixed_parts, prefill_curve

    step, curve = _decode_step(block), prefill_curve(block["prefill"])
    overhead = state.get("client_overhead_s")
    factor = float(state.get("mixed_prompt_factor", 1.0))
    separate = bool(config.deployment.get("separate_passes", False))
    layout = bool(config.deployment.get("slot_layout", False))
    dec = [r["step_s"] / step(int(r["batch"]), float(r["context_tokens"])) for r in rd["decode"]]
    pre = [_time(r, overhead) / curve(int(r["input_tokens"])) for r in rd["prefill"]
           if r.get("role", "fit") == "fit" and int(r["input_tokens"]) >= SPEED_MIN_PROMPT]
    mix = []
    for r in rd.get("mixed", []):
        base, work = mixed_parts(block, int(r["decoders"]), int(r.get("prompts", 1)), int(r["input_tokens"]),
                                 separate=separate, layout=layout)
        mix.append(_time(r, overhead) / (base + factor * work))

    def med(v: list[float]) -> float:
        v = [x for x in v if np.isfinite(x)]
        return float(np.median(v)) if v else float("nan")

    return {"decode": med(dec), "prefill": med(pre), "mixed": med(mix)}


def engine_shift(first: Path, again: Path) -> dict[str, float]:
    """The engine's own clock, repeat / first run - 1 on the same workload: summed prompt_ms, and
    predicted_ms per decoded token after the first (measured on the validation workload: a diagnostic)."""
    cols = ["engine_prompt_ms", "engine_predicted_ms", "engine_predicted_n", "error"]
    a, b = (pd.read_parquet(d / "requests.parquet", columns=cols) for d in (first, again))
    a, b = a[a["error"].isna()], b[b["error"].isna()]

    def per_token(f: pd.DataFrame) -> float:
        return float(f["engine_predicted_ms"].sum() / (f["engine_predicted_n"] - 1).clip(lower=1).sum())

    return {"prefill": float(b["engine_prompt_ms"].sum() / a["engine_prompt_ms"].sum() - 1.0),
            "decode": per_token(b) / per_token(a) - 1.0}


def print_round_speed(sweep: Path, meta: dict, states: dict[str, dict], config) -> None:
    tags = [r["tag"] for r in meta["calibration"]["rounds"]]
    rounds = {t: json.loads((sweep / "calibration" / t / "probes.json").read_text()) for t in tags}
    for i, run in enumerate(meta["runs"]):
        tag = run["profile"]
        if tag == "start":
            print(f"load {i}: its prediction used the start round alone (no recalibration): nothing to compare")
            continue
        k = tags.index(f"after_{tag}")
        state = states[tag]
        block = next(iter(state["profiles"].values()))
        idx = {t: round_speed(rounds[t], block, state, config) for t in (tags[k - 1], tags[k])}
        line = "  ".join(f"{t}: decode x{v['decode']:.3f} prefill x{v['prefill']:.3f} mixed x{v['mixed']:.3f}"
                         for t, v in idx.items())
        print(f"load {i} (profile {tag}) probe rounds against it: {line}")
        if run.get("repeat_dir"):
            s = engine_shift(Path(run["engine_dir"]), Path(run["repeat_dir"]))
            b, a = idx[tags[k - 1]], idx[tags[k]]
            print(f"  engine's own clock, repeat vs first run: decode {s['decode']:+.1%}, prefill {s['prefill']:+.1%}; "
                  f"round after vs round before: decode {a['decode'] / b['decode'] - 1:+.1%}, "
                  f"prefill {a['prefill'] / b['prefill'] - 1:+.1%}, mixed {a['mixed'] / b['mixed'] - 1:+.1%}")


def refit(sweep: Path, meta: dict, config, fit_cache_save: bool, tile_tokens: int | None = None,
          tile_roles: list[str] | None = None) -> dict[str, dict]:
    """The callback's own fit of each tag from the saved probe rounds: {tag: state}."""
    tags = [r["tag"] for r in meta["calibration"]["rounds"]]
    rounds = [json.loads((sweep / "calibration" / t / "probes.json").read_text()) for t in tags]
    call = cb.ValidateCallback()
    call.url = str(meta.get("engine", {}).get("url", "replay"))
    with open_dict(config):
        config.experiment.calibration.fit_cache_save = bool(fit_cache_save)
        if tile_tokens is not None:
            config.deployment.tile_tokens = int(tile_tokens)
        if tile_roles:
            config.experiment.calibration.tile_roles = list(tile_roles)
    states = {}
    with tempfile.TemporaryDirectory(prefix="replay_") as tmp:
        call.sweep_dir = Path(tmp)  # the fit writes its profile.yaml here, not into the sweep
        for k, tag in enumerate(tags):
            fit_tag = "start" if tag == "start" else tag.replace("after_", "")
            use = [rounds[0]] if tag == "start" else rounds[k - 1:k + 1]
            call._fit(config, use, fit_tag)
            states[fit_tag] = dict(cb._STATE)
            states[fit_tag]["client_overhead_s"] = call.meta.get("client_overhead_s", {}).get(fit_tag)
    return states


def _tile(cfg, tile_tokens: int | None) -> None:
    """The emulator job's tile settings: `--tile-tokens` (else the sweep's own) and the refitted tile_fill."""
    if tile_tokens is not None:
        cfg.deployment.tile_tokens = int(tile_tokens)
    if int(cfg.deployment.get("tile_tokens") or 0):
        cfg.deployment.tile_fill = float(cb._STATE.get("tile_fill", 0.0))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=Path)
    parser.add_argument("--fit-cache-save", action="store_true")
    parser.add_argument("--slot-order", choices=("default", "engine"), default="default")
    parser.add_argument("--tile-tokens", type=int, default=None, help="deployment.tile_tokens (default: the sweep's)")
    parser.add_argument("--tile-roles", default=None, help="probe roles fit_tile uses, comma-separated (default tile)")
    parser.add_argument("--set", action="append", default=[], help="an override of the emulator's jobs")
    parser.add_argument("--round-speed", action="store_true",
                        help="print each probe round's speed against its load's profile (no emulator runs)")
    args = parser.parse_args()
    from harness.runs.assemble import run_into

    for sweep in args.sweeps:
        meta = json.loads((sweep / "validation.json").read_text())
        runs = meta["runs"]
        first = OmegaConf.load(Path(runs[0]["sim_dir"]) / ".hydra" / "config.yaml")
        roles = args.tile_roles.split(",") if args.tile_roles else None
        with open_dict(first):  # the calibration's own settings apply to the refit
            for item in args.set:
                key, value = item.split("=", 1)
                if key.startswith("experiment.calibration."):
                    OmegaConf.update(first, key, yaml.safe_load(value), force_add=True)
        states = refit(sweep, meta, first, args.fit_cache_save, args.tile_tokens, roles)
        if args.round_speed:
            print(f"== {sweep}: probe rounds' speed against each load's refitted profile")
            print_round_speed(sweep, meta, states, first)
            continue
        print(f"== {sweep} (--fit-cache-save {args.fit_cache_save}, --slot-order {args.slot_order}, "
              f"--tile-tokens {args.tile_tokens} --tile-roles {args.tile_roles}, {' '.join(args.set)})")
        cb._STATE.clear()
        cb._STATE.update(states["start"])
        with open_dict(first):
            first.deployment.cache_save_token_s = float(cb._STATE.get("cache_save_token_s", 0.0))
            _tile(first, args.tile_tokens)
            for item in args.set:
                key, value = item.split("=", 1)
                OmegaConf.update(first, key, yaml.safe_load(value), force_add=True)
        call = cb.ValidateCallback()
        call._capacity(first)
        print(f"capacity: the sweep's {meta['capacity_rps']:.3f} req/s, replayed {cb._STATE['capacity_rps']:.3f}")
        for i, run in enumerate(runs):
            cb._STATE.clear()
            cb._STATE.update(states[run["profile"]])
            cb._STATE["capacity_rps"] = meta["capacity_rps"]
            cfg = OmegaConf.load(Path(run["sim_dir"]) / ".hydra" / "config.yaml")
            with open_dict(cfg):
                cfg.deployment.cache_save_token_s = float(cb._STATE.get("cache_save_token_s", 0.0))
                _tile(cfg, args.tile_tokens)
                if args.slot_order == "engine":
                    cfg.deployment.slot_order = engine_slot_order(sweep / "engine.log", Path(run["engine_dir"]),
                                                                  int(cfg.deployment.slots))
                for item in args.set:
                    key, value = item.split("=", 1)
                    OmegaConf.update(cfg, key, yaml.safe_load(value), force_add=True)
                cfg.mode = "sim"
            with tempfile.TemporaryDirectory() as tmp:
                new = run_into(cfg, Path(tmp))
            measured = pd.read_parquet(Path(run["engine_dir"]) / "summary.parquet").iloc[0]
            before = pd.read_parquet(Path(run["sim_dir"]) / "summary.parquet").iloc[0]
            state = states[run["profile"]]
            print(f"load {i} ({run['load_rps']:.2f} req/s, fit {run['profile']}: cache_save "
                  f"{state.get('cache_save_token_s', 0.0) * 1e6:.2f} us/token, mixed "
                  f"{state.get('mixed_prompt_factor', 1.0):.3f}, wake {state.get('wake_s', 0.0) * 1e3:.1f} ms, "
                  f"tile fill {state.get('tile_fill', 0.0):.3f}"
                  + (f", slot order {cfg.deployment.slot_order}" if args.slot_order == "engine" else "") + ")")
            for metric, target in TARGETS.items():
                m, b, a = float(measured[metric]), float(before[metric]), float(new[metric])
                mark = "ok" if abs(a / m - 1) <= target else "MISS"
                print(f"  {metric:<15} measured {m:8.4f}  sweep's prediction {b:8.4f} ({b / m - 1:+6.1%})  "
                      f"replayed {a:8.4f} ({a / m - 1:+6.1%}) {mark}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
