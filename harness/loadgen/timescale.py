"""Which clock a target runs on: emulated seconds per wall second, so url runs report emulated times.

A `harness-serve server.time_scale=10` runs its deployment ten times faster than the wall clock; a
client that measured wall seconds against it would report TTFTs ten times too small. The server
announces its scale (`X-Harness-Time-Scale` on every response, `time_scale` in `/health` and
`/v1/models`); `detect_time_scale` reads it before the run, and `target.time_scale` overrides it
(for another target that runs on a scaled clock, or to force 1). Real engines announce nothing: 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import aiohttp

from harness.errors import require
from harness.loadgen.records import RequestRecord

HEADER = "X-Harness-Time-Scale"


def _scale(value) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) and out > 0 else None


def _root(url: str) -> str:
    url = url.rstrip("/")
    return url.removesuffix("/v1")


async def detect_time_scale(session: aiohttp.ClientSession, url: str, override: float | None = None,
                            headers: dict[str, str] | None = None, timeout_s: float = 5.0) -> tuple[float, str]:
    """(time scale, where it came from: `target.time_scale`, `/health`, `/v1/models` or `default`)."""
    if override is not None:
        require(
            _scale(override) is not None, f"target.time_scale must be a finite number > 0 (or null), got {override}"
        )
        return float(override), "target.time_scale"
    timeout = aiohttp.ClientTimeout(total=timeout_s)
    for path in ("/health", "/v1/models"):
        try:
            async with session.get(_root(url) + path, headers=headers or {}, timeout=timeout) as resp:
                found = _scale(resp.headers.get(HEADER))
                if found is None and resp.status == 200 and "json" in resp.content_type:
                    body = await resp.json()
                    if isinstance(body, dict):
                        data = body.get("data")
                        item = data[0] if isinstance(data, list) and data and isinstance(data[0], dict) else body
                        found = _scale(item.get("time_scale"))
        except TimeoutError:  # a target that does not answer: do not wait twice
            break
        except (aiohttp.ClientError, ValueError):
            continue
        if found is not None:
            return found, path
    return 1.0, "default"


def announced_mismatch(records: Sequence[RequestRecord], used: float) -> str | None:
    """A problem line when responses announced a time scale other than the one the run used."""
    seen = {r.server_time_scale for r in records if r.server_time_scale is not None}
    other = sorted(s for s in seen if not math.isclose(s, used, rel_tol=1e-9))
    if not other:
        return None
    return (f"the server announced time scale {', '.join(f'{s:g}' for s in other)} but the run used {used:g} "
            f"(target.time_scale): latencies are on the wrong clock")
