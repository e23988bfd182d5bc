"""The long-term rebalancer (paper section 3.4.3): re-plan the PD split and threshold as traffic shifts.

Every `period_s` it takes the incremental prefill lengths and output lengths of the requests that
arrived in the last `window_s`, asks the planner for the best split and threshold for that
traffic, and compares it with the planner's prediction for the current configuration on the same
traffic. When the gain is at least `min_gain`, it converts local instances between prefill and
decode (drain, then `switch_delay_s`) and moves the threshold. It ticks only while requests are in
flight, so a finished run ends; a PrfaaS outage or recovery re-plans at once (`nudge`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from harness.clock import Clock, Timer
from harness.deploy.router.base import ThresholdRouter
from harness.errors import InputError

# plan(lengths, mean_output, fixed) -> (lambda_rps, n_prefill, n_decode, threshold); fixed=None: free search
PlanFn = Callable[[np.ndarray, float, "tuple[int, int, float | None] | None"], tuple[float, int, int, float | None]]


@dataclass
class Decision:
    t_s: float
    n_prefill: int
    n_decode: int
    threshold_tokens: float | None
    predicted_gain: float


class Rebalancer:
    def __init__(self, clock: Clock, deployment, plan: PlanFn, *, period_s: float, window_s: float,
                 switch_delay_s: float, min_gain: float, min_samples: int) -> None:
        for name, value in (("period_s", period_s), ("window_s", window_s)):
            if not value > 0:
                raise InputError(f"rebalancer.{name} must be > 0, got {value}")
        if switch_delay_s < 0 or min_gain < 0 or min_samples < 1:
            raise InputError("rebalancer: switch_delay_s and min_gain must be >= 0, min_samples >= 1")
        self.clock = clock
        self.deployment = deployment
        self.plan = plan
        self.period_s, self.window_s = period_s, window_s
        self.switch_delay_s, self.min_gain, self.min_samples = switch_delay_s, min_gain, min_samples
        self._seen: deque[tuple[float, int, int]] = deque()  # (arrival, incremental tokens, output tokens)
        self._timer: Timer | None = None
        self.decisions: list[Decision] = []

    def observe(self, job) -> None:
        now = self.clock.now()
        self._seen.append((now, job.request.input_tokens - job.cached_tokens, job.request.output_tokens))
        if self._timer is None:
            self._timer = self.clock.call_at(now + self.period_s, self._tick)

    def nudge(self) -> None:
        """Re-plan now (the PrfaaS cluster went away or came back), not at the next period."""
        now = self.clock.now()
        while self._seen and self._seen[0][0] < now - self.window_s:
            self._seen.popleft()
        if len(self._seen) >= self.min_samples and not self.deployment.draining:
            self._replan(now)

    def _tick(self) -> None:
        self._timer = None
        now = self.clock.now()
        while self._seen and self._seen[0][0] < now - self.window_s:
            self._seen.popleft()
        dep = self.deployment
        if len(self._seen) >= self.min_samples and not dep.draining:
            self._replan(now)
        if dep.in_flight:
            self._timer = self.clock.call_at(now + self.period_s, self._tick)

    def _replan(self, now: float) -> None:
        dep = self.deployment
        window = np.array(self._seen, dtype=float)
        lengths, mean_out = np.maximum(window[:, 1], 1.0), float(window[:, 2].mean())
        threshold = getattr(dep.router, "threshold_tokens", None)
        n_p, n_d = len(dep.prefill["local"]), len(dep.decode)
        current, *_ = self.plan(lengths, mean_out, (n_p, n_d, threshold))
        best, new_p, new_d, new_t = self.plan(lengths, mean_out, None)
        gain = best / current - 1 if current > 0 else float("inf")
        if gain < self.min_gain:
            return
        if new_t is not None and isinstance(dep.router, ThresholdRouter):
            dep.router.set_threshold(new_t)
        if (new_p, new_d) != (n_p, n_d):
            dep.convert(new_p, new_d, self.switch_delay_s)
        self.decisions.append(Decision(now, new_p, new_d, new_t, gain))
