"""RecordStream: rows reach Parquet parts by count and by time, exactly once; a write failure is one
OutputError naming the path and keeps what was written."""

from __future__ import annotations

import time

import pytest

from harness.analysis.frames import read_parquet
from harness.runs.recording import OutputError, RecordStream


def _row(i: int) -> dict:
    return {"deployment": "d", "request_id": i, "arrival_s": float(i), "input_tokens": 10, "output_tokens": 2}


def _wait(cond, deadline_s: float = 20.0) -> None:
    end = time.monotonic() + deadline_s
    while not cond():
        assert time.monotonic() < end, "condition not met before the deadline"
        time.sleep(0.01)


def _parts(path):
    return sorted(path.with_name(path.name + ".parts").glob("part-*.parquet"))


def test_count_threshold_writes_a_part_without_waiting_for_the_interval(tmp_path):
    path = tmp_path / "requests.parquet"
    stream = RecordStream(path, every=3, every_s=3600.0)
    try:
        for i in range(3):
            stream.add(_row(i))
        _wait(lambda: len(_parts(path)) == 1)
        stream.add(_row(3))
    finally:
        stream.close()
    assert len(_parts(path)) == 2
    assert sorted(read_parquet(path)["request_id"]) == [0, 1, 2, 3]


def test_interval_writes_a_lone_row_without_a_count(tmp_path):
    path = tmp_path / "requests.parquet"
    stream = RecordStream(path, every=10**6, every_s=0.05)
    try:
        stream.add(_row(7))
        _wait(lambda: len(_parts(path)) == 1)  # no further add, no close: the writer alone put it there
        assert list(read_parquet(path)["request_id"]) == [7]
    finally:
        stream.close()
    assert stream.written == 1 and len(_parts(path)) == 1  # close wrote nothing twice


def test_many_rows_from_the_caller_while_the_writer_flushes_each_land_once(tmp_path):
    path = tmp_path / "requests.parquet"
    stream = RecordStream(path, every=50, every_s=0.001)
    for i in range(3000):
        stream.add(_row(i))
    stream.close()
    assert sorted(read_parquet(path)["request_id"]) == list(range(3000))
    assert sorted(stream.read()["request_id"]) == list(range(3000))


def test_unwritable_path_is_an_output_error_naming_it(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    path = blocker / "requests.parquet"  # its parts folder cannot be made under a file
    stream = RecordStream(path, every=1, every_s=3600.0)
    stream.add(_row(0))
    _wait(lambda: stream.error is not None)
    with pytest.raises(OutputError, match=f"cannot write {blocker}"):
        stream.add(_row(1))
    with pytest.raises(OutputError):
        stream.close()


def test_discard_parts_after_the_final_file(tmp_path):
    path = tmp_path / "requests.parquet"
    stream = RecordStream(path, every=1, every_s=3600.0)
    stream.add(_row(0))
    stream.close()
    assert _parts(path)
    stream.discard_parts()
    assert not path.with_name(path.name + ".parts").exists()


def test_no_path_records_nothing():
    stream = RecordStream(None)
    stream.add(_row(0))
    stream.close()
    assert stream.written == 0


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_virtual_run_between_events_not_inside_one(sig):
    """The signal lands inside an event (here: the event sends it): the event still finishes, the
    events due at that instant run, and the run stops before any later one."""
    import signal

    from harness.clock import VirtualClock
    from harness.runs.recording import stop_on_signals

    clock = VirtualClock()
    done: list[str] = []

    def event() -> None:
        # raise_signal, not os.kill(getpid()): kill may hand the signal to another of the worker's
        # threads, whose C handler can run only after this run ended on a busy machine (it did, once)
        signal.raise_signal(getattr(signal, sig))
        for _ in range(1000):  # bytecodes after the signal, where it used to raise
            pass
        done.append("event, whole")

    clock.fire_at(1.0, event)
    clock.fire_at(1.0, lambda: done.append("same instant"))
    clock.fire_at(2.0, lambda: done.append("later"))
    before = signal.getsignal(getattr(signal, sig))
    with pytest.raises(KeyboardInterrupt), stop_on_signals(clock):
        clock.run()
    assert done == ["event, whole", "same instant"]
    assert signal.getsignal(getattr(signal, sig)) is before
