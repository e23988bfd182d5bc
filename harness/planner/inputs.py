"""SharedInputs: every planner input the emulator also uses, built once and read by both.

The planner's Eq. 5 and the emulator's decode instances must see the same BS_max and decode step,
its Eq. 3-4 and the emulator's prefill instances the same profiles, and both the same SLO. Before
this object existed, the emulator built its own profiles at the default 40 tok/s whatever
`planner.slo_tokens_per_s` said, so a decode-bound case ran a batch the planner never assumed.
`deploy.build` now builds one `SharedInputs` and hands it to the planner and to the deployment.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.costmodel import InstanceProfile, build_profile
from harness.errors import InputError
from harness.planner.configs import deployment_config, planner_config


@dataclass(frozen=True)
class SharedInputs:
    local: InstanceProfile
    remote: InstanceProfile | None
    slo_tokens_per_s: float
    service_time: str
    decode_step_override_s: float | None  # deployment.decode_step_s: a fixed step for every batch
    notes: tuple[str, ...] = ()  # what these inputs mean for the plan that the numbers do not say

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


def _variant_applies(model_cfg: Any) -> None:
    """`model.decode_variant` on the model that runs must name one of its variants. (The profile builder
    lets it pass on a model without any, for tables that compose every model with one command line.)"""
    fields = ("decode_variant", "decode_variants", "name")
    variant, variants, name = (model_cfg.get(k) if isinstance(model_cfg, Mapping) else getattr(model_cfg, k, None)
                               for k in fields)
    if variant is not None and not variants:
        raise InputError(f"model.decode_variant={variant}: model {name} has no decode variants "
                         "(model.decode_variants is empty); drop the override or choose a model that has them")


def _slo_reachable(prof: InstanceProfile, slo: float, override_s: float | None) -> tuple[str, ...]:
    """A lone sequence must decode at the SLO, or no batch meets it and the plan is for a TPOT the SLO
    forbids (a measured constant step ignores the SLO when sizing its batch): an input error for the
    model's own step; a note for `deployment.decode_step_s`, a step the user fixed on purpose."""
    step = override_s if override_s is not None else float(prof.decode_step_s(1, 0.0))
    if step * slo <= 1.0 + 1e-9:
        return ()
    if override_s is not None:
        return (f"deployment.decode_step_s={override_s:g} is above the {1e3 / slo:.4g} ms step of the "
                f"planner.slo_tokens_per_s={slo:g} SLO: planned with it, every TPOT misses the SLO",)
    raise InputError(f"planner.slo_tokens_per_s={slo:g} cannot be met: model {prof.model}'s decode step on "
                     f"{prof.gpus_per_instance} x {prof.hardware} is {step * 1e3:.4g} ms for a lone sequence "
                     f"({1.0 / step:.4g} tok/s at best); choose an SLO <= {1.0 / step:.4g}")


def shared_inputs(deployment_cfg: Any, model_cfg: Any, planner_cfg: Any) -> SharedInputs:
    """Build the profiles of both clusters at the planner's SLO, and read the service-time mode.

    The deployment and planner nodes may be composed configs, dicts or the schema dataclasses
    (harness/planner/configs.py turns them into the dataclasses and checks them). Inputs that cannot
    apply (a decode variant the model lacks, an SLO the decode step cannot meet) fail here, in one line."""
    dep = deployment_config(deployment_cfg)
    planner = planner_config(planner_cfg)
    slo = planner.slo_tokens_per_s
    _variant_applies(model_cfg)
    local, remote = dep.local, dep.prfaas
    local_prof = build_profile(model_cfg, local.hardware, gpus_per_instance=local.gpus_per_instance,
                               slo_tokens_per_s=slo)
    remote_prof = None
    if remote is not None:
        remote_prof = build_profile(model_cfg, remote.hardware, gpus_per_instance=remote.gpus_per_instance,
                                    slo_tokens_per_s=slo)
    notes = _slo_reachable(local_prof, slo, dep.decode_step_s)
    return SharedInputs(local_prof, remote_prof, slo, planner.service_time, dep.decode_step_s, notes)
