"""`harness-profile` against the real engine: a small design; the profile it writes predicts
held-out probes (lengths and a batch size it never fitted), reports each check against issue 11's
10% with a pass flag that agrees with its error, and loads as a profile.

The probes are timed on the engine's CPU clock (`profile.clock=cpu`, the single-threaded server's
CPU seconds): on this shared 2-core machine the wall clock of the server (its own timings included)
stretches 2-6x with the other processes' load, which no fit can predict. The CPU clock is steadier
but not immune: the two vCPUs share a core's caches, so a probe's CPU seconds grow when the other
vCPU is busy (a fresh-clone CI run, the other pytest worker busy: held-out 768 tokens -11%, while
quiet runs gave +1..+3%). So the suite asserts what holds on any machine -- held-out predictions
within a factor of 1.5 (a wrong fit, unit or curve form misses by far more), the pass flag
consistent -- and the 10% agreement is reported: by `harness-profile` (profile.json, its stdout) and
`benchmarks/bench_validate.py` (held-out lengths per probe round).

The decode step is fitted per batch size (`profile.decode.kind: per_batch`, what validate_engine
uses): this engine's step is not linear in the batch (1 thread, CPU clock: ~2.4 ms alone, ~7.0 /
7.8 / 8.5 ms for 2 / 3 / 4 streams of 64-token prompts: a fast single-sequence path), so the linear
form missed batch 1 and its batch-3 prediction landed 5-20% off. The held-out batch 3 is predicted by
interpolating between the fitted 2 and 4; its error is measured and reported (profile.json, the
written provenance), not held to 10% here: on a loaded machine one held-out group of 2 probes is noisy.
Decode streams run on slots 0..N-1 (`profile.decode.pin_slots`): llama.cpp runs one ubatch per run of
consecutive slots, so unpinned the slots the engine picks would decide what a batch of N costs.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest
import yaml

from .conftest import BUILD_TIMEOUT, SLOTS
from .test_engine import run_python

# The first test of a session may build the engine (~10-20 min on 2 cores) when `make engine` has not.
pytestmark = [pytest.mark.engine, pytest.mark.timeout(BUILD_TIMEOUT)]

# Prompts up to 256 tokens: the engine's CPU for the run is ~4.6 s (~6.5 s with every length doubled: prefill
# 64..512, held out 192/384, 64- and 256-token decode streams, whose prefill-only twins (profile.clock=cpu) are most
# of it; ~12 s with prompts up to 1,024). Still 4 fitted lengths for 3 coefficients, held-out lengths between
# fitted ones, two contexts per batch size (4x apart, as before). Held-out prefill, 10 runs here (one beside two
# CPU burners, one beside the validate_engine suite: 0.87): predicted / measured 0.87-1.05 (0.99-1.04 in 2 runs at
# the doubled lengths), inside the asserted 1/1.5..1.5; a prediction at half the tokens (0.63) fails it.
SMALL_DESIGN = [
    "profile.name=engine_test", "profile.prefill.lengths=[32,64,128,256]", "profile.prefill.repeats=2",
    "profile.prefill.holdout_lengths=[96,192]", "profile.prefill.holdout_repeats=3",
    "profile.cached.prefix_tokens=[256]", "profile.cached.new_tokens=[64]", "profile.cached.repeats=1",
    "profile.decode.prompt_tokens=[32,128]", "profile.decode.output_tokens=32", "profile.decode.repeats=1",
    "profile.decode.holdout_batches=[3]", "profile.slot_probe.max_concurrency=6",
    "profile.slot_probe.output_tokens=24",
]


def test_harness_profile_fits_the_engine_and_predicts_held_out_probes(engine_server, tmp_path):
    proc = run_python("-m", "harness.profile", f"target.url={engine_server.url}", *SMALL_DESIGN, "profile.clock=cpu",
                      f"profile.engine_pid={engine_server.process.pid}", f"hydra.run.dir={tmp_path}", timeout=240)
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads((tmp_path / "profile.json").read_text())
    assert doc["errors"] == 0
    assert doc["slots"] == {"declared": SLOTS, "probed": SLOTS, "used": SLOTS}
    # The engine's step grows with the batch: a constant step would be the wrong model.
    steps = doc["decode"]["median_step_s"]
    assert steps["4x32"] > 1.5 * steps["1x32"] and steps["4x128"] > 1.5 * steps["1x128"]
    assert doc["decode"]["kind"] == "per_batch" and doc["decode"]["b4"] > doc["decode"]["b1"]
    # decode streams ran on slots 0..N-1 (profile.decode.pin_slots): each batch is one llama.cpp ubatch
    probes = pd.read_parquet(tmp_path / "probes.parquet")
    decode = probes[(probes["probe"] == "decode") & probes["role"].isin(["fit", "holdout"])]
    for _, group in decode.groupby("group"):
        assert sorted(group["slot"].astype(int)) == list(range(int(group["batch"].iloc[0])))
    checks = {(c["probe"], c.get("batch"), c["input_tokens"]): c for c in doc["holdout"]}
    assert {("prefill", None, 96), ("prefill", None, 192), ("decode", 3, 32), ("decode", 3, 128)} == set(checks)
    for c in doc["holdout"]:
        assert c["measured_s"] > 0 and c["predicted_s"] > 0 and c["pass"] == (abs(c["rel_error"]) <= 0.10)
        if c["probe"] == "prefill":  # 10% is reported, not asserted: see the module docstring
            assert 1 / 1.5 <= c["predicted_s"] / c["measured_s"] <= 1.5, c
    model = yaml.safe_load((tmp_path / "model" / "engine_test.yaml").read_text())
    assert model["name"] == "engine_test"
    assert model["full_attention"] == {"layers": 6, "kind": "gqa", "q_heads": 6, "kv_heads": 6, "k_head_dim": 64,
                                       "v_head_dim": 64}  # the GGUF's own dims
    prof = model["profiles"]["cpu_local"]
    assert prof["prefill"]["kind"] == "polynomial" and len(prof["prefill"]["coefficients"]) == 3
    assert prof["decode"]["kind"] == "per_batch" and prof["decode"]["bs_max"] == SLOTS
    assert len(prof["decode"]["batch_step_s"]) == SLOTS
    assert "batch sizes [1, 2, 4] fitted" in prof["decode"]["provenance"]
    assert {"engine", "model_file", "date", "machine", "prefill", "decode", "design"} <= set(model["provenance"])
    assert "InstanceProfile(engine_test on 1xcpu_local" in doc["loads_as"]  # build_profile took it
