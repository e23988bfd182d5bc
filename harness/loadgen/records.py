"""One request as the load generator saw it: monotonic-ns stamps, then a row of the requests frame.

Every request the generator sends ends in exactly one `RequestRecord`, completed or failed; a
failure is data (`error`), never an exception. Rows use the run clock: seconds since the run
started, times `time_scale` (the emulator's speed-up; 1 against a real endpoint), so a live run's
rows read like a sim run's; `ttft_wall_s` and `e2e_wall_s` keep the measured wall-clock values.
A request still in flight when the run was stopped is `interrupted` (an error, but not a failure of
the target: SLO attainment leaves it out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

_NAN = math.nan
# llama.cpp's per-request `timings` kept as engine_<key> columns (NaN when the target sends none).
ENGINE_TIMING_COLUMNS = ("prompt_n", "cache_n", "prompt_ms", "predicted_n", "predicted_ms")


def _num(value: float | None) -> float:
    return _NAN if value is None else float(value)


@dataclass(slots=True)
class RequestRecord:
    request_id: int
    scheduled_ns: int  # when it was due (open loop: start + offset; closed loop: when a slot freed)
    input_tokens: int  # as sent; the server's count when it reports usage
    output_tokens: int  # as requested (max_tokens); the server's count when it reports usage
    session_id: int | None = None
    warmup: bool = False
    sent_ns: int | None = None
    first_token_ns: int | None = None
    last_token_ns: int | None = None
    done_ns: int | None = None
    chunk_ns: list[int] = field(default_factory=list)  # arrival of each chunk that carried tokens
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens, if reported
    usage_reported: bool = False
    http_status: int | None = None
    error: str | None = None
    queued_ns: int = 0  # waiting in the client for a loadgen.max_concurrency slot (not lateness)
    interrupted: bool = False  # still in flight when the run was stopped
    response_id: str | None = None  # the server's response `id` (cmpl-..., chatcmpl-...)
    server_time_scale: float | None = None  # what the server announced (X-Harness-Time-Scale)
    engine_timings: dict[str, float | None] | None = None  # the engine's own `timings` (llama.cpp)

    @property
    def completed(self) -> bool:
        return self.error is None and self.last_token_ns is not None

    def to_row(self, t0_ns: int, time_scale: float, deployment: str, mode: str) -> dict[str, Any]:
        def t(ns: int | None) -> float:
            return _NAN if ns is None else (ns - t0_ns) / 1e9 * time_scale

        sent, first, last = t(self.sent_ns), t(self.first_token_ns), t(self.last_token_ns)
        ok = self.completed
        # Not completed: the tokens it was seen to deliver, one per token-bearing chunk (a lower bound
        # when a chunk carries several), 0 when none came.
        n_out = self.output_tokens if ok else len(self.chunk_ns)
        if not ok:
            first, last = (first if self.first_token_ns is not None else _NAN), _NAN
        itl = [(b - a) / 1e9 * time_scale for a, b in zip(self.chunk_ns, self.chunk_ns[1:], strict=False)]
        queue_s = self.queued_ns / 1e9 * time_scale
        timings = self.engine_timings or {}
        return {
            "deployment": deployment,
            "mode": mode,
            "request_id": self.request_id,
            "session_id": self.session_id,
            "arrival_s": sent,  # when the target got it: latencies count from here, as in sim mode
            "input_tokens": self.input_tokens,
            "cached_tokens": self.cached_tokens,  # None (null) when the usage did not say
            "cache_hit_tokens": None,  # the target's prefix pool and cross-cluster fetches are not
            "fetched_tokens": None,  # visible to a client: unknown (null), not 0
            "output_tokens": n_out,
            "first_token_s": first,
            "finish_s": last,
            "ttft_s": first - sent,
            "tpot_s": (last - first) / (n_out - 1) if ok and n_out > 1 else _NAN,
            "e2e_s": last - sent,
            "error": self.error,
            "scheduled_s": t(self.scheduled_ns),
            "sent_s": sent,
            "lateness_s": sent - t(self.scheduled_ns) - queue_s,
            "queue_s": queue_s,
            "done_s": t(self.done_ns),
            "n_chunks": len(self.chunk_ns),
            "itl_max_s": max(itl) if itl else _NAN,
            "usage_reported": self.usage_reported,
            "http_status": self.http_status,  # null: no status received (the run stopped first)
            "interrupted": self.interrupted,
            "response_id": self.response_id,
            "ttft_wall_s": (first - sent) / time_scale,
            "e2e_wall_s": (last - sent) / time_scale,
            **{f"engine_{k}": _num(timings.get(k)) for k in ENGINE_TIMING_COLUMNS},
        }

    def chunk_rows(self, t0_ns: int, time_scale: float) -> list[tuple[int, int, float]]:
        """(request_id, chunk index, arrival on the run clock) for each token-bearing chunk."""
        return [(self.request_id, i, (ns - t0_ns) / 1e9 * time_scale) for i, ns in enumerate(self.chunk_ns)]
