"""Faults on a schedule: a PrfaaS outage and link trouble. Nothing is lost; the physics shows."""

from __future__ import annotations

import numpy as np
import pytest

from harness.analysis.summary import summarize
from harness.errors import InputError
from harness.runs.sim import run_sim

from .conftest import compose_cfg

BASE = ("loadgen.rate_rps=1.8", "workload.num_requests=1200")


def _run(*overrides):
    cfg = compose_cfg(*BASE, *overrides)
    result = run_sim(cfg)
    return result, summarize(result.requests, result.timeseries, result.meta, cfg.analysis)


@pytest.mark.parametrize("deployment", ["prfaas_pd", "naive_hetero"])
def test_an_outage_loses_nothing_and_reroutes(deployment):
    """PrfaaS unreachable for 200-320 s: stuck work restarts, every request still ends in one record."""
    result, summary = _run(f"deployment={deployment}", "faults=prfaas_outage")
    df = result.requests
    assert len(df) == 1200 and df["request_id"].is_unique
    assert summary["failed"] == 0
    assert df["retries"].sum() > 0
    remote = df[df["route"] == "prfaas"]
    kv_in_outage = (remote["kv_ready_s"] > 200) & (remote["kv_ready_s"] < 320)
    assert not kv_in_outage.any()  # nothing crosses a dead link
    if deployment == "prfaas_pd":
        during = df[(df["arrival_s"] > 201) & (df["arrival_s"] < 319)]
        assert (during["route"] == "local").all()
    else:  # no local prefill: requests wait for the remote cluster to return
        assert remote["prefill_start_s"].between(200, 320, inclusive="neither").sum() == 0


def test_homogeneous_pd_does_not_notice_a_prfaas_outage():
    base, _ = _run("deployment=homogeneous_pd")
    faulted, _ = _run("deployment=homogeneous_pd", "faults=prfaas_outage")
    assert np.allclose(base.requests["ttft_s"], faulted.requests["ttft_s"])


def test_loss_and_rtt_stretch_remote_transfers():
    """A lossy, long path caps each TCP connection (Mathis): offloaded KV lands later than on a clean link."""
    clean, _ = _run("deployment=prfaas_pd")
    trouble, _ = _run("deployment=prfaas_pd", "faults=rtt_spike")

    def tail(df):
        remote = df[(df["route"] == "prfaas") & df["arrival_s"].between(220, 380)]
        return float((remote["kv_ready_s"] - remote["prefill_end_s"]).mean())

    assert tail(trouble.requests) > 5 * tail(clean.requests)


def test_bad_fault_schedules_are_named():
    with pytest.raises(InputError, match=r"faults.prfaas_outages\[0\]"):
        _run("deployment=prfaas_pd", "faults.prfaas_outages=[[300,200]]")
    with pytest.raises(InputError, match="unknown key"):
        _run("deployment=prfaas_pd", "faults.link_events=[{t_s:1,bandwidth:3}]")


def test_the_rebalancer_turns_decode_into_prefill_while_prfaas_is_away():
    """During the outage the local cluster must prefill everything: re-planning it alone moves instances
    to prefill, and the goodput lost to the outage shrinks."""
    _static, static_summary = _run("deployment=prfaas_pd", "faults=prfaas_outage", "workload.num_requests=2000")
    adapted, adapted_summary = _run("deployment=prfaas_pd", "faults=prfaas_outage", "workload.num_requests=2000",
                                    "rebalancer.enabled=true")
    ts = adapted.timeseries
    during = ts[(ts["t_s"] > 200) & (ts["t_s"] < 320)]
    assert during["n_prefill_active"].max() > 3
    assert adapted_summary["goodput_rps"] > 1.1 * static_summary["goodput_rps"]
    assert adapted_summary["failed"] == 0
