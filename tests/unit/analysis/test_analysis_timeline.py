"""The timeline figure plots each run's binned TTFT P90, completions and egress, one row per category."""

from __future__ import annotations

import numpy as np
import pandas as pd

from harness.analysis.timeline import timeline


def _run(tmp_path, name, ttft, egress):
    run_dir = tmp_path / name
    run_dir.mkdir()
    arrival = np.arange(0, 100, 10.0)
    pd.DataFrame({"arrival_s": arrival, "ttft_s": ttft, "finish_s": arrival + 5, "error": [None] * 10}).to_parquet(
        run_dir / "requests.parquet")
    pd.DataFrame({"t_s": np.arange(100.0), "egress_gbps": egress, "link_capacity_gbps": 100.0}).to_parquet(
        run_dir / "timeseries.parquet")
    return str(run_dir)


def test_timeline_draws_one_row_per_category_and_a_line_per_deployment(tmp_path):
    runs = pd.DataFrame({
        "deployment": ["a", "b", "a"],
        "faults": ["drop", "drop", "loss"],
        "run_dir": [_run(tmp_path, "1", np.full(10, 2.0), 5.0), _run(tmp_path, "2", np.linspace(1, 10, 10), 0.0),
                    _run(tmp_path, "3", np.full(10, 3.0), 7.0)],
    })
    fig = timeline(runs, "faults", bin_s=20.0)
    axes = fig.axes
    assert len(axes) == 6
    ttft_drop = axes[0]
    assert [line.get_label() for line in ttft_drop.lines] == ["a", "b"]
    # run "b": TTFT 1..10 over arrivals 0..90 s, 20 s bins of two requests each -> P90 of each pair
    y = ttft_drop.lines[1].get_ydata()
    assert np.allclose(y, [1.9, 3.9, 5.9, 7.9, 9.9])
    assert len(axes[2].lines) == 2  # only "a" has egress: its egress and the capacity line
    assert "faults=loss" in axes[3].get_title()
