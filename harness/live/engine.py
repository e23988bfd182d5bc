"""The emulated deployment as the HTTP handlers see it: submit a prompt, await its first token,
follow its tokens, await its record.

The deployment calls back once at the first token and once with the request's record (completed
or failed); `LiveEngine` turns those calls into asyncio futures. Between them a streaming handler
asks when the k-th token will exist (`token_time_s`) and sleeps until then, so a stream costs one
timer per chunk, never one per emulated token.

Every request that reaches a generation endpoint ends in exactly one record, also one that never
enters the deployment (`record_unsubmitted`): answered with an error status first (bad JSON, unknown
model, invalid parameters, prompt too long, ...: `refused`), or its client hung up while sending it.
A client that hangs up before its response ended is `abandon`ed: the deployment cancels the request
at once, as vLLM and llama-server abort one whose client left (it leaves its queue, its prefill, KV
transfer or decode batch stops, and the capacity it held goes to the others: `Deployment.cancel`),
and its record is written then: `abandoned`, error "client disconnected", `abandoned_s` when it left,
its stamps up to the cancellation (`finish_s` empty). Records also carry `http_status`, the status
line the client got (a stream's is 200 whatever ends it; 499, nginx's "client closed request", when
the client left before any was sent), and `interrupted` (still in flight when the server stopped:
`close`; from then on `closed` is set, and a request that arrives or is still arriving is refused or
cut by the server, not left by its client: `record_unsubmitted(..., interrupted=True)`, answered 503
where a response can still go out). A request that left without finishing carries `ended_s`, when it
left (cancelled or cut off), where the time series end the place it held.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from harness.deploy.deployment import Deployment
from harness.deploy.job import Job
from harness.live.clock import ScheduledLoopClock
from harness.live.metrics import ServerMetrics
from harness.live.tokens import block_hash_ids

if TYPE_CHECKING:
    import numpy as np
from harness.workload.request import Request

# How often a stream looks again when its next token's time cannot be predicted (wall seconds).
_POLL_WALL_S = 0.001
CLIENT_LEFT = "client disconnected"  # the error of an abandoned request's record
CLIENT_CLOSED_STATUS = 499  # nginx's "client closed request": the client left before any status was sent
_NAN = math.nan


class LiveJob:
    """One HTTP request inside the deployment. `record` is set once, when the request ends."""

    __slots__ = ("request", "job", "client_id", "first_token", "done", "record", "wake", "stream", "abandoned_s",
                 "abandoned_tokens")

    def __init__(self, request: Request, loop: asyncio.AbstractEventLoop, client_id: str | None,
                 stream: bool = False) -> None:
        self.request = request
        self.job: Job | None = None
        self.client_id = client_id
        self.first_token: asyncio.Future[None] = loop.create_future()
        self.done: asyncio.Future[None] = loop.create_future()
        self.record: dict | None = None
        self.wake: asyncio.Future[None] | None = None
        self.stream = stream  # SSE: the 200 status line goes out before the first token
        self.abandoned_s: float | None = None  # when its client hung up (emulated clock), if it did
        self.abandoned_tokens = 0  # output tokens decoded by then (its record's output_tokens)

    @property
    def error(self) -> str | None:
        return self.record.get("error") if self.record is not None else None


def _resolve(fut: asyncio.Future[None] | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


class LiveEngine:
    def __init__(self, deployment: Deployment, clock: ScheduledLoopClock, loop: asyncio.AbstractEventLoop, *,
                 block_tokens: int) -> None:
        self.deployment = deployment
        self.clock = clock
        self.loop = loop
        self.block_tokens = block_tokens
        self.metrics = ServerMetrics()
        self.client_ids: dict[int, str] = {}  # deployment request id -> the client's X-Request-Id
        self._ids = itertools.count()
        self._live: dict[int, LiveJob] = {}
        self._closing = False  # inside close(): the records that end now were cut off by the stop
        self.closed = False  # close() ran: the server is stopping, it takes nothing new
        # Where each record goes as it ends (harness-serve streams them to disk); when set, client ids
        # are not kept here but carried in the record (`client_id`).
        self.record_sink: Callable[[dict], None] | None = None
        deployment.on_first_token = self._on_first_token
        deployment.on_record = self._on_record

    # -- requests -----------------------------------------------------------------------------
    def submit(self, prompt_ids: Sequence[int] | np.ndarray, max_tokens: int, client_id: str | None = None,
               *, stream: bool = False) -> LiveJob:
        """Hand a prompt to the deployment now; a request it refuses outright ends at once (record set)."""
        rid = next(self._ids)
        request = Request(rid, self.clock.now(), len(prompt_ids), max_tokens,
                          block_hash_ids(prompt_ids, self.block_tokens))
        live = LiveJob(request, self.loop, client_id, stream)
        self._live[rid] = live
        if client_id is not None:
            self.client_ids[rid] = client_id
        self.metrics.on_submit(request)
        live.job = self.deployment.submit(request)
        return live

    def _on_first_token(self, job: Job) -> None:
        live = self._live.get(job.request.request_id)
        if live is not None:
            _resolve(live.first_token)
            _resolve(live.wake)

    def record_unsubmitted(self, status: int, error: str, client_id: str | None = None, *,
                           abandoned: bool = False, interrupted: bool = False) -> None:
        """Record a request that never reached the deployment: answered with `status` (refused),
        `abandoned` by a client that hung up while sending it, or `interrupted`: refused or cut off by
        the server because it is stopping (`closed`). Its id comes from the deployment's sequence;
        input_tokens is 0 (not counted)."""
        dep = self.deployment
        now = self.clock.now()
        refused = not abandoned and not interrupted
        if refused:
            self.metrics.on_refused(status)
        if self.record_sink is not None:
            record = {"deployment": dep.name, "mode": getattr(dep, "mode", "live"), "request_id": next(self._ids),
                      "arrival_s": now, "input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "route": "",
                      "first_token_s": _NAN, "finish_s": _NAN, "ttft_s": _NAN, "tpot_s": _NAN, "e2e_s": _NAN,
                      "kv_bytes_sent": 0.0, "error": error,
                      **self._outcome(status, refused=refused, abandoned_s=now if abandoned else None,
                                      interrupted=interrupted)}
            if interrupted:
                record["ended_s"] = now
            self.record_sink(record if client_id is None else {**record, "client_id": client_id})

    def abandon(self, live: LiveJob) -> bool:
        """Its client hung up: cancel the request in the deployment now, which writes its one record
        (abandoned) and frees what it held; False when it had ended already (its record is written: the
        client left while the last bytes went out)."""
        if live.record is not None or live.abandoned_s is not None:
            return False
        live.abandoned_s = self.clock.now()
        live.abandoned_tokens = self.tokens_done(live)
        if live.job is not None:
            self.deployment.cancel(live.job, CLIENT_LEFT)  # -> _on_record, at once
        return True

    def _outcome(self, status: int, *, refused: bool = False, abandoned_s: float | None = None,
                 interrupted: bool = False) -> dict:
        """The serve columns: `interrupted` marks a request still in flight when the server stopped
        (`close`), or one it refused or cut off as it stopped, which the summary counts apart from
        failures, as a stopped run's."""
        return {"http_status": status, "refused": refused, "abandoned": abandoned_s is not None,
                "abandoned_s": _NAN if abandoned_s is None else abandoned_s,
                "interrupted": interrupted or (self._closing and abandoned_s is None and not refused)}

    def _on_record(self, record: dict) -> None:
        rid = record["request_id"]
        if self.closed and not self._closing:  # a request that ended at the stop has its record: one only
            return
        live = self._live.pop(rid, None)
        if live is not None:
            if live.abandoned_s is not None:  # the client is gone: not a completion nor a server failure
                status = 200 if live.stream else CLIENT_CLOSED_STATUS
                record = {**record, "error": CLIENT_LEFT, "output_tokens": live.abandoned_tokens,
                          **self._outcome(status, abandoned_s=live.abandoned_s)}
            elif live.job is None:  # refused on arrival, inside deployment.submit: answered 400
                self.metrics.on_refused(400)
                record = {**record, **self._outcome(400, refused=True)}
            else:  # what the handler answers: 200, or 503 for a failure without a stream
                record = {**record, **self._outcome(200 if live.stream or record.get("error") is None else 503)}
                if self._closing:  # cut off by the stop, now: where its time series intervals end
                    record["ended_s"] = self.clock.now()
        self.metrics.on_record(record)
        if self.record_sink is not None:
            cid = self.client_ids.pop(rid, None)
            self.record_sink(record if cid is None else {**record, "client_id": cid})
        if live is None:
            return
        live.record = record
        _resolve(live.first_token)
        _resolve(live.done)
        _resolve(live.wake)

    # -- token timeline -----------------------------------------------------------------------
    def tokens_done(self, live: LiveJob) -> int:
        if live.record is not None:
            return live.request.output_tokens if live.error is None else 0
        return self.deployment.tokens_done(live.job) if live.job is not None else 0

    def _decode_instance(self, job):
        dep = self.deployment
        instances = [*dep.decode, *(getattr(d, "instance", None) for d in getattr(dep, "draining", ()))]
        return next((i for i in instances if getattr(i, "name", None) == job.decode_instance), None)

    def token_time_s(self, live: LiveJob, k: int) -> float:
        """Emulated time at which the k-th output token exists if the decode batch keeps its members;
        NaN when unknown (not decoding yet, or an instance without `tokens_done(job, now)`).

        The decode instance's `tokens_done(job, now)` extrapolates to any future `now`, so the time is
        found by doubling then bisecting on it: exact to a nanosecond, no knowledge of its internals.
        """
        job = live.job
        instance = self._decode_instance(job) if job is not None else None
        if instance is None or not hasattr(instance, "tokens_done"):
            return math.nan
        now = self.clock.now()
        if instance.tokens_done(job, now) >= k:
            return now
        step = 1e-4
        while instance.tokens_done(job, now + step) < k:
            step *= 2
            if step > 1e7:
                return math.nan
        lo, hi = now + step / 2 if step > 1e-4 else now, now + step
        while hi - lo > 1e-9 * max(1.0, hi):
            mid = (lo + hi) / 2
            if instance.tokens_done(job, mid) >= k:
                hi = mid
            else:
                lo = mid
        return hi

    async def wait_for_tokens(self, live: LiveJob, target: int) -> int:
        """Sleep until `target` output tokens exist (or the request ended); return how many exist.

        A membership change of the decode batch can move the predicted time either way, so the
        count is checked again after each wake; unpredictable cases poll every millisecond (wall).
        """
        while True:
            done = self.tokens_done(live)
            if done >= target or live.record is not None:
                return done
            when = self.token_time_s(live, target)
            if math.isnan(when):
                when = self.clock.now() + _POLL_WALL_S * self.clock.time_scale
            await self.sleep_until(live, when)

    async def sleep_until(self, live: LiveJob, t_s: float) -> None:
        """Sleep until emulated time t_s, or until the request ends."""
        if live.record is not None:
            return
        loop = self.loop
        fut = live.wake = loop.create_future()
        handle = loop.call_at(self.clock.to_loop_time(t_s), _resolve, fut)
        try:
            await fut
        finally:
            handle.cancel()
            live.wake = None

    # -- shutdown -----------------------------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._live)

    def close(self, reason: str = "server shut down before the request completed") -> None:
        """Fail every request still in the deployment (each gets its record, marked `interrupted`, and
        its handler wakes); from now on the server takes nothing new (`closed`)."""
        self.closed = True
        self._closing = True
        try:
            self.deployment.close(reason)
        finally:
            self._closing = False
            self.clock.stop()  # the requests cut off keep timers (decode steps, transfers): none may end them again
