"""validate_engine's calibration against an engine without llama.cpp's fields: the fake engine
(fake_engine.py: known prefill curve and decode step, no `timings`) is probed through the load generator
with the vLLM preset (times from /metrics) and with the client's stamps only; the fit recovers its
curve and step. A preset promising fields the engine does not send, or a fit with no decode probe, is
one line (InputError), never a crash."""

from __future__ import annotations

import math

import pytest
from omegaconf import OmegaConf

from harness.errors import InputError
from harness.validation.calibrate import _decode_step, checks, fit, prefill_curve
from harness.validation.probes import probe

from .fake_engine import FakeEngine


def prefill_s(n: int) -> float:
    return 0.020 + 40e-6 * n + 5e-9 * n * n  # 21 ms at 32 tokens, 123 ms at 2,048


def step_s(b: int) -> float:
    return 0.016 + 0.006 * b  # 22 ms for one sequence, 40 ms for four


# 3 repeats: the fit takes each length's median, so one probe delayed by a busy test machine does not tilt it
CAL = {"lengths": [32, 128, 512, 1024, 2048], "holdout_lengths": [320, 1536], "repeats": 3,
       "cached_prefixes": [], "cached_new": [], "batches": [1, 2, 3, 4], "decode_prompts": [64, 384],
       "decode_tokens": 16, "pin_slots": False, "seed": 5}


def _round(compose_cfg, engine: FakeEngine, overrides: list[str], timings: str | None = None) -> dict:
    cfg = compose_cfg(["experiment=validate_engine", *overrides])
    preset = OmegaConf.to_container(cfg.engine)
    if timings is not None:
        preset["timings"] = timings
    return probe(engine.url, CAL, _plain(cfg.target), _plain(cfg.loadgen), block_tokens=512, seed=5,
                 max_sequences=4, engine=preset)


def _plain(node):
    return OmegaConf.to_container(node)  # a writable copy of the composed (read-only) node


@pytest.mark.parametrize("timings", ["metrics", "client"])
def test_the_fit_recovers_the_fake_engines_prefill_curve_and_decode_step(compose_cfg, timings):
    """vLLM's preset (engine timings from /metrics) and client stamps alone each give the known costs."""
    with FakeEngine(prefill_s, step_s) as engine:
        raw = _round(compose_cfg, engine, ["engine=vllm"], timings)
    assert not any("timings_per_token" in b or "cache_prompt" in b or "id_slot" in b for b in engine.bodies)
    profiles = fit([raw], hardware="cpu_local", slots=4, source="fake", clock="server")
    block = profiles["cpu_local"]
    curve = prefill_curve(block["prefill"])
    # The curve is the engine's prompt time plus what the client adds (a few ms on the loopback, which the
    # emulator's TTFT must carry too): its growth is the engine's, its offset small and positive.
    growth = 0.10 if timings == "metrics" else 0.15  # client TTFTs carry the client's own jitter too
    assert curve(2048) - curve(128) == pytest.approx(prefill_s(2048) - prefill_s(128), rel=growth)
    for n in (32, 128, 320, 512, 1024, 1536, 2048):  # fitted lengths and held-out ones
        assert 0.0 <= curve(n) - prefill_s(n) <= 0.040, n
    step = _decode_step(block)
    for b in (1, 2, 3, 4):  # two prompt lengths: the context term is identified (this engine has none)
        for prompt in (64, 384):
            assert step(b, b * (prompt + 8)) == pytest.approx(step_s(b), rel=0.10), (b, prompt)
    held = checks([raw], block, clock="server")["prefill_holdout"]
    assert [h["input_tokens"] for h in held] == [320, 1536]
    # (a few ms of client jitter are 10-20% of 33 ms at 320 tokens on a loaded machine)
    assert all(abs(h["rel_error"]) < (0.10 if timings == "metrics" else 0.20) for h in held), held
    if timings == "metrics":  # the engine's own prompt times, from its histograms' sums
        for row in raw["prefill"]:
            assert row["server_prompt_s"] == pytest.approx(prefill_s(row["input_tokens"]), rel=0.10, abs=0.005)


def test_a_preset_promising_timings_the_engine_does_not_send_is_one_line(compose_cfg):
    """llama-server's preset against an engine without `timings`: named, before the round goes on."""
    no_timings = r"engine.timings=engine: the engine's responses carry no timings.prompt_ms .*engine=vllm"
    with FakeEngine(prefill_s, step_s) as engine, pytest.raises(InputError, match=no_timings):
        _round(compose_cfg, engine, ["engine=llama_server"])
    assert len(engine.bodies) == 1  # the warm-up only


def test_a_missing_metric_is_named(compose_cfg):
    with FakeEngine(prefill_s, step_s) as engine, pytest.raises(InputError, match=r"has no series 'vllm:nope_sum'"):
        cfg = compose_cfg(["experiment=validate_engine", "engine=vllm", "engine.metrics.prompt_s=vllm:nope_sum"])
        probe(engine.url, CAL, _plain(cfg.target), _plain(cfg.loadgen), block_tokens=512, seed=5,
              max_sequences=4, engine=cfg.engine)
    assert engine.bodies == []  # nothing sent: the series is looked up first


def test_no_decode_probe_is_one_line_not_a_crash():
    """Without a decode step (every probe failed, or no clock timed one) the fit says so."""
    rows = {"prefill": [{"input_tokens": n, "role": "fit", "ttft_s": 0.01 * n / 64, "server_prompt_s": math.nan}
                        for n in (64, 128, 256)], "decode": []}
    with pytest.raises(InputError, match="no decode probe of fake measured a step"):
        fit([rows], hardware="cpu_local", slots=4, source="fake", clock="server")
