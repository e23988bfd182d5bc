"""Twice the capacity, for a bounded while: the live emulator queues every request, loses none,
and keeps answering /health.

The deployment is small on purpose (one H20 prefill instance, one decode instance, 16K-token prompts,
16 output tokens), so prefill is the bottleneck and its capacity is one number: the sim's saturated
throughput (`loadgen.rate_rps=inf`), checked against the planner's Lambda_max for the same config.
The live emulator then runs at `server.time_scale=40` on 127.0.0.1, port 0, and the load generator
offers 80 requests (Poisson) at twice that capacity: about 3 s of sending and as long again to drain
the queue, the whole file well under 40 s. A second task polls /health every 50 ms meanwhile.

What overload must look like: every request sent ends in exactly one record (client side) and one
emulator record (server side); no connection errors or resets; TTFT grows with the backlog (the
M/D/1-like queue a 2x overload builds) instead of requests being dropped or failed fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import aiohttp
import numpy as np
import pytest

from harness.analysis import metrics as m
from harness.loadgen.client import OpenAIHttpTarget
from harness.loadgen.clock import MonotonicClock
from harness.loadgen.engine import run_load
from harness.loadgen.prompts import PromptBuilder
from harness.runs.sim import run_sim
from harness.workload import build_workload

pytestmark = pytest.mark.timeout(40)

TIME_SCALE = 40.0
N_REQUESTS = 80
OVERLOAD = 2.0
HEALTH_PERIOD_S = 0.05
HEALTH_TIMEOUT_S = 5.0  # a liveness bound, not a latency target
REQUEST_TIMEOUT_S = 20.0  # wall; an answer later than this is a timeout record, not a hang
SMALL = ["deployment=homogeneous_pd", "deployment.local.instances=2", "deployment.local.n_prefill=1",
         "deployment.local.n_decode=1", "workload=fixed", "workload.input_tokens=16384",
         "workload.output_tokens=16", f"server.time_scale={TIME_SCALE}"]
# Connection-level failures: what "lost" looks like on the client side.
CONNECTION_ERRORS = ("ClientOSError", "ServerDisconnectedError", "ClientConnectorError", "ClientPayloadError",
                     "Connection reset", "stream ended before")


@pytest.fixture(scope="module")
def capacity_rps(compose_cfg):
    """Saturated sim throughput (run-clock requests/s) of the small deployment."""
    cfg = compose_cfg([*SMALL, "workload.num_requests=120", "loadgen.rate_rps=inf",
                       "loadgen.saturation_in_flight=32"])
    result = run_sim(cfg)
    assert m.n_completed(result.requests) == 120
    measured = m.throughput_rps(result.requests)
    # The sim and the planner must agree on what "capacity" is, or "2x capacity" means nothing.
    assert measured == pytest.approx(result.meta["plan"]["lambda_max_rps"], rel=0.05)
    return measured


async def _poll_health(url: str, stop: asyncio.Event, answers: list) -> None:
    """GET /health every HEALTH_PERIOD_S until `stop`; each answer (status or exception name) kept."""
    async with aiohttp.ClientSession() as session:
        while not stop.is_set():
            try:
                async with session.get(url + "/health",
                                       timeout=aiohttp.ClientTimeout(total=HEALTH_TIMEOUT_S)) as resp:
                    answers.append(resp.status)
            except (TimeoutError, aiohttp.ClientError) as err:
                answers.append(type(err).__name__)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), HEALTH_PERIOD_S)


async def _overload(cfg, offered_rps: float) -> dict:
    from harness.live.server import start_server

    requests = build_workload(cfg.workload, rate_rps=offered_rps)
    server = await start_server(cfg, host="127.0.0.1", port=0)
    health: list = []
    stop = asyncio.Event()
    try:
        poller = asyncio.create_task(_poll_health(server.url, stop, health))
        clock = MonotonicClock()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            target = OpenAIHttpTarget(session, server.url, model=server.options.served_model, clock=clock,
                                      prompts=PromptBuilder(512), api="completions", stream=True,
                                      ignore_eos=True, timeout_s=REQUEST_TIMEOUT_S)
            wall0 = time.monotonic()
            result = await run_load(requests, target, clock=clock, time_scale=TIME_SCALE)
            wall_s = time.monotonic() - wall0
            stop.set()
            await poller
            during = list(health)
            async with session.get(server.url + "/health") as resp:
                after_status = resp.status
            # Still serving after the storm: one more request gets a whole answer.
            async with session.post(server.url + "/v1/completions",
                                    json={"prompt": [1, 2, 3], "max_tokens": 2, "ignore_eos": True}) as resp:
                after_request = (resp.status, await resp.json())
        server_records = list(server.built.deployment.records)
        client_ids = dict(server.engine.client_ids)
    finally:
        stop.set()
        await server.stop()
    return {"requests": requests, "result": result, "wall_s": wall_s, "health": during,
            "after_status": after_status, "after_request": after_request,
            "server_records": server_records, "client_ids": client_ids}


@pytest.fixture(scope="module")
def overload(compose_cfg, capacity_rps):
    cfg = compose_cfg([*SMALL, f"workload.num_requests={N_REQUESTS}"])
    run = asyncio.run(_overload(cfg, OVERLOAD * capacity_rps))
    run["capacity_rps"] = capacity_rps
    return run


def test_every_request_ends_in_exactly_one_record(overload):
    records = overload["result"].records
    sent_ids = sorted(r.request_id for r in overload["requests"])
    assert len(sent_ids) == N_REQUESTS
    assert sorted(r.request_id for r in records) == sent_ids
    assert all(r.sent_ns is not None and r.done_ns is not None and r.done_ns >= r.sent_ns for r in records)
    # The emulator's side: one record per request, matched through X-Request-Id.
    by_client = [overload["client_ids"].get(rec["request_id"]) for rec in overload["server_records"]]
    assert sorted(int(c) for c in by_client if c is not None) == sent_ids


def test_no_connection_errors_and_nothing_dropped(overload):
    """Overload is queueing: no resets or broken streams, and every request completes (status 200)."""
    records = overload["result"].records
    lost = [(r.request_id, r.error) for r in records if r.error and any(e in r.error for e in CONNECTION_ERRORS)]
    assert lost == []
    failed = [(r.request_id, r.http_status, r.error) for r in records if not r.completed]
    # Any failure would at least have to be explicit (an HTTP status or a timeout record).
    assert all(status not in (None, 0) or (error or "").startswith("timeout") for _, status, error in failed)
    assert failed == []
    assert all(r.http_status == 200 for r in records)
    assert all(rec["error"] is None for rec in overload["server_records"])


def test_health_answers_during_and_after(overload):
    health = overload["health"]
    assert len(health) >= 10, (len(health), overload["wall_s"])  # polled all through the run
    assert set(health) == {200}, [h for h in health if h != 200][:5]
    assert overload["after_status"] == 200
    status, body = overload["after_request"]
    assert status == 200 and body["usage"]["completion_tokens"] == 2


def _emulator_view(overload) -> dict:
    """The emulator's records of the test's requests in arrival order, all on its own clock (emulated
    seconds, exact whatever the host did: ScheduledLoopClock), each with its run-clock schedule."""
    result = overload["result"]
    scheduled = {r.request_id: (r.scheduled_ns - result.t0_ns) / 1e9 * TIME_SCALE for r in result.records}
    rows = sorted((rec for rec in overload["server_records"] if rec["request_id"] in overload["client_ids"]),
                  key=lambda rec: (rec["arrival_s"], rec["request_id"]))  # ids count submissions: ties in order
    arrival = np.array([rec["arrival_s"] for rec in rows])
    sigma = np.array([scheduled[int(overload["client_ids"][rec["request_id"]])] for rec in rows])
    delay = arrival - sigma  # the schedule's offset onto the emulator's clock, plus this request's delivery delay
    return {"arrival": arrival, "schedule": np.sort(sigma), "delay_spread": float(delay.max() - delay.min()),
            "prefill_start": np.array([rec["prefill_start_s"] for rec in rows]),
            "prefill_end": np.array([rec["prefill_end_s"] for rec in rows]),
            "ttft": np.array([rec["ttft_s"] for rec in rows])}


def test_ttft_grows_with_the_backlog(overload):
    """At 2x capacity the queue grows all run long, and TTFT with it; read on the emulator's records.

    One prefill instance, every prompt 16K uncached tokens: each prefill takes the same S (the
    sim's capacity is 1/S). FIFO, one at a time, never before the request arrived: a request that
    finds k requests ahead of it (arrived, prefill not done) waits at least k*S, and the i-th arrival
    cannot finish its prefill before i+1 services after the first arrival. Those hold whatever the
    arrival times. With the offer's schedule they become the backlog a 2x overload builds:
    TTFT_i >= (i+1)*S - (schedule_i - schedule_0) - D for the i-th request, where D is the spread of
    the delivery delay (emulator arrival minus schedule) this run measured, so the bound is as
    loose as the host made the arrivals, no looser. At the last request that is the backlog:
    (N*S - the offer's span) - D, about N/2 service times on a quiet machine."""
    view = _emulator_view(overload)
    arrival, prefill_end, ttft = view["arrival"], view["prefill_end"], view["ttft"]
    service = prefill_end - view["prefill_start"]
    s = float(service.mean())
    assert np.allclose(service, s, rtol=1e-9, atol=0) and s == pytest.approx(1 / overload["capacity_rps"], rel=0.01)
    assert (view["prefill_start"] >= arrival).all()
    assert (view["prefill_start"][1:] >= prefill_end[:-1] - 1e-9).all()  # one at a time, in arrival order
    assert (ttft >= prefill_end - arrival).all()
    ahead = np.array([int(((arrival < a) & (prefill_end > a)).sum()) for a in arrival])
    assert (ttft >= ahead * s - 1e-6).all(), [(k, t / s) for k, t in zip(ahead, ttft, strict=True) if t < k * s][:5]
    i = np.arange(len(arrival))
    assert (prefill_end - arrival >= (i + 1) * s - (arrival - arrival[0]) - 1e-6).all()
    bound = (i + 1) * s - (view["schedule"] - view["schedule"][0]) - view["delay_spread"]
    assert (ttft >= bound - 1e-6).all(), [(int(k), float(t), float(b)) for k, t, b in zip(i, ttft, bound, strict=True)
                                          if t < b - 1e-6][:5]


def test_offered_rate_was_twice_capacity(overload):
    """The overload is what it claims: the offer the load generator scheduled (exact run-clock
    targets, from the seeded Poisson arrivals at 2x) is well above capacity, each request was sent
    in order, none before its target, and each reached the emulator once. How late the sends were is
    the host's; the TTFT test takes the delay the run measured as its slack instead of assuming it."""
    records = overload["result"].records
    scheduled_s = np.sort([(r.scheduled_ns - overload["result"].t0_ns) / 1e9 * TIME_SCALE for r in records])
    offered_rps = (len(scheduled_s) - 1) / (scheduled_s[-1] - scheduled_s[0])
    assert offered_rps > 1.5 * overload["capacity_rps"], (offered_rps, overload["capacity_rps"])
    by_schedule = sorted(records, key=lambda r: (r.scheduled_ns, r.request_id))
    assert all(r.sent_ns - r.queued_ns >= r.scheduled_ns for r in by_schedule)
    sent = [r.sent_ns - r.queued_ns for r in by_schedule]
    assert sent == sorted(sent)
    assert len(_emulator_view(overload)["arrival"]) == N_REQUESTS
