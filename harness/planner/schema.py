"""Schema of the `planner` config group: grid, service-time convention, what `harness-plan` plans."""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class ProjectionConfig:
    """Eq. 2 scale-out projection: B_out = (N/P) * Phi_kv(L) for these GPU counts and lengths."""

    gpus: list[int] = field(default_factory=lambda: [512, 10000])
    gpus_per_instance: int = 8
    lengths_tokens: list[int] = field(default_factory=lambda: [1024, 8192, 32768, 131072])
    models: list[str] = field(default_factory=list)  # model configs with a kv_throughput table


@dataclass
class PlannerConfig:
    grid_step_tokens: int = 256
    t_max_tokens: int = 131072
    service_time: str = "expected"  # expected (E[T(L)|L>t], what a queue sees) | representative (paper: T(l_long))
    slo_tokens_per_s: float = 40.0
    tie_rel_tol: float = 1e-9
    deployments: list[str] = field(default_factory=lambda: ["homogeneous_pd", "naive_hetero", "prfaas_pd"])
    baseline: str = "homogeneous_pd"
    projection: ProjectionConfig = field(default_factory=ProjectionConfig)


def register(cs: ConfigStore) -> None:
    cs.store(group="planner", name="base_planner", node=PlannerConfig)
