"""Role changes for the long-term rebalancer: local instances move between prefill and decode.

An instance changing role drains (takes no new work, finishes what it holds), waits the switch
delay, then comes back in its new role. Mixed into `Deployment`, whose state it reads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from harness.deploy.decode import DecodeInstance
from harness.deploy.prefill import PrefillInstance
from harness.deploy.router.base import LOCAL
from harness.deploy.state import DeploymentState


@dataclass
class Drain:
    """An instance changing role: it takes no new work, finishes what it holds, then switches."""

    instance: PrefillInstance | DecodeInstance
    new_role: str  # "prefill" | "decode"
    delay_s: float
    switching: bool = False

    @property
    def idle(self) -> bool:
        inst = self.instance
        if isinstance(inst, PrefillInstance):
            return not inst.running and not inst.queue
        return inst.reserved == 0


class RoleChanges(DeploymentState):
    def convert(self, n_prefill: int, n_decode: int, switch_delay_s: float) -> None:
        """Move local instances between prefill and decode: drain, wait `switch_delay_s`, switch."""
        to_decode = len(self.prefill[LOCAL]) - n_prefill
        to_prefill = len(self.decode) - n_decode
        for _ in range(max(0, to_decode)):
            prefill = self.least_loaded[LOCAL].least_loaded()
            if prefill is None:  # no local prefill instance left to convert
                break
            self.prefill[LOCAL].remove(prefill)
            self._start_drain(prefill, "decode", switch_delay_s)
        for _ in range(max(0, to_prefill)):
            decode = min(self.decode, key=lambda d: d.reserved)
            self.decode.remove(decode)
            self._start_drain(decode, "prefill", switch_delay_s)
        self._log_roles()
        self._check_draining()

    def _start_drain(self, instance: PrefillInstance | DecodeInstance, new_role: str, delay_s: float) -> None:
        self.draining.append(Drain(instance, new_role, delay_s))

    def _check_draining(self) -> None:
        for drain in self.draining:
            if drain.switching or not drain.idle:
                continue
            drain.switching = True
            self.clock.call_at(self.clock.now() + drain.delay_s, functools.partial(self._switch, drain))

    def _switch(self, drain: Drain) -> None:
        self.draining.remove(drain)
        self._instance_seq += 1
        if drain.new_role == "decode":
            self.decode.append(self._new_decode(f"pdd{self._instance_seq}"))
            self._dispatch()
        else:
            self.prefill[LOCAL].append(self._new_prefill(f"pdp{self._instance_seq}", LOCAL))
        self._log_roles()

    def _log_roles(self) -> None:
        self.roles_log.append((self.clock.now(), len(self.prefill[LOCAL]), len(self.decode)))
