"""The validate_engine suite's shared state and the config resolvers its jobs read it through.

The suite (harness/validation/callback.py) measures the engine's capacity and calibrates a profile before
its jobs run; each job's config asks for them by resolver (`${validate_rate:0.6}`, `${validate_profiles:}`,
...: conf/experiment/validate_engine.yaml). Importing this module registers the resolvers.
"""

from __future__ import annotations

import copy
from typing import Any

from omegaconf import OmegaConf

from harness.errors import InputError

STATE: dict[str, Any] = {}  # what the suite measured so far: capacity_rps, profiles, fitted knobs


def load_rate(fraction: Any) -> float:
    if "capacity_rps" not in STATE:
        raise InputError("experiment=validate_engine is a suite: run it with -m (python -m harness -m "
                         "experiment=validate_engine); its rates are fractions of a capacity measured first")
    return float(float(fraction) * STATE["capacity_rps"])


def _profiles() -> dict:
    if "profiles" not in STATE:
        raise InputError("experiment=validate_engine: no calibrated profile yet (run the suite with -m)")
    return copy.deepcopy(STATE["profiles"])


def _prefix_attention() -> float:
    return float(STATE.get("prefix_attention", 1.0))


def _wake() -> float:
    return float(STATE.get("wake_s", 0.0))


def _mixed() -> float:
    return float(STATE.get("mixed_prompt_factor", 1.0))


def _cache_save() -> float:
    return float(STATE.get("cache_save_token_s", 0.0))


def _tile_fill() -> float:
    return float(STATE.get("tile_fill", 0.0))


def _offset(fraction: Any) -> int:
    """Hash ids of each load's prompts start here: loads share no prompt on the same engine."""
    return round(float(fraction) * 1000) * 10_000_000


for _name, _fn in (("validate_rate", load_rate), ("validate_profiles", _profiles), ("validate_offset", _offset),
                   ("validate_prefix_attention", _prefix_attention), ("validate_wake", _wake),
                   ("validate_mixed", _mixed), ("validate_cache_save", _cache_save),
                   ("validate_tile_fill", _tile_fill)):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _fn)
