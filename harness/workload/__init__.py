"""Workloads: request rows, length and arrival models, agentic sessions, traces, prefix caches.

`build_workload(cfg.workload, rate_rps)` turns a `workload` config node into requests;
`input_length_distribution` and `mean_output_tokens` give the planner what it integrates over.

Implementation note: names are imported on first use (PEP 562), so `harness-trace stats` does not
pay for scipy and Hydra, which only the generators need.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "harness.workload.agentic": ("AgenticWorkload",),
    "harness.workload.arrivals": ("Constant", "Gamma", "Poisson", "Replay"),
    "harness.workload.base": ("Workload", "resolve_path"),
    "harness.workload.build": ("build_workload", "input_length_distribution", "instantiate_workload",
                               "mean_output_tokens"),
    "harness.workload.durations": ("ExponentialTime", "FixedTime", "LogNormalTime"),
    "harness.workload.formats": ("LoadReport", "detect_format", "load_trace", "read_trace", "write_trace"),
    "harness.workload.lengths": ("Empirical", "Fixed", "TruncatedLogNormal", "Uniform"),
    "harness.workload.prefix": ("PrefixCache", "PrefixReplay", "hit_tokens", "replay_hits", "replayed_input_tokens",
                                "uncached_input_tokens"),
    "harness.workload.request": ("Request", "frame_to_requests", "n_blocks", "requests_to_frame",
                                 "unique_hash_ids"),
    "harness.workload.stats": ("trace_stats",),
    "harness.workload.synthetic": ("FixedWorkload", "SyntheticWorkload"),
    "harness.workload.trace_workload": ("TraceWorkload",),
}
_WHERE = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'harness.workload' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:
    from harness.workload.agentic import AgenticWorkload
    from harness.workload.arrivals import Constant, Gamma, Poisson, Replay
    from harness.workload.base import Workload, resolve_path
    from harness.workload.build import (
        build_workload,
        input_length_distribution,
        instantiate_workload,
        mean_output_tokens,
    )
    from harness.workload.durations import ExponentialTime, FixedTime, LogNormalTime
    from harness.workload.formats import LoadReport, detect_format, load_trace, read_trace, write_trace
    from harness.workload.lengths import Empirical, Fixed, TruncatedLogNormal, Uniform
    from harness.workload.prefix import (
        PrefixCache,
        PrefixReplay,
        hit_tokens,
        replay_hits,
        replayed_input_tokens,
        uncached_input_tokens,
    )
    from harness.workload.request import Request, frame_to_requests, n_blocks, requests_to_frame, unique_hash_ids
    from harness.workload.stats import trace_stats
    from harness.workload.synthetic import FixedWorkload, SyntheticWorkload
    from harness.workload.trace_workload import TraceWorkload
