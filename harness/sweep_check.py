"""Every job of a sweep composed and range-checked before the first one runs.

Hydra's sweeper composes every job before it launches any, so a bad override or an unknown option stops a
sweep at once; the harness's value ranges (`harness.schema.validate_config`) are otherwise checked by each
job as it starts, after the jobs before it have run. `SweepCheck` composes and checks each job when the
multirun starts, before the other callbacks (the planner) do anything: a job that cannot run ends the
command with one line naming that job's override, and no job runs. conf/hydra/callbacks/check.yaml puts
it first in `hydra.callbacks` for every command. The price is one composition per job (~0.2 s of CPU).

Hydra turns an `Exception` raised in a callback into a warning and goes on; the check stops the sweep
with `SweepRefused`, a `BaseException` (as SystemExit is) that carries the job's error to the command's
exit status and line (harness/hydra_entry.py).
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.errors import InputError


def sweep_overrides(config: DictConfig) -> tuple[list[str], dict[str, list[str]]]:
    """(fixed overrides, {swept key: values}) of a multirun, combined as Hydra's basic sweeper does:
    `hydra.sweeper.params` first, then the command line; the later override of a key wins. A swept key
    whose values cannot be listed (a `glob(...)` or an interval) has no values here."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = config.hydra.sweeper.get("params") or {}
    lines = [f"{key}={value}" for key, value in params.items()] + [str(o) for o in config.hydra.overrides.task]
    final = {o.get_key_element(): o for o in OverridesParser.create().parse_overrides(lines)}
    fixed = [str(o.input_line) for o in final.values() if not o.is_sweep_override()]
    swept = {key: (list(o.sweep_string_iterator()) if o.is_discrete_sweep() and "glob(" not in str(o.input_line)
                   else [])
             for key, o in final.items() if o.is_sweep_override()}
    return fixed, swept


def sweep_jobs(config: DictConfig) -> list[list[str]]:
    """Each job's overrides (the fixed ones, then one value of each listable swept key), in sweep order."""
    fixed, swept = sweep_overrides(config)
    listed = {key: values for key, values in swept.items() if values}
    return [[*fixed, *(f"{key}={value}" for key, value in zip(listed, values, strict=True))]
            for values in itertools.product(*listed.values())]


def job_label(overrides: list[str], message: str) -> str:
    """The job's overrides of the keys the message names (all its overrides if none does)."""
    named = [o for o in overrides
             if re.search(rf"(?<![\w.]){re.escape(o.split('=', 1)[0].lstrip('+~'))}(?![\w.])", message)]
    return " ".join(named or overrides)


class SweepRefused(BaseException):
    """A job of the sweep cannot run: `error` (an InputError, or Hydra's composition error) and the job's overrides."""

    def __init__(self, error: Exception, overrides: list[str]) -> None:
        super().__init__(str(error))
        self.error = error
        self.overrides = overrides


class SweepCheck(Callback):
    """At the start of a multirun, compose every job's config and check its values (InputError naming the
    job); a composition error (an unknown option in one job) is raised as Hydra raised it."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        from hydra import compose

        from harness.schema import validate_config

        name = config.hydra.job.config_name
        for overrides in sweep_jobs(config):
            try:
                validate_config(compose(config_name=name, overrides=overrides))
            except InputError as err:
                labelled = InputError(f"job {job_label(overrides, str(err))}: {err}")
                raise SweepRefused(labelled, overrides) from err
            except Exception as err:  # Hydra's composition errors; a bug is reported as the crash it is
                raise SweepRefused(err, overrides) from err
