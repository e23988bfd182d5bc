"""Parameter sweeps in the report: which columns were swept, the sweep table, and the data each
sweep figure plots (axes' line and image data, not pixels), on fake runs with known capacities."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from harness.analysis import report as rep
from harness.analysis.summary import write_run

THRESHOLDS = (0, 20000, 40000)
LINKS = (5.0, 100.0)


@pytest.fixture(scope="module")
def plots():
    """harness.analysis.plots, with matplotlib (~0.3 s of CPU): imported where these tests run, not by every
    xdist worker as it collects."""
    from harness.analysis import plots

    return plots


@pytest.fixture
def unrendered_figures(plots, monkeypatch):
    """For tests that read which figures a report writes, not what is in them: each figure is made as
    always (the plotting code runs) but saved as an empty file, not rendered into a PNG (~0.1 s of CPU
    each). test_report_of_a_two_parameter_sweep_... checks real PNGs."""
    from pathlib import Path

    def save(fig, path):
        Path(path).write_bytes(b"")
        return Path(path)

    monkeypatch.setattr(plots, "save", save)


def capacity(t: float, link_gbps: float) -> float:
    """A made-up capacity surface: peaks at t = 20K, grows with the link."""
    return (3.0 - abs(t - 20000) / 20000) * (1.0 if link_gbps >= 100 else 0.5)


@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    """prfaas_pd over threshold x link capacity, each point saturated (offered 2x capacity), plus one
    run per point at half its capacity; the run's summary records the planner's Lambda as 1.1x."""
    from .conftest import fake_run

    root = tmp_path_factory.mktemp("grid") / "sweep"
    job = 0
    for t in THRESHOLDS:
        for link in LINKS:
            cap = capacity(t, link)
            for rate in (0.5 * cap, 2.0 * cap):
                run_dir = root / f"{job}_prfaas_pd"
                (run_dir / ".hydra").mkdir(parents=True)
                (run_dir / ".hydra" / "overrides.yaml").write_text(
                    f"- deployment.router.threshold_tokens={t}\n- link.capacity_gbps={link}\n"
                    f"- loadgen.rate_rps={rate}\n- experiment=fake\n")
                req, ts, meta = fake_run("prfaas_pd", rate, cap)
                meta["plan"] = {"lambda_max_rps": 1.1 * cap}
                meta["threshold_tokens"] = t
                write_run(run_dir, req, ts, meta, {"figures": False})
                job += 1
    return root


def test_sweep_params_are_the_varying_numeric_overrides_other_than_the_load(grid_sweep, shared_sweep):
    assert rep.sweep_params(rep.build_report([grid_sweep])) == ["deployment.router.threshold_tokens",
                                                                "link.capacity_gbps"]
    assert rep.sweep_params(rep.build_report([shared_sweep])) == []  # a load sweep only


def test_sweep_table_has_one_row_per_point_with_its_capacity_and_the_planner(grid_sweep):
    table = rep.sweep_table(rep.build_report([grid_sweep]))
    assert len(table) == len(THRESHOLDS) * len(LINKS)
    assert (table["runs"] == 2).all() and table["saturated"].all() and not table["closed_loop"].any()
    for _, row in table.iterrows():
        cap = capacity(row["deployment.router.threshold_tokens"], row["link.capacity_gbps"])
        assert row["steady_rps"] == pytest.approx(cap, rel=0.05)
        assert row["plan_lambda_max_rps"] == pytest.approx(1.1 * cap)
    assert "threshold_tokens" not in table.columns  # the measured t only repeats the swept one
    assert table["n_prefill"].tolist() == [3] * len(table)  # the split was not swept: it stays


def test_a_point_below_capacity_is_not_saturated(run_factory, tmp_path):
    """One run per CV at half the capacity: steady_rps is the offered rate and not a capacity."""
    for i, cv in enumerate((1.0, 4.0)):
        run_dir = tmp_path / f"{i}_a"
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / ".hydra" / "overrides.yaml").write_text(f"- workload.arrivals.cv={cv}\n")
        req, ts, meta = run_factory("a", 1.0, 2.0)
        write_run(run_dir, req, ts, meta, {"figures": False})
    table = rep.sweep_table(rep.build_report([tmp_path]))
    assert table["workload.arrivals.cv"].tolist() == [1.0, 4.0]
    assert not table["saturated"].any()
    assert table["steady_rps"].tolist() == pytest.approx([1.0, 1.0], rel=0.03)


def lines_by_label(ax) -> dict[str, tuple[list[float], list[float]]]:
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata())) for line in ax.get_lines()}


TABLE = pd.DataFrame({
    "deployment": ["a", "a", "a", "b", "b"],
    "link.capacity_gbps": [100.0, 1.0, 10.0, 1.0, 100.0],
    "steady_rps": [3.0, 1.0, 2.5, 0.2, 2.4],
    "saturated": [True, True, True, True, True],
    "closed_loop": [True, True, False, True, True],
    "plan_lambda_max_rps": [3.1, 1.1, 2.6, np.nan, np.nan],
    "goodput_rps": [0.1, 0.0, 1.5, 0.0, 0.1],
    "ttft_mean_s": [5.0, 50.0, 9.0, 80.0, 6.0],
    "ttft_p90_s": [9.0, 90.0, 20.0, 160.0, 12.0],
})


def test_sweep_lines_plot_capacity_and_planner_vs_the_parameter_sorted(plots):
    _fig, ax = plots.new_axes()
    plots.sweep_lines(TABLE, "link.capacity_gbps", ax)
    lines = lines_by_label(ax)
    assert lines["a emulated"] == ([1.0, 10.0, 100.0], [1.0, 2.5, 3.0])
    assert lines["a planner Λ_max"] == ([1.0, 10.0, 100.0], [1.1, 2.6, 3.1])
    assert lines["b emulated"] == ([1.0, 100.0], [0.2, 2.4])
    assert "b planner Λ_max" not in lines  # no plan columns for b
    assert lines["a goodput"] == ([10.0], [1.5])  # open-loop points only
    assert ax.get_xscale() == "log" and "Gbps" in ax.get_xlabel() and "req/s" in ax.get_ylabel()


def test_sweep_ttft_plots_mean_and_p90(plots):
    _fig, ax = plots.new_axes()
    plots.sweep_ttft(TABLE, "link.capacity_gbps", ax)
    lines = lines_by_label(ax)
    assert lines["b mean"] == ([1.0, 100.0], [80.0, 6.0])
    assert lines["a P90"] == ([1.0, 10.0, 100.0], [90.0, 20.0, 9.0])


def test_sweep_lines_draw_one_line_per_value_of_the_other_parameter(plots):
    table = pd.DataFrame({"deployment": "a", "x.t": [1.0, 2.0, 1.0, 2.0], "x.bw": [5.0, 5.0, 100.0, 100.0],
                          "steady_rps": [1.0, 2.0, 3.0, 4.0]})
    _fig, ax = plots.new_axes()
    plots.sweep_lines(table, "x.t", ax)
    lines = lines_by_label(ax)
    assert lines["a, bw=5 emulated"] == ([1.0, 2.0], [1.0, 2.0])
    assert lines["a, bw=100 emulated"] == ([1.0, 2.0], [3.0, 4.0])


def test_heatmap_puts_each_value_in_its_cell_and_leaves_missing_points_blank(plots):
    table = pd.DataFrame({"deployment": ["a", "a", "a", "b"], "p.x": [2.0, 1.0, 2.0, 1.0],
                          "p.y": [10.0, 10.0, 20.0, 10.0],
                          "steady_rps": [3.0, 1.0, 4.0, 7.0], "saturated": True})
    fig = plots.sweep_heatmap(table, "p.x", "p.y")
    panels = [ax for ax in fig.axes if ax.collections and ax.get_title()]  # not the colour bars
    images = [ax.collections[0].get_array().reshape(len(ax.get_yticks()), len(ax.get_xticks())) for ax in panels]
    assert len(images) == 2  # one panel per deployment
    a = np.ma.filled(images[0].astype(float), np.nan)
    assert a[0].tolist() == [1.0, 3.0]  # y = 10: x = 1, 2
    assert a[1, 0] != a[1, 0] and a[1, 1] == 4.0  # y = 20: x = 1 missing (NaN)
    assert np.ma.filled(images[1].astype(float), np.nan).tolist() == [[7.0]]
    panel = panels[0]
    assert [t.get_text() for t in panel.get_xticklabels()] == ["1", "2"]
    assert panel.get_xlabel() == "p.x" and panel.get_ylabel() == "p.y"


def test_kv_throughput_draws_model_curves_and_measured_points(plots):
    df = pd.DataFrame({
        "model": ["m", "m", "m", "d", "d"], "family": ["hybrid"] * 3 + ["dense"] * 2,
        "hardware": "h200", "input_tokens": [4096.0, 1024.0, 1024.0, 1024.0, 4096.0],
        "phi_kv_gbps": [2.0, 1.0, 1.5, 5.0, 30.0],
        "source": ["costmodel", "costmodel", "measured", "costmodel", "costmodel"],
    })
    _fig, ax = plots.new_axes()
    plots.kv_throughput(df, ax)
    lines = lines_by_label(ax)
    assert lines["m (hybrid)"] == ([1024.0, 4096.0], [1.0, 2.0])
    assert lines["m measured"] == ([1024.0], [1.5])
    assert lines["d (dense)"] == ([1024.0, 4096.0], [5.0, 30.0])
    assert "d measured" not in lines
    assert "Gbps" in ax.get_ylabel() and "h200" in ax.get_title()


def test_plan_threshold_overlays_the_emulated_capacity(plots):
    curve = pd.DataFrame({"deployment": "p", "threshold_tokens": [0.0, 20000.0, 40000.0], "lambda_rps": [2.5, 3.2, 1.4],
                          "n_prefill": 3, "n_decode": 5})
    emulated = pd.DataFrame({"deployment": "p", "threshold_tokens": [40000.0, 0.0], "capacity_rps": [1.4, 2.3]})
    fig = plots.plan_panels(curve, plots.plan_threshold, emulated)
    lines = lines_by_label(fig.axes[0])
    assert lines["emulated capacity"] == ([0.0, 40.0], [2.3, 1.4])
    assert lines["Λ_max"] == ([0.0, 20.0, 40.0], [2.5, 3.2, 1.4])


def test_plan_panels_draw_one_panel_per_deployment(plots):
    curve = pd.DataFrame({"deployment": ["h", "h", "p", "p"], "n_prefill": [1, 2, 0, 1], "n_decode": [2, 1, 2, 1],
                          "lambda_rps": [1.0, 0.5, 0.0, 2.0], "threshold_tokens": [np.nan, np.nan, 19e3, 19e3]})
    fig = plots.plan_panels(curve, plots.plan_split)
    assert len(fig.axes) == 2
    assert lines_by_label(fig.axes[1])["Λ_max"] == ([0.0, 1.0], [0.0, 2.0])
    assert "(p)" in fig.axes[1].get_title()


def test_emulated_points_take_the_runs_at_the_curves_fixed_configuration():
    report = pd.DataFrame({
        "deployment": ["p", "p", "p", "p", "h"],
        "threshold_tokens": [20000.0, 20000.0, 5000.0, 5000.0, np.nan],
        "n_prefill": [3, 3, 3, 4, 9], "n_decode": [5, 5, 5, 4, 3],
        "steady_throughput_rps": [2.0, 3.1, 2.4, 9.9, 2.0],
    })
    curve = pd.DataFrame({"deployment": "p", "threshold_tokens": [0.0, 30000.0], "n_prefill": 3, "n_decode": 5})
    points = rep.emulated_points(report, curve, "threshold_tokens")
    assert points.to_dict("list") == {"deployment": ["p", "p"], "threshold_tokens": [20000.0, 5000.0],
                                      "capacity_rps": [3.1, 2.4]}  # max over loads; the 4/4 split is off the curve
    split = pd.DataFrame({"deployment": ["h", "p"], "threshold_tokens": [np.nan, 20000.0], "n_prefill": [9, 3],
                          "n_decode": [3, 5]})
    points = rep.emulated_points(report, split, "n_prefill")
    assert points.to_dict("list") == {"deployment": ["h", "p"], "n_prefill": [9, 3], "capacity_rps": [2.0, 3.1]}


def test_emulated_points_are_empty_when_the_sweep_varied_something_else():
    report = pd.DataFrame({"deployment": "p", "link.capacity_gbps": [1.0, 100.0], "threshold_tokens": 20000.0,
                           "n_prefill": 3, "n_decode": 5, "steady_throughput_rps": [1.0, 3.0]})
    curve = pd.DataFrame({"deployment": "p", "threshold_tokens": [0.0], "n_prefill": 3, "n_decode": 5})
    assert rep.emulated_points(report, curve, "threshold_tokens").empty


def test_report_of_a_two_parameter_sweep_prints_the_sweep_table_and_draws_its_figures(grid_sweep, tmp_path):
    _report, text = rep.write_report([grid_sweep], out_dir=tmp_path)
    assert "swept: deployment.router.threshold_tokens, link.capacity_gbps" in text
    assert "x_homogeneous_pd" not in text  # no per-deployment capacity table over a parameter sweep
    for name in ("fig_sweep_threshold_tokens.png", "fig_sweep_threshold_tokens_ttft.png", "fig_sweep_capacity_gbps.png",
                 "fig_sweep_capacity_gbps_ttft.png", "fig_sweep_heatmap.png", "fig_throughput_vs_load.png"):
        assert (tmp_path / name).stat().st_size > 1000, name
    assert "skipped fig_ttft_cdf.png, fig_egress_timeseries.png, fig_table6.png" in text
    assert not (tmp_path / "fig_table6.png").exists()
    assert len(pd.read_parquet(tmp_path / "report.parquet")) == 12


def test_saturation_only_sweep_skips_the_load_figures(tmp_path, run_factory, unrendered_figures):
    for i, t in enumerate((1000, 2000)):
        run_dir = tmp_path / f"{i}_p"
        (run_dir / ".hydra").mkdir(parents=True)
        (run_dir / ".hydra" / "overrides.yaml").write_text(f"- deployment.router.threshold_tokens={t}\n")
        req, ts, meta = run_factory("p", 4.0, 2.0 + i)
        meta["offered_rps"] = math.inf
        write_run(run_dir, req, ts, meta, {"figures": False})
    report, text = rep.write_report([tmp_path], out_dir=tmp_path)
    assert "skipped fig_throughput_vs_load.png, fig_ttft_vs_load.png" in text
    table = rep.sweep_table(report)
    assert table["closed_loop"].all() and table["steady_rps"].tolist() == pytest.approx([2.0, 3.0], rel=0.05)


def test_categorical_sweep_keys_split_the_points_but_get_no_axis(plots, tmp_path, run_factory, unrendered_figures):
    """A sweep over a config group (`workload=a,b`) and a boolean flag: both are sweep keys that
    separate points (never mixed into one capacity); only the numeric key gets a line figure."""
    job = 0
    for workload, cap_scale in (("a", 1.0), ("b", 2.0)):
        for flag in (False, True):
            for cv in (1.0, 4.0):
                run_dir = tmp_path / f"{job}_p"
                (run_dir / ".hydra").mkdir(parents=True)
                (run_dir / ".hydra" / "overrides.yaml").write_text(
                    f"- workload={workload}\n- deployment.router.flag={str(flag).lower()}\n"
                    f"- workload.arrivals.cv={cv}\n")
                req, ts, meta = run_factory("p", 6.0, cap_scale * (2.0 + flag))
                meta["workload"] = workload
                write_run(run_dir, req, ts, meta, {"figures": False})
                job += 1
    report, text = rep.write_report([tmp_path], out_dir=tmp_path)
    params = rep.sweep_params(report)
    assert params == ["workload", "deployment.router.flag", "workload.arrivals.cv"]
    # two categories: no timeline, and the report says why
    assert not (tmp_path / "fig_timeline.png").exists()
    assert ("skipped fig_timeline.png: a timeline compares runs over exactly 1 swept category besides the "
            "deployment, the sweep varies workload, deployment.router.flag") in text
    assert rep.numeric_params(report, params) == ["workload.arrivals.cv"]
    table = rep.sweep_table(report).set_index(["workload", "deployment.router.flag", "workload.arrivals.cv"])
    assert table.loc[("b", True, 4.0), "steady_rps"] == pytest.approx(6.0, rel=0.05)
    assert table.loc[("a", False, 1.0), "steady_rps"] == pytest.approx(2.0, rel=0.05)
    assert (tmp_path / "fig_sweep_cv.png").exists() and not (tmp_path / "fig_sweep_heatmap.png").exists()
    _fig, ax = plots.new_axes()
    plots.sweep_lines(rep.sweep_table(report), "workload.arrivals.cv", ax, keys=params)
    assert len([label for label in lines_by_label(ax) if label.endswith("emulated")]) == 4
    assert lines_by_label(ax)["p, workload=b, flag=True emulated"][1] == pytest.approx([6.0, 6.0], rel=0.05)
