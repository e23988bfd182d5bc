"""Faults on the testbed's real parts during a run: the link taken down for a while, an engine killed.

`testbed.faults` lists them, e.g. `[{kind: link_down, at_s: 5, duration_s: 3}, {kind: kill_engine, at_s: 8,
instance: remote_prefill}]`; `at_s` counts from the moment the load starts. Each fault runs on a timer
thread; what happened and when (monotonic ns) is kept for the run's metadata. Requests caught by a fault
still end in exactly one record: a transfer waits out a short outage (TCP retransmits), a dead remote prefill
is recomputed locally (`testbed.recompute_locally`), anything else fails with the engine's reason.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from harness.errors import InputError
from harness.testbed import netns
from harness.testbed.cluster import Testbed

KINDS = ("link_down", "kill_engine")


@dataclass(frozen=True)
class Fault:
    kind: str
    at_s: float
    duration_s: float = 0.0
    instance: str | None = None


def parse_faults(items: Any, roles: tuple[str, ...]) -> list[Fault]:
    faults = []
    for i, item in enumerate(items or []):
        item = dict(item)
        kind = item.get("kind")
        if kind not in KINDS:
            raise InputError(f"testbed.faults[{i}].kind={kind!r}; valid: {', '.join(KINDS)}")
        unknown = sorted(set(item) - {"kind", "at_s", "duration_s", "instance"})
        if unknown:
            raise InputError(f"testbed.faults[{i}].{unknown[0]} is not a fault key; valid: kind, at_s, duration_s, "
                             f"instance")
        fault = Fault(kind, float(item.get("at_s", 0.0)), float(item.get("duration_s", 0.0)), item.get("instance"))
        if fault.at_s < 0 or fault.duration_s < 0:
            raise InputError(f"testbed.faults[{i}]: at_s and duration_s must be >= 0")
        if kind == "link_down" and "remote_prefill" not in roles:
            raise InputError(f"testbed.faults[{i}]: link_down needs a deployment that uses the link")
        if kind == "kill_engine" and fault.instance not in roles:
            raise InputError(f"testbed.faults[{i}].instance={fault.instance!r}; valid: {', '.join(roles)}")
        faults.append(fault)
    return faults


@dataclass
class FaultInjector:
    testbed: Testbed
    faults: list[Fault]
    log: list[dict[str, Any]] = field(default_factory=list)
    _timers: list[threading.Timer] = field(default_factory=list)

    def _note(self, what: str, fault: Fault) -> None:
        self.log.append({"event": what, "kind": fault.kind, "instance": fault.instance,
                         "t_ns": time.monotonic_ns()})

    def _link(self, fault: Fault, up: bool) -> None:
        netns.set_link(self.testbed.topology, up)
        self._note("link_up" if up else "link_down", fault)

    def _kill(self, fault: Fault) -> None:
        for proc in self.testbed.processes:
            if proc.name == fault.instance:
                proc.process.kill()
        self._note("killed", fault)

    def start(self) -> None:
        for fault in self.faults:
            if fault.kind == "link_down":
                self._timers += [threading.Timer(fault.at_s, self._link, (fault, False)),
                                 threading.Timer(fault.at_s + fault.duration_s, self._link, (fault, True))]
            else:
                self._timers.append(threading.Timer(fault.at_s, self._kill, (fault,)))
        for timer in self._timers:
            timer.daemon = True
            timer.start()

    def stop(self) -> None:
        for timer in self._timers:
            timer.cancel()
        if any(f.kind == "link_down" for f in self.faults):
            netns.set_link(self.testbed.topology, True)  # never leave the link down behind a cancelled timer

    def events(self, t0_ns: int) -> list[dict[str, Any]]:
        return [{**{k: v for k, v in e.items() if k != "t_ns"}, "t_s": (e["t_ns"] - t0_ns) / 1e9} for e in self.log]
