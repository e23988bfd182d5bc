"""The paper's analytic planner (§3.4): throughput bounds, grid search over (t, N_p/N_d), Eq. 2 projection.

`plan_deployment(...) -> Plan` is what the emulator and `harness-plan` call.
"""

from __future__ import annotations

from harness.planner.deployment import plan_deployment
from harness.planner.distribution import LengthDistribution
from harness.planner.result import Plan
from harness.planner.search import Grid, Stages, best_index, evaluate

__all__ = ["Grid", "LengthDistribution", "Plan", "Stages", "best_index", "evaluate", "plan_deployment"]
