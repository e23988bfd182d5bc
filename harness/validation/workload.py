"""The validation workload: independent requests, some opening with one of a few shared prompts.

Input lengths and arrivals come from the usual length laws and arrival processes (log-normal,
Poisson); a `shared_fraction` of the requests start with one of `shared_prompts` system prompts
of `shared_prompt_tokens` tokens (whole blocks, so their `hash_ids` are shared exactly and a
prefix cache can reuse them). `id_offset` moves every hash id, so two runs against the same
engine (whose prefix cache outlives a run) share nothing unless they are meant to.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from harness.errors import InputError
from harness.workload.base import streams
from harness.workload.prefix import PrefixReplay
from harness.workload.request import Request, n_blocks
from harness.workload.synthetic import SyntheticWorkload

_SHARED_BASE = 1 << 40  # shared prompts' ids live far from the per-request ones


class SharedPromptWorkload(SyntheticWorkload):
    def __init__(self, input_lengths: Any, output_lengths: Any, arrivals: Any, num_requests: int = 200,
                 seed: int | None = 0, block_tokens: int = 512, name: str = "shared_prompts",
                 shared_prompts: int = 2, shared_prompt_tokens: int = 512, shared_fraction: float = 0.5,
                 id_offset: int = 0) -> None:
        super().__init__(input_lengths, output_lengths, arrivals, num_requests, seed, block_tokens, name)
        where = f"workload {name!r}"
        if not isinstance(shared_prompts, int) or shared_prompts < 0:
            raise InputError(f"{where}: shared_prompts must be an integer >= 0, got {shared_prompts!r}")
        if not isinstance(shared_prompt_tokens, int) or shared_prompt_tokens % block_tokens:
            raise InputError(f"{where}: shared_prompt_tokens must be a multiple of block_tokens ({block_tokens}), "
                             f"got {shared_prompt_tokens!r}")
        if not 0.0 <= float(shared_fraction) <= 1.0:
            raise InputError(f"{where}: shared_fraction must be in [0, 1], got {shared_fraction!r}")
        if not isinstance(id_offset, int) or id_offset < 0:
            raise InputError(f"{where}: id_offset must be an integer >= 0, got {id_offset!r}")
        self.shared_prompts, self.shared_prompt_tokens = shared_prompts, shared_prompt_tokens
        self.shared_fraction, self.id_offset = float(shared_fraction), id_offset

    def generate(self, rate_rps: float | None = None) -> list[Request]:
        base = super().generate(rate_rps)
        (rng,) = streams(None if self.seed is None else self.seed + 7919, 1)
        shared = (rng.random(len(base)) < self.shared_fraction) if self.shared_prompts else np.zeros(len(base), bool)
        which = rng.integers(0, max(1, self.shared_prompts), len(base))
        k = self.shared_prompt_tokens // self.block_tokens
        out, next_id = [], self.id_offset
        for r, is_shared, w in zip(base, shared.tolist(), which.tolist(), strict=False):
            prefix: tuple[int, ...] = ()
            n_in = r.input_tokens
            if is_shared:
                first = _SHARED_BASE + self.id_offset + int(w) * k
                prefix = tuple(range(first, first + k))
                n_in += self.shared_prompt_tokens
            own = int(n_blocks(int(n_in), self.block_tokens)) - len(prefix)
            ids = prefix + tuple(range(next_id, next_id + own))
            next_id += own
            out.append(Request(r.request_id, r.arrival_s, n_in, r.output_tokens, ids))
        return out

    def uncached_input_distribution(self, replay: PrefixReplay | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Whole prompts: the validation engine's prefix hits are measured, not planned."""
        lengths = np.array([r.input_tokens for r in self.generate()], dtype=float)
        return lengths, np.full(len(lengths), 1.0 / len(lengths))
