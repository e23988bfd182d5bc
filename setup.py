"""Build hook: ship the repository's `conf/` and `traces/` inside the wheel, as `harness/conf` and
`harness/traces` (package data found by `harness.resources`). The source tree keeps them at the root,
where README, tests and configs name them. Everything else is declared in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
DATA_DIRS = ("conf", "traces")
IGNORE = shutil.ignore_patterns("local", "__pycache__", "*.pyc")  # conf/local: machine-local, git-ignored


class BuildPyWithData(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads them from the source tree
        for name in DATA_DIRS:
            target = Path(self.build_lib) / "harness" / name
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(ROOT / name, target, ignore=IGNORE)


setup(cmdclass={"build_py": BuildPyWithData})
