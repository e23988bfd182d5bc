"""Perf gates: pass on a good report, fail (exit 1, naming the check) on a worse one, exit 2 on a bad file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from harness.analysis import gates
from harness.errors import InputError
from harness.gate import run as gate_cli

CONF_GATES = Path(__file__).resolve().parents[3] / "conf" / "gates"

# A report as runs.collect builds it: two deployments, three loads each.
REPORT = pd.DataFrame({
    "deployment": ["base"] * 3 + ["new"] * 3,
    "run_name": [f"{i}_x" for i in range(6)],
    "load_rps": [1.0, 2.0, 3.0, 1.0, 2.0, 3.0],
    "steady_throughput_rps": [1.0, 2.0, 2.0, 1.0, 2.0, 3.0],
    "ttft_mean_s": [4.0, 9.0, 30.0, 2.0, 2.5, 4.0],
    "egress_gbps_mean": [0.0, 0.0, 0.0, 5.0, 9.0, 12.0],
    "link_capacity_gbps": [100.0, 100.0, 100.0, 100.0, 10.0, 100.0],
    "plan_lambda_max_rps": [2.1, 2.1, 2.1, 3.2, 3.2, 3.2],
})


def write_gate(tmp_path: Path, checks: list[dict], name: str = "g.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"name": "t", "checks": checks}))  # JSON is YAML
    return path


def evaluate(tmp_path: Path, *checks: dict, report: pd.DataFrame = REPORT, plans: pd.DataFrame | None = None):
    return gates.evaluate(gates.load_gate(write_gate(tmp_path, list(checks))), report, plans)


@pytest.mark.parametrize(("check", "value", "passed"), [
    ({"metric": "capacity_rps", "deployment": "new", "relative_to": "base", "min": 1.45}, 1.5, True),
    ({"metric": "capacity_rps", "deployment": "new", "relative_to": "base", "min": 1.6}, 1.5, False),
    ({"metric": "capacity_rps", "deployment": "new", "target": 3.24, "rel_tol": 0.03}, 3.0, False),
    ({"metric": "capacity_rps", "deployment": "new", "target": 3.0, "abs_tol": 0}, 3.0, True),
    ({"metric": "ttft_mean_s", "deployment": "new", "at": "lowest_load", "max": 2.0}, 2.0, True),
    ({"metric": "ttft_mean_s", "deployment": "new", "relative_to": "base", "at": "lowest_load", "max": 0.6}, 0.5, True),
    ({"metric": "ttft_mean_s", "deployment": "base", "at": "near_capacity", "max": 10.0}, 9.0, True),
    ({"metric": "ttft_mean_s", "deployment": "base", "at": "highest_load", "max": 10.0}, 30.0, False),
    ({"metric": "ttft_mean_s", "deployment": "new", "at": 2.2, "max": 3.0}, 2.5, True),
    ({"metric": "ttft_mean_s", "deployment": "new", "max": 3.0}, 4.0, False),  # default at: all -> worst run
    ({"metric": "egress_gbps_mean", "deployment": "new", "max": "link_capacity_gbps"}, 9.0, True),  # 9 of 10 Gbps
    ({"metric": "egress_gbps_mean", "deployment": "new", "max": 8.0}, 12.0, False),
])
def test_checks_on_a_report(tmp_path, check, value, passed):
    (result,) = evaluate(tmp_path, check)
    assert result.value == pytest.approx(value)
    assert result.passed is passed


def test_column_bound_is_read_from_the_same_run(tmp_path):
    """At 2 req/s the link is only 10 Gbps and egress is 9: passes; a 8 Gbps cap at that run fails."""
    report = REPORT.copy()
    report.loc[4, "egress_gbps_mean"] = 11.0
    (result,) = evaluate(tmp_path, {"metric": "egress_gbps_mean", "deployment": "new", "max": "link_capacity_gbps"},
                         report=report)
    assert not result.passed and result.value == 11.0 and "4_x" in result.detail


def test_plan_metrics_come_from_summary_plan_columns_or_plan_json(tmp_path):
    plans = gates_plans_from_report()
    (a, b) = evaluate(tmp_path, {"metric": "lambda_max_rps", "deployment": "new", "target": 3.24, "rel_tol": 0.03},
                      {"metric": "lambda_max_rps", "source": "plan", "deployment": "new", "relative_to": "base",
                       "target": 1.54, "rel_tol": 0.03}, plans=plans)
    assert a.passed and a.value == 3.2
    assert b.passed and b.value == pytest.approx(3.2 / 2.1)


def gates_plans_from_report() -> pd.DataFrame:
    from harness.analysis.runs import collect_plans

    return collect_plans([], REPORT)


@pytest.mark.parametrize("doc", [
    {"prfaas_pd": {"lambda_max_rps": 3.2, "n_prefill": 3}},
    {"deployments": [{"deployment": "prfaas_pd", "lambda_max_rps": 3.2, "n_prefill": 3}]},
    {"deployment": "prfaas_pd", "lambda_max_rps": 3.2, "n_prefill": 3, "grid": {"t": [1, 2]}},
])
def test_plan_json_shapes_are_read(tmp_path, doc):
    from harness.analysis.runs import collect_plans

    (tmp_path / "plan.json").write_text(json.dumps(doc))
    plans = collect_plans([tmp_path])
    (result,) = evaluate(tmp_path, {"metric": "n_prefill", "source": "plan", "deployment": "prfaas_pd", "target": 3,
                                    "abs_tol": 0}, plans=plans)
    assert result.passed and "plan.json" in result.detail


def test_missing_plan_or_deployment_fails_with_a_reason(tmp_path):
    (no_plan, no_runs) = evaluate(tmp_path, {"metric": "theta_pd_d_rps", "deployment": "new", "min": 1},
                                  {"metric": "ttft_mean_s", "deployment": "ghost", "max": 1})
    assert not no_plan.passed and math.isnan(no_plan.value) and "plan" in no_plan.detail
    assert not no_runs.passed and "ghost" in no_runs.detail and "base, new" in no_runs.detail


@pytest.mark.parametrize(("checks", "message"), [
    ([{"metric": "ttft_mean_s", "max": 1, "bogus": 2}], r"check 0: unknown key 'bogus'; valid: name, metric"),
    ([{"metric": "ttft_mean_s", "max": 1}, {"deployment": "x", "max": 1}], r"check 1: key 'metric' is required"),
    ([{"metric": "ttft_mean_s"}], r"check 0: needs a bound"),
    ([{"metric": "ttft_mean_s", "target": 1.0}], r"check 0: key 'target' needs 'rel_tol' or 'abs_tol'"),
    ([{"metric": "ttft_mean_s", "max": "1.0x", "at": "sometimes"}], r"check 0: key 'at' is 'sometimes'; valid: lowest"),
    ([{"metric": "ttft_mean_s", "min": True}], r"check 0: key 'min' must be a number"),
    ([{"metric": "ttft_mean_s", "max": 1, "source": "oracle"}],
     r"check 0: key 'source' is 'oracle'; valid: report, plan"),
    ([], r"non-empty list under key 'checks'"),
    ([{"metric": "ttft_mean_s", "min": 5, "max": 1}], r"check 0: key 'min' \(5\) is above key 'max' \(1\)"),
    ([{"metric": "capacity_rps", "deployment": "x", "max": "plan_lambda_max_rps"}],
     r"check 0: key 'max' is 'plan_lambda_max_rps', a report column, but capacity_rps is a whole-sweep metric"),
    ([{"metric": "lambda_max_rps", "source": "plan", "min": "x"}], r"check 0: key 'min' is 'x', .* a plan check"),
])
def test_bad_gate_files_name_the_check_and_key(tmp_path, checks, message):
    with pytest.raises(InputError, match=message):
        gates.load_gate(write_gate(tmp_path, checks))


@pytest.mark.parametrize(("check", "message"), [
    ({"metric": "ttft_avg", "deployment": "new", "max": 1},
     r"check 0: key 'metric' is 'ttft_avg'; valid: .*ttft_mean_s"),
    ({"metric": "capacity_rps", "deployment": "new", "at": "lowest_load", "min": 1}, r"'at' does not apply"),
    ({"metric": "ttft_mean_s", "deployment": "new", "relative_to": "base", "max": 1}, r"'relative_to' needs 'at'"),
    ({"metric": "ttft_mean_s", "max": 1}, r"'deployment' is required .* valid: base, new"),
])
def test_checks_that_cannot_be_evaluated_are_input_errors(tmp_path, check, message):
    with pytest.raises(InputError, match=message):
        evaluate(tmp_path, check)


@pytest.mark.parametrize(("bound", "message"), [
    ({"min": "abc"}, r"check 1 \(egress_gbps_mean new\): key 'min' is 'abc', neither a number nor a numeric "
                     r"column of the report; numeric columns: egress_gbps_mean, link_capacity_gbps, load_rps"),
    ({"max": "run_name"}, r"check 1 \(egress_gbps_mean new\): key 'max' is 'run_name', neither a number"),
    ({"max": "lambda_max_rps"}, r"check 1 .*: key 'max' is 'lambda_max_rps', neither"),  # a plan key, not a column
    ({"max": "link_capacity_gpbs"}, r"check 1 .*: key 'max' is 'link_capacity_gpbs', neither a number nor a numeric "
                                    r"column of the report \(did you mean link_capacity_gbps\?\)"),
])
def test_a_bound_that_names_no_numeric_column_is_bad_input_before_any_check_runs(tmp_path, bound, message):
    """Was a failed check (`<= abc`, exit 1). Check 0 would itself stop the evaluation (no deployment among
    several): the bounds are checked first, so the error names check 1."""
    with pytest.raises(InputError, match=r"gate file .*g\.yaml, " + message):
        evaluate(tmp_path, {"metric": "ttft_mean_s", "max": 1},
                 {"metric": "egress_gbps_mean", "deployment": "new", **bound})


def test_gate_cli_exits_2_on_a_bound_that_is_no_column(tmp_path, shared_sweep, capsys):
    gate = write_gate(tmp_path, [{"metric": "egress_gbps_mean", "deployment": "prfaas_pd", "max": "foo_col"}])
    with pytest.raises(SystemExit) as exc:
        gate_cli([str(shared_sweep), "--gate", str(gate)])
    captured = capsys.readouterr()
    assert exc.value.code == 2 and captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith(f"error: gate file {gate}, check 0 (egress_gbps_mean prfaas_pd): key 'max' is "
                                   f"'foo_col', neither a number nor a numeric column of the report")


@pytest.mark.parametrize(("name", "text", "message"), [
    ("bad.yaml", "checks:\n  - {metric: x, min: 1\n  - {metric: y}\n",
     ", line 3, column 5: not valid YAML: expected ',' or '}', but got '{' (while parsing a flow mapping from line 2)"),
    ("g.jsonl", '{"metric": "x"}\n{"metric": "y"}\n',
     ", line 2, column 1: not valid YAML: expected '<document start>', but found '{': a second document"),
    ("g.parquet", b"PAR1\x15\x04\xff\xfe", ": not a YAML text file (byte 6 is not UTF-8)"),
])
def test_a_gate_file_that_is_not_yaml_is_one_line_naming_the_line(tmp_path, shared_sweep, capsys, name, text, message):
    """Was PyYAML's own text: 8 lines (4 for JSON Lines), a traceback-like caret display."""
    path = tmp_path / name
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    with pytest.raises(SystemExit) as exc:
        gate_cli([str(shared_sweep), "--gate", str(path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: gate file {path}{message}")


def test_gate_cli_passes_on_a_good_sweep_and_fails_naming_the_check_on_a_worse_one(tmp_path, sweep_factory,
                                                                                  good_spec, capsys):
    gate = write_gate(tmp_path, [
        {"metric": "capacity_rps", "deployment": "prfaas_pd", "relative_to": "homogeneous_pd", "min": 1.45},
        {"metric": "ttft_p90_s", "deployment": "prfaas_pd", "at": "lowest_load", "max": 6.0},
    ])
    good = sweep_factory(tmp_path / "good")
    assert gate_cli([str(good), "--gate", str(gate)]) == 0
    assert "2/2 checks passed" in capsys.readouterr().out

    worse = dict(good_spec, prfaas_pd=(2.2, 1.0, 1.5, 0.5))  # capacity only 1.1x the baseline
    bad = sweep_factory(tmp_path / "bad", spec=worse)
    assert gate_cli([str(bad), "--gate", str(gate)]) == 1
    out = capsys.readouterr().out
    assert "1/2 checks passed; FAILED: #0 capacity_rps prfaas_pd / homogeneous_pd" in out
    assert "FAIL" in out.splitlines()[2]


def test_gate_cli_exits_2_on_a_bad_gate_file(tmp_path, sweep, capsys):
    bad = write_gate(tmp_path, [{"metric": "capacity_rps", "deploymnet": "x", "min": 1}])
    with pytest.raises(SystemExit) as exc:
        gate_cli([str(sweep), "--gate", str(bad)])
    assert exc.value.code == 2
    assert "check 0: unknown key 'deploymnet'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["paper_case.yaml", "paper_table6.yaml"])
def test_shipped_gate_files_parse(name):
    gate = gates.load_gate(CONF_GATES / name)
    assert gate.checks and gate.name == name.removesuffix(".yaml")


def test_shipped_paper_case_gate_passes_on_the_good_fake_sweep(shared_sweep, capsys):
    assert gate_cli([str(shared_sweep), "--gate", str(CONF_GATES / "paper_case.yaml")]) == 0


def test_table6_reference_targets_are_the_paper_values():
    targets = gates.reference_targets(gates.load_gate(CONF_GATES / "paper_table6.yaml"))
    got = {(r.deployment, r.quantity): r.value for r in targets.itertuples()}
    assert got == {("prfaas_pd", "capacity_rps"): 3.24, ("homogeneous_pd", "capacity_rps"): 2.11,
                   ("naive_hetero", "capacity_rps"): 2.45, ("prfaas_pd", "ttft_mean_s"): 2.22,
                   ("prfaas_pd", "ttft_p90_s"): 3.51, ("homogeneous_pd", "ttft_mean_s"): 4.44,
                   ("homogeneous_pd", "ttft_p90_s"): 9.73, ("naive_hetero", "ttft_mean_s"): 1.74,
                   ("naive_hetero", "ttft_p90_s"): 3.51}
