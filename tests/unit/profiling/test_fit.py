"""The profile fits recover known curves from noisy synthetic measurements, and the steady decode
window reads the step and the batch's context from chunk stamps."""

from __future__ import annotations

import numpy as np
import pytest

from harness.errors import InputError

# harness.profiling.fit and .probes import scipy (~0.6 s of CPU): imported in the tests that use them, not
# by every xdist worker as it collects

LENGTHS = np.repeat([128, 256, 512, 1024, 2048], 3)


def test_prefill_fit_recovers_a_known_quadratic_under_noise():
    from harness.profiling.fit import fit_prefill, predict_prefill

    rng = np.random.default_rng(7)
    true = (0.012, 2.4e-4, 6.0e-8)
    y = (true[0] + true[1] * LENGTHS + true[2] * LENGTHS**2) * (1 + 0.02 * rng.standard_normal(len(LENGTHS)))
    fit = fit_prefill(LENGTHS, y)
    got = fit.as_list()
    assert got[1] == pytest.approx(true[1], rel=0.10)
    assert got[2] == pytest.approx(true[2], rel=0.30)
    for l in (384, 768, 1536, 3000):  # held-out lengths, including an extrapolation
        exact = true[0] + true[1] * l + true[2] * l * l
        assert predict_prefill(fit, l) == pytest.approx(exact, rel=0.03)
    assert 0.005 < fit.rms_rel < 0.04  # the 2% noise shows up as the residual, not hidden
    assert fit.n == len(LENGTHS)


def test_prefill_fit_keeps_terms_non_negative():
    from harness.profiling.fit import fit_prefill

    # A concave measurement (falling marginal cost): least squares would want c2 < 0.
    y = 0.01 + 0.05 * np.sqrt(LENGTHS)
    fit = fit_prefill(LENGTHS, y)
    assert min(fit.as_list()) >= 0.0
    assert fit.rms_rel > 0.01  # the wrong form shows in the residual


def test_prefill_fit_needs_three_distinct_lengths():
    from harness.profiling.fit import fit_prefill

    with pytest.raises(InputError, match="distinct lengths"):
        fit_prefill([100, 100, 200], [0.1, 0.1, 0.2])


def _decode_design():
    batch = np.repeat([1, 2, 4], 4).astype(float)
    per_seq_ctx = np.tile([100.0, 100.0, 1600.0, 1600.0], 3)
    return batch, batch * per_seq_ctx


def test_decode_fit_recovers_base_per_seq_and_per_token():
    from harness.profiling.fit import fit_decode, predict_decode

    rng = np.random.default_rng(3)
    batch, ctx = _decode_design()
    true = {"base_s": 3.5e-3, "per_seq_s": 1.2e-3, "per_token_s": 2.0e-7}
    y = (true["base_s"] + true["per_seq_s"] * batch + true["per_token_s"] * ctx) * (1 + 0.01 * rng.standard_normal(12))
    fit = fit_decode(batch, ctx, y)
    assert fit.params["base_s"] == pytest.approx(true["base_s"], rel=0.15)
    assert fit.params["per_seq_s"] == pytest.approx(true["per_seq_s"], rel=0.15)
    assert fit.params["per_token_s"] == pytest.approx(true["per_token_s"], rel=0.35)
    exact = true["base_s"] + true["per_seq_s"] * 3 + true["per_token_s"] * 3 * 800
    assert predict_decode(fit, 3, 3 * 800) == pytest.approx(exact, rel=0.03)  # a held-out batch


def test_a_constant_step_engine_fits_as_constant():
    from harness.profiling.fit import fit_decode

    rng = np.random.default_rng(5)
    batch, ctx = _decode_design()
    y = 0.025 * (1 + 0.01 * rng.standard_normal(12))
    fit = fit_decode(batch, ctx, y)
    assert fit.params["base_s"] == pytest.approx(0.025, rel=0.02)
    assert fit.params["per_seq_s"] < 0.02 * 0.025  # no growth with the batch
    assert fit.params["per_token_s"] * 4 * 1600 < 0.02 * 0.025  # nor with the context


def _stream(first: float, step: float, n: int) -> list[float]:
    return [first + step * j for j in range(n)]


def test_decode_window_takes_the_span_where_every_stream_decodes():
    from harness.profiling.probes import decode_window

    # Three streams start together; their first tokens come at 1/8, 2/8 and 3/8 s (staggered
    # prefills), then one step of 1/64 s for all. Stream 0 ran alone at 1/256 s steps before the others
    # joined. (Binary fractions: the stamps are exact.)
    step, solo = 1 / 64, 1 / 256
    s0 = [1 / 8 + solo * j for j in range(64)]  # ends at 1/8 + 63/256 < 3/8
    s0 += [3 / 8 + step * j for j in range(1, 60)]  # indices 64..122
    s1 = _stream(2 / 8, step, 8) + _stream(3 / 8 + step, step, 60)  # indices 8..67 after 3/8
    s2 = _stream(3 / 8, step, 50)  # indices 0..49, the first to finish
    w = decode_window([s0, s1, s2], [64, 100, 64])
    assert w is not None
    assert w.step_s == pytest.approx(step, rel=1e-12)  # the solo steps are outside the window
    # The window is [3/8, 3/8 + 49/64]: stream 0 indices 64..112, stream 1 8..56, stream 2 0..49;
    # each token at index j was made reading prompt + j tokens.
    assert w.context_tokens == pytest.approx((64 + 88) + (100 + 32) + (64 + 24.5), rel=1e-12)
    assert w.steps == 48


def test_decode_window_is_none_when_the_streams_barely_overlap():
    from harness.profiling.probes import decode_window

    assert decode_window([_stream(0.0, 0.01, 10), _stream(0.085, 0.01, 10)], [8, 8]) is None


def test_per_batch_decode_fit_interpolates_a_batch_size_it_never_saw():
    from harness.profiling.fit import batch_steps, fit_decode_per_batch, predict_decode

    true = {1: 0.0024, 2: 0.0070, 3: 0.0078, 4: 0.0085}  # not linear in the batch (a fast single-sequence path)
    per_token = 2e-7
    rows = [(b, b * (p + 32)) for b in (1, 2, 4) for p in (64, 1536)]
    y = [true[b] + per_token * c for b, c in rows]
    fit = fit_decode_per_batch([b for b, _ in rows], [c for _, c in rows], y, max_batch=6)
    steps = batch_steps(fit)
    assert steps[:2] == pytest.approx([true[1], true[2]], rel=1e-6) and steps[3] == pytest.approx(true[4], rel=1e-6)
    assert steps[2] == pytest.approx((true[2] + true[4]) / 2, rel=1e-6)  # 3: between its fitted neighbours
    assert steps[4] == pytest.approx(true[4] + (true[4] - true[2]) / 2, rel=1e-6)  # beyond: the last increment
    assert fit.params["per_token_s"] == pytest.approx(per_token, rel=1e-6) and fit.rms_rel < 1e-9
    held = predict_decode(fit, 3, 3 * 96)
    assert held == pytest.approx(true[3] + per_token * 3 * 96, rel=0.02)  # within 2% of the unseen truth here
