"""`python -m harness -m experiment=validate_engine`: predict a real engine, then measure it.

The suite's jobs are the emulator's runs (sim mode, `deployment=aggregated`), one per load in
`experiment.load_fraction`; this Hydra callback does the rest around them, in order:

1. start the engine (llama-server built by `make engine`) unless `target.url` names one;
2. calibration: the profile file `experiment.profile` (e.g. from harness-profile), or else the
   built-in probe calibration (`calibrate.py`): probe prompts only, never the validation workload;
   every probe round and fit is written to `<sweep>/calibration/<tag>/`;
3. the emulator's capacity on the validation workload (a sim saturation run with the first fit),
   so the loads are fractions of what the emulator predicts it can carry;
4. for each load, before its sim job: the engine at that load (`mode=url`, run directory
   `<sweep>/engine/load<i>`), so engine and emulator runs interleave; with
   `experiment.repeat_engine`, the engine runs the same workload a second time right after
   (`<sweep>/engine/load<i>_repeat`, hash ids moved so nothing is cached): its engine-vs-engine
   differences sit beside the emulator's errors (validation.parquet `repeat`, `repeat_rel_diff`); with
   `experiment.recalibrate`, a probe round follows each engine run and that load's emulator run
   uses the fit of the two probe rounds around it (the machine's speed drifts within minutes);
5. at the end: `validation.parquet` (load_rps, metric, measured, predicted, rel_error),
   `validation.json` (the profiles, their calibration provenance, capacity, run directories) and
   `ttft_cdf.png`.

The jobs read the calibrated profile and their rate through resolvers (harness/validation/resolvers.py:
`${validate_profiles:}`, `${validate_rate:<fraction>}`, ...), set in step 2 and 3.
"""

from __future__ import annotations

import atexit
import copy
import json
import math
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict

from harness.errors import EXIT_BAD_INPUT, InputError, path_error
from harness.validation.resolvers import STATE as _STATE  # registers the suite's resolvers too
from harness.validation.resolvers import load_rate

if TYPE_CHECKING:
    from harness.engine.server import EngineServer

REPEAT_ID_SHIFT = 5_000_000  # experiment.repeat_engine: the repeat's hash ids (loads are 10^9 apart)


def _task_cfg(config: DictConfig) -> DictConfig:
    cfg = copy.deepcopy(config)
    with open_dict(cfg):
        cfg.pop("hydra", None)
    return cfg


class ValidateCallback(Callback):
    def __init__(self) -> None:
        self.engine: EngineServer | None = None
        self.url = ""
        self.sweep_dir = Path(".")
        self.runs: list[dict[str, Any]] = []
        self.rounds: list[dict] = []  # probe rounds, in time order
        self.meta: dict[str, Any] = {}

    # -- before the jobs ----------------------------------------------------------------------
    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._prepare(config)
        except InputError as err:  # Hydra turns a callback's exception into a warning: stop here instead
            self._abort(f"error: {err}", EXIT_BAD_INPUT)
        except Exception as err:
            line = path_error(err) if isinstance(err, OSError) else None
            if line is not None:  # the sweep directory cannot be written (read-only, full): bad input
                self._abort(f"error: {line}", EXIT_BAD_INPUT)
            self._abort(f"error: validate_engine could not start: {type(err).__name__}: {err}", 1)

    def _abort(self, message: str, status: int) -> None:
        if self.engine is not None:
            self.engine.stop()
        print(message, file=sys.stderr, flush=True)
        raise SystemExit(status)

    def _prepare(self, config: DictConfig) -> None:
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        self.url = str(config.target.url) if config.target.url else ""
        nice = config.experiment.engine.get("nice")
        if nice is not None:  # before the engine starts: it inherits this process's niceness
            from harness.engine.server import set_niceness

            self.meta["nice"] = set_niceness(int(nice), "experiment.engine.nice")
        from harness.validation.cpus import resolve

        setting = config.experiment.engine.get("cpus")
        cpus = resolve(setting, int(config.experiment.engine.get("threads") or 1), "experiment.engine.cpus")
        if self.url and cpus is not None and setting != "auto":
            raise InputError("experiment.engine.cpus pins an engine this run starts; target.url names one "
                             "already running: pin it yourself (taskset) or set experiment.engine.cpus=null")
        from harness.validation.coverage import check_engine, check_probe_design

        check_engine(config)
        if not config.experiment.get("profile"):  # the built-in probes must cover what is predicted: before the engine
            check_probe_design(config)
        if self.url:
            self.meta["engine"] = {"url": self.url, "started_here": False}
        else:
            self._start_engine(config, cpus)
        print(f"engine at {self.url}", flush=True)
        self._calibrate(config)
        self._capacity(config)

    def _start_engine(self, config: DictConfig, cpus: list[int] | None) -> None:
        from harness.engine.build import BuildError, ensure_engine
        from harness.engine.server import start_server

        eng = config.experiment.engine
        if eng.binary and eng.model:
            binary, model, version = Path(str(eng.binary)), Path(str(eng.model)), "given"
            for key, path in (("binary", binary), ("model", model)):
                if not path.is_file():
                    raise InputError(f"experiment.engine.{key}={path}: no such file")
        else:
            try:
                built = ensure_engine()  # cached by `make engine`; builds (~10 min) when missing
            except BuildError as err:
                raise InputError(f"experiment=validate_engine: no engine ({err}); run `make engine` or set "
                                 f"target.url=http://HOST:PORT") from err
            binary, model, version = built.binary, built.model, built.version
        extra = ["-b", str(int(eng.batch_tokens))] if eng.batch_tokens else []
        if eng.get("cache_ram_mib") is not None:  # llama-server's host-memory prompt cache (its default: 8,192 MiB)
            extra += ["--cache-ram", str(int(eng.cache_ram_mib))]
        self.engine = start_server(binary, model, self.sweep_dir / "engine.log", slots=int(config.deployment.slots),
                                   threads=int(eng.threads), context=int(eng.context_tokens), extra=extra)
        atexit.register(self.engine.stop)  # whatever ends the run, the engine goes with it
        self.url = self.engine.url
        self.meta["engine"] = {"binary": str(binary), "model": str(model), "version": version,
                               "args": self.engine.args, "started_here": True}
        if cpus:  # the engine on its CPUs, this process (load generator, probes, emulator) on the others
            from harness.validation.cpus import pin_apart

            placed = self.meta["engine"]["cpus"] = pin_apart(self.engine.process.pid, cpus, "experiment.engine.cpus")
            print(f"engine on CPUs {placed['engine']}, the harness on {placed['harness']}", flush=True)
        else:
            print(f"engine and harness placed by the scheduler (experiment.engine.cpus={eng.get('cpus')})", flush=True)

    def _calibrate(self, config: DictConfig) -> None:
        exp = config.experiment
        hw = str(config.deployment.hardware.name)
        out = self.sweep_dir / "calibration"
        out.mkdir(exist_ok=True)
        if exp.profile:
            path = Path(str(exp.profile))
            if not path.is_file():
                raise InputError(f"experiment.profile={path}: no such file (a model YAML with profiles.{hw})")
            node = yaml.safe_load(path.read_text()) or {}
            profiles = node.get("profiles") or {}
            if hw not in profiles:
                raise InputError(f"experiment.profile={path}: no profiles.{hw} block; it has {sorted(profiles)}")
            self.meta["calibration"] = {"source": "profile file", "profile_file": str(path.resolve()),
                                        "validation_workload_used": False,
                                        "provenance": {k: profiles[hw].get(k, {}).get("provenance", "")
                                                       for k in ("prefill", "decode")}}
            _STATE["profiles"] = {hw: profiles[hw]}
        else:
            self.meta["calibration"] = {"source": "built-in probes (harness/validation/calibrate.py)",
                                        "probe_lengths": list(exp.calibration.lengths),
                                        "decode_batches": list(exp.calibration.batches),
                                        "decode_prompt_tokens": list(exp.calibration.decode_prompts),
                                        "recalibrate": bool(exp.recalibrate), "validation_workload_used": False,
                                        "rounds": []}
            self._probe_round(config, "start")
            self._fit(config, [self.rounds[0]], "start")
        self.meta["profile_file"] = str(out / "start" / "profile.yaml") if not exp.profile else str(exp.profile)

    def _probe_round(self, config: DictConfig, tag: str) -> None:
        """Probe the engine now (probe prompts only); the raw rows go to calibration/<tag>/probes.json."""
        from harness.validation.probes import probe

        cal = config.experiment.calibration
        t0 = time.monotonic()
        raw = probe(self.url, cal, config.target, config.loadgen, block_tokens=int(config.workload.block_tokens),
                    seed=int(cal.seed) + len(self.rounds), max_sequences=int(config.deployment.slots),
                    engine=config.get("engine"))
        out = self.sweep_dir / "calibration" / tag
        out.mkdir(parents=True, exist_ok=True)
        (out / "probes.json").write_text(json.dumps(raw, indent=1))
        self.rounds.append(raw)
        self.meta["calibration"]["rounds"].append({"tag": tag, "wall_s": time.monotonic() - t0,
                                                   "at": time.strftime("%H:%M:%SZ", time.gmtime())})

    def _fit(self, config: DictConfig, rounds: list[dict], tag: str) -> None:
        from harness.validation.calibrate import (
            checks,
            client_overhead,
            fit,
            fit_cache_save,
            fit_mixed,
            fit_prefix_attention,
            fit_tile,
            fit_wake,
            prefill_curve,
            prefill_rows,
        )
        from harness.validation.compare import check_lines

        cal = config.experiment.calibration
        clock = str(cal.get("clock", "server"))
        if clock not in ("server", "client"):
            raise InputError(f"experiment.calibration.clock={clock!r}; valid: server, client")
        layout = bool(config.deployment.get("slot_layout", False))
        save = 0.0
        if layout and clock == "server" and bool(cal.get("fit_cache_save", False)):
            save, intercept, pairs = fit_cache_save(rounds)
            self.meta.setdefault("cache_save_token_s", {})[tag] = {
                "value": save, "intercept_s": intercept, "pairs": pairs,
                "provenance": "[M] Theil-Sen slope of client TTFT - the engine's prompt_ms of back-to-back prefill "
                              f"probes against the tokens the probe before left on its slot, probe rounds {tag}"}
            print(f"[{tag}] prompt cache save at launch: {save * 1e6:.2f} us per token copied (client's own part "
                  f"{intercept * 1e3:.1f} ms, {pairs} probes)", flush=True)
        _STATE["cache_save_token_s"] = save
        engine = (config.get("engine") or {}).get("name", "llama_server")
        profiles = fit(rounds, hardware=str(config.deployment.hardware.name), slots=int(config.deployment.slots),
                       source=f"{engine} at {self.url}, probe rounds {tag}", decode_kind=str(cal.decode_kind),
                       prefill_kind=str(cal.prefill_kind),
                       knots=[int(k) for k in cal.knots] if cal.get("knots") else None, clock=clock,
                       save_token_s=save)
        _STATE["profiles"] = profiles
        block = next(iter(profiles.values()))
        if clock == "server":
            overhead = client_overhead(prefill_rows(rounds), save)
            self.meta.setdefault("client_overhead_s", {})[tag] = overhead
            print(f"[{tag}] client overhead over the engine's prompt time: {overhead * 1e3:.1f} ms", flush=True)
        tile_tokens = int(config.deployment.get("tile_tokens") or 0)
        ubatch = int(config.deployment.get("ubatch_tokens") or 512)
        fill = 0.0
        if tile_tokens:
            roles = tuple(str(r) for r in (cal.get("tile_roles") or ["tile"]))
            fill, tile_rows = fit_tile(rounds, prefill_curve(block["prefill"]), tile_tokens=tile_tokens,
                                       ubatch_tokens=ubatch, roles=roles,
                                       overhead=client_overhead(prefill_rows(rounds), save) if clock == "server"
                                       else None)
            self.meta.setdefault("tile_fill", {})[tag] = {
                "value": fill, "by_length": tile_rows,
                "provenance": f"[M] relative least squares of back-to-back probes off the {tile_tokens}-token "
                              f"attention tiles (roles {list(roles)}) beyond the curve's step from the fitted "
                              f"length below each, against their padded rows' work, probe rounds {tag}"}
            print(f"[{tag}] partial attention tile ({tile_tokens} rows): x{fill:.3f} of the padded rows' work "
                  + ", ".join(f"{r['input_tokens']} tok {r['rel_error']:+.1%}" for r in tile_rows), flush=True)
        _STATE["tile_fill"] = fill
        gamma, residual = fit_prefix_attention(rounds, prefill_curve(block["prefill"]))
        _STATE["prefix_attention"] = gamma
        self.meta.setdefault("prefix_attention", {})[tag] = {
            "value": gamma, "relative_rms_residual": residual,
            "provenance": "[M] fitted to TTFT of new tokens on a cached probe prefix "
                          f"({list(cal.cached_prefixes)} x {list(cal.cached_new)} tokens), probe rounds {tag}"}
        wake, wake_rows = fit_wake(rounds, prefill_curve(block["prefill"]), save)
        _STATE["wake_s"] = wake
        self.meta.setdefault("wake_s", {})[tag] = {
            "value": wake, "by_length": wake_rows,
            "provenance": f"[M] median over {[r['input_tokens'] for r in wake_rows]} tokens of (TTFT after "
                          f"{cal.get('idle', {}).get('gap_s')} s idle - the back-to-back curve), probe rounds {tag}"}
        print(f"[{tag}] wake from idle: {wake * 1e3:.1f} ms", flush=True)
        separate = bool(config.deployment.get("separate_passes", False))
        form = ("separate passes" if separate else "one shared pass") + (", decode ubatches by slot layout"
                                                                         if layout else "")
        mixed, mixed_rms = (fit_mixed(rounds, block, separate=separate, clock=clock, layout=layout, save_token_s=save)
                            if cal.get("fit_mixed", True) else (1.0, math.nan))
        _STATE["mixed_prompt_factor"] = mixed
        self.meta.setdefault("mixed_prompt_factor", {})[tag] = {
            "value": mixed, "relative_rms_residual": mixed_rms, "step_form": form,
            "provenance": "[M] fitted to TTFT of probe prompts sent together beside decoding probe streams "
                          f"({dict(cal.get('mixed') or {})}; step form: {form}), probe rounds {tag}"}
        print(f"[{tag}] prompt work beside decodes ({form}): x{mixed:.3f} (relative RMS {mixed_rms:.3f})",
              flush=True)
        found = checks(rounds, block, separate=separate, clock=clock, layout=layout, save_token_s=save,
                       tile=(fill, tile_tokens, ubatch))
        self.meta.setdefault("checks", {})[tag] = found
        for line in check_lines(found, form):
            print(f"[{tag}] {line}", flush=True)
        out = self.sweep_dir / "calibration" / tag
        out.mkdir(parents=True, exist_ok=True)
        (out / "profile.yaml").write_text(yaml.safe_dump({"profiles": profiles}, sort_keys=False))
        self.meta.setdefault("profiles", {})[tag] = profiles

    def _capacity(self, config: DictConfig) -> None:
        from harness.runs.sim import run_sim

        cfg = _task_cfg(config)
        with open_dict(cfg):
            cfg.loadgen.rate_rps = None
            cfg.loadgen.concurrency = int(cfg.experiment.saturation_concurrency)
            cfg.loadgen.progress = False
        result = run_sim(cfg)
        frame = result.requests
        done = frame[frame["error"].isna()]
        span = float(done["finish_s"].max())
        _STATE["capacity_rps"] = float(len(done) / span) if span > 0 else math.nan
        self.meta["capacity_rps"] = _STATE["capacity_rps"]
        self.meta["capacity_run"] = {"concurrency": int(cfg.loadgen.concurrency), "requests": len(frame)}
        print(f"emulator capacity on this workload: {_STATE['capacity_rps']:.3f} req/s", flush=True)

    # -- around each job ----------------------------------------------------------------------
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        fraction = float(config.experiment.load_fraction)
        index = len(self.runs)
        cfg = _task_cfg(config)
        with open_dict(cfg):
            cfg.mode = "url"
            cfg.target.url = self.url
            cfg.target.name = "engine"
            cfg.loadgen.progress = False
            cfg.analysis.figures = False
        out = self._engine_pass(config, cfg, f"load{index}", f"run at {fraction:g} of capacity")
        run = {"load_fraction": fraction, "load_rps": load_rate(fraction), "engine_dir": str(out),
               "sim_dir": str(config.hydra.runtime.output_dir), "profile": "start"}
        if bool(config.experiment.get("repeat_engine", False)):
            # The same workload again (same seed, rate, lengths, sharing), its hash ids moved so the
            # engine's prefix cache holds none of them: how far the engine differs from itself.
            rcfg = copy.deepcopy(cfg)
            with open_dict(rcfg):
                rcfg.workload.id_offset = int(rcfg.workload.id_offset) + REPEAT_ID_SHIFT
            again = self._engine_pass(config, rcfg, f"load{index}_repeat", f"repeat run at {fraction:g} of capacity")
            run["repeat_dir"] = str(again)
        if self.rounds and bool(config.experiment.recalibrate):
            # Probes again after this load; the emulator's run for it uses the probes that bracket it
            # in time (before and after), so machine drift moves prediction and measurement alike.
            tag = f"load{index}"
            self._probe_round(config, f"after_{tag}")
            self._fit(config, self.rounds[-2:], tag)
            run["profile"] = tag
        self.runs.append(run)

    def _engine_pass(self, config: DictConfig, cfg: DictConfig, name: str, what: str) -> Path:
        """One run of the engine (url mode) into `<sweep>/engine/<name>`, its slots reset first."""
        from harness.runs.assemble import run_into

        out = self.sweep_dir / "engine" / name
        out.mkdir(parents=True, exist_ok=True)
        self._reset_slots(config)
        try:
            run_into(cfg, out)
        except Exception as err:
            self._abort(f"error: the engine's {what} failed: {type(err).__name__}: {err}", 1)
        return out

    def _reset_slots(self, config: DictConfig) -> None:
        """`experiment.reset_slots`: before an engine run, its slots least recently used in the order the
        emulator's fresh instance takes them (`probes.reset_slots`), so both runs start alike."""
        if not bool(config.experiment.get("reset_slots", False)) or not bool(config.deployment.get("slot_layout")):
            return
        from harness.validation.probes import reset_slots

        reset_slots(self.url, config.target, config.loadgen, slots=int(config.deployment.slots),
                    block_tokens=int(config.workload.block_tokens), seed=int(config.experiment.calibration.seed) + 7)

    # -- after --------------------------------------------------------------------------------
    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.validation.compare import write_validation

        if self.engine is not None:
            self.engine.stop()
        if not self.runs:
            return
        table = write_validation(self.sweep_dir, self.runs, self.meta,
                                 cast(dict[str, Any], OmegaConf.to_container(config.experiment)))
        print(table, flush=True)
