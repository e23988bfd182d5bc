"""Read config nodes (DictConfig, dict or dataclass) as plain dicts, with error messages that name keys."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from harness.errors import InputError


def plain(node: Any, where: str) -> dict[str, Any]:
    """A config node as a plain, resolved dict; InputError naming `where` if it is missing."""
    if node is None:
        raise InputError(f"{where} is missing (null)")
    if isinstance(node, DictConfig):
        return OmegaConf.to_container(node, resolve=True)  # type: ignore[return-value]
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return dataclasses.asdict(node)
    if isinstance(node, Mapping):
        return dict(node)
    raise InputError(f"{where} must be a mapping, got {type(node).__name__}")


def number(node: Mapping[str, Any], key: str, where: str, *, minimum: float | None = None,
           exclusive: bool = False, default: Any = ...) -> float:
    """A float field, checked against a lower bound; the message names `where.key` and the value.

    A missing or null field takes `default`; with no default it is an error.
    """
    value = node.get(key)
    value = default if value is None else value
    if value is ...:
        raise InputError(f"{where}.{key} is required")
    try:
        out = float(value)
    except (TypeError, ValueError) as err:
        raise InputError(f"{where}.{key} must be a number, got {value!r}") from err
    if minimum is not None and (out <= minimum if exclusive else out < minimum):
        op = ">" if exclusive else ">="
        raise InputError(f"{where}.{key} must be {op} {minimum}, got {value!r}")
    return out


def integer(node: Mapping[str, Any], key: str, where: str, *, minimum: int | None = None,
            default: Any = ...) -> int:
    value = node.get(key)
    value = default if value is None else value
    if value is ...:
        raise InputError(f"{where}.{key} is required")
    if isinstance(value, bool) or not isinstance(value, int | float) or int(value) != value:
        raise InputError(f"{where}.{key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InputError(f"{where}.{key} must be >= {minimum}, got {value!r}")
    return int(value)
