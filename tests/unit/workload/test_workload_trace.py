"""Trace workloads: first N rows, replay re-timing, other arrival processes, path resolution."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from harness.errors import InputError
from harness.workload.arrivals import Poisson, Replay
from harness.workload.base import resolve_path
from harness.workload.trace_workload import TraceWorkload

REPO = Path(__file__).resolve().parents[3]
TINY = "tests/data/tiny_mooncake.jsonl"


def test_all_rows_or_first_n():
    assert len(TraceWorkload(TINY).generate()) == 4
    requests, report = TraceWorkload(TINY, num_requests=2).load()
    assert [r.request_id for r in requests] == [0, 1] and report.truncated == 2


def test_more_requests_than_the_trace_holds_is_noted():
    requests, report = TraceWorkload(TINY, num_requests=1000).load()
    assert len(requests) == 4 and report.truncated == 0
    note = f"{TINY}: holds 4 requests; workload.num_requests=1000 replays all 4"
    assert note in report.lines()
    assert not any("num_requests" in line for line in TraceWorkload(TINY, num_requests=4).load()[1].lines())


def test_replay_keeps_lengths_and_prefixes_and_spreads_ticks():
    requests, report = TraceWorkload(TINY, arrivals=Replay(spread_ticks_s=3.0)).load()
    assert [r.arrival_s for r in requests] == pytest.approx([0.0, 0.75, 1.5, 3.001])
    assert report.retimed == 1
    assert requests[1].hash_ids == (0, 1, 3)


def test_rate_override_rescales_replay():
    requests = TraceWorkload(TINY).generate(rate_rps=2.0)
    assert len(requests) / requests[-1].arrival_s == pytest.approx(2.0)


def test_other_arrival_process_replaces_timestamps():
    a = TraceWorkload(TINY, arrivals=Poisson(10.0), seed=1).generate()
    b = TraceWorkload(TINY, arrivals=Poisson(10.0), seed=1).generate()
    assert a == b and a[0].arrival_s == 0.0 and np.all(np.diff([r.arrival_s for r in a]) > 0)
    assert [r.input_tokens for r in a] == [1200, 1300, 2000, 500]


def test_distribution_removes_prefix_hits_and_counts_changes(caplog):
    values, weights = TraceWorkload(TINY).uncached_input_distribution()
    # Uncached lengths: 1200, 1300-1024, 2000-1024, 500 (hits replayed in file order).
    assert dict(zip(values.tolist(), weights.tolist(), strict=False)) == \
        {276.0: 0.25, 500.0: 0.25, 976.0: 0.25, 1200.0: 0.25}
    assert TraceWorkload(TINY).mean_output_tokens() == pytest.approx((30 + 1 + 12 + 8) / 4)
    with caplog.at_level(logging.WARNING):
        TraceWorkload(TINY).generate()
    assert "raised output length 0 to 1" in caplog.text


def test_paths_resolve_against_cwd_then_repo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert resolve_path(TINY) == REPO / TINY
    (tmp_path / "tests" / "data").mkdir(parents=True)
    (tmp_path / TINY).write_text((REPO / TINY).read_text())
    assert resolve_path(TINY) == Path(TINY)
    with pytest.raises(InputError, match="not found"):
        resolve_path("traces/nope.jsonl")


@pytest.mark.parametrize(("kwargs", "text"), [({"num_requests": 0}, "num_requests"),
                                              ({"arrivals": 3}, "arrivals"),
                                              ({"block_tokens": -1}, "block_tokens")])
def test_bad_arguments(kwargs, text):
    with pytest.raises(InputError, match=text):
        TraceWorkload(TINY, **kwargs)


def test_a_trace_is_parsed_once_per_file_state_and_each_load_gets_its_own_copies(tmp_path, monkeypatch):
    import harness.workload.trace_workload as trace_workload

    path = tmp_path / "t.jsonl"
    path.write_text((REPO / TINY).read_text())
    calls = []
    real = trace_workload.load_trace
    monkeypatch.setattr(trace_workload, "load_trace", lambda *a: calls.append(a) or real(*a))
    trace_workload._parsed.cache_clear()
    first, report = TraceWorkload(str(path), num_requests=2).load()  # truncates: changes its report
    assert report.truncated == 2 and len(first) == 2
    again, report = TraceWorkload(str(path)).load()
    assert len(calls) == 1 and len(again) == 4 and report.truncated == 0  # nothing of the first load leaked
    for _ in range(2):  # other arguments are parsed for themselves, and a failure is not kept
        with pytest.raises(InputError, match="block_tokens=256"):
            TraceWorkload(str(path), block_tokens=256).load()
    assert len(calls) == 3
    path.write_text((REPO / TINY).read_text().splitlines(keepends=True)[0])  # the file changed: parsed again
    assert len(TraceWorkload(str(path)).load()[0]) == 1 and len(calls) == 4
