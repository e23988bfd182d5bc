"""Which request continues which, and the order a saturation run may send them in.

A saturation run (`loadgen.rate_rps=inf`) is a closed loop: each completion sends the next request
in trace order. A user sends the next turn of a conversation after the answer, so a turn is never
sent before the turn it continues has ended; without that rule a large in-flight count sends later
turns before their prefix exists, and capacity falls with the knob as the cache stops helping. Sim
mode (harness/runs/closed_loop.py) and the HTTP load generator (harness/loadgen/engine.py) both take
their requests from a `TurnOrder`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from harness.workload.request import Request


def predecessors(requests: Iterable[Request], block_tokens: int = 512) -> dict[int, int]:
    """request id -> id of the earlier request it continues: the latest earlier request of its session,
    else the one whose whole prompt (up to its last full block; hash ids are prefix-chained) its own
    prompt starts with, linked to the first later request that does so (so a shared system prompt
    links one request, not every one)."""
    pred: dict[int, int] = {}
    last_of_session: dict[object, int] = {}
    open_prompt: dict[tuple[int, object], int] = {}  # (position, block id) of a prompt's end -> its request
    for request in requests:
        rid = request.request_id
        session = getattr(request, "session_id", None)
        if session is not None:
            if session in last_of_session:
                pred[rid] = last_of_session[session]
            last_of_session[session] = rid
        hash_ids = getattr(request, "hash_ids", None) or ()
        if session is None:
            for pos, h in enumerate(hash_ids):
                i = open_prompt.pop((pos, h), None)
                if i is not None:
                    pred[rid] = i  # the longest match wins (later positions overwrite)
        n_full = min(len(hash_ids), int(request.input_tokens) // block_tokens)
        if n_full >= 1:
            open_prompt[(n_full - 1, hash_ids[n_full - 1])] = rid
    return pred


class TurnOrder:
    """Requests in trace order, but never one before the request it continues (`pred`: id -> id) has
    ended. `next()` is the next request free to go (one freed by an ending goes ahead of later ones),
    None when every request left waits on one still in flight (or none is left); `ended(id)` frees
    those waiting on it. With no `pred` it is the plain trace order."""

    def __init__(self, requests: Iterable[Request], pred: Mapping[int, int] | None = None) -> None:
        self._it = iter(requests)
        self._pred = pred or {}
        self._done: set[int] = set()
        self._waiting_on: dict[int, list[Request]] = {}  # request id -> requests waiting for it (trace order)
        self._ready: list[Request] = []  # requests freed, to go before any new one (trace order)

    def next(self) -> Request | None:
        if self._ready:
            return self._ready.pop(0)
        for request in self._it:
            before = self._pred.get(request.request_id)
            if before is None or before in self._done:
                return request
            self._waiting_on.setdefault(before, []).append(request)
        return None

    def ended(self, request_id: int) -> None:
        if not self._pred:
            return
        self._done.add(request_id)
        freed = self._waiting_on.pop(request_id, None)
        if freed:
            self._ready.extend(freed)
            self._ready.sort(key=lambda r: r.request_id)
