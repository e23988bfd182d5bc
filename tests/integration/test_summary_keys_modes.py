"""summary.json has the same documented keys in sim and live runs of the same workload (contract26 finding
6): `max_output_tokens_per_s` and the `*_itl_ms` keys in both (ITL null in sim: no chunk stamps), and the
same `burstiness` (1.0: the paper workload's Poisson arrivals) in both."""

from __future__ import annotations

import json
import math
from pathlib import Path

from harness.runs.assemble import run_into

KEYS_FILE = Path(__file__).resolve().parents[1] / "data" / "vllm_bench_serve_keys.txt"


def _measurable() -> list[str]:
    keys = []
    for line in KEYS_FILE.read_text().splitlines():
        key, _, comment = line.partition("#")
        if key.strip() and "not measured" not in comment:
            keys.append(key.strip())
    return keys


def test_sim_and_live_summary_json_have_the_same_documented_keys(compose_cfg, tmp_path):
    common = ["workload.num_requests=8", "analysis.figures=false", "server.time_scale=20"]
    out = {}
    for mode in ("sim", "live"):
        run_into(compose_cfg([f"mode={mode}", *common]), tmp_path / mode)
        out[mode] = json.loads((tmp_path / mode / "summary.json").read_text())
    measurable = _measurable()
    for mode, summary in out.items():
        missing = [k for k in measurable if k not in summary]
        assert not missing, (mode, missing)
        assert summary["burstiness"] == 1.0, mode
        assert summary["max_output_tokens_per_s"] > 0, mode
    assert out["sim"]["mean_itl_ms"] is None and out["live"]["mean_itl_ms"] > 0
    vllm_keys = {k for k in out["live"] if k in measurable or (k.endswith("_itl_ms") and not k.startswith("vllm_"))}
    assert vllm_keys <= set(out["sim"])
    assert not math.isnan(out["sim"]["max_concurrent_requests"])
