"""A live run signalled at a point of its shutdown path keeps every row once and writes its summary
(harness/runs/signals.py): just after the load ended (before, the signal was taken by the load's own
stop and lost), while the streams close, and while the final files are written."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from typing import Any

import pandas as pd
import pytest

from harness.analysis import summary as summary_module
from harness.errors import install_signal_handlers
from harness.runs import http as http_module
from harness.runs import recording
from harness.runs.assemble import run_into

N = 12
CONFIG = ["mode=live", "server.time_scale=50", "workload=fixed", "workload.input_tokens=512",
          "workload.output_tokens=16", f"workload.num_requests={N}", "loadgen.rate_rps=20", "analysis.figures=false"]


def _then_signal(fn: Callable[..., Any], sig: int) -> Callable[..., Any]:
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = fn(*args, **kwargs)
        signal.raise_signal(sig)
        return out

    return wrapped


def _async_then_signal(fn: Callable[..., Any], sig: int) -> Callable[..., Any]:
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        out = await fn(*args, **kwargs)
        signal.raise_signal(sig)
        return out

    return wrapped


@pytest.mark.parametrize("point", ["load_ended", "stream_close", "write_run"])
def test_a_signal_at_a_live_shutdown_point_keeps_every_row_and_the_summary(point, compose_cfg, tmp_path, monkeypatch):
    restore = install_signal_handlers()  # the command's handlers: SIGTERM as SIGINT
    try:
        if point == "load_ended":
            monkeypatch.setattr(http_module, "drive", _async_then_signal(http_module.drive, signal.SIGTERM))
        elif point == "stream_close":
            monkeypatch.setattr(recording.RecordStream, "close",
                                _then_signal(recording.RecordStream.close, signal.SIGTERM))
        else:
            monkeypatch.setattr(summary_module, "write_run", _then_signal(summary_module.write_run, signal.SIGINT))
        with pytest.raises(KeyboardInterrupt):  # the run is whole, and the command still stops (status 130)
            run_into(compose_cfg([*CONFIG, f"out_dir={tmp_path}"]), tmp_path)
    finally:
        restore()
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["interrupted"] is False and on_disk["completed"] == N
    df = pd.read_parquet(tmp_path / "requests.parquet")
    assert sorted(df["request_id"]) == list(range(N)) and df["error"].isna().all()
