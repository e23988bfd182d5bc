"""`experiment.engine.cpus`: the engine on its own CPUs, the harness (load generator, probes) on the others
(`auto`: the engine on the last CPUs this process may use, one per engine thread, when any are left).

On a 2-vCPU machine, with nothing pinned, the scheduler now and then runs the load generator on the
vCPU where llama-server decodes (its client wakes at every streamed token). Measured on one (engine's own
per-token step of 4 streams on slots 0-3, 128-token prompts, 200 tokens out, engine 1 thread, nice -10,
alternating 8 times; docs/results/engine-validation.md): client on the engine's vCPU 9.26 ms
median (8.50-11.04), on the other vCPU 8.36 ms (8.20-8.74); which vCPU the engine had made no difference
(8.39 vs 8.32 ms, unpinned 8.60). The client's own CPU per request rose with it (~90 vs ~79 ms a run), as
it did in the validation sweeps' slow engine passes. Pinning both apart keeps that placement fixed for the
probes and the validation runs alike.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from harness.errors import InputError, choices, require


def resolve(setting: Any, threads: int, key: str) -> list[int] | None:
    """The engine's CPUs for `experiment.engine.cpus`: null -> None (the scheduler places both); a list ->
    those CPUs; `auto` -> the last `threads` CPUs this process may use, when at least one is left for the
    harness (else None: nothing to keep apart on one CPU). Anything else: InputError naming the choices."""
    if setting is None or setting is False:
        return None
    if isinstance(setting, str):
        require(setting == "auto", f"{key}={setting!r}; valid: null, auto or a list of CPU numbers")
        allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
        return allowed[-threads:] if len(allowed) > threads >= 1 else None
    try:
        return [int(c) for c in setting]
    except (TypeError, ValueError):
        raise InputError(f"{key}={setting!r}; valid: null, auto or a list of CPU numbers") from None


def _threads(pid: int | str) -> list[int]:
    return [int(t) for t in os.listdir(f"/proc/{pid}/task")]


def pin_apart(pid: int, engine_cpus: Sequence[int], key: str) -> dict[str, list[int]]:
    """Every thread of process `pid` (the engine) onto `engine_cpus`, every thread of this process onto
    the CPUs it may use besides those (threads started later inherit their creator's set). Returns the two
    sets. InputError (one line, naming `key`) for a CPU this process may not use or a set leaving none."""
    require(hasattr(os, "sched_setaffinity"), f"{key}: CPU affinity is not available on this system; set {key}=null")
    allowed = sorted(os.sched_getaffinity(0))
    engine = sorted({int(c) for c in engine_cpus})
    bad = [c for c in engine if c not in allowed]
    require(bool(engine) and not bad, f"{key}={list(engine_cpus)}: CPU {bad or '(none)'} is not one this process may "
                                      f"use; valid: {choices(allowed)}")
    rest = [c for c in allowed if c not in engine]
    require(bool(rest), f"{key}={engine}: leaves no CPU for the load generator; this process may use "
                        f"{choices(allowed)}")
    for target, cpus in ((pid, engine), ("self", rest)):
        for tid in _threads(target):
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:  # the thread ended meanwhile
                continue
            except OSError as err:
                raise InputError(f"{key}={engine}: cannot set CPU affinity ({err.strerror or err}); "
                                 f"set {key}=null") from err
    return {"engine": engine, "harness": rest}
