"""The load generator's lifecycle: schedule on absolute targets, send, record, wait for stragglers.

Read top-down:
  1. fix the start time and each request's absolute send time (start + offset / time_scale);
  2. start a watcher that measures how late this event loop wakes (the generator's own health);
  3. offer the requests: open loop (each at its target, however many are in flight) or closed loop
     (`concurrency` workers, each sending its next request when the previous one ends);
  4. one TaskGroup holds every request in flight and waits for them all; each ends in exactly one
     `RequestRecord`, its failure (if any) recorded as data; a `stop` event cancels the offering
     and what is in flight (each cancelled request recorded as interrupted);
  5. stop the watcher and hand back the records.
A target is anything with `prepare(request) -> body` (CPU work, done before the send time) and
`async send(body, record)` (fills the record; raises only on cancellation).
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from tqdm import tqdm

from harness.errors import require
from harness.loadgen.clock import MonotonicClock, Pacer
from harness.loadgen.records import RequestRecord
from harness.workload.request import Request
from harness.workload.turns import TurnOrder


class Target(Protocol):
    def prepare(self, request: Request) -> Any: ...

    async def send(self, body: Any, record: RequestRecord) -> None: ...


@dataclass
class LoadResult:
    records: list[RequestRecord]
    t0_ns: int  # run-clock zero (monotonic ns)
    time_scale: float
    open_loop: bool
    loop_lag_ns: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    cpu_s: float = 0.0  # this process's CPU time during the run (all threads)
    interrupted: bool = False  # stopped early (SIGINT/SIGTERM): not every request was offered
    end_ns: int = 0


async def run_load(requests: Sequence[Request], target: Target, *, clock: Pacer | None = None,
                   time_scale: float = 1.0, concurrency: int | None = None, max_duration_s: float | None = None,
                   warmup_s: float = 0.0, progress: bool = False, start_ns: int | None = None,
                   lag_period_s: float | None = 0.01, stop: asyncio.Event | None = None,
                   max_concurrency: int | None = None, status_every_s: float | None = None,
                   on_done: Callable[[RequestRecord], None] | None = None,
                   predecessors: Mapping[int, int] | None = None) -> LoadResult:
    """Offer `requests` to `target`; times in the requests (arrival_s, max_duration_s, warmup_s) are
    run-clock seconds, run `time_scale` times faster than the wall clock. Setting `stop` ends the
    run early: nothing more is sent, requests in flight are cancelled (and recorded as interrupted).
    `max_concurrency` caps the requests in flight of an open loop (vLLM's --max-concurrency): a
    request due while the cap is reached waits in the client, its wait kept as `queued_ns`.
    `status_every_s` prints a one-line status that often (wall seconds) when no progress bar shows.
    `on_done(record)` is called as each request ends (to stream it to disk); it must not raise.
    `predecessors` (request id -> the id it continues; a saturation run's): a closed loop never sends
    a request before the one it continues has ended (harness/workload/turns.py, as sim mode)."""
    require(time_scale > 0 and math.isfinite(time_scale), f"time_scale must be finite and > 0, got {time_scale}")
    require(concurrency is None or concurrency >= 1, f"loadgen.concurrency must be >= 1, got {concurrency}")
    require(max_concurrency is None or max_concurrency >= 1,
            f"loadgen.max_concurrency must be >= 1 (or null), got {max_concurrency}")
    slots = asyncio.Semaphore(max_concurrency) if max_concurrency is not None else None
    clock = clock or MonotonicClock()
    ns_per_run_s = 1e9 / time_scale
    # 1. The start and the absolute targets.
    # A stream that says it is in order (a synthetic workload's) is read as it goes, never held whole.
    ordered = requests if getattr(requests, "sorted_by_arrival", False) else \
        sorted(requests, key=lambda r: (r.arrival_s, r.request_id))
    t0 = clock.now_ns() if start_ns is None else start_ns
    warmup_end = t0 + round(warmup_s * ns_per_run_s)
    stop_at = math.inf if max_duration_s is None else t0 + max_duration_s * ns_per_run_s
    records: list[RequestRecord] = []
    bar = tqdm(total=len(ordered), desc="load", unit="req", leave=False, disable=None if progress else True,
               mininterval=0.5)

    def new_record(request: Request, scheduled_ns: int) -> RequestRecord:
        record = RequestRecord(request.request_id, scheduled_ns, request.input_tokens,
                               max(1, request.output_tokens), request.session_id,
                               warmup=scheduled_ns < warmup_end)
        records.append(record)
        return record

    async def send(body: Any, record: RequestRecord) -> None:
        acquired = False
        try:
            if slots is not None:
                due = clock.now_ns()
                await slots.acquire()
                acquired = True
                record.queued_ns = clock.now_ns() - due
            record.sent_ns = clock.now_ns()
            await target.send(body, record)
        except asyncio.CancelledError:
            record.error = record.error or "interrupted: the run was stopped"
            record.interrupted = True
            raise
        except Exception as exc:  # a target bug must not cost the record (or the run)
            record.error = record.error or f"{type(exc).__name__}: {exc}"
        finally:
            if acquired and slots is not None:
                slots.release()
            record.done_ns = clock.now_ns()
            bar.update(1)
            if on_done is not None:
                on_done(record)

    # 2. Watch our own loop. Objects made before the run (configs, modules, the trace) are moved out
    # of the garbage collector's reach, so its passes over them do not stall the sends.
    lags: list[int] = []
    watcher = asyncio.create_task(_watch_loop(clock, t0, lag_period_s, lags)) if lag_period_s else None
    status = None
    if status_every_s and bar.disable:  # a bar on a terminal says it already
        from harness.loadgen.status import report_status

        status = asyncio.create_task(report_status(records, len(ordered), clock, t0, status_every_s, time_scale))
    gc.freeze()
    wall0, cpu0 = time.perf_counter(), time.process_time()
    tasks: set[asyncio.Task] = set()  # what a stop cancels: the offering and every send in flight

    def spawn(tg: asyncio.TaskGroup, coro) -> None:
        task = tg.create_task(coro)
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def offer(tg: asyncio.TaskGroup) -> None:
        if concurrency is None:
            for request in ordered:
                if max_duration_s is not None and request.arrival_s > max_duration_s:
                    break
                body = target.prepare(request)  # before the target time: CPU work off the send path
                scheduled = t0 + round(request.arrival_s * ns_per_run_s)
                await clock.sleep_until(scheduled)
                spawn(tg, send(body, new_record(request, scheduled)))
                await asyncio.sleep(0)  # let it go out before we build the next body
        else:
            feed = TurnOrder(ordered, predecessors)
            await clock.sleep_until(t0)
            for _ in range(concurrency):
                spawn(tg, _closed_loop_worker(feed, target, clock, stop_at, new_record, send))

    async def stop_when_told() -> None:
        assert stop is not None  # only started with a stop event
        await stop.wait()
        for task in list(tasks):
            task.cancel()

    stopper = asyncio.create_task(stop_when_told()) if stop is not None else None
    try:
        # 3-4. Offer the requests; the TaskGroup waits for the last one.
        async with asyncio.TaskGroup() as tg:
            spawn(tg, offer(tg))
    finally:
        # 5. Stop watching.
        gc.unfreeze()
        for helper in (watcher, stopper, status):
            if helper is not None:
                helper.cancel()
                await asyncio.gather(helper, return_exceptions=True)
        bar.close()
    return LoadResult(records, t0, time_scale, concurrency is None, lags, time.perf_counter() - wall0,
                      time.process_time() - cpu0, interrupted=stop is not None and stop.is_set(),
                      end_ns=clock.now_ns())


async def _closed_loop_worker(feed: TurnOrder, target: Target, clock: Pacer, stop_at: float,
                              new_record, send) -> None:
    """One slot of a closed loop: its next request is due the moment the previous one ended (a slot
    that finds every request left waiting on one in flight ends, as in sim mode)."""
    while (request := feed.next()) is not None:
        body = target.prepare(request)
        due = clock.now_ns()
        if due > stop_at:
            return
        await send(body, new_record(request, due))
        feed.ended(request.request_id)


async def _watch_loop(clock: Pacer, t0: int, period_s: float, lags: list[int]) -> None:
    """Sleep to absolute ticks every `period_s`; how late each wake-up is, is the loop's lag."""
    period = round(period_s * 1e9)
    tick = max(t0, clock.now_ns()) + period
    while True:
        await clock.sleep_until(tick)
        now = clock.now_ns()
        lags.append(now - tick)
        tick += period * max(1, (now - tick) // period + 1)  # skip ticks we slept through
