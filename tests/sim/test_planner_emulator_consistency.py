"""Planner and emulator describe the same system: each input that changes what the emulator does changes
what the planner assumes (or the plan says, in `plan_notes`, that it does not model it), inputs that cannot
apply fail in one line, and on the Mooncake conversation trace the emulated capacity is the planned one.

Before the prefix-cache settings reached the planner, `cache.enabled=false` read 8.05 req/s against a planned
12.46 (-35%) on prfaas_pd (homogeneous PD -25%), and the router matched the local pool only while the planner
assumed one shared cache: 0.485 of requests offloaded against 0.351 planned.
"""

from __future__ import annotations

import re

import pytest

from harness.analysis.summary import summarize
from harness.clock import VirtualClock
from harness.deploy.build import build
from harness.errors import InputError
from harness.runs.closed_loop import saturation_in_flight
from harness.runs.sim import run_sim

from .conftest import compose_cfg

TRACE = ("deployment=prfaas_pd", "model=qwen35_397b", "link.capacity_gbps=40", "workload=mooncake_conversation")
SHORT = (*TRACE, "workload.num_requests=400")
# generated sessions: their hash_ids follow workload.block_tokens (a trace's are fixed by the file)
SESSIONS = ("deployment=prfaas_pd", "model=qwen35_397b", "workload=agentic", "workload.num_requests=300")
_RUNS: dict[tuple[str, ...], tuple[dict, dict]] = {}


def _plan_and_summary(*overrides: str) -> tuple[dict, dict]:
    if overrides not in _RUNS:  # the unflipped bases are shared by the tests of this module
        cfg = compose_cfg(*overrides)
        result = run_sim(cfg)
        _RUNS[overrides] = result.meta["plan"], summarize(result.requests, result.timeseries, result.meta,
                                                            cfg.analysis)
    return _RUNS[overrides]


PLANNED = ("lambda_max_rps", "offload_fraction", "l_long_tokens", "l_short_tokens", "threshold_tokens")


@pytest.mark.parametrize(("base", "flip"), [
    (SHORT, "cache.enabled=false"),
    (SHORT, "cache.capacity_tokens=200000"),
    (SHORT, "cache.exact_state_match=false"),
    (SESSIONS, "workload.block_tokens=256"),
    (SHORT, "deployment.router.cache_view=local"),
])
def test_each_cache_input_moves_the_planner_and_the_emulator_or_is_noted(base, flip):
    """The emulator's prefix hits move with each cache input; the plan moves with them, or says why not."""
    plan0, summary0 = _plan_and_summary(*base)
    plan, summary = _plan_and_summary(*base, flip)
    assert summary["cached_token_frac"] != pytest.approx(summary0["cached_token_frac"], rel=1e-3) \
        or summary["offload_fraction"] != summary0["offload_fraction"]
    moved = any(plan[k] != plan0[k] for k in PLANNED)
    noted = [n for n in plan["notes"] if flip.split("=")[0] in n]
    assert moved or noted, (flip, {k: (plan0[k], plan[k]) for k in PLANNED}, plan["notes"])
    if flip.startswith("deployment.router.cache_view"):
        assert noted and not plan0["notes"]  # local: said, not silently planned as global
    if flip == "cache.enabled=false":  # no prefix hits: the planner's lengths are whole prompts
        assert plan["l_short_tokens"] > plan0["l_short_tokens"] and not plan["notes"]


def test_the_local_views_offload_is_estimated_in_the_notes():
    """The planner plans the global view; for `cache_view=local` it replays the router's local view at the
    planned t, and that share is the emulator's (0.473 against 0.4735 on 4,000 requests of this trace)."""
    plan, summary = _plan_and_summary(*SHORT, "deployment.router.cache_view=local")
    note = next(n for n in plan["notes"] if "replayed at the planned t=" in n)
    estimated = float(re.search(r"offloads ([0-9.]+) of requests", note).group(1))
    assert estimated == pytest.approx(summary["offload_fraction"], abs=0.02)
    assert estimated > plan["offload_fraction"] + 0.02, (estimated, plan["offload_fraction"])


def test_the_decode_variant_moves_both():
    """internal_1t's linear H20 step: the planner's T_decode and the emulator's TPOT both leave the constant 25 ms."""
    plan0, summary0 = _plan_and_summary("workload.num_requests=300")
    plan, summary = _plan_and_summary("workload.num_requests=300", "model.decode_variant=linear")
    assert plan0["t_decode_s"] == pytest.approx(0.025) and plan["t_decode_s"] < 0.025
    assert summary0["tpot_mean_s"] == pytest.approx(0.025) and summary["tpot_mean_s"] < 0.025


@pytest.mark.parametrize(("overrides", "message"), [
    (("model=minimax_m25", "model.decode_variant=linear"),
     "model.decode_variant=linear: model minimax_m25 has no decode variants"),
    (("planner.slo_tokens_per_s=60",),
     r"planner.slo_tokens_per_s=60 cannot be met: model internal_1t's decode step on 8 x h20 is 25 ms for a lone "
     r"sequence \(40 tok/s at best\)"),
])
def test_an_option_that_cannot_apply_is_a_one_line_input_error(overrides, message):
    cfg = compose_cfg(*overrides, "workload.num_requests=50")
    with pytest.raises(InputError, match=message) as err:
        build(cfg, VirtualClock(), mode="sim")
    assert "\n" not in str(err.value)


def test_a_fixed_decode_step_over_the_slo_is_noted():
    cfg = compose_cfg("deployment=homogeneous_pd", "+deployment.decode_step_s=0.05", "workload.num_requests=50")
    built = build(cfg, VirtualClock(), mode="sim")
    assert built.plan is not None
    assert any(n.startswith("deployment.decode_step_s=0.05 is above the 25 ms step") for n in built.plan["notes"])


def test_weights_that_do_not_fit_are_named_before_the_saturation_settings():
    """ring_25_1t (1 TB of weights) on 8 x H20: the real cause, not a hint to set loadgen.saturation_in_flight."""
    cfg = compose_cfg("model=ring_25_1t", "loadgen.rate_rps=inf", "workload.num_requests=50")
    with pytest.raises(InputError, match=r"^model ring_25_1t: weights .* do not fit 8 x h20") as err:
        saturation_in_flight(cfg)
    assert "saturation_in_flight" not in str(err.value)


@pytest.mark.parametrize("deployment", ["prfaas_pd", "homogeneous_pd"])
@pytest.mark.parametrize("cache", ["true", "false"])
def test_mooncake_capacity_is_the_planned_one_with_the_cache_on_and_off(deployment, cache):
    """Saturation runs on the conversation trace (qwen35_397b, 40 Gbps): within 5% of Lambda_max, and the
    emulator offloads the share the planner planned."""
    plan, summary = _plan_and_summary(*TRACE, f"deployment={deployment}", f"cache.enabled={cache}",
                                      "workload.num_requests=2000", "loadgen.rate_rps=inf")
    assert summary["steady_throughput_rps"] == pytest.approx(plan["lambda_max_rps"], rel=0.05)
    assert summary["offload_fraction"] == pytest.approx(plan["offload_fraction"], abs=0.02)
