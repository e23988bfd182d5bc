"""Hydra's run mode without composing the config twice.

Hydra 1.3's `_run_hydra` asks `Hydra.get_mode()` for `cfg.hydra.mode` before it runs, and that
composes the whole config (in MULTIRUN mode) only to read one key; `Hydra.run()` then composes it
again. For a short run the first composition is a sixth of the command's time. `hydra.mode` is None
unless an override or a config on the search path sets it, so when neither can, the answer is known
without composing: None, which Hydra turns into RUN (MULTIRUN with `-m`), exactly as if it had
composed. Anything this check cannot rule out falls back to Hydra's own `get_mode`.

What can set `hydra.mode` (or add a search path that could): an override of `hydra`, `hydra.mode`
or `hydra.searchpath`, or one with a package (`key@pkg=...`); a config file or ConfigStore node whose
`hydra` node (at its package) holds `mode` or a non-empty `searchpath`, or whose defaults list moves
a config to the root or to `hydra` (`group@hydra`, `@_global_`, `@_here_`...). Every config of every
source on the search path (files, package resources, the ConfigStore) is checked, not only those the
defaults list would select: checking is a text scan (only files that could set it are parsed, see
_NAMES): ~5 ms for conf/, against ~160 ms for a composition.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Iterator
from typing import Any

# What a config must contain to be able to set hydra.mode: the key, a relocation (`@` outside a
# comment) or a `hydra:` key given a value on its own line (`hydra: ${...}`).
_NAMES = re.compile(r"\b(mode|searchpath)\b|^[^#\n]*@|^[ \t]*hydra[ \t]*:[ \t]*[^\s#]", re.MULTILINE)
_RELATIVE = ("_here_", "_group_", "_name_")


def _package(group: str, header: str | None) -> str | None:
    """The package a config lands in (its `# @package`, else its group's path); None: cannot tell."""
    if header is None:
        return group.replace("/", ".")
    package = header.replace("_group_", group.replace("/", "."))
    if package == "_global_":
        return ""
    if package.startswith("_global_."):
        package = package[len("_global_."):]
    return None if any(token in package for token in (*_RELATIVE, "_global_")) else package


def _relocates_to_hydra(defaults: Any, package: str) -> bool:
    """A defaults entry `group@pkg` that puts a config at the root or at `hydra` (it could set the mode)."""
    if not defaults:
        return False
    if not isinstance(defaults, (list, tuple)) and not _is_sequence(defaults):
        return True
    for entry in defaults:
        keys = [entry] if isinstance(entry, str) else list(entry.keys()) if hasattr(entry, "keys") else [None]
        for key in keys:
            if not isinstance(key, str):
                return True
            if "@" not in key:
                continue
            target = key.split("@", 1)[1].strip()
            if any(token in target for token in _RELATIVE):
                return True
            if target == "_global_" or target.startswith("_global_."):
                where = target[len("_global_"):].lstrip(".")
            else:
                where = f"{package}.{target}".strip(".") if target else package
            if where in ("", "hydra"):
                return True
    return False


def _is_sequence(value: Any) -> bool:
    from omegaconf import ListConfig

    return isinstance(value, ListConfig)


def _sets_mode(config: Any, package: str) -> bool:
    """True if this config, placed at `package`, could set hydra.mode or hydra.searchpath."""
    if config is None:
        return False
    if not hasattr(config, "keys"):
        return True  # a config that is not a mapping: not understood here
    if _relocates_to_hydra(config.get("defaults"), package):
        return True
    if package == "":
        node = config.get("hydra")
    elif package == "hydra":
        node = config
    else:
        return False  # elsewhere (`hydra.launcher`, `model`, ...) no key is hydra.mode
    if node is None:
        return False
    if not hasattr(node, "keys"):
        return True  # `hydra: ${...}`: not understood here
    return node.get("mode") is not None or bool(node.get("searchpath"))


def _file_sets_mode(text: str, group: str) -> bool:
    if not _NAMES.search(text):
        return False  # names neither key and relocates nothing
    import yaml
    from hydra.plugins.config_source import ConfigSource

    package = _package(group, ConfigSource._get_header_dict(text).get("package"))
    if package is None:
        return True
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return _sets_mode(yaml.load(text, Loader=loader), package)


def _tree(root: Any, group: str = "") -> Iterator[tuple[str, Any]]:
    """(group, file) for every `.yaml` under a directory or package resource tree."""
    for child in root.iterdir():
        if child.is_dir():
            yield from _tree(child, f"{group}/{child.name}".lstrip("/"))
        elif child.name.endswith(".yaml"):
            yield group, child


def _store_nodes(repo: dict[str, Any]) -> Iterator[Any]:
    for value in repo.values():
        if isinstance(value, dict):
            yield from _store_nodes(value)
        else:
            yield value


def _source_sets_mode(source: Any) -> bool:
    scheme = source.scheme()
    if scheme == "file":
        from pathlib import Path

        root: Any = Path(source.path)
    elif scheme == "pkg":
        from importlib import resources

        root = resources.files(source.path)
    elif scheme == "structured":
        from hydra.core.config_store import ConfigStore

        for node in _store_nodes(ConfigStore.instance().repo):
            package = _package(node.group or "", node.package)
            if package is None or _sets_mode(node.node, package):
                return True
        return False
    else:
        return True  # a source this check cannot read
    if not root.is_dir():
        return False  # Hydra reports a missing config dir itself
    return any(_file_sets_mode(path.read_text(encoding="utf-8"), group) for group, path in _tree(root))


def _override_may_set_mode(overrides: Iterable[str]) -> bool:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.package is not None or key == "hydra" or key.startswith(("hydra.mode", "hydra.searchpath")):
            return True
    return False


def mode_is_unset(config_loader: Any, overrides: Iterable[str]) -> bool:
    """True only if no override and no config on `config_loader`'s search path can set hydra.mode."""
    try:
        if _override_may_set_mode(overrides):
            return False
        return not any(_source_sets_mode(source) for source in config_loader.get_sources())
    except Exception:  # anything unexpected (a bad override, an unreadable file): let Hydra compose
        return False


@contextlib.contextmanager
def mode_without_composing() -> Iterator[None]:
    """While inside, `Hydra.get_mode` answers None without composing when `mode_is_unset` proves it."""
    from hydra._internal.hydra import Hydra

    hydra_get_mode = Hydra.get_mode

    def get_mode(self: Any, config_name: str | None, overrides: list[str]) -> Any:
        if mode_is_unset(self.config_loader, overrides):
            return None  # what Hydra's composition would find: the configs leave hydra.mode at None
        return hydra_get_mode(self, config_name, overrides)

    Hydra.get_mode = get_mode  # type: ignore[method-assign]
    try:
        yield
    finally:
        Hydra.get_mode = hydra_get_mode  # type: ignore[method-assign]
