"""Hydra callback: when a multirun ends, build the sweep report in its sweep directory and print it.

Wired in conf/config.yaml as
`hydra.callbacks.report: {_target_: harness.analysis.callback.ReportCallback}`.
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from harness.errors import InputError


class ReportCallback(Callback):
    """Runs `harness-report <sweep dir>` in-process at the end of a multirun.

    A report problem is printed as `error: ...` and never turns a finished sweep into a crash:
    the runs are on disk and the report can be rebuilt with `harness-report`.
    """

    def __init__(self, figures: bool | None = None, baseline: str | None = None) -> None:
        self.figures = figures
        self.baseline = baseline

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        from harness.analysis import report

        sweep_dir = str(config.hydra.sweep.dir)
        figures = self.figures
        if figures is None:
            analysis = config.get("analysis") or {}
            figures = bool(analysis.get("figures", True))
        try:
            _, text = report.write_report([sweep_dir], figures=figures, baseline=self.baseline or report.BASELINE)
        except InputError as err:
            sys.stderr.write(f"error: report of {sweep_dir}: {err}\n")
            return
        print(text)
