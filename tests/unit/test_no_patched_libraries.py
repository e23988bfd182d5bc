"""The harness uses Hydra, OmegaConf and PyYAML as they ship: no module of harness/ assigns to an attribute of
theirs (a class, a module, or an object one of their functions returned) or calls setattr on one. A patch
breaks silently when the library changes; the stock ways are their public APIs, configs and callbacks."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parents[2] / "harness"
LIBRARIES = ("hydra", "omegaconf", "yaml")


def _from_library(module: str | None) -> bool:
    return module is not None and module.split(".")[0] in LIBRARIES


def _library_names(tree: ast.AST) -> set[str]:
    """Names bound to a library's module, to something imported from it, or to what one of those returned."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names if _from_library(a.name)}
        elif isinstance(node, ast.ImportFrom) and _from_library(node.module):
            names |= {a.asname or a.name for a in node.names}
    for node in ast.walk(tree):  # `parser = get_args_parser()`: an object the library made
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _root(node.value.func) in names:
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, (ast.Attribute, ast.Call, ast.Subscript)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else None


def patches(source: str) -> list[str]:
    """`lib.attr = ...` / `setattr(lib_object, ...)` on a library name of this source, as `line: text`."""
    tree = ast.parse(source)
    names = _library_names(tree)
    found = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and node.args:
            targets = [ast.Attribute(value=node.args[0], attr="?")]
        for target in targets:
            if isinstance(target, ast.Attribute) and _root(target) in names:
                found.append(f"{node.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


@pytest.mark.parametrize("source", [
    "from hydra._internal.hydra import Hydra\nHydra.get_mode = lambda *a: None\n",
    "from hydra._internal import defaults_list\ndefaults_list.Overrides.__init__ = print\n",
    "from hydra._internal.utils import get_args_parser\nparser = get_args_parser()\nparser.error = print\n",
    "import yaml\nsetattr(yaml, 'load', print)\n",
    "def f():\n    from omegaconf import OmegaConf\n    OmegaConf.x = 1\n",
])
def test_the_check_finds_a_patch(source):
    assert patches(source)


def test_reading_and_calling_a_library_is_no_patch():
    source = ("from omegaconf import OmegaConf\nOmegaConf.register_new_resolver('x', len)\n"
              "from hydra.core.hydra_config import HydraConfig\nout = HydraConfig.get().runtime.output_dir\n"
              "import sys\nsys.stderr = None\n")
    assert patches(source) == []


def test_no_module_of_the_harness_patches_hydra_omegaconf_or_yaml():
    found = {str(path.relative_to(HARNESS)): hits for path in sorted(HARNESS.rglob("*.py"))
             if (hits := patches(path.read_text(encoding="utf-8")))}
    assert found == {}
