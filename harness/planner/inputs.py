"""SharedInputs: every planner input the emulator also uses, built once and read by both.

The planner's Eq. 5 and the emulator's decode instances must see the same BS_max and decode step,
its Eq. 3-4 and the emulator's prefill instances the same profiles, and both the same SLO. Before
this object existed, the emulator built its own profiles at the default 40 tok/s whatever
`planner.slo_tokens_per_s` said, so a decode-bound case ran a batch the planner never assumed.
`deploy.build` now builds one `SharedInputs` and hands it to the planner and to the deployment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.costmodel import InstanceProfile, build_profile
from harness.costmodel.nodes import integer, number, plain
from harness.errors import InputError
from harness.planner.search import SERVICE_TIMES

DEFAULT_SERVICE_TIME = "expected"  # what a queue sees; `representative` is the paper's formula
DEFAULT_SLO_TOKENS_PER_S = 40.0


@dataclass(frozen=True)
class SharedInputs:
    local: InstanceProfile
    remote: InstanceProfile | None
    slo_tokens_per_s: float
    service_time: str
    decode_step_override_s: float | None  # deployment.decode_step_s: a fixed step for every batch

    @property
    def bs_max(self) -> int:
        return self.local.bs_max

    def t_decode_s(self, context_tokens_per_seq: float | None = None) -> float:
        """The decode step of a full batch (Eq. 5's T_decode).

        With a context (the workload's mean decode context), a batch- and context-dependent step is
        evaluated there, which is what the emulator's batch reads; without, the profile's step at
        the hardware's reference context.
        """
        if self.decode_step_override_s is not None:
            return self.decode_step_override_s
        if context_tokens_per_seq is None:
            return self.local.t_decode_s
        b = self.local.bs_max
        return float(self.local.decode_step_s(b, float(b) * context_tokens_per_seq))


def service_time_of(planner: dict[str, Any]) -> str:
    service_time = planner.get("service_time") or DEFAULT_SERVICE_TIME
    if service_time not in SERVICE_TIMES:
        raise InputError(f"planner.service_time must be one of {', '.join(SERVICE_TIMES)}, got {service_time!r}")
    return str(service_time)


def shared_inputs(deployment_cfg: Any, model_cfg: Any, planner_cfg: Any) -> SharedInputs:
    """Build the profiles of both clusters at the planner's SLO, and read the service-time mode."""
    dep = plain(deployment_cfg, "deployment")
    planner = plain(planner_cfg, "planner")
    local = dep.get("local")
    if not local:
        raise InputError(f"deployment {dep.get('name', 'deployment')}: `local` cluster is missing")
    slo = number(planner, "slo_tokens_per_s", "planner", minimum=0, exclusive=True,
                 default=DEFAULT_SLO_TOKENS_PER_S)
    gpus_local = integer(local, "gpus_per_instance", "deployment.local", minimum=1)
    local_prof = build_profile(model_cfg, local.get("hardware"), gpus_per_instance=gpus_local, slo_tokens_per_s=slo)
    remote_prof = None
    remote_cfg = dep.get("prfaas")
    if remote_cfg is not None:
        gpus_remote = integer(remote_cfg, "gpus_per_instance", "deployment.prfaas", minimum=1)
        remote_prof = build_profile(model_cfg, remote_cfg.get("hardware"), gpus_per_instance=gpus_remote,
                                    slo_tokens_per_s=slo)
    override = None
    if dep.get("decode_step_s") is not None:
        override = number(dep, "decode_step_s", "deployment", minimum=0, exclusive=True)
    return SharedInputs(local_prof, remote_prof, slo, service_time_of(planner), override)
