"""The run-assembly layer: one place that builds a run for every mode from a config.

`run(cfg)` (sim, live, url: `harness`, `harness-load`), `serve(cfg)` (`harness-serve`) and
`run_dir(cfg)`. Modules: `offer` (how requests are offered), `recording` (records streamed to
Parquet parts), `sim` (virtual time), `http` (live and url runs), `serve` (the server's run), `plan`
(harness-plan's planner run) and `plan_variants` (the one composition of every option it plans).
"""

from harness.runs.assemble import MODES, run, run_dir, serve

__all__ = ["MODES", "run", "run_dir", "serve"]
