"""From a `workload` config node to requests, and to the length statistics the planner needs.

The config node names its generator with `_target_` (the config group is the registry). These
functions accept a DictConfig, a plain mapping, or an already-built workload object.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from typing import Any, cast

import numpy as np
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.errors import InputError
from harness.workload.agentic import PLANNER_SAMPLE_REQUESTS
from harness.workload.base import Workload
from harness.workload.request import Request


def _one_line(text: str) -> str:
    return "; ".join(part.strip() for part in str(text).splitlines() if part.strip())


def instantiate_workload(workload_cfg: Any) -> Workload:
    """Build the workload object named by the node's `_target_`; config mistakes become InputError."""
    if callable(getattr(workload_cfg, "generate", None)):
        built: Workload = workload_cfg  # already built
        return built
    if isinstance(workload_cfg, DictConfig):
        try:
            node = cast(dict[str, Any], OmegaConf.to_container(workload_cfg, resolve=True))
        except OmegaConfBaseException as err:
            raise InputError(f"workload config: {_one_line(str(err))}") from err
    elif isinstance(workload_cfg, Mapping):
        node = dict(workload_cfg)
    else:
        raise InputError(f"workload config must be a mapping with a _target_, got {type(workload_cfg).__name__}")
    name = node.get("name", "?")
    if not node.get("_target_"):
        raise InputError(f"workload {name!r} has no _target_ (e.g. harness.workload.synthetic.SyntheticWorkload)")
    try:
        workload: Workload = instantiate(node, _convert_="all")
        return workload
    except InstantiationException as err:
        cause: BaseException | None = err
        while cause is not None and not isinstance(cause, InputError):
            cause = cause.__cause__
        if isinstance(cause, InputError):
            raise InputError(str(cause) if str(cause).startswith("workload ") else f"workload {name!r}: {cause}") \
                from err
        raise InputError(f"workload {name!r}: {_one_line(str(err))}") from err


def build_workload(workload_cfg: Any, rate_rps: float | None = None) -> list[Request]:
    """The workload's requests; `rate_rps`, when given, replaces its arrival process's mean rate."""
    return instantiate_workload(workload_cfg).generate(rate_rps)


def planner_requests(workload_cfg: Any) -> list[Request]:
    """The requests a planner reads lengths from, bounded whatever `num_requests`: a synthetic workload's
    first PLANNER_SAMPLE_REQUESTS, an agentic one's sample (AgenticWorkload.planner_sample), a trace's
    rows (held in memory anyway)."""
    workload = instantiate_workload(workload_cfg)
    if getattr(workload, "streams_as_generated", False):
        return list(itertools.islice(cast(Any, workload).stream(), PLANNER_SAMPLE_REQUESTS))
    sample = getattr(workload, "planner_sample", None)
    return cast(list[Request], sample()) if callable(sample) else workload.generate()


def input_length_distribution(workload_cfg: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values, weights) of the uncached (incremental) input length, weights summing to 1.

    Analytic workloads give an exact fine grid of their length law; traces and agentic sessions
    give the empirical law of their requests after an unbounded prefix cache removes the hits.
    """
    return instantiate_workload(workload_cfg).uncached_input_distribution()


def mean_output_tokens(workload_cfg: Any) -> float:
    return instantiate_workload(workload_cfg).mean_output_tokens()
