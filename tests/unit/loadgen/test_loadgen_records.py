"""A record's nanosecond stamps become run-clock seconds (times time_scale) in the requests frame."""

from __future__ import annotations

import math

import pytest

from harness.loadgen.records import RequestRecord

MS = 1_000_000


def done_record(**kw):
    r = RequestRecord(request_id=7, scheduled_ns=1000 * MS, input_tokens=50, output_tokens=5)
    r.sent_ns, r.first_token_ns = 1002 * MS, 1102 * MS
    r.chunk_ns = [1102 * MS, 1122 * MS, 1142 * MS]
    r.last_token_ns, r.done_ns = 1142 * MS, 1143 * MS
    for k, v in kw.items():
        setattr(r, k, v)
    return r


@pytest.mark.parametrize("scale", [1.0, 10.0])
def test_completed_row(scale):
    row = done_record().to_row(t0_ns=1000 * MS, time_scale=scale, deployment="d", mode="live")
    assert row["scheduled_s"] == pytest.approx(0.0)
    assert row["sent_s"] == row["arrival_s"] == pytest.approx(0.002 * scale)
    assert row["lateness_s"] == pytest.approx(0.002 * scale)
    assert row["ttft_s"] == pytest.approx(0.100 * scale)
    assert row["e2e_s"] == pytest.approx(0.140 * scale)
    assert row["tpot_s"] == pytest.approx(0.040 * scale / 4)
    assert row["itl_max_s"] == pytest.approx(0.020 * scale)
    assert (row["output_tokens"], row["n_chunks"], row["error"]) == (5, 3, None)


def test_failed_row_has_no_finish_and_no_output():
    row = done_record(error="HTTP 500: boom", last_token_ns=None, chunk_ns=[]).to_row(1000 * MS, 1.0, "d", "url")
    assert row["output_tokens"] == 0 and math.isnan(row["finish_s"]) and math.isnan(row["e2e_s"])
    assert row["error"] == "HTTP 500: boom"


def test_a_request_cut_off_after_streaming_counts_the_tokens_it_delivered():
    """Stopped (or failed) after 3 token-bearing chunks of the 5 tokens asked for: output_tokens is what
    was seen delivered (3), not the 5 requested nor 0; still no finish, no TPOT."""
    rec = done_record(error="interrupted: the run was stopped", last_token_ns=None)
    rec.interrupted = True
    row = rec.to_row(1000 * MS, 1.0, "d", "url")
    assert (row["output_tokens"], row["n_chunks"]) == (3, 3)
    assert math.isnan(row["finish_s"]) and math.isnan(row["tpot_s"]) and row["first_token_s"] > 0


def test_what_a_client_cannot_know_is_null_not_zero():
    """The target's prefix pool, its cross-cluster fetches, and a status never received: None (null in
    requests.parquet), where the url rows used to say 0."""
    rec = done_record(error="interrupted: the run was stopped", last_token_ns=None)
    row = rec.to_row(1000 * MS, 1.0, "d", "url")
    assert row["cache_hit_tokens"] is None and row["fetched_tokens"] is None and row["http_status"] is None
    assert done_record(http_status=200).to_row(1000 * MS, 1.0, "d", "url")["http_status"] == 200


def test_chunk_rows():
    rows = done_record().chunk_rows(1000 * MS, 2.0)
    assert [(r[0], r[1]) for r in rows] == [(7, 0), (7, 1), (7, 2)]
    assert rows[2][2] == pytest.approx(0.284)
