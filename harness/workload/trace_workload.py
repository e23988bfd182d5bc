"""A recorded trace as a workload: its lengths and prefix structure, replayed or re-timed.

With `Replay` arrivals the trace's own timestamps are used (rebased to 0, optionally sped up,
rescaled to a rate, or spread over their ticks); with any other process (Poisson, Gamma, ...) the
trace keeps its requests and order but gets new arrival times.
"""

from __future__ import annotations

import copy
import functools
import logging
import os
from typing import Any

import numpy as np

from harness.workload.arrivals import Replay
from harness.workload.base import (
    check_block_tokens,
    check_has,
    check_num_requests,
    check_seed,
    empirical,
    resolve_path,
    streams,
)
from harness.workload.formats import LoadReport, load_trace
from harness.workload.prefix import PrefixReplay, replayed_input_tokens, uncached_input_tokens
from harness.workload.request import Request

_log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=2)
def _parsed(path: str, stamp: tuple[int, int], fmt: str | None, block_tokens: int) -> tuple[list[Request], LoadReport]:
    """`load_trace`, once per file state (`stamp`: mtime in ns and size) in a process: a run asks for its
    trace's requests several times (the planner's length and output distributions, the in-flight count,
    the offer; ~0.14 s each for the 12K-row Mooncake trace), and a sweep's runs share it. Failures are
    not kept."""
    return load_trace(path, fmt, block_tokens)


def _load(path: str, fmt: str | None, block_tokens: int) -> tuple[list[Request], LoadReport]:
    """A fresh list (of frozen Requests) and report, as a parse gives."""
    try:
        stat = os.stat(path)
    except OSError:  # missing or unreadable: the loader's own error names it
        return load_trace(path, fmt, block_tokens)
    requests, report = _parsed(path, (stat.st_mtime_ns, stat.st_size), fmt, block_tokens)
    return list(requests), copy.deepcopy(report)


class TraceWorkload:
    """The first `num_requests` rows of `path` (all rows when None)."""

    def __init__(self, path: str, fmt: str | None = None, arrivals: Any = None, num_requests: int | None = None,
                 seed: int | None = 0, block_tokens: int = 512, name: str = "trace") -> None:
        owner = f"workload {name!r}"
        self.name = name
        self.path = path
        self.fmt = fmt
        self.arrivals = Replay() if arrivals is None else arrivals
        check_has(owner, "arrivals", self.arrivals, ("with_rate",), "harness.workload.arrivals.Replay")
        self.num_requests = check_num_requests(owner, num_requests, allow_all=True)
        self.seed = check_seed(owner, seed)
        self.block_tokens = check_block_tokens(owner, block_tokens)

    def load(self, rate_rps: float | None = None) -> tuple[list[Request], LoadReport]:
        """The requests and the report of everything the loader and the re-timing changed."""
        requests, report = _load(str(resolve_path(self.path)), self.fmt, self.block_tokens)
        if self.num_requests is not None and len(requests) > self.num_requests:
            report.truncated = len(requests) - self.num_requests
            requests = requests[: self.num_requests]
        elif self.num_requests is not None and len(requests) < self.num_requests:
            report.notes.append(f"holds {len(requests)} requests; workload.num_requests={self.num_requests} "
                                f"replays all {len(requests)}")
        arrivals = self.arrivals if rate_rps is None else self.arrivals.with_rate(rate_rps)
        stamps = np.fromiter((r.arrival_s for r in requests), dtype=np.float64, count=len(requests))
        if isinstance(arrivals, Replay):
            times, report.retimed = arrivals.retime(stamps)
        else:
            times = arrivals.offsets(len(requests), streams(self.seed, 1)[0])
        retimed = [Request(r.request_id, t, r.input_tokens, r.output_tokens, r.hash_ids, r.session_id, r.turn)
                   for r, t in zip(requests, times.tolist(), strict=False)]
        return retimed, report

    def generate(self, rate_rps: float | None = None) -> list[Request]:
        requests, report = self.load(rate_rps)
        for line in report.lines():
            _log.warning("%s", line)
        return requests

    def uncached_input_distribution(self, replay: PrefixReplay | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Input minus the prefix a cache would hold, replaying the trace in order: an unbounded one,
        or the one `replay` describes (the emulator's cache settings)."""
        requests, _ = self.load()
        if replay is not None:
            return empirical(replayed_input_tokens(requests, self.block_tokens, replay))
        return empirical(uncached_input_tokens(requests, self.block_tokens))

    def mean_output_tokens(self) -> float:
        requests, _ = self.load()
        return float(np.mean([r.output_tokens for r in requests]))
