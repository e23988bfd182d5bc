"""The OpenAI/vLLM request surface: validate a request body into `GenerationParams`, or raise an
`ApiError` that the server turns into an OpenAI-style error object with a 4xx status.

Only what changes the emulation is read: the prompt (text, token ids, or chat messages), `max_tokens`
(`max_completion_tokens` in chat), `min_tokens`, `ignore_eos`, `stream` and
`stream_options.include_usage`. Sampling fields (temperature, top_p, ...) are accepted and ignored:
the emulator's tokens carry no content.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from harness.live.tokens import PromptTooLong, TextTokenizer

_WORDS = TextTokenizer()


class ApiError(Exception):
    """An error the client caused (or a server failure), in the OpenAI error shape."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | int | None = None,
                 type_: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type_ or ("server_error" if status >= 500 else "invalid_request_error")

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclass(frozen=True, slots=True)
class GenerationParams:
    api: str  # "completions" | "chat"
    model: str
    prompt_ids: list[int] | np.ndarray
    max_tokens: int
    min_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool


# Token-id prompts run to 100K+ ids; json.loads plus a per-element check costs ~3 ms per 30K ids on
# the event loop the whole live run shares. The fast path parses the list with numpy (~2x faster)
# and lets json handle the rest of the body; anything unusual takes the ordinary path.
_PROMPT_LIST = re.compile(rb'(?<!\\)"prompt"\s*:\s*\[')
_IDS_ONLY = re.compile(rb"[0-9,\s]*")
_MAX_TOKEN_ID = 1 << 62


def load_body(raw: bytes) -> Any:
    """json.loads(raw), with a token-id `prompt` list returned as an int64 array."""
    # The fast path parses the one `"prompt": [ids]` by itself; with any other "prompt" key in the
    # body (nested, duplicated) it could pick the wrong one, so only plain JSON decides then.
    m = _PROMPT_LIST.search(raw) if raw.count(b'"prompt"') == 1 else None
    if m is not None:
        end = raw.find(b"]", m.end())
        inner = raw[m.end():end]
        if end > 0 and b"," in inner and _IDS_ONLY.fullmatch(inner):
            try:
                ids = np.fromstring(inner, dtype=np.int64, sep=",")
                body = json.loads(raw[:m.end() - 1] + b"null" + raw[end + 1:])
            except ValueError:
                body = None
            if (isinstance(body, dict) and "prompt" in body and body["prompt"] is None
                    and ids.size == inner.count(b",") + 1 and ids.max() < _MAX_TOKEN_ID):
                body["prompt"] = ids
                return body
    try:
        return json.loads(raw)
    except RecursionError as err:
        raise ValueError("JSON nested too deeply") from err


def _bad(message: str, param: str | None, code: str | None = None) -> ApiError:
    return ApiError(400, message, param=param, code=code)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_list(value: list[Any], param: str) -> np.ndarray:
    """Token ids as an int64 array; checked in one vectorised pass (prompts run to 100K+ ids)."""
    if not value:
        return np.zeros(0, dtype=np.int64)
    try:
        ids = np.asarray(value)
    except (ValueError, OverflowError):
        ids = np.asarray(value, dtype=object)
    if ids.ndim == 1 and ids.dtype.kind == "i" and (ids.size == 0 or ids.min() >= 0):  # not uint64: > int64
        return ids.astype(np.int64, copy=False)
    for i, v in enumerate(value):  # slow path, only to name the bad element
        if not _is_int(v) or v < 0 or v >= 1 << 63:
            raise _bad(f"{param}[{i}] must be a non-negative integer token id, got {v!r:.40}", param)
    raise _bad(f"{param} must be a flat list of token ids", param)


def _prompt_ids(prompt: Any, tokenizer: TextTokenizer = _WORDS, limit: int | None = None) -> list[int] | np.ndarray:
    """Text, a token-id list, or a batch of exactly one of those (text longer than `limit` tokens
    raises PromptTooLong, found on a cheap bound before the text is tokenised)."""
    if isinstance(prompt, np.ndarray):  # from load_body's fast path: already checked
        return prompt
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]  # a batch of one
    if isinstance(prompt, str):
        return tokenizer.ids(prompt, limit)
    if isinstance(prompt, list):
        if prompt and all(isinstance(p, (str, list)) for p in prompt):
            raise _bad(f"batched prompts are not supported (got {len(prompt)}); send one prompt per request",
                       "prompt")
        return _token_list(prompt, "prompt")
    raise _bad(f"prompt must be a string or a list of token ids, got {type(prompt).__name__}", "prompt")


def _message_ids(messages: Any, tokenizer: TextTokenizer = _WORDS, limit: int | None = None) -> list[int]:
    if not isinstance(messages, list) or not messages:
        raise _bad("messages must be a non-empty list of {role, content} objects", "messages")
    ids: list[int] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise _bad(f"messages[{i}] must be an object with a string 'role'", "messages")
        content = message.get("content")
        if content is None:
            continue
        left = None if limit is None else limit - len(ids)
        if isinstance(content, str):
            ids.extend(tokenizer.ids(content, left))
        elif isinstance(content, list):
            for part in content:
                if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                    ids.extend(tokenizer.ids(part["text"], None if limit is None else limit - len(ids)))
                else:
                    raise _bad(f"messages[{i}].content parts must be {{'type': 'text', 'text': ...}}; "
                               f"got {part!r:.80}", "messages")
        else:
            raise _bad(f"messages[{i}].content must be a string, a list of text parts or null", "messages")
    return ids


def _optional(body: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = body.get(key)
    if value is None:
        return default
    ok = _is_int(value) if kind is int else isinstance(value, kind)
    if not ok:
        raise _bad(f"{key} must be {'an integer' if kind is int else kind.__name__}, got {value!r}", key)
    return value


def parse_generation(body: Any, api: str, *, served_model: str, max_model_len: int,
                     default_max_tokens: int, tokenizer: TextTokenizer = _WORDS) -> GenerationParams:
    """Validate a /v1/completions (`api="completions"`) or /v1/chat/completions (`"chat"`) body.

    Text is tokenised by `tokenizer` only after a cheap bound says it fits `max_model_len - 1`."""
    if not isinstance(body, dict):
        raise _bad(f"the request body must be a JSON object, got {type(body).__name__}", None)
    model = body.get("model", served_model)
    if model is None:
        model = served_model
    if model != served_model:
        raise ApiError(404, f"The model `{model}` does not exist. Served: {served_model}", param="model",
                       code="model_not_found")
    param = "messages" if api == "chat" else "prompt"
    try:
        if api == "chat":
            ids: list[int] | np.ndarray = _message_ids(body.get("messages"), tokenizer, max_model_len - 1)
            max_key = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        else:
            if "prompt" not in body:
                raise _bad("prompt is required", "prompt")
            ids = _prompt_ids(body["prompt"], tokenizer, max_model_len - 1)
            max_key = "max_tokens"
    except PromptTooLong as err:
        raise _bad(f"This model's maximum context length is {max_model_len} tokens. However, the prompt has "
                   f"{err} (counted before tokenising it in full).", param, "context_length_exceeded") from err
    if len(ids) == 0:
        raise _bad("the prompt has no tokens", "messages" if api == "chat" else "prompt")
    max_tokens = _optional(body, max_key, int, default_max_tokens)
    if max_tokens < 1:
        raise _bad(f"{max_key} must be >= 1, got {max_tokens}", max_key)
    min_tokens = _optional(body, "min_tokens", int, 0)
    if not 0 <= min_tokens <= max_tokens:
        raise _bad(f"min_tokens must be in [0, {max_key}={max_tokens}], got {min_tokens}", "min_tokens")
    if _optional(body, "n", int, 1) != 1:
        raise _bad(f"n must be 1 (one completion per request), got {body['n']!r}", "n")
    ignore_eos = _optional(body, "ignore_eos", bool, False)
    stream = _optional(body, "stream", bool, False)
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise _bad("stream_options can only be set when stream is true", "stream_options")
        if not isinstance(options, dict):
            raise _bad(f"stream_options must be an object, got {options!r}", "stream_options")
        include_usage = bool(options.get("include_usage", False))
    if len(ids) + max_tokens > max_model_len:
        raise _bad(f"This model's maximum context length is {max_model_len} tokens. However, you requested "
                   f"{len(ids) + max_tokens} tokens ({len(ids)} in the prompt, {max_tokens} in the completion).",
                   "messages" if api == "chat" else "prompt", "context_length_exceeded")
    return GenerationParams(api, model, ids, max_tokens, min_tokens, ignore_eos, stream, include_usage)
