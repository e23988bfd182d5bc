"""`harness-profile`'s settings checked before anything is sent: one InputError naming the key and the
valid choices or range, so a bad design fails at once instead of after minutes of probing.

`check_design(cfg)` needs no server. `check_against_server(cfg, info)` is what needs the server's own
answer (its declared slots, its model file): called once /v1/models and /props have answered, before
the first completion is sent.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.engine.schema import TIMINGS
from harness.errors import InputError, choices, require
from harness.profiling.writer import ARCH_KEYS, check_architecture

CLOCKS = ("server", "client", "cpu")
DECODE_KINDS = ("per_batch", "linear")
PREFILL_DEGREE = 2  # the prefill fit is a quadratic: more than 2 distinct fitted lengths
_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")


def hardware_options() -> list[str]:
    """The hardware configs a profile can be checked on (conf/hardware/*.yaml)."""
    from harness.hydra_entry import CONF_DIR

    return sorted(p.stem for p in (Path(CONF_DIR) / "hardware").glob("*.yaml"))


def _ints(node: Any, key: str, low: int, *, empty: bool) -> list[int]:
    values = OmegaConf.to_container(node) if OmegaConf.is_config(node) else node
    ok = isinstance(values, list) and (empty or values) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= low for v in values)
    require(bool(ok), f"{key} must be a {'' if empty else 'non-empty '}list of integers >= {low}, got {values!r}")
    return list(values) if isinstance(values, list) else []


def _at_least(value: Any, low: int, key: str) -> None:
    require(isinstance(value, int) and not isinstance(value, bool) and value >= low,
            f"{key} must be an integer >= {low}, got {value!r}")


def check_design(cfg: DictConfig) -> None:
    """Every `profile.*` and `seed` setting the probes, the fits and the writer read."""
    p = cfg.profile
    require(p.clock in CLOCKS, f"profile.clock={p.clock!r}; valid: {choices(CLOCKS)}")
    require(p.clock != "cpu" or p.engine_pid is not None,
            "profile.clock=cpu needs profile.engine_pid (the local engine's pid)")
    name = str(p.name)
    require(bool(_PLAIN_NAME.fullmatch(name)) and name not in (".", ".."),
            f"profile.name={name!r} must be a plain file name (letters, digits, '.', '_', '-'; no '/'): the model "
            f"config is written as <profile.out_dir or the run dir>/model/<profile.name>.yaml")
    hardware = hardware_options()
    require(str(p.hardware) in hardware, f"profile.hardware={p.hardware!r}: no conf/hardware/{p.hardware}.yaml to "
                                         f"check the profile on; valid: {choices(hardware)}")
    require(p.decode.kind in DECODE_KINDS, f"profile.decode.kind={p.decode.kind!r}; valid: {choices(DECODE_KINDS)}")
    _at_least(cfg.seed, 0, "seed")
    require(p.slots is None or (isinstance(p.slots, int) and p.slots >= 1),
            f"profile.slots must be an integer >= 1 or null (the server's own, else probed), got {p.slots!r}")
    require(p.tolerance > 0, f"profile.tolerance must be > 0, got {p.tolerance!r}")
    engine = cfg.get("engine") or {}
    require(str(engine.get("timings", "engine")) in TIMINGS,
            f"engine.timings={engine.get('timings')!r}; valid: {choices(TIMINGS)}")
    require(not p.decode.get("pin_slots", False) or bool((engine.get("request") or {}).get("id_slot", True)),
            f"profile.decode.pin_slots=true needs an engine that takes `id_slot` (llama.cpp); engine="
            f"{engine.get('name')} does not (engine.request.id_slot=false): set profile.decode.pin_slots=false")

    lengths = _ints(p.prefill.lengths, "profile.prefill.lengths", 1, empty=False)
    require(len(set(lengths)) > PREFILL_DEGREE,
            f"profile.prefill.lengths needs more than {PREFILL_DEGREE} distinct lengths (the prefill fit is "
            f"c0 + c1*l + c2*l^2), got {lengths}")
    _at_least(p.prefill.repeats, 1, "profile.prefill.repeats")
    _ints(p.prefill.holdout_lengths, "profile.prefill.holdout_lengths", 1, empty=True)
    _at_least(p.prefill.holdout_repeats, 0, "profile.prefill.holdout_repeats")

    _ints(p.cached.prefix_tokens, "profile.cached.prefix_tokens", 1, empty=True)
    _ints(p.cached.new_tokens, "profile.cached.new_tokens", 1, empty=True)
    _at_least(p.cached.repeats, 0, "profile.cached.repeats")

    dd = p.decode
    _ints(dd.prompt_tokens, "profile.decode.prompt_tokens", 1, empty=False)
    _at_least(dd.output_tokens, 8, "profile.decode.output_tokens")  # a step is timed from the gaps
    _at_least(dd.repeats, 1, "profile.decode.repeats")
    for key in ("batches", "holdout_batches"):
        if dd[key] is not None:
            _ints(dd[key], f"profile.decode.{key}", 1, empty=key == "holdout_batches")
    if p.slots is not None:  # else checked once the server says (or probing finds) its slots
        from harness.profiling.experiment import decode_batches

        decode_batches(int(p.slots), dd.batches, dd.holdout_batches)

    sp = p.slot_probe
    _at_least(sp.max_concurrency, 1, "profile.slot_probe.max_concurrency")
    _at_least(sp.prompt_tokens, 1, "profile.slot_probe.prompt_tokens")
    _at_least(sp.output_tokens, 2, "profile.slot_probe.output_tokens")

    if p.architecture is not None:
        architecture(p.architecture)


def architecture(node: Any) -> dict[str, Any]:
    """profile.architecture as a dict: every key present, each a number > 0."""
    arch = check_architecture(OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node)
    for key in ARCH_KEYS:
        value = arch[key]
        require(isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0,
                f"profile.architecture.{key} must be a number > 0, got {value!r}")
    return arch


def check_against_server(cfg: DictConfig, info: dict[str, Any]) -> None:
    """What needs the server's answer: its model file when profile.architecture is not given, and the
    decode batch sizes against the slots it declares."""
    p = cfg.profile
    if p.architecture is None:
        path = info.get("model_path")
        require(path is not None and bool(path) and Path(str(path)).is_file(),
                f"profile.architecture is not set and the server's model file ({path}) is not on this machine; "
                f"give profile.architecture={{hidden_size: ..., layers: ..., q_heads: ..., kv_heads: ..., "
                f"head_dim: ..., params_b: ..., weight_dtype_bytes: ..., kv_dtype_bytes: ...}}")
    slots = p.slots or info.get("declared_slots")
    if slots is not None:
        from harness.profiling.experiment import decode_batches

        try:
            decode_batches(int(slots), p.decode.batches, p.decode.holdout_batches)
        except InputError as err:
            raise InputError(f"{err}; {slots} slots declared by {info.get('url')}") from None
