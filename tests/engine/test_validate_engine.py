"""The validate_engine suite end to end on a tiny design against an engine of its own (~20 s alone), run in
the background beside the other engine tests (tests/engine/conftest.py `validate_run`).

Checks the pipeline, not the accuracy (the machine is shared and noisy: benchmarks/bench_validate.py
and the README report the full validation): one row per load x metric with the contract's columns,
the calibration kept apart from the validation runs, and engine and emulator runs interleaved.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.engine

REQUESTS = 4  # per engine run: 4 runs (2 loads, each repeated) of Poisson arrivals, ~1-2 s each at these loads
# Prompts of at most 256 + 256 tokens (256-token blocks: one shared prompt is one block) and 8-16 tokens out: the
# engine's CPU for the suite is ~5.5 s (~9.3 s with prompts up to 512 + 512, 16-32 tokens out, 512-token long probes).
# Each pinned probe waits out its shared start (probes.PIN_LEAD_S): one decode prompt length (64; the long
# probes, 256 cached + 16 new, give the fit its second context), one layout and one mixed shape. The probes cover
# what is predicted (validate_engine refuses less): batches up to the 4 slots, lengths up to 256 + 256 tokens.
TINY = [f"workload.num_requests={REQUESTS}", "experiment.load_fraction=0.5,1.0", "experiment.saturation_concurrency=8",
        "experiment.calibration.lengths=[64,128,256,512]", "experiment.calibration.repeats=1",
        "experiment.calibration.batches=[1,2,3,4]", "experiment.calibration.decode_prompts=[64]",
        "experiment.calibration.decode_tokens=16", "workload.output_lengths.low=8", "workload.output_lengths.high=16",
        "workload.output_lengths.mu=2.5", "workload.input_lengths.high=256", "workload.input_lengths.mu=4.5",
        "workload.block_tokens=256", "workload.shared_prompt_tokens=256",
        "experiment.calibration.cached_prefixes=[256]", "experiment.calibration.cached_new=[64]",
        "experiment.calibration.holdout_lengths=[]", "experiment.calibration.mixed.decoders=[1]",
        "experiment.calibration.mixed.prompts=[2,4]", "experiment.calibration.mixed.lengths=[128]",
        "experiment.calibration.mixed.decode_tokens=40",
        "experiment.calibration.knots=null", "experiment.calibration.idle.lengths=[]",
        "experiment.calibration.tile_lengths=[130]", "experiment.calibration.layouts=[[0,2]]",
        "experiment.calibration.decode_cached.prompts=[256]",
        "experiment.repeat_engine=true"]


def suite_args(url: str, sweep: Path) -> list[str]:
    """The command (after the interpreter) this test checks: `validate_run` in conftest.py runs it."""
    return ["-m", "harness", "-m", "experiment=validate_engine", f"target.url={url}", f"hydra.sweep.dir={sweep}",
            "hydra.sweep.subdir=${hydra.job.num}", *TINY]


def test_validate_engine_suite_writes_one_row_per_load_and_metric(validate_run):
    # started at the first engine test of the session, against a server of its own (see conftest.py)
    code, _, stderr = validate_run.result(timeout=300)
    assert code == 0, stderr[-3000:]
    sweep = validate_run.out / "sweep"
    frame = pd.read_parquet(sweep / "validation.parquet")
    assert {"load_rps", "metric", "measured", "predicted", "rel_error"} <= set(frame.columns)
    metrics = {"throughput_rps", "ttft_p50_s", "ttft_p90_s", "tpot_mean_s"}
    assert metrics <= set(frame["metric"])
    assert frame.groupby("load_rps")["metric"].apply(lambda m: m.is_unique).all()
    assert frame["load_rps"].nunique() == 2
    assert len(frame) == 2 * frame["metric"].nunique()
    assert (frame["measured"] > 0).all() and (frame["predicted"] > 0).all()
    # rel_error is (predicted - measured) / measured, row by row
    assert ((frame["predicted"] - frame["measured"]) / frame["measured"]).sub(frame["rel_error"]).abs().max() < 1e-9
    side = json.loads((sweep / "validation.json").read_text())
    assert side["calibration"]["validation_workload_used"] is False
    assert Path(side["profile_file"]).is_file() and side["capacity_rps"] > 0
    # mixed probes: 2 prompts beside 1 decoding stream (1 + 4 > the 4 slots: that shape is skipped), fitted
    # by the deployment's step form (validate_engine: separate passes, slot layout), the engine's own prompt
    # times; streams pinned to slots 0 and 2 checked against the fitted steps
    for tag, mixed in side["mixed_prompt_factor"].items():
        assert mixed["step_form"] == "separate passes, decode ubatches by slot layout" and mixed["value"] >= 1.0, \
            (tag, mixed)
        layouts = side["checks"][tag]["layouts"]
        assert [c["slots"] for c in layouts] == [[0, 2]] and layouts[0]["measured_s"] > 0, (tag, layouts)
        assert [(c["decoders"], c["prompts"]) for c in side["checks"][tag]["mixed"]] == [(1, 2)]
        assert 0.0 <= side["client_overhead_s"][tag] < 1.0
        # the prompt-cache copy cost: fitted from the back-to-back prefill probes (4 lengths, 1 repeat)
        save = side["cache_save_token_s"][tag]
        assert save["value"] >= 0.0 and save["pairs"] == 4 * (1 if tag == "start" else 2), (tag, save)
        # the partial attention tile: 130 tokens against the fitted 128, a share in [0, 1]
        tile = side["tile_fill"][tag]
        assert 0.0 <= tile["value"] <= 1.0 and [r["input_tokens"] for r in tile["by_length"]] == [130], (tag, tile)
    # long-context decode probes: each stream's 256-token prefix served from the engine's cache on its slot
    probes = json.loads((sweep / "calibration" / "start" / "probes.json").read_text())
    long = [r for r in probes["decode"] if r.get("cached_tokens") == 256]
    assert sorted(r["batch"] for r in long) == [1, 2, 3, 4] and all(r["server_cache_n"] >= 256 for r in long), long
    # the engine's repeat run at each load: its values beside the first run's
    assert frame["repeat"].gt(0).all() and frame["repeat_rel_diff"].notna().all()
    runs = side["runs"]
    # engine and emulator at the same load saw the same requests; the engine ran first at each load
    for run in runs:
        eng = pd.read_parquet(Path(run["engine_dir"]) / "requests.parquet")
        sim = pd.read_parquet(Path(run["sim_dir"]) / "requests.parquet")
        assert sorted(eng["input_tokens"]) == sorted(sim["input_tokens"]) and len(eng) == REQUESTS
        assert eng["error"].isna().all()
    stamps = [Path(run[key]) / "summary.parquet" for run in runs for key in ("engine_dir", "sim_dir")]
    mtimes = [p.stat().st_mtime for p in stamps]
    assert mtimes == sorted(mtimes)  # engine load 1, emulator load 1, engine load 2, ...
    assert (sweep / "ttft_cdf.png").stat().st_size > 0
