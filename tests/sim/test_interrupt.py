"""A sim run stopped by SIGINT/SIGTERM records its requests in flight as a live run does: `interrupted`
(an error, not a failure), so the summary has them in `interrupted_requests`, not in `failed`.

The signal is raised from an event at a fixed virtual time (as the kernel would deliver it while an event
runs), so where the run stops does not depend on the machine's speed.
"""

from __future__ import annotations

import json
import signal

import pandas as pd
import pytest

from harness.clock import VirtualClock
from harness.runs import sim as sim_module
from harness.runs.assemble import run_into
from harness.runs.sim import run_sim

from .conftest import compose_cfg

ERROR = "interrupted: the run was stopped"


def _stop_at(monkeypatch, t_s: float, sig: int = signal.SIGINT) -> None:
    """The run's clock raises `sig` from an event at virtual time `t_s`."""

    class StoppingClock(VirtualClock):
        def __init__(self, start: float = 0.0) -> None:
            super().__init__(start)
            self.fire_at(t_s, lambda: signal.raise_signal(sig))

    monkeypatch.setattr(sim_module, "VirtualClock", StoppingClock)


# (overrides, virtual stop time, how many requests are in flight then: None = some)
CASES = {
    "open_loop": (["workload.num_requests=400"], 100.0, None),
    "closed_loop": (["workload.num_requests=400", "loadgen.concurrency=8"], 100.0, 8),  # always 8 in flight
    "capacity": (["workload.num_requests=400", "loadgen.rate_rps=inf"], 100.0, None),
    "aggregated": (["deployment=aggregated", "model=random_llama_35m", "workload=fixed", "workload.input_tokens=300",
                    "workload.output_tokens=64", "workload.num_requests=400", "loadgen.rate_rps=20"], 5.0, None),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_stopped_sim_run_records_its_requests_in_flight_as_interrupted(case, tmp_path, monkeypatch):
    overrides, stop_s, in_flight = CASES[case]
    _stop_at(monkeypatch, stop_s, signal.SIGTERM if case == "closed_loop" else signal.SIGINT)
    cfg = compose_cfg(*overrides, "analysis.figures=false", "recording.flush_every=20", f"out_dir={tmp_path}")
    summary = run_into(cfg, tmp_path)

    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert not (tmp_path / "requests.parquet.parts").exists()
    assert summary["interrupted"] and 0 < len(df) <= 400 and sorted(df["request_id"]) == list(range(len(df)))
    assert df["interrupted"].dtype == bool
    cut = df[df["interrupted"]]
    assert len(cut) == (in_flight if in_flight is not None else len(cut)) and len(cut) > 0
    assert (cut["error"] == ERROR).all() and cut["finish_s"].isna().all()
    assert (cut["ended_s"] == stop_s).all() and df.loc[~df["interrupted"], "ended_s"].isna().all()  # time series end
    assert df.loc[~df["interrupted"], "error"].isna().all()  # nothing else failed: the rest completed
    assert summary["interrupted_requests"] == len(cut)
    assert summary["failed"] == 0 and summary["completed"] == len(df) - len(cut)
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["failed"] == 0 and on_disk["interrupted_requests"] == len(cut)
    assert pd.read_parquet(tmp_path / "summary.parquet").iloc[0]["interrupted_requests"] == len(cut)


def test_a_stopped_sim_run_in_memory_has_the_same_column(monkeypatch):
    """Without a run directory (the records kept in memory) the frame says the same."""
    _stop_at(monkeypatch, 100.0)
    result = run_sim(compose_cfg("workload.num_requests=400", "loadgen.concurrency=8"))
    df = result.requests
    assert result.meta["interrupted"] and df["interrupted"].dtype == bool and int(df["interrupted"].sum()) == 8
    assert (df.loc[df["interrupted"], "error"] == ERROR).all() and df.loc[~df["interrupted"], "error"].isna().all()
    assert (df.loc[df["interrupted"], "ended_s"] == 100.0).all() and df.loc[~df["interrupted"], "ended_s"].isna().all()


def test_a_run_that_ends_by_itself_has_no_interrupted_column(tmp_path):
    """Its files are what they always were (no all-False column)."""
    summary = run_into(compose_cfg("workload.num_requests=60", "analysis.figures=false", f"out_dir={tmp_path}"),
                       tmp_path)
    assert not summary["interrupted"] and summary["interrupted_requests"] == 0 and summary["completed"] == 60
    assert not {"interrupted", "ended_s"} & set(pd.read_parquet(tmp_path / "requests.parquet").columns)
