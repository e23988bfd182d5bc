"""The emulator's model of the PD testbed, from the testbed's probe results: a list of Hydra overrides.

The testbed's probes measure what the emulator needs to predict it (never on the validation workload):
how the KV is handed off, what a save and a restore cost per request, the bytes a saved KV puts on the
link, the link's goodput and how it shares, and each engine's prefill curve and decode step. Their
results, keyed by the emulator's own option names, become the overrides of a calibrated run:

    from harness.testbed_model import overrides
    args = overrides({"deployment.kv_save_s": {"base_s": 0.003, "per_token_s": 6e-6}, "link.efficiency": 0.956,
                      "prefill": {"kind": "polynomial", "coefficients": [0.01, 2.5e-4, 1.6e-7]}})
    # python -m harness experiment=testbed_scale deployment=prfaas_pd <args> ...

Keys: the options (`OPTIONS`), each with the value its config takes (a mapping for the cost and bytes
nodes), and `prefill` / `decode`: fits in the model config's profile format (`model.profiles.<hardware>`),
whose keys are set one by one (so give the kind the profile already has, with its keys). Anything else
is bad input: one line naming the key and the valid ones.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

from harness.errors import InputError

OPTIONS = ("deployment.kv_handoff", "deployment.kv_save_s", "deployment.kv_restore_s",
           "deployment.kv_bytes_overhead", "link.efficiency", "link.sharing")
PROFILE_FITS = ("prefill", "decode")

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")


def _value(key: str, value: Any) -> str:
    """One value in Hydra's override grammar."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"testbed probe {key}: {value!r} is not a finite number")
        return repr(value)
    if isinstance(value, str):
        if _BARE.fullmatch(value) and value not in ("null", "true", "false"):
            return value
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_value(key, v) for v in value) + "]"
    raise InputError(f"testbed probe {key}: cannot write {type(value).__name__} {value!r} as an override value")


def _flat(path: str, value: Any) -> Iterator[str]:
    if isinstance(value, Mapping):
        for name, sub in value.items():
            yield from _flat(f"{path}.{name}", sub)
    else:
        yield f"{path}={_value(path, value)}"


def overrides(probes: Mapping[str, Any], *, hardware: str = "cpu_local") -> list[str]:
    """The Hydra overrides that make the emulator model the probed testbed (in the order of `probes`).

    `hardware` names the profile the fits replace (`model.profiles.<hardware>`; the testbed's engines run
    on `cpu_local`)."""
    out: list[str] = []
    for key, value in probes.items():
        if key in OPTIONS:
            out.extend(_flat(key, value))
        elif key in PROFILE_FITS:
            if not isinstance(value, Mapping):
                raise InputError(f"testbed probe {key}: a profile fit is a mapping (model.profiles.{hardware}.{key}), "
                                 f"got {value!r}")
            out.extend(_flat(f"model.profiles.{hardware}.{key}", value))
        else:
            raise InputError(f"testbed probe {key!r} is not an emulator option; valid keys: "
                             f"{', '.join(OPTIONS + PROFILE_FITS)}")
    return out
