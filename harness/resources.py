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
