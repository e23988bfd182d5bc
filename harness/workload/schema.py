"""Schemas of the `workload` group: one per generator, stored as `base_<kind>`.

Fields typed `Any` hold `_target_` nodes (length laws, arrival processes, think times) that their
constructors validate. The `_target_` of each schema names the generator class, so a YAML file only
lists `base_<kind>` first in its defaults and sets its numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING


@dataclass
class WorkloadConfig:
    _target_: str = MISSING
    name: str = MISSING
    num_requests: int | None = 2000  # traces: null = every row, N = the first N
    seed: int | None = 0  # null: unseeded (fresh entropy each run)
    block_tokens: int = 512  # tokens per hash_ids block (prefix-cache granularity)


@dataclass
class SyntheticWorkloadConfig(WorkloadConfig):
    _target_: str = "harness.workload.synthetic.SyntheticWorkload"
    input_lengths: Any = MISSING
    output_lengths: Any = MISSING
    arrivals: Any = MISSING


@dataclass
class FixedWorkloadConfig(WorkloadConfig):
    _target_: str = "harness.workload.synthetic.FixedWorkload"
    input_tokens: int = 8192
    output_tokens: int = 1024
    arrivals: Any = MISSING


@dataclass
class AgenticWorkloadConfig(WorkloadConfig):
    _target_: str = "harness.workload.agentic.AgenticWorkload"
    session_arrivals: Any = MISSING  # sessions per second; loadgen.rate_rps sets requests per second
    turns: Any = MISSING
    system_prompt_tokens: int = 0
    shared_system_prompts: int = 1  # distinct system prompts shared across sessions; 0: none shared
    first_user_tokens: Any = MISSING
    appended_tokens: Any = MISSING  # tool output / next user message added before each later turn
    output_lengths: Any = MISSING
    think_time_s: Any = MISSING
    max_context_tokens: int = 131072


@dataclass
class TraceWorkloadConfig(WorkloadConfig):
    _target_: str = "harness.workload.trace_workload.TraceWorkload"
    path: str = MISSING  # relative paths: current directory first, then the repo root
    fmt: str | None = None  # jsonl | csv | parquet; null: from the extension
    num_requests: int | None = None
    arrivals: Any = None  # null: Replay() with the trace's own timestamps


@dataclass
class PhasedWorkloadConfig(WorkloadConfig):
    _target_: str = "harness.workload.phased.PhasedWorkload"
    num_requests: int | None = None  # null: every phase's requests
    phases: Any = MISSING  # a list of workload nodes, each with its own _target_
    gap_s: float = 0.0


def register(cs: ConfigStore) -> None:
    cs.store(group="workload", name="base_synthetic", node=SyntheticWorkloadConfig)
    cs.store(group="workload", name="base_fixed", node=FixedWorkloadConfig)
    cs.store(group="workload", name="base_agentic", node=AgenticWorkloadConfig)
    cs.store(group="workload", name="base_trace", node=TraceWorkloadConfig)
    cs.store(group="workload", name="base_phased", node=PhasedWorkloadConfig)
