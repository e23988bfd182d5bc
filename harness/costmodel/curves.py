"""One-dimensional curves y(l) with a cheap scalar call (the emulator's hot path) and a numpy path.

Scalar calls avoid numpy entirely (bisect and float arithmetic, about a microsecond); `vec` is
used by the planner on whole grids. Every curve here is checked to be finite, non-negative and
non-decreasing when it is built, because a prefill time or KV size that falls with length would
make both the planner and the emulator quietly wrong.
"""

from __future__ import annotations

import bisect
import csv
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from harness.errors import InputError

# Lengths at which monotonicity is checked: 0 and a geometric grid up to 1M tokens.
_CHECK_TOKENS = np.concatenate([[0.0], np.geomspace(1.0, 1_048_576.0, 400)])


class Curve(Protocol):
    """What every curve here offers: a scalar call and a vectorised one."""

    def __call__(self, l: float) -> float: ...

    def vec(self, l: np.ndarray) -> np.ndarray: ...


class PiecewiseLinear:
    """Linear interpolation between measured points, linear extrapolation beyond both ends.

    Below the first point the extrapolated value is clamped at 0 (a steep first segment must not
    produce a negative prefill time or KV size).
    """

    __slots__ = ("xs", "ys", "slopes", "_x", "_y", "_s", "_last")

    def __init__(self, xs: Sequence[float], ys: Sequence[float], where: str) -> None:
        if len(xs) != len(ys):
            raise InputError(f"{where}: {len(xs)} lengths but {len(ys)} values")
        if len(xs) < 2:
            raise InputError(f"{where}: need at least 2 points to interpolate, got {len(xs)}")
        x = [float(v) for v in xs]
        y = [float(v) for v in ys]
        for i in range(1, len(x)):
            if not x[i] > x[i - 1]:
                raise InputError(f"{where}: lengths must be strictly increasing, got {x[i - 1]:g} then {x[i]:g}")
            if y[i] < y[i - 1]:
                raise InputError(f"{where}: values must not fall with length, got {y[i - 1]:g} at {x[i - 1]:g} "
                                 f"then {y[i]:g} at {x[i]:g}")
        if min(x) < 0 or min(y) < 0:
            raise InputError(f"{where}: lengths and values must be >= 0")
        self._x, self._y = x, y
        self._s = [(y[i + 1] - y[i]) / (x[i + 1] - x[i]) for i in range(len(x) - 1)]
        self._last = len(x) - 2
        self.xs, self.ys, self.slopes = np.array(x), np.array(y), np.array(self._s)

    def __call__(self, l: float) -> float:
        i = bisect.bisect_right(self._x, l) - 1
        i = 0 if i < 0 else (self._last if i > self._last else i)
        y = self._y[i] + self._s[i] * (l - self._x[i])
        return y if y > 0.0 else 0.0

    def vec(self, l: np.ndarray) -> np.ndarray:
        l = np.asarray(l, dtype=float)
        i = np.clip(np.searchsorted(self.xs, l, side="right") - 1, 0, self._last)
        y: np.ndarray = np.maximum(self.ys[i] + self.slopes[i] * (l - self.xs[i]), 0.0)
        return y


class Polynomial:
    """y(l) = c0 + c1*l + c2*l^2 + ... (Horner)."""

    __slots__ = ("coefficients", "_rev")

    def __init__(self, coefficients: Sequence[float], where: str) -> None:
        if not coefficients:
            raise InputError(f"{where}: polynomial needs at least one coefficient")
        self.coefficients = [float(c) for c in coefficients]
        self._rev = self.coefficients[::-1]
        check_monotone(self, where)

    def __call__(self, l: float) -> float:
        y = 0.0
        for c in self._rev:
            y = y * l + c
        return y

    def vec(self, l: np.ndarray) -> np.ndarray:
        return np.polyval(self._rev, np.asarray(l, dtype=float))


class RooflinePrefill:
    """T(l) = overhead_s + FLOPs(l) / (mfu * gpus * peak), FLOPs(l) = a*l + b*l^2 + c*pairs_w(l)."""

    __slots__ = ("overhead_s", "a", "b", "c", "w", "_rate")

    def __init__(self, flops_coefficients: tuple[float, float, float, float], flops_per_s: float,
                 overhead_s: float) -> None:
        self.a, self.b, self.c, self.w = flops_coefficients
        self._rate = flops_per_s
        self.overhead_s = overhead_s

    def __call__(self, l: float) -> float:
        flops = self.a * l + self.b * l * l
        if self.c:
            w = self.w
            flops += self.c * (l * l / 2.0 if l <= w else w * l - w * w / 2.0)
        return self.overhead_s + flops / self._rate

    def vec(self, l: np.ndarray) -> np.ndarray:
        l = np.asarray(l, dtype=float)
        flops = self.a * l + self.b * l * l
        if self.c:
            w = self.w
            flops = flops + self.c * np.where(l <= w, l * l / 2.0, w * l - w * w / 2.0)
        seconds: np.ndarray = self.overhead_s + flops / self._rate
        return seconds


class Scaled:
    """A curve times a constant (a sensitivity knob: `prefill.scale` on an inferred curve)."""

    __slots__ = ("curve", "factor")

    def __init__(self, curve: Curve, factor: float) -> None:
        self.curve, self.factor = curve, factor

    def __call__(self, l: float) -> float:
        return self.factor * self.curve(l)

    def vec(self, l: np.ndarray) -> np.ndarray:
        scaled: np.ndarray = self.factor * self.curve.vec(l)
        return scaled


def check_monotone(curve: Curve, where: str) -> None:
    """InputError unless the curve is finite, >= 0 and non-decreasing on [0, 1M] tokens."""
    y = curve.vec(_CHECK_TOKENS)
    if not np.all(np.isfinite(y)) or np.any(y < 0):
        raise InputError(f"{where}: curve is negative or not finite on [0, 1M] tokens")
    bad = np.nonzero(np.diff(y) < -1e-12 * np.maximum(np.abs(y[:-1]), 1.0))[0]
    if bad.size:
        l = _CHECK_TOKENS[bad[0] + 1]
        raise InputError(f"{where}: curve falls with length near {l:,.0f} tokens; it must be non-decreasing")


def read_profile_csv(path: str | Path, where: str) -> tuple[list[float], list[float], list[float] | None]:
    """Read `input_tokens,prefill_s[,kv_bytes]` rows (a user's own engine measurements)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{where}: profile CSV {str(p)!r} does not exist")
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        cols = reader.fieldnames or []
        missing = [c for c in ("input_tokens", "prefill_s") if c not in cols]
        if missing:
            raise InputError(f"{p}: missing column(s) {', '.join(missing)}; expected "
                             f"input_tokens,prefill_s[,kv_bytes], got {', '.join(cols) or 'no header'}")
        has_kv = "kv_bytes" in cols
        tokens, seconds, kv = [], [], []
        for line, row in enumerate(reader, start=2):
            try:
                tokens.append(float(row["input_tokens"]))
                seconds.append(float(row["prefill_s"]))
                if has_kv:
                    kv.append(float(row["kv_bytes"]))
            except (TypeError, ValueError) as err:
                raise InputError(f"{p}:{line}: not a number in {dict(row)}") from err
    order = np.argsort(tokens, kind="stable")

    def sort(xs: list[float]) -> list[float]:
        return [xs[i] for i in order]

    return sort(tokens), sort(seconds), (sort(kv) if has_kv else None)
