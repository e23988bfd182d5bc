"""Scheduled trouble: link events (capacity, RTT, loss changes) and PrfaaS outages.

Configured under `faults` (see conf/config.yaml) and set on the deployment's clock, so the same
schedule plays in virtual time and in live mode.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from harness.clock import Clock
from harness.errors import InputError

LINK_EVENT_KEYS = ("t_s", "capacity_gbps", "rtt_ms", "loss_rate")


def _number(where: str, value: Any, minimum: float = 0.0) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError) as err:
        raise InputError(f"{where} must be a number, got {value!r}") from err
    if not number >= minimum:
        raise InputError(f"{where} must be >= {minimum:g}, got {value!r}")
    return number


def schedule_faults(clock: Clock, deployment, link_events: Sequence[Mapping[str, Any]],
                    prfaas_outages: Sequence[Sequence[float]]) -> None:
    links = [link for link in (deployment.cross_link, deployment.reverse_link) if link is not None]
    for i, event in enumerate(link_events):
        where = f"faults.link_events[{i}]"
        if not isinstance(event, Mapping) or "t_s" not in event:
            raise InputError(f"{where} must be a mapping with t_s and any of capacity_gbps, rtt_ms, loss_rate")
        unknown = set(event) - set(LINK_EVENT_KEYS)
        if unknown:
            raise InputError(f"{where}: unknown key(s) {sorted(unknown)}; valid: {', '.join(LINK_EVENT_KEYS)}")
        t = _number(f"{where}.t_s", event["t_s"])
        capacity = event.get("capacity_gbps")
        rtt_ms = event.get("rtt_ms")
        loss = event.get("loss_rate")
        capacity = None if capacity is None else _number(f"{where}.capacity_gbps", capacity)
        rtt_s = None if rtt_ms is None else _number(f"{where}.rtt_ms", rtt_ms) / 1e3
        loss = None if loss is None else _number(f"{where}.loss_rate", loss)
        if loss is not None and loss >= 1:
            raise InputError(f"{where}.loss_rate must be in [0, 1), got {loss}")

        def apply(capacity=capacity, rtt_s=rtt_s, loss=loss) -> None:
            for link in links:
                if capacity is not None:
                    link.set_capacity(capacity)
                if rtt_s is not None or loss is not None:
                    link.set_conditions(rtt_s=rtt_s, loss_rate=loss)

        clock.call_at(t, apply)
    has_remote = deployment.cross_link is not None
    for i, window in enumerate(prfaas_outages):
        where = f"faults.prfaas_outages[{i}]"
        if isinstance(window, str) or len(window) != 2:
            raise InputError(f"{where} must be [start_s, end_s], got {window!r}")
        start, end = _number(f"{where}[0]", window[0]), _number(f"{where}[1]", window[1])
        if end <= start:
            raise InputError(f"{where}: end_s must be after start_s, got {window!r}")
        if has_remote:
            clock.call_at(start, lambda: deployment.set_prfaas_reachable(False))
            clock.call_at(end, lambda: deployment.set_prfaas_reachable(True))
