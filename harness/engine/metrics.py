"""An engine's own per-request times read from its Prometheus `/metrics`, for engines whose responses
carry no per-request timings (vLLM) while their metrics do.

A probe sent alone moves a histogram's `_sum` by exactly that probe's time: vLLM's
`vllm:request_prefill_time_seconds` (scheduled to first token), `vllm:request_decode_time_seconds`
(first to last token), `vllm:request_queue_time_seconds`; llama.cpp's counters
`llamacpp:prompt_seconds_total`, `llamacpp:tokens_predicted_seconds_total` do the same. `MetricDelta`
reads the named series before and after a probe; the engine preset (conf/engine/) names them.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

from harness.errors import InputError


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text format (0.0.4) -> {series name: value summed over its label sets}.

    Comments, blank lines and values that are not numbers are skipped; a timestamp after the value is
    ignored. Summing over labels adds up an engine's per-engine or per-model series into one."""
    out: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "{" in line:  # label values may hold spaces: the value starts after the closing brace
            name, rest = line.split("{", 1)[0], line.rsplit("}", 1)[-1]
        else:
            name, _, rest = line.partition(" ")
        fields = rest.split()
        if not fields:
            continue
        try:
            value = float(fields[0])
        except ValueError:
            continue
        out[name.strip()] = out.get(name.strip(), 0.0) + value
    return out


def metrics_url(url: str) -> str:
    """`http://host:port[/v1]` -> `http://host:port/metrics` (engines serve it beside /v1, not under it)."""
    base = url.rstrip("/")
    return (base[:-3] if base.endswith("/v1") else base) + "/metrics"


@dataclass(frozen=True)
class MetricNames:
    """The series of one engine preset (`engine.metrics`): seconds summed over requests, and a count of
    finished requests to wait for (null: no wait), so a delta read right after a probe includes it."""

    prompt_s: str
    decode_s: str | None = None
    requests: str | None = None

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None, key: str = "engine.metrics") -> MetricNames:
        if not node or not node.get("prompt_s"):
            raise InputError(f"{key}.prompt_s: no metric named; timings=metrics needs the engine's Prometheus series "
                             f"of prompt seconds (e.g. vllm:request_prefill_time_seconds_sum)")
        return cls(str(node["prompt_s"]), node.get("decode_s") and str(node["decode_s"]),
                   node.get("requests") and str(node["requests"]))


async def scrape(session: aiohttp.ClientSession, url: str, timeout_s: float = 10.0) -> dict[str, float]:
    """The engine's /metrics now; InputError (naming the URL) when it has none."""
    where = metrics_url(url)
    try:
        async with session.get(where, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            if resp.status != 200:
                raise InputError(f"engine timings=metrics: {where} answered HTTP {resp.status}; this engine serves no "
                                 f"Prometheus metrics there (valid timings: engine, metrics, client)")
            return parse_metrics(await resp.text())
    except (TimeoutError, aiohttp.ClientError) as err:
        raise InputError(f"engine timings=metrics: cannot read {where} ({type(err).__name__}: {err})") from err


class MetricDelta:
    """What the named series moved by between `before()` and `after(n)` (n requests finished meanwhile)."""

    WAIT_S = 2.0  # engines update a request's histograms just after its last chunk: poll this long at most

    def __init__(self, session: aiohttp.ClientSession, url: str, names: MetricNames) -> None:
        self.session, self.url, self.names = session, url, names
        self.start: dict[str, float] = {}

    def _value(self, values: Mapping[str, float], name: str) -> float:
        if name not in values:
            known = sorted(n for n in values if n.split(":")[0] == name.split(":")[0])[:8]
            raise InputError(f"engine.metrics: {metrics_url(self.url)} has no series {name!r} "
                             f"(some it has: {', '.join(known) or 'none of that prefix'})")
        return values[name]

    async def before(self) -> None:
        self.start = await scrape(self.session, self.url)
        for name in (self.names.prompt_s, self.names.decode_s, self.names.requests):
            if name:
                self._value(self.start, name)

    async def after(self, finished: int) -> dict[str, float]:
        """{"prompt_s", "decode_s"}: the moves of the named series (nan for a series not named)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.WAIT_S
        while True:
            now = await scrape(self.session, self.url)
            counted = self.names.requests is None or (
                self._value(now, self.names.requests) - self._value(self.start, self.names.requests) >= finished)
            if counted or loop.time() >= deadline:
                break
            await asyncio.sleep(0.02)
        out = {"prompt_s": self._value(now, self.names.prompt_s) - self._value(self.start, self.names.prompt_s)}
        out["decode_s"] = (self._value(now, self.names.decode_s) - self._value(self.start, self.names.decode_s)
                           if self.names.decode_s else math.nan)
        if not counted:
            out = dict.fromkeys(out, math.nan)  # the engine never counted the probe: its time is unknown
        return out
