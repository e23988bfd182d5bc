"""Agentic sessions: contexts grow turn by turn and each turn reuses the previous one as a prefix."""

from __future__ import annotations

import itertools
from collections import defaultdict

import numpy as np
import pytest

from harness.errors import InputError
from harness.workload.agentic import AgenticWorkload
from harness.workload.arrivals import Poisson
from harness.workload.durations import ExponentialTime, FixedTime
from harness.workload.lengths import Fixed, TruncatedLogNormal, Uniform
from harness.workload.prefix import replay_hits
from harness.workload.request import n_blocks

BLOCK = 512


def _workload(n=800, seed=0, shared=2, system=1300, max_context=131072, **kw):
    args = dict(session_arrivals=Poisson(0.5), turns=Uniform(1, 12), system_prompt_tokens=system,
                first_user_tokens=TruncatedLogNormal(6.0, 1.0, 16, 8192),
                appended_tokens=TruncatedLogNormal(6.5, 1.2, 1, 20000),
                output_lengths=TruncatedLogNormal(5.0, 0.8, 1, 2048), think_time_s=ExponentialTime(5.0),
                shared_system_prompts=shared, max_context_tokens=max_context, num_requests=n, seed=seed)
    return AgenticWorkload(**(args | kw))


@pytest.fixture(scope="module")
def requests():
    return _workload().generate()


def _sessions(reqs):
    by = defaultdict(list)
    for r in reqs:
        by[r.session_id].append(r)
    return by


def test_count_order_and_ids(requests):
    assert len(requests) == 800
    assert [r.request_id for r in requests] == list(range(800))
    assert np.all(np.diff([r.arrival_s for r in requests]) >= 0)
    assert all(len(r.hash_ids) == n_blocks(r.input_tokens, BLOCK) for r in requests)


def test_turns_are_consecutive_and_later(requests):
    for turns in _sessions(requests).values():
        assert [r.turn for r in turns] == list(range(1, len(turns) + 1))
        assert np.all(np.diff([r.arrival_s for r in turns]) > 0)


def test_each_turn_extends_the_previous_context(requests):
    """Turn k+1's prompt holds turn k's prompt and output, and starts with its complete blocks."""
    checked = 0
    for turns in _sessions(requests).values():
        for prev, cur in itertools.pairwise(turns):
            assert cur.input_tokens > prev.input_tokens + prev.output_tokens
            keep = prev.input_tokens // BLOCK
            assert cur.hash_ids[:keep] == prev.hash_ids[:keep]
            if prev.input_tokens % BLOCK:
                # The partial last block changed content: a new id, never seen in turn k.
                assert cur.hash_ids[keep] not in prev.hash_ids
            checked += 1
    assert checked > 300


def test_new_blocks_are_fresh(requests):
    """Apart from the inherited prefix and shared system prompts, no id was used before."""
    seen: set[int] = set()
    system_ids = set(range(2 * (1300 // BLOCK)))
    previous = {}
    for r in sorted(requests, key=lambda r: (r.session_id, r.turn)):
        keep = previous[r.session_id].input_tokens // BLOCK if r.turn > 1 else 0
        new = [h for h in r.hash_ids[keep:] if h not in system_ids]
        assert not seen.intersection(new)
        seen.update(r.hash_ids)
        previous[r.session_id] = r


def test_shared_system_prompt_is_a_common_prefix(requests):
    firsts = [r for r in requests if r.turn == 1]
    heads = {r.hash_ids[: 1300 // BLOCK] for r in firsts}
    assert len(heads) == 2  # two shared prompts, each used by many sessions
    none_shared = [r for r in _workload(n=300, shared=0).generate() if r.turn == 1]
    ids = [h for r in none_shared for h in r.hash_ids]
    assert len(ids) == len(set(ids))


def test_prefix_reuse_shows_up_as_cache_hits(requests):
    """Every later turn hits at least the previous prompt's complete blocks in an unbounded cache."""
    hits = replay_hits(requests, BLOCK)
    prev_input = {}
    for r, hit in zip(requests, hits.tolist(), strict=False):
        if r.turn > 1:
            assert hit >= (prev_input[r.session_id] // BLOCK) * BLOCK
        prev_input[r.session_id] = r.input_tokens
    assert hits.sum() / sum(r.input_tokens for r in requests) > 0.5


def test_context_never_exceeds_the_limit():
    reqs = _workload(n=400, max_context=20_000).generate()
    assert max(r.input_tokens + r.output_tokens for r in reqs) <= 20_000


def test_seeded():
    assert _workload(n=200, seed=5).generate() == _workload(n=200, seed=5).generate()
    assert _workload(n=200, seed=5).generate() != _workload(n=200, seed=6).generate()


def test_rate_override_sets_requests_per_second():
    """20k requests at 4 req/s: the ramp-up is ~0.1% of the span; 8% is ~4 standard errors of the
    number of sessions (~5,700, Poisson) and of their turn counts."""
    reqs = _workload(n=20_000, turns=Uniform(1, 6), think_time_s=FixedTime(2.0)).generate(rate_rps=4.0)
    assert len(reqs) / reqs[-1].arrival_s == pytest.approx(4.0, rel=0.08)


def test_rate_override_and_more_requests_keep_every_session():
    """Sessions are drawn in seeded chunks: a session looks the same whatever the rate or count."""
    def sessions(reqs):
        return {sid: [(r.turn, r.input_tokens, r.output_tokens) for r in turns]
                for sid, turns in _sessions(reqs).items()}

    base = sessions(_workload(n=500).generate())
    faster = sessions(_workload(n=500).generate(rate_rps=20.0))
    more = sessions(_workload(n=3000).generate())
    for other in (faster, more):
        for sid in set(base) & set(other):
            shorter, longer = sorted((base[sid], other[sid]), key=len)
            assert longer[: len(shorter)] == shorter
    assert len(set(base) & set(more)) > 20


def test_distribution_removes_cached_prefix():
    wl = _workload(n=300)
    values, weights = wl.uncached_input_distribution()
    reqs = wl.generate()
    assert weights.sum() == pytest.approx(1.0)
    assert values @ weights < np.mean([r.input_tokens for r in reqs]) * 0.6
    assert wl.mean_output_tokens() == pytest.approx(np.mean([r.output_tokens for r in reqs]))


@pytest.mark.parametrize(("kwargs", "text"), [
    ({"system_prompt_tokens": -1}, "system_prompt_tokens"),
    ({"system_prompt_tokens": 200_000}, "max_context_tokens"),
    ({"turns": None}, "turns"),
    ({"think_time_s": 5.0}, "think_time_s"),
    ({"session_arrivals": Fixed(3)}, "session_arrivals"),
])
def test_bad_arguments(kwargs, text):
    with pytest.raises(InputError, match=text):
        _workload(**kwargs)


def test_more_agentic_requests_than_memory_holds_is_one_line_not_a_crash():
    """Agentic sessions are generated whole (~1 KB a request): 10^13 of them is refused at once, naming
    the key, instead of drawing until the machine runs out of memory."""
    with pytest.raises(InputError, match=r"num_requests=10000000000000 .*lower workload.num_requests"):
        _workload(n=10**13).generate()


def test_the_planner_reads_a_bounded_sample_the_first_requests_of_the_whole(monkeypatch):
    """The planner's statistics come from the first PLANNER_SAMPLE_REQUESTS requests: the same lengths
    and times as the whole workload's first ones."""
    import harness.workload.agentic as agentic

    monkeypatch.setattr(agentic, "PLANNER_SAMPLE_REQUESTS", 300)
    workload = _workload(n=900)
    sample, whole = workload.planner_sample(), workload.generate()
    assert len(sample) == 300
    assert [(r.arrival_s, r.input_tokens, r.output_tokens, r.session_id, r.turn) for r in sample] == \
        [(r.arrival_s, r.input_tokens, r.output_tokens, r.session_id, r.turn) for r in whole[:300]]
