"""validate_engine's engine repeat (experiment.repeat_engine): the engine-vs-engine columns of validation.parquet."""

from __future__ import annotations

import math

import pandas as pd

from harness.validation.compare import COLUMNS, format_table, validation_frame


def _run_dir(path, throughput: float, ttfts: list[float]) -> str:
    path.mkdir()
    ok = sorted(ttfts)
    pd.DataFrame([{"throughput_rps": throughput, "ttft_p50_s": ok[len(ok) // 2], "ttft_p90_s": ok[-1],
                   "ttft_mean_s": sum(ok) / len(ok), "tpot_mean_s": 0.01}]).to_parquet(path / "summary.parquet")
    pd.DataFrame({"e2e_s": [t + 1.0 for t in ttfts], "ttft_s": ttfts, "error": [None] * len(ttfts)}).to_parquet(
        path / "requests.parquet")
    return str(path)


def test_repeat_columns_are_the_second_engine_run_against_the_first(tmp_path):
    engine = _run_dir(tmp_path / "engine", 2.0, [0.1, 0.2, 0.4])
    again = _run_dir(tmp_path / "again", 2.5, [0.1, 0.3, 0.5])
    sim = _run_dir(tmp_path / "sim", 1.0, [0.1, 0.1, 0.1])
    frame = validation_frame([{"load_rps": 1.0, "load_fraction": 0.3, "engine_dir": engine, "sim_dir": sim,
                               "repeat_dir": again}]).set_index("metric")
    assert sorted(frame.reset_index().columns) == sorted(COLUMNS)
    # against the first engine run, not against the emulator
    assert frame.loc["throughput_rps", "repeat"] == 2.5
    assert math.isclose(frame.loc["throughput_rps", "repeat_rel_diff"], 0.25)
    assert math.isclose(frame.loc["ttft_p50_s", "repeat_rel_diff"], 0.5)
    assert math.isclose(frame.loc["throughput_rps", "rel_error"], -0.5)
    assert math.isclose(frame.loc["e2e_mean_s", "repeat"], 0.3 + 1.0)
    assert "engine-vs-engine" in format_table(frame.reset_index())


def test_without_a_repeat_the_columns_are_nan_and_the_table_unchanged(tmp_path):
    engine = _run_dir(tmp_path / "engine", 2.0, [0.1, 0.2, 0.4])
    sim = _run_dir(tmp_path / "sim", 1.0, [0.1, 0.1, 0.1])
    frame = validation_frame([{"load_rps": 1.0, "load_fraction": 0.3, "engine_dir": engine, "sim_dir": sim}])
    assert frame["repeat"].isna().all() and frame["repeat_rel_diff"].isna().all()
    assert frame["rel_error"].notna().all()
    assert "engine-vs-engine" not in format_table(frame)
