"""Run a Hydra task so that configuration mistakes exit with status 2, not 1.

Hydra reports composition errors (unknown key, wrong type, unknown option of a group) as one
line and exits 1, the same status as a crash inside the task. Users and CI need to tell the two
apart, so we note when the task body starts: an exit before that point is a config error.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from harness.errors import EXIT_BAD_INPUT, exits_on_input_error
from harness.fast_help import help_text, wants_help
from harness.resources import conf_dir

if TYPE_CHECKING:
    from omegaconf import DictConfig

CONF_DIR = str(conf_dir())  # inside the installed package, else the source tree's conf/


def hydra_entry(config_name: str = "config") -> Callable[[Callable[[DictConfig], Any]], Callable[[], None]]:
    """Wrap `task(cfg)` as a console-script `main()` with Hydra's CLI (overrides, -m, --help)."""

    def decorate(task: Callable[[DictConfig], Any]) -> Callable[[], None]:
        started = False

        @functools.wraps(task)
        def body(cfg: DictConfig) -> Any:
            nonlocal started
            started = True
            from harness.schema import register_configs  # noqa: F401  (schemas already stored)

            return exits_on_input_error(task)(cfg)

        def main() -> None:
            if wants_help(sys.argv[1:]):  # fast: no Hydra import, no composition
                print(help_text(task, conf_dir()))
                return
            import hydra

            from harness.schema import register_configs

            hydra_main = hydra.main(version_base=None, config_path=CONF_DIR, config_name=config_name)(body)

            register_configs()
            try:
                hydra_main()
            except SystemExit as exc:
                if exc.code == 1 and not started:
                    sys.exit(EXIT_BAD_INPUT)
                raise

        return main

    return decorate
