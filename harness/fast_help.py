"""`--help` of the Hydra commands without importing Hydra or composing a config.

Hydra's own `--help` lists every config group by building a config repository per group (~100 deep
copies of the config store: seconds), then prints the composed config. This prints the command's own
page (`conf/hydra/help/<command>.yaml`: what it does, its groups with a line each, the key overrides)
with the options of each group read from the `conf/` directory, well under a second; a command with
no page gets its summary, usage and groups. The composed config is `--cfg job`, Hydra's help
`--hydra-help`.
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


def _page(conf: Path, page: str) -> str | None:
    """The command's help page with Hydra's placeholders filled in, or None when it has none."""
    path = conf / "hydra" / "help" / f"{page}.yaml"
    if not path.is_file():
        return None
    import yaml  # PyYAML (Hydra's own dependency): milliseconds, unlike composing a config

    spec = yaml.safe_load(path.read_text()) or {}
    groups = [f"{group}: {', '.join(options)}" for group, options in config_groups(conf).items()]
    text = str(spec.get("template", ""))
    for key in ("header", "footer"):
        text = text.replace("${hydra.help." + key + "}", str(spec.get(key, "")))
    lines = []
    for line in text.splitlines():
        if line.strip() == "$APP_CONFIG_GROUPS":
            indent = line[: len(line) - len(line.lstrip())]
            lines += [indent + "  " + g for g in groups]
        else:
            lines.append(line)
    text = "\n".join(lines)
    text = text.replace("$FLAGS_HELP", "--help, --hydra-help, --cfg job, -m/--multirun, --config-dir DIR")
    return text.rstrip() + "\n"


def help_text(task: Callable[..., object], conf: Path, page: str | None = None) -> str:
    if page is not None:
        text = _page(conf, page)
        if text is not None:
            return text
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
