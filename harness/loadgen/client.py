"""An OpenAI-compatible HTTP target: POST one request, stream its SSE chunks, stamp each one.

Works against any server following the OpenAI/vLLM conventions (the live emulator, vLLM, SGLang).
Every failure becomes the record's `error` (HTTP status and the server's message, refused
connection, timeout, broken or truncated stream); `send` raises only on cancellation.

Per request it also keeps the server's response `id` (to join client rows with engine logs), the
time scale a harness-serve announces (`X-Harness-Time-Scale`), and the engine's own `timings`
when the target sends them (llama.cpp's final chunk: prompt_n, cache_n, prompt_ms, predicted_n,
predicted_ms). `api_key`, `headers` and `extra_body` go out with every request.
"""

from __future__ import annotations

import json
import json.scanner
import math
from typing import Any, cast

import aiohttp

from harness.errors import require
from harness.loadgen.clock import Pacer
from harness.loadgen.prompts import PROMPT_KEYS, PromptBuilder, request_body
from harness.loadgen.records import ENGINE_TIMING_COLUMNS as ENGINE_TIMING_KEYS
from harness.loadgen.records import RequestRecord
from harness.workload.request import Request

API_PATHS = {"completions": "/completions", "chat": "/chat/completions"}
_SCAN = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))  # the C scanner: ~30% cheaper than json.loads


def _loads(text: str) -> Any:
    """json.loads for one SSE payload, minus the per-call overhead (chunks come by the thousand)."""
    try:
        obj, end = _SCAN(text, 0)
    except StopIteration as err:
        raise ValueError(f"not JSON at char {err.value}: {text[:60]!r}") from None
    if end != len(text):
        raise ValueError(f"extra data after the JSON object: {text[end:end + 40]!r}")
    return obj


def v1_base(url: str) -> str:
    """`http://host:port` or `http://host:port/v1` -> the `/v1` base every path hangs off."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def auth_headers(api_key: str | None, headers: dict[str, str] | None = None) -> dict[str, str]:
    """`Authorization: Bearer <api_key>` (when given) plus the user's own headers (theirs win)."""
    out = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    out.update({str(k): str(v) for k, v in (headers or {}).items()})
    return out


async def discover_model(session: aiohttp.ClientSession, url: str, timeout_s: float = 30.0,
                         headers: dict[str, str] | None = None) -> str:
    """The first model id the endpoint lists at /v1/models (what `vllm bench serve` does)."""
    async with session.get(v1_base(url) + "/models", timeout=aiohttp.ClientTimeout(total=timeout_s),
                           headers=headers or {}) as resp:
        resp.raise_for_status()
        data = await resp.json()
    models = data.get("data") or []
    if not models:
        raise ValueError(f"{url}/v1/models lists no model; set target.model")
    return str(models[0]["id"])


def _error_message(status: int, text: str) -> str:
    try:
        err = json.loads(text)
        err = err.get("error", err) if isinstance(err, dict) else err
        message = err.get("message", text) if isinstance(err, dict) else text
    except ValueError:
        message = text
    return f"HTTP {status}: {str(message).strip()[:300]}"


def _choice_text(choice: dict[str, Any]) -> str | None:
    text = choice.get("text")
    if text is None:
        delta = choice.get("delta") or choice.get("message") or {}
        text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
    return text


def _float_or_none(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(out) else out


def _keep_id_and_timings(obj: dict[str, Any], record: RequestRecord) -> None:
    """The response id (first seen) and the engine's `timings` object (llama.cpp), if any."""
    if record.response_id is None and isinstance(obj.get("id"), str):
        record.response_id = obj["id"]
    timings = obj.get("timings")
    if isinstance(timings, dict):
        record.engine_timings = {k: _float_or_none(timings.get(k)) for k in ENGINE_TIMING_KEYS}




def _never_sent(err: aiohttp.ClientOSError, record: RequestRecord) -> bool:
    """True when the request failed before any byte of it left this process: a pooled keep-alive
    connection the server had already closed (llama-server closes one after every streamed
    response, without `Connection: close`), found closing at the first write. aiohttp then raises
    "Can not write request body" caused by its "Cannot write to closing transport"; the request
    (headers and body are one write) reached no server, so sending it again is safe."""
    cause = err.__cause__  # ("Connection lost", its other reset, can come after bytes were written)
    return (record.http_status is None and isinstance(cause, aiohttp.ClientConnectionResetError)
            and "closing transport" in str(cause))


class OpenAIHttpTarget:
    """Sends `Request`s to `url` (`api`: completions with token-id prompts, or chat with text)."""

    def __init__(self, session: aiohttp.ClientSession, url: str, *, model: str, clock: Pacer,
                 prompts: PromptBuilder, api: str = "completions", stream: bool = True, ignore_eos: bool = True,
                 timeout_s: float = 600.0, api_key: str | None = None, headers: dict[str, str] | None = None,
                 extra_body: dict[str, Any] | None = None) -> None:
        if api not in API_PATHS:
            raise ValueError(f"target.api must be one of {', '.join(API_PATHS)}, got {api!r}")
        self.session = session
        self.endpoint = v1_base(url) + API_PATHS[api]
        self.model, self.clock, self.prompts = model, clock, prompts
        self.api, self.stream, self.ignore_eos = api, stream, ignore_eos
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "application/json", **auth_headers(api_key, headers)}
        bad = sorted(set(extra_body or {}) & set(PROMPT_KEYS))
        require(not bad, f"target.extra_body may not set {', '.join(bad)}: the prompt comes from the workload")
        self.extra_json = json.dumps(dict(extra_body), sort_keys=True) if extra_body else ""

    def prepare(self, request: Request) -> bytes:
        return request_body(self.prompts, request, api=self.api, model=self.model, stream=self.stream,
                            ignore_eos=self.ignore_eos, extra_json=self.extra_json)

    async def send(self, body: bytes, record: RequestRecord) -> None:
        headers = {**self.headers, "X-Request-Id": str(record.request_id)}
        try:
            try:
                await self._post(body, headers, record)
            except aiohttp.ClientOSError as err:
                if not _never_sent(err, record):
                    raise
                await self._post(body, headers, record)  # once, on a new connection: nothing reached the server
        except TimeoutError:
            record.error = f"timeout: no complete response within target.timeout_s={self.timeout_s:g} s"
        except aiohttp.ClientError as err:
            record.error = f"{type(err).__name__}: {err}"
        except (ValueError, KeyError, TypeError, AttributeError) as err:  # a body that is not what the API says
            record.error = f"malformed response: {type(err).__name__}: {err}"

    async def _post(self, body: bytes, headers: dict[str, str], record: RequestRecord) -> None:
        async with self.session.post(self.endpoint, data=body, headers=headers, timeout=self.timeout) as resp:
            record.http_status = resp.status
            scale = resp.headers.get("X-Harness-Time-Scale")
            if scale is not None:
                record.server_time_scale = _float_or_none(scale)
            if resp.status != 200:
                record.error = _error_message(resp.status, await resp.text(errors="replace"))
            elif self.stream:
                await self._read_stream(resp, record)
            else:
                await self._read_whole(resp, record)

    async def _read_whole(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        data = await resp.json(content_type=None)
        now = self.clock.now_ns()
        if data.get("error"):
            record.error = _error_message(resp.status, json.dumps(data))
            return
        choices = data.get("choices") or []
        if not choices or not _choice_text(choices[0]):
            record.error = "response carried no output tokens"
            return
        record.first_token_ns = record.last_token_ns = now
        record.chunk_ns.append(now)
        self._usage(data.get("usage"), record)
        _keep_id_and_timings(data, record)

    async def _read_stream(self, resp: aiohttp.ClientResponse, record: RequestRecord) -> None:
        """Parse SSE events as bytes arrive; each event is stamped with its arrival time."""
        buffer = b""
        saw_done = False
        clock, chunks = self.clock, record.chunk_ns
        async for piece in resp.content.iter_any():
            now = clock.now_ns()
            buffer += piece
            if b"\r" in buffer:
                buffer = buffer.replace(b"\r\n", b"\n")
            end = buffer.rfind(b"\n\n")
            if end < 0:
                continue
            complete, buffer = buffer[:end], buffer[end + 2:]
            for line in complete.split(b"\n"):
                if line[:5] != b"data:":
                    continue  # blank separators, comments, event names, keep-alives
                payload = line[5:].strip()
                if payload == b"[DONE]":
                    saw_done = True
                    continue
                obj = _loads(payload.decode())
                if obj.get("error"):
                    err = obj["error"]
                    record.error = f"stream error: {err.get('message', err) if isinstance(err, dict) else err}"
                    return
                if record.response_id is None or "timings" in obj:
                    _keep_id_and_timings(obj, record)
                choices = obj.get("choices")
                if choices and _choice_text(choices[0]):
                    if record.first_token_ns is None:
                        record.first_token_ns = now
                    record.last_token_ns = now
                    chunks.append(now)
                if obj.get("usage"):
                    self._usage(obj["usage"], record)
        if not saw_done:
            record.error = "stream ended before `data: [DONE]`"
        elif record.first_token_ns is None:
            record.error = "stream carried no output tokens"

    @staticmethod
    def _usage(usage: dict[str, Any] | None, record: RequestRecord) -> None:
        """The server's token counts replace the requested ones."""
        if not usage:
            return
        record.usage_reported = True
        if usage.get("prompt_tokens") is not None:
            record.input_tokens = int(usage["prompt_tokens"])
        if usage.get("completion_tokens") is not None:
            record.output_tokens = int(usage["completion_tokens"])
        details = usage.get("prompt_tokens_details") or {}
        if details.get("cached_tokens") is not None:
            record.cached_tokens = int(details["cached_tokens"])
