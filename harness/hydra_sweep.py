"""A sweep composes each job's config once, not twice.

Hydra 1.3's sweepers call `validate_batch_is_legal` on each batch before launching it: that composes
every job's config (`ConfigLoaderImpl.load_sweep_config`) to report a bad override before any job
runs, and throws the configs away; the basic and Ray launchers then compose each job's config again
in this process (~0.2 s of CPU a job here, a sixth of a short sim job). While inside
`sweep_composes_once()`, a config composed for the validation is kept and handed, once, to the
launcher's call with the same loader, master config and overrides: the same inputs, so the same
config (its resolver cache included: `${now:}` resolves as the sweep did). Validation still composes
everything first (a bad override is still reported before any job runs). A config is kept pickled
(~40 KB, ~2 ms to pickle or unpickle, against ~400 KB as objects), at most `KEEP` at a time; a job
whose config was not kept is composed as before, as is every job of the joblib launcher (its workers
compose in their own processes).

`check` (harness.schema.validate_config for the harness's commands) runs on every config the validation
composes: a job whose values are out of range stops the sweep before any job runs, as a bad override
does, with one line naming the job's override of the key (or, if none names it, all its overrides).

`after_validation(line)`: a line for stderr from a callback that runs before the jobs are validated (the
planner's, at the sweep's start), held until the first batch is: a job that cannot run ends the command
with its own one line, and the held line (mostly the same bad override, seen first) is dropped.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import sys
from collections.abc import Callable, Iterator
from typing import Any

from harness.errors import InputError

KEEP = 256  # configs kept at once (~10 MB pickled); a larger batch composes its later jobs twice, as Hydra does


_held: list[list[str]] = []  # the lines held by each open sweep_composes_once (innermost last)


def after_validation(line: str) -> None:
    """Write `line` to stderr once the sweep's jobs are validated (now, outside a sweep)."""
    if _held:
        _held[-1].append(line)
    else:
        _write(line)


def _write(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _flush(held: list[str]) -> None:
    while held:
        _write(held.pop(0))


def _job(overrides: list[str], message: str) -> str:
    """The job's overrides of the keys the message names (all its overrides if none does)."""
    named = [o for o in overrides
             if re.search(rf"(?<![\w.]){re.escape(o.split('=', 1)[0].lstrip('+~'))}(?![\w.])", message)]
    return " ".join(named or overrides)


@contextlib.contextmanager
def sweep_composes_once(check: Callable[[Any], None] | None = None) -> Iterator[None]:
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.plugins.sweeper import Sweeper

    load = ConfigLoaderImpl.load_sweep_config
    validate = Sweeper.validate_batch_is_legal
    kept: dict[tuple[int, int, tuple[str, ...]], bytes] = {}
    validating = [False]

    def load_sweep_config(self: Any, master_config: Any, sweep_overrides: list[str]) -> Any:
        key = (id(self), id(master_config), tuple(sweep_overrides))
        if not validating[0]:
            stored = kept.pop(key, None)
            return pickle.loads(stored) if stored is not None else load(self, master_config, sweep_overrides)
        config = load(self, master_config, sweep_overrides)
        if check is not None:
            try:
                check(config)
            except InputError as err:
                raise InputError(f"job {_job(sweep_overrides, str(err))}: {err}") from err
        if key not in kept and len(kept) < KEEP:  # a repeated job composes its own copy later
            kept[key] = pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)
        return config

    def validate_batch_is_legal(self: Any, batch: Any) -> None:
        validating[0] = True
        try:
            validate(self, batch)
        finally:
            validating[0] = False
        _flush(held)

    held: list[str] = []
    _held.append(held)

    ConfigLoaderImpl.load_sweep_config = load_sweep_config  # type: ignore[method-assign]
    Sweeper.validate_batch_is_legal = validate_batch_is_legal  # type: ignore[method-assign]
    try:
        yield
        _flush(held)  # a sweeper that validates nothing: the lines come when the sweep ends
    finally:
        _held.remove(held)
        ConfigLoaderImpl.load_sweep_config = load  # type: ignore[method-assign]
        Sweeper.validate_batch_is_legal = validate  # type: ignore[method-assign]
        kept.clear()
