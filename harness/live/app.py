"""The OpenAI-compatible aiohttp application in front of a `LiveEngine`: all routes in one place.

Bad input never reaches the deployment: the `api_errors` middleware turns `ApiError` and aiohttp's
own HTTP errors (unknown route, wrong method, oversized body) into OpenAI error objects with their
4xx status, and anything unexpected into a 500 of the same shape, so the server keeps serving.
A client that hangs up while its body is still arriving is a disconnect (counted, no traceback).

Every generation request ends in one record (see engine.py): one answered with an error before it
reached the deployment is recorded as refused (its status and message), one whose client hung up as
abandoned. The server runs with aiohttp's handler cancellation on (`HANDLER_CANCELLATION`), so a
client that leaves is noticed when it leaves, also while a non-streaming request waits for its end.

Every response carries `X-Harness-Time-Scale` (emulated seconds per wall second); `/health` and
`/v1/models` say it too, so a load generator can put its wall-clock measurements on the emulated clock.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from harness.live.engine import CLIENT_CLOSED_STATUS, LiveEngine, LiveJob
from harness.live.protocol import ApiError, GenerationParams, load_body, parse_generation
from harness.live.responses import DONE, ChunkWriter, full_response, usage
from harness.live.tokens import TextTokenizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServeOptions:
    served_model: str
    max_model_len: int = 262144
    default_max_tokens: int = 16
    stream_interval_tokens: int = 1
    max_body_bytes: int = 32 << 20
    time_scale: float = 1.0  # emulated seconds per wall second, announced to clients
    tokenizer: TextTokenizer = field(default_factory=TextTokenizer)  # how text prompts are counted


TIME_SCALE_HEADER = "X-Harness-Time-Scale"
# aiohttp's AppRunner option: cancel a handler when its client disconnects (how a hang-up is seen).
HANDLER_CANCELLATION = True


# A request the server refuses, or cuts off, because it is stopping (`LiveEngine.closed`): interrupted.
SHUTDOWN_STATUS = 503
SHUTTING_DOWN = "server shutting down"

ENGINE = web.AppKey("engine", LiveEngine)
OPTIONS = web.AppKey("options", ServeOptions)

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "request_too_large"}


@web.middleware
async def api_errors(request: web.Request, handler) -> web.StreamResponse:
    try:
        response = await handler(request)
    except ConnectionError:  # the client hung up before its request was read: a disconnect, not a 500
        if not request.app[ENGINE].closed:  # (else the stopping server cut it)
            request.app[ENGINE].metrics.disconnects_mid_body += 1
        response = web.Response(status=499)  # nginx's "client closed request"; nobody reads it
    except ApiError as err:
        response = web.json_response(err.body(), status=err.status)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        api_err = _api_error(exc)
        response = web.json_response(api_err.body(), status=exc.status)
    except Exception as exc:  # a harness bug: answer it, log it, keep serving
        log.exception("unhandled error on %s %s", request.method, request.path)
        response = web.json_response(ApiError(500, f"internal error: {exc!r}").body(), status=500)
    _count_response(request, response.status)
    return response


class ProtocolErrorLog(logging.LoggerAdapter):
    """aiohttp's server log for one app (AppRunner's `logger` option). A request its HTTP parser rejects
    (e.g. an HTTP/1.0 POST without Content-Length: the standard gives such a request no body, so the body
    that follows is bad data) is answered 400 by aiohttp itself, before any handler: here it gets its
    record (refused, the parser's reason as its error) and one warning line instead of a traceback."""

    def __init__(self, engine: LiveEngine) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self.engine = engine

    def exception(self, msg: object, *args: object, exc_info: object = True, **kwargs: object) -> None:
        if isinstance(exc_info, HttpProcessingError):
            reason = " ".join(str(exc_info.message).split())
            self.engine.record_unsubmitted(exc_info.code or 400, f"malformed HTTP request: {reason}")
            self.logger.warning("malformed HTTP request answered %s: %s", exc_info.code or 400, reason)
            return
        self.logger.exception(msg, *args, exc_info=exc_info, **kwargs)


def _count_response(request: web.Request, status: int) -> None:
    resource = request.match_info.route.resource
    endpoint = resource.canonical if resource is not None else "unmatched"
    request.app[ENGINE].metrics.http[endpoint, status] += 1


def _api_error(exc: web.HTTPException) -> ApiError:
    message = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
    return ApiError(exc.status, message, code=_HTTP_CODES.get(exc.status, exc.status))


def make_app(engine: LiveEngine, options: ServeOptions) -> web.Application:
    app = web.Application(client_max_size=options.max_body_bytes, middlewares=[api_errors])
    app[ENGINE] = engine
    app[OPTIONS] = options
    engine.metrics.model_name = options.served_model
    scale = repr(float(options.time_scale))

    async def announce(request: web.Request, response: web.StreamResponse) -> None:
        response.headers[TIME_SCALE_HEADER] = scale

    app.on_response_prepare.append(announce)

    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok", "time_scale": options.time_scale})

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{
            "id": options.served_model, "object": "model", "created": 0, "owned_by": "harness",
            "max_model_len": options.max_model_len, "time_scale": options.time_scale}]})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=engine.metrics.render(engine), content_type="text/plain",
                            headers={"X-Prometheus-Format": "0.0.4"})

    async def completions(request: web.Request) -> web.StreamResponse:
        return await _generate(request, engine, options, "completions")

    async def chat(request: web.Request) -> web.StreamResponse:
        return await _generate(request, engine, options, "chat")

    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _generate(request: web.Request, engine: LiveEngine, options: ServeOptions, api: str) -> web.StreamResponse:
    client_id = request.headers.get("X-Request-Id")
    try:
        announced = request.content_length
        if announced is not None and announced > options.max_body_bytes:  # refused now, not after the whole body
            raise web.HTTPRequestEntityTooLarge(max_size=options.max_body_bytes, actual_size=announced)
        raw = await request.read()  # aiohttp raises 413 past client_max_size
        params = _parse(raw, api, options)
    except (ConnectionError, asyncio.CancelledError) as exc:  # hung up while its request was arriving
        if engine.closed:  # or the stopping server cut it (aiohttp stops reading, then cancels the handler)
            engine.record_unsubmitted(SHUTDOWN_STATUS, "server shut down while the request was arriving",
                                      client_id, interrupted=True)
            raise
        engine.record_unsubmitted(CLIENT_CLOSED_STATUS, "client disconnected while sending its request", client_id,
                      abandoned=True)
        if isinstance(exc, asyncio.CancelledError):  # (a ConnectionError is counted by api_errors)
            engine.metrics.disconnects_mid_body += 1
        raise
    except ApiError as err:
        engine.record_unsubmitted(err.status, err.message, client_id)
        raise
    except web.HTTPException as exc:
        if exc.status >= 400:
            engine.record_unsubmitted(exc.status, _api_error(exc).message, client_id)
        raise
    except Exception as exc:  # a harness bug (api_errors answers 500): the request still gets its record
        engine.record_unsubmitted(500, f"internal error: {exc!r}", client_id)
        raise
    if engine.closed:  # the server is stopping: it takes nothing new (the request is interrupted, not failed)
        engine.record_unsubmitted(SHUTDOWN_STATUS, SHUTTING_DOWN, client_id, interrupted=True)
        raise ApiError(SHUTDOWN_STATUS, SHUTTING_DOWN, code="server_shutting_down")
    live = engine.submit(params.prompt_ids, params.max_tokens, client_id, stream=params.stream)
    try:
        return await _respond(request, engine, options, live, params)
    except asyncio.CancelledError:  # its client hung up (aiohttp cancels the handler), or the server stopped
        if not engine.closed:  # (stopping, it recorded the request as interrupted: `LiveEngine.close`)
            engine.metrics.disconnects += 1
            engine.abandon(live)
        if live.stream:  # its status line went out before it left (api_errors sees no response)
            _count_response(request, 200)
        raise


def _parse(raw: bytes, api: str, options: ServeOptions) -> GenerationParams:
    try:
        body = load_body(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ApiError(400, f"the request body is not valid JSON: {err}", code="invalid_json") from err
    return parse_generation(body, api, served_model=options.served_model, max_model_len=options.max_model_len,
                            default_max_tokens=options.default_max_tokens, tokenizer=options.tokenizer)


async def _respond(request: web.Request, engine: LiveEngine, options: ServeOptions, live: LiveJob,
                   params: GenerationParams) -> web.StreamResponse:
    if live.error is not None:  # refused on arrival (e.g. its KV fits no decode instance)
        raise ApiError(400, f"the emulated deployment cannot serve this request: {live.error}", code="unservable")
    rid = f"{'chatcmpl' if params.api == 'chat' else 'cmpl'}-{live.request.request_id}"
    created = int(time.time())
    if params.stream:
        return await _stream(request, engine, options, live, params, rid, created)
    await live.done
    if live.error is not None:
        raise ApiError(503, f"request failed: {live.error}", code="request_failed")
    record = live.record
    assert record is not None  # set when the request ended
    body = full_response(params.api, rid, created, params.model, params.max_tokens,
                         usage(record["input_tokens"], record["output_tokens"], record["cached_tokens"]))
    return web.json_response(body)


async def _stream(request: web.Request, engine: LiveEngine, options: ServeOptions, live: LiveJob,
                  params: GenerationParams, rid: str, created: int) -> web.StreamResponse:
    """SSE: the first token in its own chunk at once, then a chunk whenever `stream_interval_tokens`
    more exist (all produced tokens if the handler woke late), the rest with the finish reason,
    then the usage chunk (if asked) and `[DONE]`."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    writer = ChunkWriter(params.api, rid, created, params.model, params.include_usage)
    n, interval = params.max_tokens, options.stream_interval_tokens
    sent = 0
    try:
        await live.first_token
        while live.record is None:
            done = min(await engine.wait_for_tokens(live, min(n, sent + (interval if sent else 1))), n)
            if live.record is not None:
                break
            if done >= n:
                await live.done  # every token exists: the last ones go out with the finish reason
                break
            await response.write(writer.tokens(done - sent))
            sent = done
        record = live.record
        assert record is not None  # set when the request ended
        if record["error"] is not None:
            await response.write(writer.error(503, f"request failed: {record['error']}"))
        else:
            await response.write(writer.tokens(n - sent, "length"))
            if params.include_usage:
                await response.write(writer.usage(usage(record["input_tokens"], record["output_tokens"],
                                                        record["cached_tokens"])))
        await response.write(DONE)
        await response.write_eof()
    except ConnectionError:  # the client went away: its request is cancelled, its record says so
        if not engine.closed:  # (the stopping server cut the stream: the record says interrupted)
            engine.metrics.disconnects += 1
            engine.abandon(live)
    return response
