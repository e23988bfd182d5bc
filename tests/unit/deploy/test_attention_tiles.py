"""A prompt's partial attention tile (`deployment.tile_tokens`, `tile_fill`): llama.cpp's CPU flash attention
computes query tiles of 64 rows and pads a partial last one, so a prompt just past a whole tile costs more than
the curve through whole-tile lengths; its calibration from probes; all on a virtual clock."""

from __future__ import annotations

import pytest

from harness.deploy.aggregated_instance import padded_tokens
from harness.errors import InputError
from harness.validation.calibrate import checks, fit_tile

from .test_aggregated import T, _deployment, _offer, _req, profile  # noqa: F401

F = 0.25  # share of the padded rows' work a partial tile costs


def test_padded_tokens_rounds_the_last_ubatch_up_to_whole_tiles():
    assert padded_tokens(130, 64, 512) == 192
    assert padded_tokens(128, 64, 512) == 128  # whole tiles: nothing padded
    assert padded_tokens(40, 64, 512) == 40  # fewer rows than a tile: the engine's untiled path
    assert padded_tokens(520, 64, 512) == 520  # 512 + a last ubatch of 8 rows (untiled)
    assert padded_tokens(583, 64, 512) == 640  # 512 + 71 rows: two tiles of the last ubatch
    assert padded_tokens(130, 0, 512) == 130  # off


def test_a_lone_prompt_off_the_tiles_pays_a_share_of_its_padded_rows(profile):  # noqa: F811
    kw = {"tile_tokens": 64, "tile_fill": F}
    recs = _offer(*_deployment(profile, **kw), [_req(1, 0.0, 130, 1), _req(2, 1.0, 128, 1), _req(3, 2.0, 40, 1),
                                                _req(4, 3.0, 520, 1), _req(5, 5.0, 583, 1)])
    assert recs[1]["ttft_s"] == pytest.approx(T(130) + F * (T(192) - T(130)), rel=1e-9)
    assert recs[1]["ttft_s"] > T(130) * 1.05  # 62 empty rows of a 64-row tile: well above the bare curve
    assert recs[2]["ttft_s"] == pytest.approx(T(128), rel=1e-9)
    assert recs[3]["ttft_s"] == pytest.approx(T(40), rel=1e-9)
    assert recs[4]["ttft_s"] == pytest.approx(T(520), rel=1e-9)
    assert recs[5]["ttft_s"] == pytest.approx(T(583) + F * (T(640) - T(583)), rel=1e-9)
    off = _offer(*_deployment(profile), [_req(1, 0.0, 130, 1)])  # the default: not modelled
    assert off[1]["ttft_s"] == pytest.approx(T(130), rel=1e-9)


def test_the_tile_is_counted_from_the_first_new_token_after_a_cached_prefix(profile):  # noqa: F811
    """512 cached + 130 new tokens: the new rows' last tile is padded to 192 rows on top of the prefix."""
    reqs = [_req(1, 0.0, 512, 1, hash_ids=(7,)), _req(2, 1.0, 642, 1, hash_ids=(7, 8))]
    recs = _offer(*_deployment(profile, tile_tokens=64, tile_fill=F), reqs)
    marginal = T(642) - T(512)
    assert recs[2]["ttft_s"] == pytest.approx(T(0) + marginal + F * (T(704) - T(642)), rel=1e-9)


def test_the_calibration_recovers_the_tile_share_from_probes_the_instance_answered(profile):  # noqa: F811
    """Back-to-back probes at whole-tile lengths (role fit) and just past them (role tile) answered by the
    instance with a tile share F: the fit finds F, and the held-out check charges it; with none, 0."""
    lengths = [(128, "fit"), (130, "tile"), (256, "fit"), (258, "tile"), (768, "fit"), (770, "tile"),
               (96, "holdout"), (64, "fit")]
    for fill in (F, 0.0):
        clock, dep = _deployment(profile, tile_tokens=64, tile_fill=fill)
        rows = []
        for i, (n, role) in enumerate(lengths, start=1):
            clock.call_at(clock.now() + 0.01, lambda i=i, n=n, c=clock, d=dep: d.submit(_req(i, c.now(), n, 1)))
            clock.run()
            rows.append({"input_tokens": n, "role": role, "ttft_s": dep.records[-1]["ttft_s"],
                         "server_prompt_s": None})
        rounds = [{"prefill": rows}]
        found, by = fit_tile(rounds, T, tile_tokens=64, ubatch_tokens=512)
        assert found == pytest.approx(fill, abs=1e-9)
        assert [r["input_tokens"] for r in by] == [130, 258, 770]
        assert all(abs(r["rel_error"]) < 1e-9 for r in by)
        block = {"prefill": {"kind": "polynomial", "coefficients": [0.01, 2e-4, 1e-7]},
                 "decode": {"kind": "linear", "base_s": 0.004, "per_seq_s": 0.001, "per_token_s": 1e-6}}
        (held,) = checks(rounds, block, clock="client", tile=(found, 64, 512))["prefill_holdout"]
        assert held["rel_error"] == pytest.approx(0.0, abs=1e-9)
    # without probes off the tiles there is nothing to fit
    assert fit_tile([{"prefill": rows[:1]}], T, tile_tokens=64, ubatch_tokens=512) == (0.0, [])


def test_tile_settings_are_checked(compose_cfg):
    from harness.clock import VirtualClock
    from harness.deploy.aggregated import build_aggregated

    base = ["deployment=aggregated", "model=random_llama_35m"]
    with pytest.raises(InputError, match="tile_fill must be a number in"):
        build_aggregated(compose_cfg([*base, "deployment.tile_fill=1.5"]), VirtualClock())
    with pytest.raises(InputError, match="tile_tokens must be an integer"):
        build_aggregated(compose_cfg([*base, "deployment.tile_tokens=-1"]), VirtualClock())
