"""Response bodies and SSE chunks in the OpenAI shapes (`text_completion`, `chat.completion[.chunk]`).

The emulator's tokens carry no content, so each output token is the text `" the"`: one token in
every common vocabulary (GPT-2/Llama-style byte-level BPE: `Ġthe`; SentencePiece: `▁the`; BERT-style
WordPiece: `the`), so a client that counts tokens by tokenising the streamed text (AIPerf, GuideLLM)
gets `usage.completion_tokens` exactly (tests/data/tokenizers has a WordPiece and a BPE fixture).
"""

from __future__ import annotations

import json
from typing import Any

TOKEN_TEXT = " the"
DONE = b"data: [DONE]\n\n"


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached_tokens}}


def text(n_tokens: int) -> str:
    return TOKEN_TEXT * n_tokens


def full_response(api: str, rid: str, created: int, model: str, n_tokens: int, usage_: dict[str, Any]) -> dict:
    """The non-streaming body: all `n_tokens` in one choice, finish_reason "length" (max_tokens reached)."""
    if api == "chat":
        choice = {"index": 0, "message": {"role": "assistant", "content": text(n_tokens)}, "logprobs": None,
                  "finish_reason": "length"}
        obj = "chat.completion"
    else:
        choice = {"index": 0, "text": text(n_tokens), "logprobs": None, "finish_reason": "length"}
        obj = "text_completion"
    return {"id": rid, "object": obj, "created": created, "model": model, "choices": [choice], "usage": usage_}


def sse(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\n\n"


class ChunkWriter:
    """Encodes one stream's chunks; the first chat chunk also carries the assistant role."""

    __slots__ = ("api", "rid", "created", "model", "include_usage", "_first")

    def __init__(self, api: str, rid: str, created: int, model: str, include_usage: bool) -> None:
        self.api, self.rid, self.created, self.model = api, rid, created, model
        self.include_usage = include_usage
        self._first = True

    def _envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        obj = "chat.completion.chunk" if self.api == "chat" else "text_completion"
        out = {"id": self.rid, "object": obj, "created": self.created, "model": self.model, "choices": choices}
        if self.include_usage:
            out["usage"] = None
        return out

    def tokens(self, n_tokens: int, finish_reason: str | None = None) -> bytes:
        if self.api == "chat":
            delta: dict[str, Any] = {"content": text(n_tokens)}
            if self._first:
                delta = {"role": "assistant", **delta}
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text(n_tokens), "logprobs": None, "finish_reason": finish_reason}
        self._first = False
        return sse(self._envelope([choice]))

    def usage(self, usage_: dict[str, Any]) -> bytes:
        out = self._envelope([])
        out["usage"] = usage_
        return sse(out)

    @staticmethod
    def error(status: int, message: str) -> bytes:
        """An error inside an open stream (vLLM's convention: one `data: {"error": ...}` event)."""
        kind = "server_error" if status >= 500 else "invalid_request_error"
        return sse({"error": {"message": message, "type": kind, "param": None, "code": status}})
