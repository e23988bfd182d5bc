"""A run in which every measured request failed ends with status 0 (errors are data), and one
warning line says so; a run with one completed request, or only requests a stop cut short, says nothing."""

from __future__ import annotations

from harness.loadgen.health import no_completion_warning
from harness.loadgen.records import RequestRecord


def record(i, *, error=None, done_ns=None, warmup=False, interrupted=False, completed=False):
    r = RequestRecord(i, i, 10, 10, warmup=warmup)
    r.sent_ns, r.done_ns, r.error, r.interrupted = i, done_ns, error, interrupted
    if completed:
        r.first_token_ns = r.last_token_ns = i + 1
    return r


def test_every_failure_is_counted_and_the_first_to_end_is_quoted():
    recs = [record(0, error="HTTP 404: model 'nope' not found", done_ns=20),
            record(1, error="HTTP 404: model 'nope' not found\n (again)", done_ns=10),
            record(2, error="HTTP 404: x", done_ns=30)]
    assert no_completion_warning(recs) == ("no request completed (3 failed; first error: HTTP 404: model 'nope' "
                                           "not found (again))")


def test_one_completed_request_is_enough():
    assert no_completion_warning([record(0, error="HTTP 500: busy", done_ns=1), record(1, completed=True)]) is None


def test_warm_up_requests_do_not_count():
    recs = [record(0, warmup=True, completed=True), record(1, error="timeout", done_ns=1)]
    assert no_completion_warning(recs) == "no request completed (1 failed; first error: timeout)"


def test_requests_a_stop_cut_short_are_not_failures_of_the_target():
    assert no_completion_warning([record(0, error="interrupted", interrupted=True)]) is None
    assert no_completion_warning([]) is None


def test_a_long_error_is_cut_to_one_short_line():
    text = no_completion_warning([record(0, error="e" * 1000, done_ns=1)])
    assert text is not None and "\n" not in text and len(text) < 300 and text.endswith("...)")
