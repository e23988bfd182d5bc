"""Prompts built from a request's `hash_ids`, so shared prefixes in a trace are shared prefixes on
the engine, and request bodies that pin the output length.

Block i of a prompt is `block_tokens` token ids that depend on its hash id alone: a walk with an
odd stride through a fixed table of 65,536 pseudo-random ids in [token_id_min, token_id_max), start
and stride drawn from the id by SplitMix64 (no RNG library, so prompts are the same on every
machine and numpy version). The last block is cut to the prompt's length. Two requests whose
leading hash ids agree therefore send identical leading tokens; requests whose ids differ diverge
at once (first token equal with probability ~1/span). Blocks a request has no hash id for get ids
from (request_id, block index), never shared. Chat prompts are the same ids written as words
(`w1234 w98 ...`): exact lengths on the emulator (one token per word), approximate on an engine
with a real tokenizer.
"""

from __future__ import annotations

import functools
import json

import numpy as np

from harness.errors import require
from harness.workload.request import Request

_MASK64 = (1 << 64) - 1
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_UNSHARED = 0x5A5A << 48  # salt for blocks without a hash id


def _mix64(h: int) -> int:
    """SplitMix64 of a block id, in Python integers (ids of any size are taken mod 2**64)."""
    x = ((h & _MASK64) * 0x94D049BB133111EB + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def _splitmix(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser on an array (uint64 arithmetic wraps, as intended)."""
    x = x ^ (x >> np.uint64(30))
    x = x * _M1
    x = x ^ (x >> np.uint64(27))
    x = x * _M2
    return x ^ (x >> np.uint64(31))


_TABLE_BITS = 16
_TABLE_MASK = (1 << _TABLE_BITS) - 1


class PromptBuilder:
    def __init__(self, block_tokens: int = 512, token_id_min: int = 1000, token_id_max: int = 30000) -> None:
        require(block_tokens >= 1, f"workload.block_tokens must be >= 1, got {block_tokens}")
        require(0 <= token_id_min < token_id_max,
                f"target.token_id_min/token_id_max must satisfy 0 <= min < max, got {token_id_min}/{token_id_max}")
        self.block_tokens = block_tokens
        self.token_id_min = token_id_min
        self.span = token_id_max - token_id_min
        self._j = np.arange(block_tokens, dtype=np.int64)
        table = _splitmix(np.arange(1 << _TABLE_BITS, dtype=np.uint64) + _GOLDEN) % np.uint64(self.span)
        self._table = table.astype(np.int64) + token_id_min  # token ids
        # The text of every table entry as a fixed-width byte row ("  1234," right-aligned: still
        # JSON; "w01234 " for chat), so a prompt's text is one row gather and one tobytes.
        width = len(str(token_id_max - 1))
        self._json_rows = _byte_rows([f"{v:>{width}}," for v in self._table.tolist()])
        self._word_rows = _byte_rows([f"w{v:0{width}} " for v in self._table.tolist()])

    def _slots(self, request: Request) -> np.ndarray:
        """Table positions of the prompt's tokens: per block, start + j * stride (stride odd)."""
        n_blocks = -(-request.input_tokens // self.block_tokens)
        ids = list(request.hash_ids[:n_blocks])
        ids += [_UNSHARED ^ (request.request_id << 20) ^ i for i in range(len(ids), n_blocks)]
        # Implementation note: the per-block mixing is plain integer arithmetic; numpy's per-call
        # cost on arrays of a few elements would be most of a short prompt's build time.
        mixes = [_mix64(h) for h in ids]
        if n_blocks == 1:
            m = mixes[0]
            slots = (m & _TABLE_MASK) + self._j * (((m >> _TABLE_BITS) & _TABLE_MASK) | 1)
        else:
            start = np.array([m & _TABLE_MASK for m in mixes], dtype=np.int64)
            stride = np.array([((m >> _TABLE_BITS) & _TABLE_MASK) | 1 for m in mixes], dtype=np.int64)
            slots = (start[:, None] + self._j[None, :] * stride[:, None]).ravel()
        return slots[: request.input_tokens] & _TABLE_MASK

    def token_ids(self, request: Request) -> np.ndarray:
        """The prompt's token ids (int64, length input_tokens)."""
        return self._table[self._slots(request)]

    def ids_json(self, request: Request) -> bytes:
        """`[21676, 8294,...]`: the token-id list as JSON."""
        return b"[" + self._json_rows[self._slots(request)].tobytes()[:-1] + b"]"

    def words(self, request: Request) -> bytes:
        """`w21676 w08294 ...`: one word per token id (the emulator's tokenizer splits on whitespace)."""
        return self._word_rows[self._slots(request)].tobytes()[:-1]


@functools.lru_cache(maxsize=8)
def shared_builder(block_tokens: int = 512, token_id_min: int = 1000, token_id_max: int = 30000) -> PromptBuilder:
    """One PromptBuilder per (block, id range) in a process: building its tables costs ~60 ms of CPU,
    and a builder never changes once built (calibration probes start a load-generator run per request)."""
    return PromptBuilder(block_tokens, token_id_min, token_id_max)


def _byte_rows(texts: list[str]) -> np.ndarray:
    """Equal-length ASCII strings -> a (len, width) uint8 matrix."""
    return np.frombuffer("".join(texts).encode(), dtype=np.uint8).reshape(len(texts), -1)


def request_body(builder: PromptBuilder, request: Request, *, api: str, model: str, stream: bool,
                 ignore_eos: bool, extra_json: str = "") -> bytes:
    """The JSON body for /v1/completions (token-id prompt) or /v1/chat/completions (one user message);
    `extra_json` (a JSON object, `target.extra_body`) adds or replaces fields after the prompt."""
    tail = _tail(model, max(1, request.output_tokens), stream, ignore_eos, extra_json)
    if api == "chat":
        return b'{"messages":[{"role":"user","content":"' + builder.words(request) + b'"}],' + tail
    return b'{"prompt":' + builder.ids_json(request) + b"," + tail


PROMPT_KEYS = ("prompt", "messages")  # set by the harness from the trace; extra_body may not replace them


@functools.lru_cache(maxsize=4096)
def _tail(model: str, max_tokens: int, stream: bool, ignore_eos: bool, extra_json: str = "") -> bytes:
    """Everything after the prompt: `"model":...,"max_tokens":N,...}` (a trace has few distinct N)."""
    rest: dict = {"model": model, "max_tokens": max_tokens, "stream": stream}
    if stream:
        rest["stream_options"] = {"include_usage": True}
    if ignore_eos:
        rest["ignore_eos"] = True
    if extra_json:
        extra = json.loads(extra_json)
        require(not set(extra) & set(PROMPT_KEYS),
                f"target.extra_body may not set {', '.join(sorted(set(extra) & set(PROMPT_KEYS)))}: the prompt "
                f"comes from the workload")
        rest.update(extra)
    return json.dumps(rest, separators=(",", ":"))[1:].encode()

