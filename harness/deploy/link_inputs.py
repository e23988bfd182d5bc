"""Validation of a `Link`'s inputs: numbers, counts and the capacity schedule.

Every failure is one `InputError` line naming the `link.` field and what it accepts.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Mapping, Sequence
from typing import Any

from harness.errors import InputError


def number(field: str, value: Any, *, minimum: float = 0.0, strict: bool = False) -> float:
    """Validate a finite number >= minimum (> minimum when strict) and return it as float."""
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"link.{field} must be a number, got {value!r}") from None
    bad = not math.isfinite(x) or (x <= minimum if strict else x < minimum)
    if bad:
        op = ">" if strict else ">="
        raise InputError(f"link.{field} must be a finite number {op} {minimum:g}, got {value!r}")
    return x


def count(field: str, value: Any) -> int:
    """Validate an integer >= 1 (numpy integers too, bools not)."""
    try:
        n = operator.index(value)
    except TypeError:
        n = 0
    if isinstance(value, bool) or n < 1:
        raise InputError(f"link.{field} must be an integer >= 1, got {value!r}")
    return n


def loss_rate(value: Any) -> float:
    """Validate a packet loss probability in [0, 1)."""
    loss = number("loss_rate", value)
    if loss >= 1.0:
        raise InputError(f"link.loss_rate must be in [0, 1), got {value!r}")
    return loss


def capacity_schedule(schedule: Sequence[Any]) -> list[tuple[float, float]]:
    """Validate [(t_s, capacity_gbps), ...]: absolute clock times, non-decreasing; gbps >= 0."""
    out: list[tuple[float, float]] = []
    for i, entry in enumerate(schedule):
        if isinstance(entry, str | bytes | Mapping) or not hasattr(entry, "__len__") or len(entry) != 2:
            raise InputError(f"link.capacity_schedule[{i}] must be [t_s, capacity_gbps] (a list of two numbers, "
                             f"e.g. link.capacity_schedule=[[0,100],[30,5]]), got {entry!r}")
        t = number(f"capacity_schedule[{i}].t_s", entry[0], minimum=-math.inf)
        gbps = number(f"capacity_schedule[{i}].capacity_gbps", entry[1])
        if out and t < out[-1][0]:
            raise InputError(f"link.capacity_schedule[{i}].t_s={t:g} is before the previous "
                             f"entry's {out[-1][0]:g}; times must be non-decreasing")
        out.append((t, gbps))
    return out


SHARING = ("fair", "fifo")


def efficiency(value: Any) -> float:
    """Validate goodput over the set rate: a number in (0, 1]."""
    eff = number("efficiency", value, strict=True)
    if eff > 1.0:
        raise InputError(f"link.efficiency must be in (0, 1] (goodput over the set rate), got {value!r}")
    return eff


def sharing(value: Any) -> str:
    """Validate how concurrent transfers share the link: one of SHARING."""
    if value not in SHARING:
        raise InputError(f"link.sharing must be one of {', '.join(SHARING)}, got {value!r}")
    return str(value)
