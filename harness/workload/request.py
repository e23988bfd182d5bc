"""The request row every part of the harness exchanges, and its DataFrame form.

A workload (synthetic generator, agentic sessions, trace file) becomes a list of `Request`s; the
load generator, the emulator and the planner only ever see these rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import cast

import numpy as np
import pandas as pd

from harness.errors import InputError

FIELDS = ("request_id", "arrival_s", "input_tokens", "output_tokens", "hash_ids", "session_id", "turn")


@dataclass(frozen=True, slots=True)
class Request:
    """One LLM request of a workload.

    `arrival_s` is the offset from the start of the run in seconds. `hash_ids` are the ids of the
    prompt's `block_tokens`-sized blocks, prefix-chained as in the Mooncake trace format: two
    requests whose leading ids are equal share that KV prefix. There are exactly
    ceil(input_tokens / block_tokens) of them; the last block may be partial.
    """

    request_id: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # a range where a sim run's pools forget blocks (unique_hash_ids)
    session_id: int | None = None
    turn: int | None = None


_new = object.__new__
_set_fields = tuple(Request.__dict__[name].__set__ for name in FIELDS)  # the slots' own setters


def make_request(request_id: int, arrival_s: float, input_tokens: int, output_tokens: int,
                 hash_ids: tuple[int, ...] = (), session_id: int | None = None, turn: int | None = None) -> Request:
    """`Request(...)` for the hot paths that build one per request (workload streams, trace readers):
    the same frozen object, its slots filled by their own setters instead of the dataclass
    `__init__`'s `object.__setattr__` per field (~2.5x faster)."""
    request = _new(Request)
    set_id, set_arrival, set_input, set_output, set_hash_ids, set_session, set_turn = _set_fields
    set_id(request, request_id)
    set_arrival(request, arrival_s)
    set_input(request, input_tokens)
    set_output(request, output_tokens)
    set_hash_ids(request, hash_ids)
    set_session(request, session_id)
    set_turn(request, turn)
    return request


def n_blocks(tokens: int | np.ndarray, block_tokens: int) -> int | np.ndarray:
    """Blocks a prompt of `tokens` tokens occupies: ceil(tokens / block_tokens)."""
    return -(-tokens // block_tokens)


def unique_hash_ids(input_tokens: np.ndarray, block_tokens: int, first_id: int = 0,
                    as_ranges: bool = False) -> list[tuple[int, ...]]:
    """Fresh, never-shared block ids for each prompt, numbered consecutively from `first_id`.

    Workloads without prefix sharing still carry hash_ids so that every consumer (prefix caches,
    token-id prompt builders) can treat all requests alike. `as_ranges`: each prompt's ids as a
    `range` (the same ids, length and truth value, made in constant time instead of a tuple of
    ints each) for a reader that only counts them: a sim run whose prefix pools forget blocks.
    """
    counts = np.asarray(n_blocks(np.asarray(input_tokens, dtype=np.int64), block_tokens), dtype=np.int64)
    starts = first_id + np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
    if as_ranges:  # typed as the tuples they stand in for (Request.hash_ids)
        return cast(list[tuple[int, ...]],
                    [range(s, s + c) for s, c in zip(starts.tolist(), counts.tolist(), strict=False)])
    return [tuple(range(s, s + c)) for s, c in zip(starts.tolist(), counts.tolist(), strict=False)]


def requests_to_frame(requests: Sequence[Request]) -> pd.DataFrame:
    """One row per request, columns named as the `Request` fields (nullable Int64 for session/turn)."""
    return pd.DataFrame({
        "request_id": np.fromiter((r.request_id for r in requests), dtype=np.int64, count=len(requests)),
        "arrival_s": np.fromiter((r.arrival_s for r in requests), dtype=np.float64, count=len(requests)),
        "input_tokens": np.fromiter((r.input_tokens for r in requests), dtype=np.int64, count=len(requests)),
        "output_tokens": np.fromiter((r.output_tokens for r in requests), dtype=np.int64, count=len(requests)),
        "hash_ids": pd.Series([r.hash_ids for r in requests], dtype=object),
        "session_id": pd.array([r.session_id for r in requests], dtype="Int64"),
        "turn": pd.array([r.turn for r in requests], dtype="Int64"),
    })


def _optional_ints(values: Iterable[object]) -> list[int | None]:
    return [None if v is None or v is pd.NA or (isinstance(v, float) and np.isnan(v)) else int(v)  # type: ignore[call-overload]
            for v in values]


def frame_to_requests(df: pd.DataFrame) -> list[Request]:
    """Inverse of `requests_to_frame`; session_id, turn and hash_ids columns are optional."""
    missing = [c for c in ("request_id", "arrival_s", "input_tokens", "output_tokens") if c not in df.columns]
    if missing:
        raise InputError(f"request frame lacks column(s) {', '.join(missing)}; columns are {', '.join(FIELDS)}")
    n = len(df)
    hash_ids = [tuple(int(h) for h in ids) for ids in df["hash_ids"]] if "hash_ids" in df else [()] * n
    sessions = _optional_ints(df["session_id"]) if "session_id" in df else [None] * n
    turns = _optional_ints(df["turn"]) if "turn" in df else [None] * n
    return [
        make_request(int(rid), float(t), int(i), int(o), h, s, k)
        for rid, t, i, o, h, s, k in zip(df["request_id"].tolist(), df["arrival_s"].tolist(),
                                         df["input_tokens"].tolist(), df["output_tokens"].tolist(),
                                         hash_ids, sessions, turns, strict=False)
    ]
