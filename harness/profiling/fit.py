"""Least-squares fits of the cost model's own profile forms, on relative error, with non-negative terms.

- prefill: T(l) = c0 + c1*l + c2*l^2 (`kind: polynomial`), the curve harness.costmodel.curves reads;
- decode: step(batch, ctx) = base_s + per_seq_s*batch + per_token_s*ctx (`kind: linear`), ctx being
  the context tokens the whole batch holds (harness.costmodel.decode.LinearDecode); or a step per
  batch size + per_token_s*ctx (`kind: per_batch`, PerBatchDecode), batch sizes never measured
  interpolated linearly between the measured ones around them.

Each row is divided by its measured value, so the fit minimises relative error (a 128-token prefill
counts as much as a 2K one), and non-negative least squares keeps every term >= 0, so the prefill
curve is non-decreasing and no term of the step is negative. The residual reported with a fit is
the RMS relative error over the points it was fitted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import nnls

from harness.errors import require


@dataclass(frozen=True)
class Fit:
    params: dict[str, float]
    rms_rel: float  # RMS of (predicted - measured) / measured over the fitted points
    max_rel: float  # largest |relative error| over the fitted points
    n: int

    def as_list(self) -> list[float]:
        return list(self.params.values())


def _nnls_rel(design: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Non-negative coefficients minimising sum(((design @ c) - y) / y)^2); also the relative errors."""
    require(bool(np.all(y > 0)), "every measured time must be > 0 to fit on relative error")
    a = design / y[:, None]
    scale = np.abs(a).max(axis=0)
    scale[scale == 0] = 1.0  # a column of zeros: its coefficient is 0 whatever the scale
    coef, _ = nnls(a / scale, np.ones_like(y))
    coef = coef / scale
    return coef, (design @ coef - y) / y


def _fit(names: Sequence[str], design: np.ndarray, y: np.ndarray) -> Fit:
    coef, rel = _nnls_rel(design, y)
    return Fit(dict(zip(names, (float(c) for c in coef), strict=True)), float(np.sqrt(np.mean(rel**2))),
               float(np.max(np.abs(rel))), len(y))


def fit_prefill(tokens: Sequence[float], seconds: Sequence[float], degree: int = 2) -> Fit:
    """c0..c_degree of T(l) = sum c_k l^k (params c0, c1, ...)."""
    l = np.asarray(tokens, dtype=float)
    y = np.asarray(seconds, dtype=float)
    require(len(np.unique(l)) > degree, f"a degree-{degree} prefill fit needs more than {degree} distinct lengths, "
                                        f"got {len(np.unique(l))}")
    design = np.vstack([l**k for k in range(degree + 1)]).T
    return _fit([f"c{k}" for k in range(degree + 1)], design, y)


def fit_decode(batch: Sequence[float], context_tokens: Sequence[float], step_s: Sequence[float]) -> Fit:
    """base_s, per_seq_s, per_token_s of step = base_s + per_seq_s*batch + per_token_s*context_tokens."""
    b = np.asarray(batch, dtype=float)
    ctx = np.asarray(context_tokens, dtype=float)
    y = np.asarray(step_s, dtype=float)
    require(len(y) >= 3, f"a decode fit needs at least 3 points, got {len(y)}")
    design = np.vstack([np.ones_like(b), b, ctx]).T
    return _fit(["base_s", "per_seq_s", "per_token_s"], design, y)


def fit_decode_per_batch(batch: Sequence[float], context_tokens: Sequence[float], step_s: Sequence[float],
                         max_batch: int) -> Fit:
    """b1..b<max_batch> (the step of each batch size at zero context) and per_token_s. Measured sizes
    get their own term; an unmeasured size between two measured ones is interpolated linearly,
    below the smallest it takes the smallest's step, above the largest the last increment continues
    (as PerBatchDecode extrapolates). The residual is over the measured points."""
    b = np.asarray(batch, dtype=int)
    ctx = np.asarray(context_tokens, dtype=float)
    y = np.asarray(step_s, dtype=float)
    sizes = sorted({int(v) for v in b})
    require(len(y) >= 2 and len(sizes) >= 1, f"a per-batch decode fit needs at least 2 points, got {len(y)}")
    design = np.vstack([*(np.where(b == k, 1.0, 0.0) for k in sizes), ctx]).T
    coef, rel = _nnls_rel(design, y)
    known = dict(zip(sizes, coef[:-1].tolist(), strict=True))
    steps = []
    for k in range(1, max_batch + 1):
        below, above = [s for s in sizes if s <= k], [s for s in sizes if s >= k]
        if not below:
            steps.append(known[above[0]])
        elif not above:
            last = below[-1]
            inc = (known[last] - known[below[-2]]) / (last - below[-2]) if len(below) > 1 else 0.0
            steps.append(known[last] + max(inc, 0.0) * (k - last))
        elif below[-1] == above[0]:
            steps.append(known[k])
        else:
            lo, hi = below[-1], above[0]
            steps.append(known[lo] + (known[hi] - known[lo]) * (k - lo) / (hi - lo))
    params = {f"b{k}": float(v) for k, v in enumerate(steps, start=1)}
    params["per_token_s"] = float(coef[-1])
    return Fit(params, float(np.sqrt(np.mean(rel**2))), float(np.max(np.abs(rel))), len(y))


def batch_steps(fit: Fit) -> list[float]:
    """The per-batch steps b1, b2, ... of a per-batch decode fit."""
    return [v for k, v in fit.params.items() if k.startswith("b") and k[1:].isdigit()]


def predict_prefill(fit: Fit, tokens: float | np.ndarray) -> float | np.ndarray:
    return sum(c * np.asarray(tokens, dtype=float) ** k for k, c in enumerate(fit.as_list()))


def predict_decode(fit: Fit, batch: float | np.ndarray, context_tokens: float | np.ndarray) -> float | np.ndarray:
    p = fit.params
    if "base_s" not in p:  # per batch size
        from harness.costmodel.decode import PerBatchDecode

        return PerBatchDecode(batch_steps(fit), p["per_token_s"])(int(batch), float(context_tokens))
    return (
        p["base_s"] + p["per_seq_s"] * np.asarray(batch, float) + p["per_token_s"] * np.asarray(context_tokens, float)
    )


def rel_error(predicted: float, measured: float) -> float:
    return (predicted - measured) / measured
