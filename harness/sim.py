"""Sim mode lives in the run-assembly layer now (harness/runs/sim.py); kept importable here."""

from harness.runs.sim import RunResult, run_sim

__all__ = ["RunResult", "run_sim"]
