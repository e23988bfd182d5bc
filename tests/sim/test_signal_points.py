"""A signal at any named point of a sim run's shutdown path loses no finished row and leaves a summary.

The signal is raised (`signal.raise_signal`, delivered as the kernel would at the next bytecode) from a
hook at each point: the end of the virtual clock, the deployment's close, the record stream's close and
flush (before and after a part is written), the merge of the parts, the final files. Whatever the point,
the run ends with summary.json (its `interrupted` key set), requests.parquet with every request exactly
once, and a signal that came after the measurement still stops the command (KeyboardInterrupt, exit 130)
once the files are written.
"""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from harness.analysis import summary as summary_module
from harness.clock import VirtualClock
from harness.deploy import deployment as deployment_module
from harness.errors import install_signal_handlers
from harness.runs import recording
from harness.runs import sim as sim_module
from harness.runs.assemble import run_into

from .conftest import compose_cfg

N = 300


@pytest.fixture(autouse=True)
def _command_handlers():
    """The command's own handlers (SIGTERM as SIGINT: KeyboardInterrupt), as `harness` installs them."""
    restore = install_signal_handlers()
    yield
    restore()


def _signalling(fn: Callable[..., Any], sig: int, when: str, times: list[int]) -> Callable[..., Any]:
    """`fn`, raising `sig` before or after its first call."""

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        times[0] += 1
        if when == "before" and times[0] == 1:
            signal.raise_signal(sig)
        out = fn(*args, **kwargs)
        if when == "after" and times[0] == 1:
            signal.raise_signal(sig)
        return out

    return wrapped


class _ClockEndsThenSignal(VirtualClock):
    sig = signal.SIGTERM

    def run(self, until: float | None = None) -> None:
        super().run(until)
        signal.raise_signal(self.sig)  # the last event has run: the clock cannot stop the run any more


# point -> (object, attribute); each wrapped to signal before or after its first call
POINTS: dict[str, tuple[Any, str]] = {
    "deployment_close": (deployment_module.Deployment, "close"),
    "stream_close": (recording.RecordStream, "close"),
    "stream_flush": (recording.RecordStream, "flush"),
    "part_write": (recording, "write_parquet"),  # a part is on disk, its rows still in the buffer
    "merge_parts": (recording, "write_sorted"),
    "discard_parts": (recording.RecordStream, "discard_parts"),
    "write_run": (summary_module, "write_run"),
    "summary_json": (summary_module, "write_json"),
}


def _check_run(tmp_path, stopped_by_signal: bool) -> dict:
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert "interrupted" in on_disk
    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert df["request_id"].is_unique and sorted(df["request_id"]) == list(range(len(df)))
    assert not (tmp_path / "requests.parquet.parts").exists()
    if not on_disk["interrupted"]:  # the signal came after the measurement: the run is whole
        assert len(df) == N and df["error"].isna().all() and on_disk["completed"] == N
    assert stopped_by_signal or on_disk["interrupted"]
    return on_disk


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("when", ["before", "after"])
@pytest.mark.parametrize("point", sorted(POINTS))
def test_a_signal_at_a_shutdown_point_keeps_every_row_and_the_summary(point, when, sig, tmp_path, monkeypatch):
    owner, name = POINTS[point]
    monkeypatch.setattr(owner, name, _signalling(getattr(owner, name), sig, when, [0]))
    cfg = compose_cfg(f"workload.num_requests={N}", "analysis.figures=false", "recording.flush_every=20",
                      f"out_dir={tmp_path}")
    stopped = False
    try:
        run_into(cfg, tmp_path)
    except KeyboardInterrupt:
        stopped = True
    _check_run(tmp_path, stopped)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_just_after_the_clock_ends_still_stops_the_command(sig, tmp_path, monkeypatch):
    """Before: the clock's stop timer was scheduled but never ran, and the signal was lost (exit 0)."""
    monkeypatch.setattr(_ClockEndsThenSignal, "sig", sig)
    monkeypatch.setattr(sim_module, "VirtualClock", _ClockEndsThenSignal)
    cfg = compose_cfg(f"workload.num_requests={N}", "analysis.figures=false", f"out_dir={tmp_path}")
    with pytest.raises(KeyboardInterrupt):
        run_into(cfg, tmp_path)
    assert _check_run(tmp_path, True)["completed"] == N


def test_a_signal_while_the_run_is_built_stops_it_before_its_first_request(tmp_path, monkeypatch):
    """Held until the clock starts, then the run stops at once: an interrupted run with its files."""
    monkeypatch.setattr(sim_module, "build", _signalling(sim_module.build, signal.SIGTERM, "before", [0]))
    cfg = compose_cfg(f"workload.num_requests={N}", "analysis.figures=false", f"out_dir={tmp_path}")
    summary = run_into(cfg, tmp_path)
    assert summary["interrupted"] and summary["n_requests"] <= 1  # the arrival due at 0 may go first
    assert _check_run(tmp_path, False)["interrupted"]


def test_a_flush_interrupted_inside_its_write_keeps_the_rows_for_the_next(tmp_path, monkeypatch):
    """The batch stays buffered until its part is in place: an interrupt inside the write loses nothing."""
    stream = recording.RecordStream(tmp_path / "requests.parquet", every=10_000, every_s=3600)
    write = recording.write_parquet
    calls = [0]

    def failing_once(frame, path):
        if threading.current_thread() is threading.main_thread() and not calls[0]:  # the run's, not the writer's
            calls[0] += 1
            raise KeyboardInterrupt("signal 2")
        return write(frame, path)

    monkeypatch.setattr(recording, "write_parquet", failing_once)
    rows = [{"deployment": "d", "request_id": i, "arrival_s": float(i), "input_tokens": 1, "output_tokens": 1}
            for i in range(5)]
    for row in rows:
        stream.add(row)
    with pytest.raises(KeyboardInterrupt):
        stream.flush()  # as the run's close does on its thread
    stream.abort()  # what the run does on its way out
    assert sorted(stream.read()["request_id"]) == list(range(5)) and stream.written == 5
