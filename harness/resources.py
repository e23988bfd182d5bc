"""Where the harness finds its data: `conf/` (the Hydra config tree) and `traces/` (sample traces).

An installed wheel carries both inside the package (`harness/conf`, `harness/traces`: copied there
at build time, see setup.py); a source checkout keeps them at the repository root. Every lookup goes
through `data_root()`, so the commands find their configs from any directory either way.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent


@cache
def data_root() -> Path:
    """The directory holding `conf/` and `traces/`: the installed package, else the source tree."""
    for root in (PACKAGE_DIR, PACKAGE_DIR.parent):
        if (root / "conf" / "config.yaml").is_file():
            return root
    return PACKAGE_DIR.parent  # neither: callers then name the missing file


def conf_dir() -> Path:
    """The Hydra config directory (`conf/`)."""
    return data_root() / "conf"


def config_groups(conf_dirs: list[Path] | None = None) -> dict[str, list[str]]:
    """{group: options} of config directories (default: `conf/`): every folder holding YAML files, sorted.
    Only files: the ConfigStore's `base_*` schemas are not options a user picks."""
    groups: dict[str, set[str]] = {}
    for conf in conf_dirs or [conf_dir()]:
        for path in conf.rglob("*.yaml"):
            group = path.parent.relative_to(conf).as_posix()
            if group != ".":
                groups.setdefault(group, set()).add(path.stem)
    return {group: sorted(options) for group, options in sorted(groups.items())}


def help_config_groups() -> str:
    """The options of each group the user chooses (not Hydra's own `hydra/...`, not `local`), one line per
    group indented by two spaces: `${harness_config_groups:}` in the help pages (conf/hydra/help/)."""
    return "\n".join(f"  {group}: {', '.join(options)}" for group, options in config_groups().items()
                     if group.split("/")[0] not in ("hydra", "local"))
