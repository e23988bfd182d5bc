"""Prompts built from a request's `hash_ids`, so shared prefixes in a trace are shared prefixes on
the engine, and request bodies that pin the output length.

Block i of a prompt is `block_tokens` token ids drawn deterministically from its hash id alone
(a SplitMix64 stream seeded by the id, mapped into [token_id_min, token_id_max)); the last block is
cut to the prompt's length. Two requests whose leading hash ids agree therefore send identical
leading tokens, and requests whose ids differ diverge in their first token (with probability
1 - 1/span). Blocks a request has no hash id for get ids from (request_id, block index), never
shared. Chat prompts are the same ids written as words (`w1234 w98 ...`): exact lengths on the
emulator (one token per word), approximate on an engine with a real tokenizer.
"""

from __future__ import annotations

import json

import numpy as np

from harness.errors import require
from harness.workload.request import Request

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_UNSHARED = 0x5A5A << 48  # salt for blocks without a hash id


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on an array (uint64 arithmetic wraps, as intended)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


class PromptBuilder:
    def __init__(self, block_tokens: int = 512, token_id_min: int = 1000, token_id_max: int = 30000) -> None:
        require(block_tokens >= 1, f"workload.block_tokens must be >= 1, got {block_tokens}")
        require(0 <= token_id_min < token_id_max,
                f"target.token_id_min/token_id_max must satisfy 0 <= min < max, got {token_id_min}/{token_id_max}")
        self.block_tokens = block_tokens
        self.token_id_min = token_id_min
        self.span = token_id_max - token_id_min
        self._j = np.arange(block_tokens, dtype=np.uint64) * _GOLDEN
        # Text of every possible id, so a prompt's JSON is one vectorised gather and one join.
        self._ids_text = np.array([f"{token_id_min + i}," for i in range(self.span)], dtype=object)
        self._words = np.array([f"w{token_id_min + i} " for i in range(self.span)], dtype=object)

    def _block_ids(self, request: Request) -> np.ndarray:
        n_blocks = -(-request.input_tokens // self.block_tokens)
        ids = [h & _MASK64 for h in request.hash_ids[:n_blocks]]
        ids += [(_UNSHARED ^ (request.request_id << 20) ^ i) & _MASK64 for i in range(len(ids), n_blocks)]
        return np.array(ids, dtype=np.uint64)

    def offsets(self, request: Request) -> np.ndarray:
        """The prompt's token ids minus token_id_min (int64, length input_tokens)."""
        seeds = _splitmix(self._block_ids(request) * _M2 + _GOLDEN)
        x = _splitmix(seeds[:, None] + self._j[None, :]).ravel()[: request.input_tokens]
        return (x % np.uint64(self.span)).astype(np.int64)

    def token_ids(self, request: Request) -> np.ndarray:
        return self.offsets(request) + self.token_id_min

    def ids_json(self, request: Request) -> str:
        """`[id,id,...]` without a JSON encoder pass over the list."""
        return "[" + "".join(self._ids_text[self.offsets(request)].tolist())[:-1] + "]"

    def words(self, request: Request) -> str:
        return "".join(self._words[self.offsets(request)].tolist())[:-1]


def request_body(builder: PromptBuilder, request: Request, *, api: str, model: str, stream: bool,
                 ignore_eos: bool) -> bytes:
    """The JSON body for /v1/completions (token-id prompt) or /v1/chat/completions (one user message)."""
    rest: dict = {"model": model, "max_tokens": max(1, request.output_tokens), "stream": stream}
    if stream:
        rest["stream_options"] = {"include_usage": True}
    if ignore_eos:
        rest["ignore_eos"] = True
    tail = json.dumps(rest, separators=(",", ":"))[1:]
    if api == "chat":
        head = '{"messages":[{"role":"user","content":"' + builder.words(request) + '"}],'
    else:
        head = '{"prompt":' + builder.ids_json(request) + ","
    return (head + tail).encode()
