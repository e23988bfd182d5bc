"""A client that hangs up frees the capacity its request held: the deployment cancels it at once.

The real app, `LiveEngine` and an emulated PD deployment with ONE prefill instance, on 127.0.0.1, port 0.
A long prompt (1000 tokens at 0.5 emulated s each: 500 s of prefill) is abandoned right after its
stream's status line arrives; a short one sent next must start its prefill at once, so its time to
first token is its own prefill (2 s), not the long prefill's remainder. Without the cancel it would
wait ~500 emulated s (25 wall s at time scale 20): the wait below is bounded and fails first.
Waits are on events (a record arrived, the server noticed the hang-up), never on timings.
"""

from __future__ import annotations

import asyncio
import math
import time

import aiohttp

from harness.deploy.deployment import Deployment
from harness.deploy.link import Link
from harness.deploy.router.homogeneous import HomogeneousRouter
from harness.live.app import ServeOptions
from harness.live.clock import ScheduledLoopClock
from harness.live.engine import CLIENT_LEFT, LiveEngine

_DEADLINE_S = 20.0  # wall seconds: a hang (no cancel), not a timing
_SCALE = 20.0
_PER_TOKEN_S = 0.5


class SlowPrefill:
    """Prefill 0.5 emulated s per new token, a 10 ms decode step, memory for anything."""

    bs_max = 8
    kv_capacity_bytes = None
    kv_bytes_per_token = 1000.0
    state_bytes = 0.0

    def prefill_s(self, new_tokens, cached_tokens=0):
        return _PER_TOKEN_S * new_tokens

    def kv_bytes(self, tokens):
        return 1000.0 * tokens

    def decode_step_s(self, batch, context_tokens):
        return 0.01


async def _until(predicate, what):
    end = time.monotonic() + _DEADLINE_S
    while not predicate():
        assert time.monotonic() < end, f"never happened: {what}"
        await asyncio.sleep(0.005)


def test_an_abandoned_stream_frees_the_prefill_instance_for_the_next_request(serve_engine):
    async def body():
        loop = asyncio.get_running_loop()
        clock = ScheduledLoopClock(loop, _SCALE)
        dep = Deployment(name="live", clock=clock, router=HomogeneousRouter(), local_profile=SlowPrefill(),
                         n_prefill=1, n_decode=1, rdma_link=Link(clock, 800.0), mode="live")
        engine = LiveEngine(dep, clock, loop, block_tokens=4)
        records: list[dict] = []
        engine.record_sink = records.append
        options = ServeOptions(served_model="m", max_model_len=100_000, max_body_bytes=1 << 20)
        try:
            async with serve_engine(engine, options) as url, aiohttp.ClientSession() as s:
                long = {"prompt": list(range(1000)), "max_tokens": 4, "stream": True}
                async with s.post(url + "/v1/completions", json=long, headers={"X-Request-Id": "long"}) as r:
                    assert r.status == 200  # the status line went out: the request is in the deployment
                    r.close()  # hang up before the first token
                await _until(lambda: records, "the abandoned request's record")
                short = {"prompt": [1, 2, 3, 4], "max_tokens": 2}
                async with s.post(url + "/v1/completions", json=short, headers={"X-Request-Id": "short"}) as r:
                    status = r.status
                    await r.read()
                await _until(lambda: len(records) == 2, "the short request's record")
                busy = dep.prefill["local"][0].busy_s
        finally:
            engine.close()
        return records, status, engine.metrics, busy

    records, status, metrics, busy = asyncio.run(body())
    gone, short = records
    assert gone["client_id"] == "long" and gone["abandoned"] is True and gone["error"] == CLIENT_LEFT
    assert gone["http_status"] == 200 and math.isnan(gone["finish_s"])
    assert gone["prefill_start_s"] <= gone["abandoned_s"] <= gone["prefill_end_s"] < 500.0  # stopped, not run out
    assert status == 200 and short["client_id"] == "short" and short["error"] is None
    assert short["prefill_start_s"] >= gone["prefill_end_s"]
    assert short["prefill_end_s"] - short["prefill_start_s"] == 4 * _PER_TOKEN_S
    assert short["ttft_s"] < 250.0  # its own 2 s prefill (and host lag), not the ~500 s left of the long one
    assert busy < 250.0  # the instance was not charged the long prefill's 500 s
    assert metrics.disconnects == 1 and metrics.finished["abandoned", "local"] == 1
