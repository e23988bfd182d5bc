"""Traffic that changes mid-run: phases of other workloads played one after another.

Each phase is a workload node of its own (any `_target_`); phase k+1 starts `gap_s` after phase
k's last arrival. Request ids, hash ids and session ids are renumbered so phases never share a
prefix by accident. Used by `experiment=traffic_shift` to test the long-term rebalancer.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from harness.errors import InputError
from harness.workload.prefix import PrefixReplay
from harness.workload.request import Request


class PhasedWorkload:
    def __init__(self, phases: list[Any], gap_s: float = 0.0, name: str = "phased", num_requests: int | None = None,
                 seed: int | None = 0, block_tokens: int = 512) -> None:
        if not phases:
            raise InputError(f"workload {name!r}: phases must list at least one workload")
        for i, phase in enumerate(phases):
            if not callable(getattr(phase, "generate", None)):
                raise InputError(f"workload {name!r}: phases[{i}] must be a workload node with a _target_")
        if gap_s < 0:
            raise InputError(f"workload {name!r}: gap_s must be >= 0, got {gap_s}")
        self.name, self.phases, self.gap_s = name, phases, float(gap_s)
        self.num_requests, self.seed, self.block_tokens = num_requests, seed, block_tokens

    def generate(self, rate_rps: float | None = None) -> list[Request]:
        """All phases in order; `rate_rps` (when given) replaces every phase's rate."""
        out: list[Request] = []
        start = 0.0
        next_hash = next_session = 0
        for phase in self.phases:
            requests = phase.generate(rate_rps)
            if not requests:
                continue
            t0 = requests[0].arrival_s
            max_hash = max_session = -1
            for r in requests:
                out.append(dataclasses.replace(
                    r, request_id=len(out), arrival_s=start + (r.arrival_s - t0),
                    hash_ids=tuple(h + next_hash for h in r.hash_ids),
                    session_id=None if r.session_id is None else r.session_id + next_session))
                max_hash = max(max_hash, max(r.hash_ids, default=-1))
                max_session = max(max_session, -1 if r.session_id is None else r.session_id)
            next_hash += max_hash + 1
            next_session += max_session + 1
            start = out[-1].arrival_s + self.gap_s
        if self.num_requests is not None:
            out = out[: self.num_requests]
        return out

    # The planner sees the first phase: the traffic the operator planned for before it shifted.
    # Adapting to what comes after is the long-term rebalancer's job (`rebalancer.enabled`).
    def uncached_input_distribution(self, replay: PrefixReplay | None = None) -> tuple[np.ndarray, np.ndarray]:
        grid: tuple[np.ndarray, np.ndarray] = self.phases[0].uncached_input_distribution(replay)
        return grid

    def mean_output_tokens(self) -> float:
        return float(self.phases[0].mean_output_tokens())
