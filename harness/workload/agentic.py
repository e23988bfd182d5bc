"""Agentic multi-turn sessions: each turn's prompt is the whole previous context plus new tokens.

Sessions start as an arrival process (Poisson by default, in sessions per second). Turn 1's prompt
is a system prompt plus a user message; turn k+1's prompt is turn k's prompt and output plus
appended tokens (a tool result or the next user message), so contexts grow turn by turn and are
reused as prefixes. Turn k+1 arrives a think/tool time after turn k (an open-loop trace: the gap
is measured from arrival to arrival). A session ends after its drawn number of turns, or earlier
when the next turn's prompt plus output would exceed `max_context_tokens`.

hash_ids follow the Mooncake convention: turn k+1 keeps the ids of turn k's *complete* prompt
blocks, and every later block gets a fresh id (the block that was partial in turn k has new
content now, so it is a new block). With `shared_system_prompts` = P > 0 every session uses one of
P system prompts, whose complete blocks have the same ids in every session that uses it.
"""

from __future__ import annotations

import copy
import math
import os
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from harness.errors import InputError
from harness.workload.base import check_block_tokens, check_has, check_num_requests, check_seed, empirical
from harness.workload.prefix import PrefixReplay, replayed_input_tokens, uncached_input_tokens
from harness.workload.request import Request, n_blocks

_LENGTH = ("sample", "mean")
_CHUNK = 256  # sessions per seeded chunk
PLANNER_SAMPLE_REQUESTS = 100_000  # requests the planner's length statistics read at most (~1 KB each)


class AgenticWorkload:
    """The first `num_requests` requests (by arrival) of an unbounded stream of sessions."""

    def __init__(self, session_arrivals: Any, turns: Any, system_prompt_tokens: int, first_user_tokens: Any,
                 appended_tokens: Any, output_lengths: Any, think_time_s: Any, shared_system_prompts: int = 1,
                 max_context_tokens: int = 131072, num_requests: int = 2000, seed: int | None = 0,
                 block_tokens: int = 512, name: str = "agentic") -> None:
        owner = f"workload {name!r}"
        check_has(owner, "session_arrivals", session_arrivals, ("offsets", "with_rate"),
                  "harness.workload.arrivals.Poisson")
        for field, dist in (("turns", turns), ("first_user_tokens", first_user_tokens),
                            ("appended_tokens", appended_tokens), ("output_lengths", output_lengths)):
            check_has(owner, field, dist, _LENGTH, "harness.workload.lengths.TruncatedLogNormal")
        check_has(owner, "think_time_s", think_time_s, _LENGTH, "harness.workload.durations.ExponentialTime")
        for field, value, low in (("system_prompt_tokens", system_prompt_tokens, 0),
                                  ("shared_system_prompts", shared_system_prompts, 0),
                                  ("max_context_tokens", max_context_tokens, 2)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
                raise InputError(f"{owner}: {field} must be an integer >= {low}, got {value!r}")
        if system_prompt_tokens >= max_context_tokens:
            raise InputError(f"{owner}: system_prompt_tokens ({system_prompt_tokens}) must be below "
                             f"max_context_tokens ({max_context_tokens})")
        self.name = name
        self.session_arrivals, self.turns = session_arrivals, turns
        self.first_user_tokens, self.appended_tokens = first_user_tokens, appended_tokens
        self.output_lengths, self.think_time_s = output_lengths, think_time_s
        self.system_prompt_tokens = int(system_prompt_tokens)
        self.shared_system_prompts = int(shared_system_prompts)
        self.max_context_tokens = int(max_context_tokens)
        self.num_requests = check_num_requests(owner, num_requests)
        self.seed = check_seed(owner, seed)
        self.block_tokens = check_block_tokens(owner, block_tokens)

    def _chunk(self, n_sessions: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
        """Every turn of `n_sessions` sessions, session-major, with times relative to the session start."""
        turns = self.turns.sample(n_sessions, rng)
        if (turns < 1).any():
            raise InputError(f"workload {self.name!r}: turns must be >= 1, the distribution drew {turns.min()}")
        total = int(turns.sum())
        session = np.repeat(np.arange(n_sessions), turns)
        first = np.concatenate(([0], np.cumsum(turns)[:-1]))
        turn = np.arange(total) - first[session] + 1
        user = self.first_user_tokens.sample(n_sessions, rng)
        appended = self.appended_tokens.sample(total, rng)
        output = self.output_lengths.sample(total, rng)
        think = self.think_time_s.sample(total, rng)
        prompt = (rng.integers(self.shared_system_prompts, size=n_sessions) if self.shared_system_prompts
                  else np.full(n_sessions, -1))
        previous_output = np.concatenate(([0], output[:-1]))
        growth = np.where(turn == 1, self.system_prompt_tokens + user[session], previous_output + appended)
        gap = np.where(turn == 1, 0.0, think)
        inputs = _segment_cumsum(growth, first, session)
        # A turn that cannot fit ends its session; later turns are longer still, so they go too.
        fits = inputs + output <= self.max_context_tokens
        return {"session": session[fits], "turn": turn[fits], "input": inputs[fits], "output": output[fits],
                "offset": _segment_cumsum(gap, first, session)[fits], "prompt": prompt}

    def _turn_table(self, n_chunks: int, entropy: int | Sequence[int] | None) -> dict[str, np.ndarray]:
        """The turns of the first n_chunks * _CHUNK sessions.

        Implementation note: each chunk of sessions has its own child seed, so drawing more
        sessions never changes the earlier ones (a rate override or a larger num_requests keeps
        every session it shares with the smaller draw).
        """
        parts = [self._chunk(_CHUNK, _rng(entropy, k + 1)) for k in range(n_chunks)]
        table = {key: np.concatenate([p[key] for p in parts]) for key in ("turn", "input", "output", "offset",
                                                                           "prompt")}
        table["session"] = np.concatenate([p["session"] + k * _CHUNK for k, p in enumerate(parts)])
        return table

    def _select(self, rate_rps: float | None) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
        """Draw enough sessions that the first num_requests arrivals are final; return them in arrival order."""
        n = cast(int, self.num_requests)  # check_num_requests without allow_all: an int
        n_chunks = math.ceil((n / max(1.0, float(self.turns.mean())) * 1.25 + 8) / _CHUNK)
        arrivals = self.session_arrivals
        entropy = np.random.SeedSequence(self.seed).entropy  # seed None: fresh, but one for all draws
        for _ in range(40):
            table = self._turn_table(n_chunks, entropy)
            n_sessions = n_chunks * _CHUNK
            kept = len(table["turn"])
            if kept == 0:
                raise InputError(f"workload {self.name!r}: no turn fits max_context_tokens="
                                 f"{self.max_context_tokens}; raise it or shorten the prompts")
            if rate_rps is not None and arrivals is self.session_arrivals:
                # Sessions per second that give rate_rps requests per second on average (fixed at
                # the first draw, so drawing more sessions does not move the rate).
                arrivals = arrivals.with_rate(rate_rps * n_sessions / kept)
            starts = arrivals.offsets(n_sessions, _rng(entropy, 0))
            times = starts[table["session"]] + table["offset"]
            order = np.lexsort((table["turn"], table["session"], times))
            # Sessions not drawn yet start after starts[-1], so arrivals up to it are complete.
            if kept >= n and times[order[n - 1]] <= starts[-1]:
                return table, times, order[:n]
            n_chunks *= 2
        raise InputError(f"workload {self.name!r}: could not draw {n} requests (sessions too short?)")

    def generate(self, rate_rps: float | None = None) -> list[Request]:
        """The first num_requests requests, built whole: their order across sessions needs every session
        drawn (~1 KB a request, measured on the `agentic` workload); refused at once if that cannot fit."""
        _check_fits(self.name, cast(int, self.num_requests))
        table, times, chosen = self._select(rate_rps)
        hash_ids = self._hash_ids(table, np.sort(chosen))
        return [Request(rid, float(times[i]), int(table["input"][i]), int(table["output"][i]), hash_ids[i],
                        int(table["session"][i]), int(table["turn"][i]))
                for rid, i in enumerate(chosen.tolist())]

    def _hash_ids(self, table: dict[str, np.ndarray], rows: np.ndarray) -> dict[int, tuple[int, ...]]:
        """Block ids for the chosen rows, walked in session-major order so each turn extends the last."""
        block = self.block_tokens
        system_blocks = self.system_prompt_tokens // block
        shared = [tuple(range(p * system_blocks, (p + 1) * system_blocks)) for p in range(self.shared_system_prompts)]
        next_id = self.shared_system_prompts * system_blocks
        out: dict[int, tuple[int, ...]] = {}
        previous: tuple[int, ...] = ()
        previous_input = 0
        session, turn, inputs, prompt = table["session"], table["turn"], table["input"], table["prompt"]
        for i in rows.tolist():
            need = int(n_blocks(int(inputs[i]), block))
            if turn[i] == 1:
                p = int(prompt[session[i]])
                head = shared[p] if p >= 0 else ()
            else:
                head = previous[: previous_input // block]
            fresh = need - len(head)
            ids = head + tuple(range(next_id, next_id + fresh))
            next_id += fresh
            out[i] = ids
            previous, previous_input = ids, int(inputs[i])
        return out

    def planner_sample(self) -> list[Request]:
        """The requests the planner's statistics read: the first PLANNER_SAMPLE_REQUESTS by arrival (all
        of them when fewer), at the workload's own rate. They are the first requests of the whole
        workload (the same sessions, lengths and times; fresh block ids are numbered among them alone,
        which changes no prefix hit), so the statistics cost that sample's memory, not num_requests'."""
        sample = self
        if cast(int, self.num_requests) > PLANNER_SAMPLE_REQUESTS:
            sample = copy.copy(self)
            sample.num_requests = PLANNER_SAMPLE_REQUESTS
        return sample.generate()

    def uncached_input_distribution(self, replay: PrefixReplay | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Incremental prompt lengths of the planner's sample under an unbounded prefix cache, or the
        cache `replay` describes."""
        sample = self.planner_sample()
        if replay is not None:
            return empirical(replayed_input_tokens(sample, self.block_tokens, replay))
        return empirical(uncached_input_tokens(sample, self.block_tokens))

    def mean_output_tokens(self) -> float:
        return float(np.mean([r.output_tokens for r in self.planner_sample()]))


_BYTES_PER_REQUEST = 1024  # an agentic request with its block ids and the draws behind it (measured: ~1 KB)


def _check_fits(name: str, n: int) -> None:
    """One line instead of a machine run out of memory: agentic sessions are generated whole."""
    try:
        physical = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system that says: no check
        return
    if physical > 0 and n * _BYTES_PER_REQUEST > physical:
        raise InputError(f"workload {name!r}: num_requests={n} agentic requests are generated whole (~1 KB each, "
                         f"~{n * _BYTES_PER_REQUEST / 2**30:,.0f} GiB) and this machine has "
                         f"{physical / 2**30:,.0f} GiB; lower workload.num_requests (a duration limit does not "
                         f"shorten agentic sessions' generation)")


def _rng(entropy: int | Sequence[int] | None, stream: int) -> np.random.Generator:
    """Child `stream` of the seed: the same generator as SeedSequence(seed).spawn(...)[stream]."""
    return np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(stream,)))


def _segment_cumsum(values: np.ndarray, first: np.ndarray, segment: np.ndarray) -> np.ndarray:
    """Running sum restarting at each segment's first index (segments contiguous, in order)."""
    total = np.cumsum(values)
    before = total[first] - values[first]
    running: np.ndarray = total - before[segment]
    return running
