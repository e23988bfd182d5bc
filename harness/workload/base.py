"""What every workload shares: the checks on num_requests, seed and block_tokens, seeded streams,
and the `Workload` protocol that `build_workload` and the planner rely on."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np

from harness.errors import InputError
from harness.resources import data_root
from harness.workload.prefix import PrefixReplay
from harness.workload.request import Request


class Workload(Protocol):
    """A generator of requests. Seeded: the same arguments give the same requests."""

    name: str

    def generate(self, rate_rps: float | None = None) -> list[Request]: ...

    def uncached_input_distribution(self, replay: PrefixReplay | None = None) -> tuple[np.ndarray, np.ndarray]: ...

    def mean_output_tokens(self) -> float: ...


def check_num_requests(owner: str, value: object, allow_all: bool = False) -> int | None:
    if value is None and allow_all:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        extra = " or null (all rows)" if allow_all else ""
        raise InputError(f"{owner}: num_requests must be an integer >= 1{extra}, got {value!r}")
    return int(value)


def check_seed(owner: str, value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise InputError(f"{owner}: seed must be a non-negative integer or null (unseeded), got {value!r}")
    return int(value)


def check_block_tokens(owner: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InputError(f"{owner}: block_tokens must be a positive integer, got {value!r}")
    return int(value)


def check_has(owner: str, field: str, obj: object, methods: tuple[str, ...], example: str) -> None:
    """Fail at construction when a `_target_` node built the wrong kind of object."""
    if obj is None or not all(callable(getattr(obj, m, None)) for m in methods):
        raise InputError(f"{owner}.{field} must be a node with a _target_ such as {example} "
                         f"(an object with {', '.join(methods)}), got {obj!r}")


def streams(seed: int | None, k: int) -> list[np.random.Generator]:
    """k independent generators from one seed (None: fresh OS entropy).

    Implementation note: separate streams per quantity (input lengths, output lengths, arrivals)
    mean a rate override changes the arrival times but not a single length.
    """
    return [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(k)]


def resolve_path(path: str | Path) -> Path:
    """A trace path from a config: absolute, else relative to the current directory, else to the
    harness's data root (the source tree, or the installed package, which ships `traces/`)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    root = data_root()
    if (root / p).exists():
        return root / p
    raise InputError(f"trace file {str(path)!r} not found (looked in {Path.cwd()} and {root})")


def empirical(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(distinct values, probabilities) of observed values, as the planner's input grid."""
    distinct, counts = np.unique(np.asarray(values), return_counts=True)
    return distinct.astype(np.float64), counts / counts.sum()
