"""Each figure plots the data it should: checked on the axes' line and bar data, not on pixels."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

REPORT = pd.DataFrame({
    "deployment": ["a", "a", "a", "b", "b"],
    "load_rps": [3.0, 1.0, 2.0, 1.0, 4.0],
    "steady_throughput_rps": [2.1, 1.0, 2.0, 1.0, 3.0],
    "ttft_mean_s": [9.0, 1.0, 2.0, 0.5, 8.0],
    "ttft_p90_s": [20.0, 2.0, 4.0, 1.0, 15.0],
    "plan_lambda_max_rps": [2.2, 2.2, 2.2, np.nan, np.nan],
})


@pytest.fixture(scope="module")
def plots():
    """harness.analysis.plots, with matplotlib (~0.3 s of CPU): imported where these tests run, not by every
    xdist worker as it collects."""
    from harness.analysis import plots

    return plots


def lines_by_label(ax) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


def test_throughput_vs_load_draws_each_sweep_sorted_by_load_with_y_equals_x_and_planner_line(plots):
    _fig, ax = plots.new_axes()
    plots.throughput_vs_load(REPORT, ax)
    lines = lines_by_label(ax)
    assert lines["a"] == ([1.0, 2.0, 3.0], [1.0, 2.0, 2.1])
    assert lines["b"] == ([1.0, 4.0], [1.0, 3.0])
    assert lines["a planner Λ_max = 2.20"][1] == [2.2, 2.2]
    assert not any(label.startswith("b planner") for label in lines)  # b has no plan
    x, y = lines["y = x"]
    assert x == y and x[-1] >= 4.0
    assert "req/s" in ax.get_xlabel() and "req/s" in ax.get_ylabel()


def test_ttft_vs_load_draws_mean_and_p90_per_deployment(plots):
    _fig, ax = plots.new_axes()
    plots.ttft_vs_load(REPORT, ax)
    lines = lines_by_label(ax)
    assert lines["a mean"] == ([1.0, 2.0, 3.0], [1.0, 2.0, 9.0])
    assert lines["a P90"] == ([1.0, 2.0, 3.0], [2.0, 4.0, 20.0])
    assert lines["b P90"] == ([1.0, 4.0], [1.0, 15.0])
    assert "(s)" in ax.get_ylabel()


def test_ttft_cdf_uses_completed_requests_only(plots):
    req = pd.DataFrame({"ttft_s": [3.0, 1.0, 2.0, 50.0, np.nan], "error": [None, None, None, "timeout", None]})
    _fig, ax = plots.new_axes()
    plots.ttft_cdf({"a": req}, ax)
    x, y = lines_by_label(ax)["a"]
    assert x == [-np.inf, 1.0, 2.0, 3.0]  # the step from 0 starts left of every point
    assert y == pytest.approx([0.0, 1 / 3, 2 / 3, 1.0])


def test_a_run_with_no_completed_request_gets_an_empty_cdf_without_a_warning(plots, recwarn):
    """An interrupted live run: nothing to draw, and no "No artists with labels found" from the legend."""
    req = pd.DataFrame({"ttft_s": [np.nan, np.nan], "error": ["interrupted", "interrupted"]})
    _fig, ax = plots.new_axes()
    plots.ttft_cdf({"a": req}, ax)
    assert ax.get_legend() is None and not lines_by_label(ax)
    assert not [w for w in recwarn if "No artists with labels" in str(w.message)]


def test_egress_timeseries_draws_egress_and_capacity(plots):
    ts = pd.DataFrame({"t_s": [0.0, 1.0, 2.0], "egress_gbps": [5.0, 12.0, 3.0],
                       "link_capacity_gbps": [100.0, 50.0, 50.0]})
    _fig, ax = plots.new_axes()
    plots.egress_timeseries(ts, ax)
    lines = lines_by_label(ax)
    assert lines["egress"] == ([0.0, 1.0, 2.0], [5.0, 12.0, 3.0])
    assert lines["link capacity"][1] == [100.0, 50.0, 50.0]
    assert "Gbps" in ax.get_ylabel()


def test_table6_comparison_puts_harness_and_paper_bars_side_by_side(plots):
    rows = pd.DataFrame([
        {"deployment": d, "quantity": q, "source": s, "value": v}
        for d, q, s, v in [("a", "capacity_rps", "harness", 2.0), ("a", "capacity_rps", "paper", 2.1),
                           ("b", "capacity_rps", "harness", 3.0), ("b", "capacity_rps", "paper", 3.2),
                           ("a", "ttft_mean_s", "harness", 4.0), ("b", "ttft_p90_s", "paper", 3.5)]
    ])
    fig = plots.table6_comparison(rows)
    capacity_ax = fig.axes[0]
    heights = [p.get_height() for p in capacity_ax.patches]
    assert heights == [2.0, 3.0, 2.1, 3.2]  # harness bars (a, b), then paper bars (a, b)
    assert "req/s" in capacity_ax.get_ylabel()
    p90 = [(p.get_x() + p.get_width() / 2, p.get_height()) for p in fig.axes[2].patches]
    assert p90 == [pytest.approx((1.2, 3.5))]  # only b's paper value: right of b's tick (x = 1)


def test_plan_threshold_and_split_mark_the_optimum(plots):
    sweep_t = pd.DataFrame({"threshold_tokens": [10000, 20000, 30000], "lambda_rps": [2.0, 3.2, 2.5],
                            "prfaas_bound_rps": [2.0, 3.2, 5.0], "pd_p_bound_rps": [9.0, 3.3, 2.5]})
    _fig, ax = plots.new_axes()
    plots.plan_threshold(sweep_t, ax)
    lines = lines_by_label(ax)
    assert lines["Θ_prfaas / p"] == ([10.0, 20.0, 30.0], [2.0, 3.2, 5.0])
    assert lines["optimum t = 20.0K, Λ = 3.20"] == ([20.0], [3.2])

    sweep_s = pd.DataFrame({"n_prefill": [3, 1, 2], "lambda_rps": [2.5, 1.0, 2.0],
                            "prefill_bound_rps": [3.2, 1.0, 2.1], "decode_bound_rps": [2.5, 4.7, 3.9]})
    _fig, ax = plots.new_axes()
    plots.plan_split(sweep_s, ax)
    lines = lines_by_label(ax)
    assert lines["decode bound"] == ([1.0, 2.0, 3.0], [4.7, 3.9, 2.5])
    assert lines["optimum N_p = 3, Λ = 2.50"] == ([3.0], [2.5])


def test_save_writes_a_png(plots, tmp_path):
    fig, ax = plots.new_axes()
    plots.ttft_vs_load(REPORT, ax)
    path = plots.save(fig, tmp_path / "f.png")
    assert path.read_bytes()[:4] == b"\x89PNG" and [p.name for p in tmp_path.iterdir()] == ["f.png"]
