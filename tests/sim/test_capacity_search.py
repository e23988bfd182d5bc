"""`loadgen.rate_rps=max`: the capacity search on deployments whose capacity is known in closed form."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from harness.deploy.build import make_plan
from harness.errors import InputError
from harness.runs.capacity import SearchSettings, search, summary_meta
from harness.schema import register_configs

CONF = str(Path(__file__).resolve().parents[2] / "conf")
# One prefill instance, fixed 32K-token prompts and short outputs on plenty of decode: an M/D/1 queue whose
# capacity is 1 / prefill time, which is the planner's Theta_pd-p (its Lambda_max here).
MD1 = ["deployment=homogeneous_pd", "workload=fixed", "workload.input_tokens=32768", "workload.output_tokens=16",
       "deployment.local.n_prefill=1", "deployment.local.n_decode=11", "analysis.figures=false"]


def _cfg(*overrides: str):
    register_configs()
    with initialize_config_dir(config_dir=CONF, version_base=None):
        return compose("config", overrides=list(overrides))


@pytest.fixture(scope="module")
def md1_search():
    cfg = _cfg(*MD1, "loadgen.rate_rps=max", "loadgen.capacity_search.min_requests=20000")
    settings = SearchSettings.from_cfg(cfg)
    return cfg, settings, search(cfg, settings, say=lambda line: None)


def test_the_search_finds_an_md1_capacity_within_its_tolerance(md1_search):
    cfg, settings, found = md1_search
    plan = make_plan(cfg)
    capacity = plan["theta_pd_p_rps"]  # one instance: 1 / its prefill time of a 32K prompt
    assert plan["lambda_max_rps"] == pytest.approx(capacity)  # the prefill server binds, nothing else
    assert plan["theta_pd_d_rps"] > 2 * capacity
    # The highest stable rate sits just under the server's rate: within the bracket's width plus the
    # 2% a finite run of a queue at rho ~ 0.98 cannot tell from growth.
    assert capacity * (1 - settings.tolerance - 0.02) <= found.lo_rps <= capacity
    assert found.hi_rps > capacity * (1 - settings.tolerance)


def test_every_probe_is_recorded_with_its_reason(md1_search):
    _, settings, found = md1_search
    frame = found.frame()
    assert len(frame) == len(found.probes) >= 3
    assert set(frame["stable"]) == {True, False}
    assert frame["reason"].str.match(r"^(stable|unstable): ").all()
    meta = summary_meta(found, settings)
    assert meta["converged"] and meta["runs"] == len(found.probes)
    assert meta["lo_rps"] < meta["hi_rps"] <= meta["lo_rps"] * (1 + settings.tolerance)
    assert meta["rps"] == found.lo_rps == frame.loc[frame["stable"], "rate_rps"].max()


@pytest.mark.parametrize("key,value", [("tolerance", 0), ("max_runs", 1), ("min_goodput", 1.5), ("alpha", 1)])
def test_bad_search_settings_are_one_line(key, value):
    cfg = _cfg(f"loadgen.capacity_search.{key}={value}")
    with pytest.raises(InputError, match=rf"^loadgen\.capacity_search\.{key}=.* must be "):
        SearchSettings.from_cfg(cfg)


def test_the_search_is_sim_only(tmp_path):
    from harness.runs.capacity import run_search

    cfg = _cfg("mode=live", "loadgen.rate_rps=max")
    with pytest.raises(InputError, match="sim mode only"):
        run_search(cfg, tmp_path)


def test_a_max_run_writes_its_probes_and_summary_and_the_report_reads_it(tmp_path):
    """The run directory holds the run at the capacity, capacity_search.parquet and the capacity_* keys; the
    report's capacity is the searched one, not the highest steady throughput of the sweep's runs."""
    import json

    import pandas as pd

    from harness.analysis.runs import capacity_rps
    from harness.runs.assemble import run_into

    cfg = _cfg(*MD1, "loadgen.rate_rps=max", "loadgen.capacity_search.min_requests=2000",
               "loadgen.capacity_search.tolerance=0.1", "loadgen.progress=false")
    cfg.out_dir = str(tmp_path)
    summary = run_into(cfg, tmp_path)
    probes = pd.read_parquet(tmp_path / "capacity_search.parquet")
    assert len(probes) == summary["capacity_runs"] >= 2
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved["capacity_rps"] == summary["capacity_rps"] == probes.loc[probes["stable"], "rate_rps"].max()
    assert saved["offered_rps"] == pytest.approx(summary["capacity_rps"])  # the run at the capacity
    assert isinstance(saved["capacity_warning"], str) and "capacity_closed_loop_gap" in saved
    report = pd.DataFrame([{"deployment": "d", "steady_throughput_rps": 10.0, "capacity_rps": float("nan")},
                           {"deployment": "d", "steady_throughput_rps": summary["steady_throughput_rps"],
                            "capacity_rps": summary["capacity_rps"]}])
    assert capacity_rps(report, "d") == summary["capacity_rps"]
    assert capacity_rps(report.drop(columns="capacity_rps"), "d") == 10.0


def test_a_signal_during_the_search_ends_it_with_the_stopped_run_and_the_probes_so_far(tmp_path, monkeypatch):
    """A run the signal stopped (meta `interrupted`) ends the search: its records are the run's files, the
    probes so far are recorded, and the capacity is NaN with a warning saying why."""
    import pandas as pd

    from harness.runs import capacity
    from harness.runs.sim import run_sim

    calls = []

    def stopped_on_third(cfg):
        result = run_sim(cfg)
        calls.append(cfg.loadgen.rate_rps)
        if len(calls) == 3:  # the closed loop, one probe, then the signal
            result.meta["interrupted"] = True
        return result

    monkeypatch.setattr("harness.runs.sim.run_sim", stopped_on_third)
    cfg = _cfg(*MD1, "loadgen.rate_rps=max", "loadgen.capacity_search.min_requests=2000", "loadgen.progress=false")
    result = capacity.run_search(cfg, tmp_path)
    assert result.meta["interrupted"] and len(calls) == 3
    meta = result.meta["capacity"]
    assert meta["runs"] == 1 and math.isnan(meta["rps"]) and meta["warning"].startswith("interrupted after 1 probe")
    assert len(pd.read_parquet(tmp_path / "capacity_search.parquet")) == 1
