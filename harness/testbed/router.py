"""The testbed's front end: an OpenAI-compatible aiohttp server on 127.0.0.1 that routes each request with the
emulator's own router classes (conf/router/*.yaml) and runs it through the real engines.

`/v1/completions` takes token-id prompts (routing needs the length), `max_tokens`, `ignore_eos`, `stream`;
the decode engine's SSE stream is passed through unchanged, so TTFT is its first streamed token (the
emulator's definition). `/health`, `/v1/models`, `/metrics` (Prometheus text) and `/testbed/records` (the
router's per-request records, JSON) complete it. The router sees the link as the emulator's routers do: a
`ClusterSnapshot` with the egress utilisation measured from the veth's counters and the KV bytes in flight.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web

from harness.deploy.router.base import ClusterSnapshot, RoutedRequest, Router
from harness.testbed import engines
from harness.testbed.engines import EngineError
from harness.testbed.handoff import Handoff, HandoffRecord
from harness.testbed.linkmon import LinkMonitor
from harness.testbed.settings import Layout


@dataclass
class FrontEnd:
    """What the app needs: the routing policy, the hand-off, the link monitor and the served model's name."""

    router: Router
    handoff: Handoff
    monitor: LinkMonitor | None
    layout: Layout
    link_gbps: float
    model_name: str
    t0_ns: int

    def view(self) -> ClusterSnapshot:
        mon = self.monitor
        return ClusterSnapshot(
            has_prfaas=self.layout.has_prfaas, has_local_prefill=self.layout.has_local_prefill,
            egress_utilisation=mon.utilisation() if mon else 0.0, link_capacity_gbps=self.link_gbps,
            prfaas_backlog_s=0.0, local_backlog_s=0.0, now_s=(time.monotonic_ns() - self.t0_ns) / 1e9,
            link_backlog_s=mon.backlog_s() if mon else 0.0)

    def route(self, input_tokens: int) -> str:
        return self.router.route(RoutedRequest(input_tokens, 0, 0), self.view()).cluster


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message, "type": "testbed_error", "code": status}},
                             status=status)


def parse_body(body: Any) -> tuple[list[int], int, bool]:
    """The prompt's token ids, max_tokens and stream flag; ValueError names what is wrong."""
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], list):
        prompt = prompt[0]
    if not isinstance(prompt, list) or not prompt or not all(isinstance(t, int) for t in prompt):
        raise ValueError("`prompt` must be a non-empty list of token ids (the testbed routes on prompt length)")
    max_tokens = body.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise ValueError(f"`max_tokens` must be an integer >= 1, got {max_tokens!r}")
    return prompt, max_tokens, bool(body.get("stream", False))


async def completions(request: web.Request) -> web.StreamResponse:
    front: FrontEnd = request.app[FRONT]
    try:
        body = await request.json()
        prompt, _, stream = parse_body(body)
    except ValueError as err:
        return _error(400, str(err))
    rec = front.handoff.new_record(request.headers.get("X-Request-Id"), len(prompt))
    try:
        route = front.route(len(prompt))
        name = await front.handoff.prepare(rec, route, prompt)
        async with front.handoff.decode_slot(rec, name) as slot:
            return await _decode(request, front, rec, engines.decode_body(body, slot), stream)
    except EngineError as err:
        rec.error = str(err)
        rec.finish_ns = time.monotonic_ns()
        return _error(502, rec.error)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError) as err:
        rec.error = f"client disconnected: {err}"
        rec.finish_ns = time.monotonic_ns()
        return web.Response(status=499, text=rec.error)  # nobody to tell: recorded, not logged as a crash
    except BaseException as err:  # cancelled (client gone, shutdown): still one record
        if rec.error is None:
            rec.error = f"{type(err).__name__}: {err}"
            rec.finish_ns = time.monotonic_ns()
        raise


async def _decode(request: web.Request, front: FrontEnd, rec: HandoffRecord, body: dict[str, Any],
                  stream: bool) -> web.StreamResponse:
    decode = front.handoff.engines[rec.decode_instance]
    session = front.handoff.session
    timeout = aiohttp.ClientTimeout(total=front.handoff.timeout_s)
    try:
        async with session.post(decode.url + "/v1/completions", json=body, timeout=timeout) as upstream:
            if upstream.status != 200:
                raise EngineError(f"decode: HTTP {upstream.status}: {(await upstream.text()).strip()[:200]}")
            if not stream:
                data = await upstream.read()
                rec.first_token_ns = rec.finish_ns = time.monotonic_ns()
                return web.Response(body=data, content_type="application/json")
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
            await resp.prepare(request)
            async for piece in upstream.content.iter_any():
                if rec.first_token_ns is None and b"data:" in piece:
                    rec.first_token_ns = time.monotonic_ns()
                await resp.write(piece)
            rec.finish_ns = time.monotonic_ns()
            await resp.write_eof()
            return resp
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, TimeoutError) as err:
        raise EngineError(f"decode: {type(err).__name__}: {err}") from err


async def health(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def models(request: web.Request) -> web.Response:
    name = request.app[FRONT].model_name
    return web.json_response({"object": "list", "data": [{"id": name, "object": "model", "owned_by": "testbed"}]})


async def records(request: web.Request) -> web.Response:
    return web.json_response([rec.row() for rec in request.app[FRONT].handoff.records])


def metrics_text(front: FrontEnd) -> str:
    recs = front.handoff.records
    lines = ["# TYPE testbed_requests_total counter"]
    for route in sorted({r.route for r in recs if r.route}):
        lines.append(f'testbed_requests_total{{route="{route}"}} {sum(r.route == route for r in recs)}')
    done = [r for r in recs if r.finish_ns is not None]
    lines += ["# TYPE testbed_requests_failed_total counter",
              f"testbed_requests_failed_total {sum(r.error is not None for r in done)}",
              "# TYPE testbed_requests_running gauge", f"testbed_requests_running {len(recs) - len(done)}",
              "# TYPE testbed_kv_bytes_total counter", f"testbed_kv_bytes_total {sum(r.kv_bytes_sent for r in recs)}"]
    mon = front.monitor
    if mon is not None and mon.samples:
        lines += ["# TYPE testbed_link_tx_bytes counter", f"testbed_link_tx_bytes {mon.samples[-1][1]}",
                  "# TYPE testbed_link_egress_gbps gauge", f"testbed_link_egress_gbps {mon.recent_gbps():.6f}"]
    for name, pool in front.handoff.pools.items():
        lines.append(f'testbed_idle_slots{{instance="{name}"}} {pool.idle}')
    return "\n".join(lines) + "\n"


async def metrics(request: web.Request) -> web.Response:
    return web.Response(text=metrics_text(request.app[FRONT]), content_type="text/plain")


FRONT = web.AppKey("front", FrontEnd)


def make_app(front: FrontEnd) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[FRONT] = front
    app.add_routes([web.post("/v1/completions", completions), web.get("/health", health),
                    web.get("/v1/models", models), web.get("/metrics", metrics),
                    web.get("/testbed/records", records)])
    return app


def dumps_records(front: FrontEnd) -> str:
    return json.dumps([rec.row() for rec in front.handoff.records])
