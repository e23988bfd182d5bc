"""Decode-step fits of the validation's calibration (harness/validation/calibrate.py): a step linear in the batch
and the context, or one step per batch size plus a context slope; both over the per-point medians of the probes.
"""

from __future__ import annotations

import numpy as np


def medians(rows: list[dict]) -> list[dict]:
    """One row per (batch, prompt) probe: the median over repeats (a busy machine has outliers)."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault((r["batch"], r["prompt_tokens"]), []).append(r)
    return [{**g[0], "step_s": float(np.median([r["step_s"] for r in g]))} for g in groups.values()]


def fit_decode(rows: list[dict]) -> tuple[list[float], float]:
    rows = medians(rows)
    b = np.array([r["batch"] for r in rows], float)
    c = np.array([r["context_tokens"] for r in rows], float)
    y = np.array([r["step_s"] for r in rows], float)
    a = np.vstack([np.ones_like(b), b, c]).T
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    if coef[2] < 0:  # context does not slow the step measurably: drop the term
        coef2, *_ = np.linalg.lstsq(a[:, :2], y, rcond=None)
        coef = np.array([coef2[0], coef2[1], 0.0])
    coef = np.maximum(coef, 0.0)
    rel = (a @ coef) / y - 1.0
    return coef.tolist(), float(np.sqrt(np.mean(rel**2)))


def fit_decode_per_batch(rows: list[dict]) -> tuple[list[float], float, float]:
    """(step at zero context per batch 1..max, per-token-of-context slope, relative RMS residual)."""
    rows = medians(rows)
    batches = sorted({int(r["batch"]) for r in rows})
    nb = max(batches)
    a = np.zeros((len(rows), nb + 1))
    for i, r in enumerate(rows):
        a[i, int(r["batch"]) - 1] = 1.0
        a[i, nb] = r["context_tokens"]
    y = np.array([r["step_s"] for r in rows], float)
    coef, *_ = np.linalg.lstsq(a, y, rcond=None)
    if coef[nb] < 0:
        coef[:nb], *_ = np.linalg.lstsq(a[:, :nb], y, rcond=None)
        coef[nb] = 0.0
    coef = np.maximum(coef, 0.0)
    steps = coef[:nb].tolist()
    for b in range(1, nb + 1):  # a batch size never probed: interpolate its neighbours
        if b not in batches:
            lo, hi = max(x for x in batches if x < b), min(x for x in batches if x > b)
            steps[b - 1] = steps[lo - 1] + (steps[hi - 1] - steps[lo - 1]) * (b - lo) / (hi - lo)
    rel = (a @ coef) / y - 1.0
    return steps, float(coef[nb]), float(np.sqrt(np.mean(rel**2)))
