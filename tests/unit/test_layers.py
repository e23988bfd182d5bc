"""Dependencies run one way (design.md, "Which part may know which"): checked on the source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"


def _imports(package: str) -> dict[str, set[str]]:
    """harness.* modules each file of the package imports (top level or inside functions)."""
    out: dict[str, set[str]] = {}
    for path in sorted((HARNESS / package).rglob("*.py")):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        out[str(path.relative_to(HARNESS.parent))] = {n for n in names if n.split(".")[0] == "harness"}
    return out


def _outside(name: str, allowed: tuple[str, ...]) -> bool:
    return not any(name == a or name.startswith(a + ".") for a in allowed)


@pytest.mark.parametrize("package,allowed", [
    # the load generator talks to a target through a small protocol, never to deploy/live/sim
    ("loadgen", ("harness.loadgen", "harness.workload", "harness.analysis", "harness.errors")),
    # analysis reads records and Parquet; errors.py (InputError) is the one shared leaf it uses
    ("analysis", ("harness.analysis", "harness.errors")),
])
def test_package_imports_only_what_it_may(package, allowed):
    bad = {f: sorted(n for n in names if _outside(n, allowed)) for f, names in _imports(package).items()}
    assert not {f: n for f, n in bad.items() if n}


@pytest.mark.parametrize("package,forbidden", [
    ("planner", "harness.deploy"),  # the config types both read live below both (harness/config/)
    ("deploy", "harness.analysis"),  # the emulator records; the run layer and analysis measure
    ("config", "harness.deploy"),
    ("config", "harness.planner"),
])
def test_package_never_imports(package, forbidden):
    bad = {f: sorted(n for n in names if not _outside(n, (forbidden,))) for f, names in _imports(package).items()}
    assert not {f: n for f, n in bad.items() if n}
