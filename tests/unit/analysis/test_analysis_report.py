"""The sweep report over a fake multirun: rows, override columns, capacity, tables, figures, callback."""

from __future__ import annotations

import shutil
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf

from harness.analysis import report as rep
from harness.analysis import runs
from harness.analysis.callback import ReportCallback
from harness.errors import InputError
from harness.report import run as report_cli

FIGURES = ("fig_throughput_vs_load.png", "fig_ttft_vs_load.png", "fig_ttft_cdf.png", "fig_egress_timeseries.png",
           "fig_table6.png")


def test_report_has_one_row_per_run_with_override_columns(shared_sweep):
    report = rep.build_report([shared_sweep])
    assert len(report) == 9
    assert sorted(report["loadgen.rate_rps"].unique()) == [1.0, 2.5, 4.0]
    assert set(report["tag"]) == {"fake"}
    assert report["load_rps"].tolist() == report["offered_rps"].tolist()
    assert runs.deployments(report) == ["homogeneous_pd", "prfaas_pd", "naive_hetero"]


@pytest.mark.parametrize(("deployment", "capacity"),
                         [("homogeneous_pd", 2.0), ("prfaas_pd", 3.1), ("naive_hetero", 2.4)])
def test_capacity_is_the_bottleneck_rate_of_each_fake_deployment(shared_sweep, deployment, capacity):
    """The fake server completes at most `capacity` req/s: the 4 req/s run measures it within 3%."""
    table = rep.deployment_table(rep.build_report([shared_sweep])).set_index("deployment")
    assert table.loc[deployment, "capacity_rps"] == pytest.approx(capacity, rel=0.03)
    assert table.loc[deployment, "x_homogeneous_pd"] == pytest.approx(capacity / 2.0, rel=0.05)
    assert table.loc[deployment, "low_load_rps"] == 1.0
    assert table.loc[deployment, "cap_load_rps"] == (2.5 if capacity > 2.5 else 1.0)


def test_light_load_runs_measure_the_offered_rate(shared_sweep):
    report = rep.build_report([shared_sweep])
    light = report[report["offered_rps"] == 1.0]
    assert light["steady_throughput_rps"].tolist() == pytest.approx([1.0, 1.0, 1.0], rel=0.02)


def test_printed_report_has_a_deployment_table_and_one_line_per_run(shared_sweep):
    text = rep.format_report(rep.build_report([shared_sweep]))
    lines = text.splitlines()
    header = next(line for line in lines if line.strip().startswith("deployment") and "capacity_rps" in line)
    assert "x_homogeneous_pd" in header and "ttft_p90_s@low" in header and "egress_gbps@cap" in header
    run_lines = [line for line in lines if "_pd_" in line or "_hetero_" in line]
    assert len(run_lines) == 9


def test_report_cli_writes_parquet_and_figures_including_planner_sweeps(sweep, capsys):
    pd.DataFrame({"threshold_tokens": [1e4, 2e4], "lambda_rps": [2.0, 3.0], "prfaas_bound_rps": [2.0, 3.0],
                  "pd_p_bound_rps": [5.0, 3.1]}).to_parquet(sweep / "plan_sweep_threshold.parquet")
    pd.DataFrame({"n_prefill": [1, 2], "lambda_rps": [1.0, 2.0], "prefill_bound_rps": [1.0, 2.0],
                  "decode_bound_rps": [4.0, 3.0]}).to_parquet(sweep / "plan_sweep_split.parquet")
    assert report_cli([str(sweep)]) == 0
    assert "capacity_rps" in capsys.readouterr().out
    assert len(pd.read_parquet(sweep / "report.parquet")) == 9
    for name in (*FIGURES, "fig_plan_threshold.png", "fig_plan_split.png"):
        assert (sweep / name).read_bytes()[:4] == b"\x89PNG", name


def test_report_cli_no_figures_and_out_dir(sweep, tmp_path, capsys):
    out_dir = tmp_path / "elsewhere"
    assert report_cli([str(sweep), "--out", str(out_dir), "--no-figures"]) == 0
    assert sorted(p.name for p in out_dir.iterdir()) == ["report.parquet"]
    assert not (sweep / "report.parquet").exists()




def test_report_of_several_dirs_never_replaces_an_input_report(sweep, tmp_path, monkeypatch, capsys):
    """`harness-report A B` used to write the combined table over A's own report.parquet: A's report
    must still describe A alone; the combined one goes to a new folder in the current directory."""
    other = Path(shutil.copytree(sweep, tmp_path / "other"))
    assert report_cli([str(sweep), "--no-figures"]) == 0
    own = (sweep / "report.parquet").read_bytes()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    assert report_cli([str(sweep), str(other), "--no-figures"]) == 0
    assert (sweep / "report.parquet").read_bytes() == own
    assert not (other / "report.parquet").exists()
    made = sorted(cwd.glob("report_*"))
    assert len(made) == 1 and len(pd.read_parquet(made[0] / "report.parquet")) == 18
    assert f"report: {made[0].name}/report.parquet" in capsys.readouterr().out
    assert report_cli([str(sweep), str(other), "--no-figures"]) == 0  # a second one: another new folder
    assert len(sorted(cwd.glob("report_*"))) == 2


def test_report_of_several_dirs_refuses_an_input_as_out(sweep, tmp_path, capsys):
    other = Path(shutil.copytree(sweep, tmp_path / "other"))
    run_dir = next(p.parent for p in sorted(other.rglob("summary.parquet")))
    for out in (sweep, run_dir):
        with pytest.raises(SystemExit) as exit_info:
            report_cli([str(sweep), str(other), "--no-figures", "--out", str(out)])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert f"--out {out}" in err and "never replaces" in err
    assert not (sweep / "report.parquet").exists() and not (run_dir / "report.parquet").exists()
    assert report_cli([str(sweep), str(other), "--no-figures", "--out", str(tmp_path / "both")]) == 0
    assert len(pd.read_parquet(tmp_path / "both" / "report.parquet")) == 18


def test_report_moved_away_from_its_runs_still_rebuilds_without_the_cdf(sweep, tmp_path, capsys):
    report_cli([str(sweep), "--no-figures"])
    alone = tmp_path / "alone"
    alone.mkdir()
    shutil.copy(sweep / "report.parquet", alone / "report.parquet")
    shutil.rmtree(sweep)
    assert report_cli([str(alone)]) == 0
    out = capsys.readouterr().out
    assert "skipped fig_ttft_cdf.png" in out and "skipped fig_plan_split.png: no plan_sweep_split.parquet" in out
    assert (alone / "fig_throughput_vs_load.png").exists()


def test_no_runs_is_an_input_error_and_exit_2(tmp_path, capsys):
    with pytest.raises(InputError, match="no run directory"):
        rep.build_report([tmp_path])
    with pytest.raises(SystemExit) as exc:
        report_cli([str(tmp_path)])
    assert exc.value.code == 2 and "error: no run directory" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["summary.parquet", "requests.parquet", "timeseries.parquet"])
def test_a_parquet_that_is_not_a_report_is_bad_input_for_report_and_gate(sweep, capsys, name):
    """A run's own Parquet files given in place of a report: exit 2 naming the file, the missing column and what
    is expected (was a KeyError crash, exit 1); the run's folder still reports."""
    from harness.gate import run as gate_cli

    run_dir = sweep / "0_homogeneous_pd_1.0"
    gate = str(Path(__file__).resolve().parents[3] / "conf" / "gates" / "paper_case.yaml")
    for command in (lambda: report_cli([str(run_dir / name), "--no-figures"]),
                    lambda: gate_cli([str(run_dir / name), "--gate", gate])):
        with pytest.raises(SystemExit) as exc:
            command()
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.count("\n") == 1, err
        assert f"error: {run_dir / name}: not a sweep report (missing column(s) load_rps)" in err
        assert "a run directory" in err and "a sweep directory or a report.parquet" in err
        assert (f"give its folder {run_dir}" in err) is (name != "timeseries.parquet")
    assert not (run_dir / "report.parquet").exists()
    assert report_cli([str(run_dir), "--no-figures"]) == 0
    assert "0_homogeneous_pd_1.0" in capsys.readouterr().out


@pytest.mark.parametrize(("args", "message"), [
    (["--paper", "/nonexistent.yaml"], "error: --paper /nonexistent.yaml: no such file; give a gate file"),
    (["--paper", "conf/gates/paper_case.yaml"], "error: --paper conf/gates/paper_case.yaml: no reference targets"),
    (["--baseline", "foo"],
     "error: --baseline foo: not a deployment in the report; present: homogeneous_pd, prfaas_pd, naive_hetero"),
])
def test_a_chosen_paper_file_or_baseline_that_cannot_be_used_is_bad_input(shared_sweep, tmp_path, capsys, args,
                                                                          message):
    """Was exit 0 with fig_table6 skipped or the ratio column dropped, silently; nothing is written."""
    with pytest.raises(SystemExit) as exc:
        report_cli([str(shared_sweep), "--out", str(tmp_path), "--no-figures", *args])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.startswith(message) and err.count("\n") == 1, err
    assert not list(tmp_path.iterdir())


def test_a_paper_file_or_hydra_overrides_that_are_not_yaml_are_one_line_naming_the_line(sweep, tmp_path, capsys):
    """Was PyYAML's own text over 8 lines."""
    bad = tmp_path / "bad.yaml"
    bad.write_text("checks:\n  - {metric: x, min: 1\n  - {metric: y}\n")
    overrides = sweep / "4_prfaas_pd_2.5" / ".hydra" / "overrides.yaml"
    overrides.write_text("- deployment=prfaas_pd\n- [loadgen.rate_rps=2.5\n")
    for args, message in (([str(sweep), "--paper", str(bad)], f"error: gate file {bad}, line 3, column 5: not valid "
                                                                f"YAML: expected ',' or '}}', but got '{{'"),
                          ([str(sweep)], f"error: Hydra overrides {overrides}, line 3, column 1: not valid YAML: ")):
        with pytest.raises(SystemExit) as exc:
            report_cli([*args, "--no-figures"])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.startswith(message) and err.count("\n") == 1, err


def test_a_chosen_paper_file_and_baseline_are_used(shared_sweep, tmp_path, capsys):
    """The ratio column is named after the chosen baseline; a paper file with targets is accepted."""
    assert report_cli([str(shared_sweep), "--out", str(tmp_path), "--no-figures", "--baseline", "prfaas_pd",
                       "--paper", "conf/gates/paper_table6.yaml"]) == 0
    assert "x_prfaas_pd" in capsys.readouterr().out


def test_cdf_runs_pick_a_common_moderate_load(shared_sweep):
    """60% of the smallest capacity (2.0) is 1.2 req/s: the common load closest to it is 1.0."""
    load, chosen = rep.cdf_runs(rep.build_report([shared_sweep]))
    assert load == 1.0 and set(chosen) == {"homogeneous_pd", "prfaas_pd", "naive_hetero"}
    assert all("_1.0" in d for d in chosen.values())


def test_egress_figure_uses_prfaas_pd_near_capacity(shared_sweep):
    name, run_dir = rep.egress_run(rep.build_report([shared_sweep]))
    assert name == "prfaas_pd" and run_dir.endswith("prfaas_pd_2.5")


def test_callback_reports_the_sweep_dir_at_multirun_end(sweep, capsys):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}, "analysis": {"figures": False}})
    ReportCallback().on_multirun_end(config)
    assert "capacity_rps" in capsys.readouterr().out
    assert (sweep / "report.parquet").exists() and not (sweep / "fig_table6.png").exists()


def test_callback_prints_an_error_instead_of_crashing_an_empty_sweep(tmp_path, capsys):
    ReportCallback(figures=False).on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}}))
    assert "error: report of" in capsys.readouterr().err


def test_plans_from_real_summaries_keep_one_deployment_column():
    """Emulator summaries carry the plan's own name as plan_deployment; it must not become a second key."""
    import pandas as pd

    from harness.analysis import runs

    report = pd.DataFrame({"deployment": ["a"], "plan_deployment": ["a"], "plan_lambda_max_rps": [1.0]})
    plans = runs.collect_plans([], report)
    assert list(plans.columns).count("deployment") == 1
    assert plans.loc[plans["deployment"] == "a", "lambda_max_rps"].iloc[0] == 1.0
