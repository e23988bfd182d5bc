"""`--help` of the Hydra commands without importing Hydra or composing a config.

Hydra's own `--help` lists every config group by building a config repository per group (~100 deep
copies of the config store: seconds), then prints the composed config. This prints the command's
summary, its usage, and the config groups with their options read from the `conf/` directory (well
under a second); the composed config is `--cfg job`, Hydra's help `--hydra-help`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path

HELP_FLAGS = ("--help", "-h")


def wants_help(argv: Sequence[str]) -> bool:
    """True when the command line asks for help (and not for Hydra's own help or a shell completion)."""
    hydra_own = ("--hydra-help", "-sc", "--shell")
    return any(a in HELP_FLAGS for a in argv) and not any(a.startswith(hydra_own) for a in argv)


def config_groups(conf: Path) -> dict[str, list[str]]:
    """{group: options} of a config directory: every folder holding YAML files, except Hydra's own."""
    groups: dict[str, list[str]] = {}
    for path in sorted(conf.rglob("*.yaml")):
        group = path.parent.relative_to(conf).as_posix()
        if group != "." and group.split("/")[0] not in ("hydra", "local"):
            groups.setdefault(group, []).append(path.stem)
    return groups


def _program(task: Callable[..., object]) -> str:
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path("harness")
    if argv0.suffix == ".py":  # python -m harness / python -m harness.plan
        return f"python -m {task.__module__.removesuffix('.cli')}"
    return argv0.name


def help_text(task: Callable[..., object], conf: Path) -> str:
    prog = _program(task)
    module = sys.modules.get(task.__module__)
    summary = (module.__doc__ or "").strip() if module is not None else ""
    lines = [summary, "", f"usage: {prog} [-m] [key=value ...] [group=option ...] [hydra.run.dir=DIR]", "",
             f"== Configuration groups ({conf}) ==",
             "Compose your configuration from these groups (group=option):", ""]
    lines += [f"{group}: {', '.join(options)}" for group, options in config_groups(conf).items()]
    lines += ["", "== Config ==",
              f"Override anything in the config (foo.bar=value). Print the composed config: {prog} --cfg job "
              "[overrides]",
              f"-m / --multirun: a sweep (comma-separated values). Hydra's own options: {prog} --hydra-help"]
    return "\n".join(lines).lstrip("\n")
