"""One request's life inside an emulated deployment, stamped in the deployment's own clock."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harness.workload.request import Request

NAN = math.nan


@dataclass(slots=True)
class Job:
    """A request in flight. Times are absolute run-clock seconds; NaN until reached."""

    request: Request
    route: str = ""  # "local" | "prfaas"
    cached_tokens: int = 0  # prefix the prefill skips (usable cache hit, or fetched across clusters)
    cache_hit_tokens: int = 0  # block-level KV hit in the prefilling cluster's pool
    cached_local_tokens: int = 0  # l_pd: what the local PD cluster holds, seen at routing
    fetched_tokens: int = 0  # prefix moved across clusters before the prefill
    fetch_bytes: float = 0.0
    prefill_instance: str = ""
    decode_instance: str = ""
    prefill_s: float = NAN  # service time on the chosen prefill instance
    prefill_start_s: float = NAN
    prefill_end_s: float = NAN
    kv_bytes: float = 0.0
    kv_save_s: float = NAN  # saving the KV on the prefill instance (a modelled hand-off only)
    kv_sent_s: float = NAN  # the KV's transfer started
    kv_restore_s: float = NAN  # restoring it on the decode instance (a modelled hand-off only)
    kv_done_s: float = NAN  # last KV byte landed on the decode side
    kv_ready_s: float = NAN  # prefill finished and KV landed: ready for decode
    first_token_s: float = NAN
    finish_s: float = NAN
    error: str | None = None
    transfer_pending: bool = False
    prefill_pending: bool = True
    join_step: int | None = None  # decode step at which the request joined its batch
    decode_kv_bytes: float | None = None  # KV of input + output, what a decode slot must hold
    attempt: int = 0  # re-prefills after a PrfaaS outage
    abandoned: bool = False  # superseded by a retry: its callbacks are ignored
    interrupted: bool = False  # still in flight when the run was stopped (`Deployment.close`)
    ended_s: float = NAN  # when it left without finishing: cancelled, or cut off by a stop (else NaN)
    flows: list = field(default_factory=list)  # link flows in progress (cancelled if abandoned)

    @property
    def new_tokens(self) -> int:
        return self.request.input_tokens - self.cached_tokens

    def record(self, deployment: str, mode: str, handoff: bool = False) -> dict:
        req = self.request
        arrival = req.arrival_s
        ttft = self.first_token_s - arrival
        e2e = self.finish_s - arrival
        n_out = req.output_tokens
        tpot = (self.finish_s - self.first_token_s) / (n_out - 1) if n_out > 1 else NAN
        row = {
            "deployment": deployment,
            "mode": mode,
            "request_id": req.request_id,
            "session_id": req.session_id,
            "arrival_s": arrival,
            "input_tokens": req.input_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_hit_tokens": self.cache_hit_tokens,
            "fetched_tokens": self.fetched_tokens,
            "retries": self.attempt,
            "output_tokens": n_out if self.error is None else 0,
            "route": self.route,
            "prefill_instance": self.prefill_instance,
            "decode_instance": self.decode_instance,
            "prefill_start_s": self.prefill_start_s,
            "prefill_end_s": self.prefill_end_s,
            "kv_ready_s": self.kv_ready_s,
            "first_token_s": self.first_token_s,
            "finish_s": self.finish_s,
            "ttft_s": ttft,
            "tpot_s": tpot,
            "e2e_s": e2e,
            "kv_bytes_sent": self.kv_bytes,
            "fetch_bytes": self.fetch_bytes,
            "error": self.error,
        }
        if handoff:  # a modelled hand-off (harness/deploy/handoff.py): only then, so default runs write what they did
            row["kv_save_s"] = self.kv_save_s
            row["kv_transfer_s"] = self.kv_done_s - self.kv_sent_s
            row["kv_restore_s"] = self.kv_restore_s
        if self.interrupted:  # only then: a run never stopped has no such column (its files as before)
            row["interrupted"] = True
        if self.ended_s == self.ended_s:  # cancelled or cut off: only then, as `interrupted`
            row["ended_s"] = self.ended_s  # where its time series intervals end (finish_s is empty)
        return row
