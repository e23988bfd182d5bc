"""The planner's boundary: config nodes in, the structured schemas' dataclasses out.

Whatever a caller hands the planner (a composed DictConfig, a plain dict, or the dataclass itself)
becomes the schema's dataclass here, once (`DeploymentConfig`, `LinkConfig`, `PlannerConfig`): an
unknown key or a value of the wrong type fails with one line naming it (InputError), and the code
below reads typed attributes. The ranges the types cannot say are checked here too. A composed
config already carries its schema and converts directly (`OmegaConf.to_object`); anything else is
merged into the schema first. The schemas are leaf modules (types only), so reading the
deployment's and link's here keeps the planner's dependencies one-way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar, cast

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from harness.config.deployment import DeploymentConfig, LinkConfig
from harness.costmodel.nodes import number
from harness.errors import InputError
from harness.planner.schema import PlannerConfig
from harness.planner.search import SERVICE_TIMES

T = TypeVar("T")


def typed(schema: type[T], node: Any, where: str) -> T:
    """`node` as an instance of the dataclass `schema`; InputError naming `where.<key>` otherwise."""
    if isinstance(node, schema):
        return node
    if node is None:
        raise InputError(f"{where} is missing (null)")
    try:
        if isinstance(node, DictConfig) and OmegaConf.get_type(node) is schema:
            out = OmegaConf.to_object(node)  # composed with its schema: types already checked
        else:
            if isinstance(node, DictConfig):
                node = OmegaConf.to_container(node, resolve=True)
            elif not isinstance(node, Mapping) and not dataclasses.is_dataclass(node):
                raise InputError(f"{where} must be a mapping, got {type(node).__name__}")
            out = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))
    except OmegaConfBaseException as err:
        raise InputError(_one_line(err, where)) from err
    return cast(T, out)


def _one_line(err: OmegaConfBaseException, where: str) -> str:
    """OmegaConf's message (problem, full_key, types on separate lines) as `where.key: problem`."""
    key = getattr(err, "full_key", None)
    problem = str(err).splitlines()[0].strip() if str(err) else type(err).__name__
    return f"{where}.{key}: {problem}" if key else f"{where}: {problem}"


def _at_least(value: int, minimum: int, key: str) -> int:
    if value < minimum:
        raise InputError(f"{key} must be >= {minimum}, got {value!r}")
    return value


def _positive(value: float, key: str) -> float:
    if not value > 0:
        raise InputError(f"{key} must be > 0, got {value!r}")
    return value


def deployment_config(node: Any) -> DeploymentConfig:
    """A PD deployment as the planner reads it, its counts and fixed values checked."""
    if isinstance(node, Mapping) and node.get("builder"):  # another kind (e.g. aggregated), another schema
        raise InputError(f"deployment {node.get('name')}: built by {node.get('builder')}, not a PD deployment "
                         "(no local/prfaas clusters): the planner has nothing to plan")
    dep = typed(DeploymentConfig, node, "deployment")
    local = dep.local
    _at_least(local.instances, 1, "deployment.local.instances")
    _at_least(local.gpus_per_instance, 1, "deployment.local.gpus_per_instance")
    if local.n_prefill is not None:
        _at_least(local.n_prefill, 0, "deployment.local.n_prefill")
    if local.n_decode is not None:
        _at_least(local.n_decode, 1, "deployment.local.n_decode")
    if dep.prfaas is not None:
        _at_least(dep.prfaas.instances, 1, "deployment.prfaas.instances")
        _at_least(dep.prfaas.gpus_per_instance, 1, "deployment.prfaas.gpus_per_instance")
    if dep.decode_step_s is not None:
        _positive(dep.decode_step_s, "deployment.decode_step_s")
    fixed_threshold(dep)
    return dep


def fixed_threshold(dep: DeploymentConfig) -> float | None:
    """The router's `threshold_tokens` when the deployment fixes it, else None. The router node is
    polymorphic (a `_target_`, checked by its own constructor); the planner reads this one key."""
    router = dep.router
    if not isinstance(router, Mapping) or router.get("threshold_tokens") is None:
        return None
    return number(router, "threshold_tokens", "deployment.router", minimum=0)


def planner_config(node: Any) -> PlannerConfig:
    planner = typed(PlannerConfig, node, "planner")
    if planner.service_time not in SERVICE_TIMES:
        raise InputError(f"planner.service_time must be one of {', '.join(SERVICE_TIMES)}, "
                         f"got {planner.service_time!r}")
    _at_least(planner.grid_step_tokens, 1, "planner.grid_step_tokens")
    _at_least(planner.t_max_tokens, 0, "planner.t_max_tokens")
    _positive(planner.slo_tokens_per_s, "planner.slo_tokens_per_s")
    proj = planner.projection
    _at_least(proj.gpus_per_instance, 1, "planner.projection.gpus_per_instance")
    for key, values in (("gpus", proj.gpus), ("lengths_tokens", proj.lengths_tokens)):
        bad = [v for v in values if v < 1]
        if bad:
            raise InputError(f"planner.projection.{key} must be a list of integers >= 1, got {list(values)!r}")
    return planner


def link_config(node: Any) -> LinkConfig:
    link = typed(LinkConfig, node, "link")
    _positive(link.capacity_gbps, "link.capacity_gbps")
    return link
