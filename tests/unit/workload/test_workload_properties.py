"""Trace readers under hypothesis: valid traces survive every format; broken ones fail as InputError.

The claims, each checked on generated files:
  1. a valid Mooncake trace (non-decreasing integer-ms timestamps, positive lengths, ceil(input/512)
     hash ids) goes JSONL -> requests -> JSONL byte for byte (plain and gzip), and through Parquet
     without loss; any JSON Lines spelling of the same rows (whitespace, key order, CRLF, blank lines)
     loads the same requests;
  2. one corruption of such a file (a line replaced by random text or bytes, a field deleted, a length
     made negative or fractional, a timestamp moved back, a hash_ids list of the wrong size, a field
     of the wrong type or beyond int64) either still loads, and then converts to Parquet without
     loss, or raises InputError whose one-line message starts `<file>:<line>:`, the line it broke;
     never any other exception;
  3. an Azure CSV with random rows (good and bad cells, blank lines, short and long rows) loads
     exactly the good rows when every row is good, and otherwise raises InputError naming the file
     and a line that is bad;
  4. a Parquet trace cut short or with bytes overwritten loads or raises InputError naming the file.
The oracle is the generator: it knows which line it broke, so no check re-implements the reader.
Counterexamples found on the way are pinned as table cases at the end, one test id per defect.
"""

from __future__ import annotations

import gzip
import json
import re
import string
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, given, settings
from hypothesis import strategies as st

from harness.errors import InputError
from harness.workload.formats import load_trace, read_trace, write_trace
from harness.workload.request import Request

BLOCK = 512
INT64_MAX = 2**63 - 1
REQUIRED = ("timestamp", "input_length", "output_length")
OPTIONAL = ("hash_ids", "session_id", "turn")
CSV_HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens"

# derandomize: the same examples on every run (unit tests are deterministic); database=None: no
# .hypothesis/ directory written into the tree; no shrink phase: every example writes and reads files,
# and shrinking a failure cost up to a minute (the smallest counterexamples are pinned at the end).
PROPS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 phases=(Phase.explicit, Phase.generate),
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def n_ids(input_tokens: int) -> int:
    return -(-input_tokens // BLOCK)


@pytest.fixture(scope="module")
def new_dir(tmp_path_factory):
    """A fresh directory per hypothesis example (the function-scoped tmp_path is shared by all)."""
    return lambda: tmp_path_factory.mktemp("ex")


def assert_names_line(err: InputError, path: Path, lines: set[int]) -> int:
    """The message is one line starting `<path>:<n>:` with n in `lines`; returns n."""
    msg = str(err)
    assert "\n" not in msg, msg
    m = re.match(rf"{re.escape(str(path))}:(\d+): ", msg)
    assert m is not None, f"message does not start with '{path}:<line>: ': {msg}"
    assert int(m.group(1)) in lines, f"names line {m.group(1)}, expected one of {sorted(lines)}: {msg}"
    return int(m.group(1))


def assert_parquet_keeps(requests: list[Request], folder: Path) -> None:
    """Whatever a reader accepts, the lossless format must hold (`harness-trace convert x.parquet`)."""
    write_trace(requests, folder / "kept.parquet")
    assert read_trace(folder / "kept.parquet") == requests


# ---------------------------------------------------------------------------------------------
# Strategies


@st.composite
def mooncake_rows(draw, max_rows: int = 8) -> list[dict]:
    """Valid Mooncake rows: ties and gaps in time, ids across the int64 range, optional session/turn."""
    n = draw(st.integers(1, max_rows))
    t_ms = draw(st.integers(0, 10**13))  # up to epoch-milliseconds sized stamps
    rows = []
    for _ in range(n):
        t_ms += draw(st.sampled_from([0, 1]) | st.integers(0, 10**7))
        inp = draw(st.integers(1, 5 * BLOCK))
        row = {"timestamp": t_ms, "input_length": inp, "output_length": draw(st.integers(1, 10**5)),
               "hash_ids": draw(st.lists(st.integers(0, INT64_MAX), min_size=n_ids(inp), max_size=n_ids(inp)))}
        if draw(st.booleans()):
            row["session_id"] = draw(st.integers(0, INT64_MAX))
        if draw(st.booleans()):
            row["turn"] = draw(st.integers(0, 10**4))
        rows.append(row)
    return rows


def jsonl(rows: list[dict]) -> str:
    """The canonical spelling: json.dumps' default separators, fields in Mooncake order."""
    return "".join(json.dumps(r) + "\n" for r in rows)


@st.composite
def parquet_requests(draw) -> list[Request]:
    """Requests with full-precision float times and arbitrary unique int64 ids (Parquet keeps both)."""
    n = draw(st.integers(1, 8))
    ids = draw(st.lists(st.integers(-(2**63), INT64_MAX), min_size=n, max_size=n, unique=True))
    times = sorted(draw(st.lists(st.floats(0.0, 1e12, allow_nan=False), min_size=n, max_size=n)))
    out = []
    for rid, t in zip(ids, times, strict=False):
        inp = draw(st.integers(1, 5 * BLOCK))
        out.append(Request(rid, t, inp, draw(st.integers(1, 10**6)),
                           tuple(draw(st.lists(st.integers(-(2**63), INT64_MAX), min_size=n_ids(inp),
                                               max_size=n_ids(inp)))),
                           draw(st.none() | st.integers(-(2**63), INT64_MAX)),
                           draw(st.none() | st.integers(-(2**63), INT64_MAX))))
    return out


def _looks_like_request(text: str) -> bool:
    """Could this line be a request (so the file might still load, or fail on the next line)?"""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and all(k in obj for k in REQUIRED)


# JSON values of every type but the ones a field accepts.
_NOT_INT = (st.text(max_size=5) | st.booleans() | st.floats() | st.lists(st.integers(0, 9), max_size=2)
            | st.dictionaries(st.text(max_size=3), st.integers(0, 9), max_size=2))
_NOT_IDS = (st.text(max_size=5) | st.booleans() | st.integers() | st.floats()
            | st.lists(st.text(max_size=3) | st.booleans() | st.floats() | st.none(), min_size=1, max_size=3))
_HUGE = st.integers(2**63, 2**80) | st.just(10**400)

CORRUPTIONS = ("text", "delete", "negative", "fraction", "backwards", "hash_count", "wrong_type", "huge")


@st.composite
def corrupted_jsonl(draw) -> tuple[list[dict], list[str], int, str]:
    """(rows, file lines, broken line number, outcome): outcome is `error` (must fail on that line),
    `loads` (still valid), `empty` (no request left) or `either` (loads, or fails on it or the next)."""
    rows = draw(mooncake_rows())
    kind = draw(st.sampled_from(CORRUPTIONS))
    if kind == "backwards":
        assume(len(rows) >= 2)
    lines = [json.dumps(r) for r in rows]
    i = draw(st.integers(1 if kind == "backwards" else 0, len(rows) - 1))
    row = dict(rows[i])
    outcome = "error"
    if kind == "text":
        text = draw(st.text(st.characters(exclude_characters="\n"), max_size=40))
        lines[i] = text
        if not text.strip():
            outcome = "loads" if len(rows) > 1 else "empty"
        elif _looks_like_request(text):
            outcome = "either"
        return rows, lines, i + 1, outcome
    if kind == "delete":
        key = draw(st.sampled_from(sorted(row)))
        del row[key]
        outcome = "loads" if key in OPTIONAL else "error"
    elif kind == "negative":
        row[draw(st.sampled_from(REQUIRED))] = -draw(st.integers(1, 10**6))
    elif kind == "fraction":  # any float, integral ones (512.0) and NaN/Infinity included
        row[draw(st.sampled_from(("input_length", "output_length", "session_id", "turn")))] = draw(st.floats())
    elif kind == "backwards":
        row["timestamp"] = rows[i - 1]["timestamp"] - draw(st.integers(1, 10**6))
    elif kind == "hash_count":
        ids = list(row["hash_ids"])
        if draw(st.booleans()):
            ids.append(draw(st.integers(0, INT64_MAX)))
        else:
            ids.pop(draw(st.integers(0, len(ids) - 1)))
        row["hash_ids"] = ids
    elif kind == "wrong_type":
        key = draw(st.sampled_from(REQUIRED + OPTIONAL))
        value = draw(st.none() | (_NOT_IDS if key == "hash_ids" else _NOT_INT))
        if key == "timestamp" and isinstance(value, float) and value == value and abs(value) != float("inf"):
            value = str(value)  # a finite float is a valid timestamp (fractional milliseconds)
        row[key] = value
        if value is None and key in OPTIONAL:
            outcome = "loads"
    elif kind == "huge":
        key = draw(st.sampled_from(REQUIRED + OPTIONAL))
        big = draw(_HUGE)
        if key == "hash_ids":
            ids = list(row["hash_ids"])
            ids[draw(st.integers(0, len(ids) - 1))] = big
            row[key] = ids
        else:
            row[key] = big
        # An id or a far-future time is not wrong in itself; what loads must still convert to Parquet.
        outcome = "either" if key in ("timestamp", "hash_ids", "session_id", "turn") else "error"
    lines[i] = json.dumps(row)
    return rows, lines, i + 1, outcome


# ---------------------------------------------------------------------------------------------
# 1. Valid traces survive every format


@PROPS
@given(rows=mooncake_rows())
def test_valid_jsonl_round_trips_byte_for_byte(rows, new_dir):
    """JSONL -> requests -> JSONL (and .jsonl.gz) gives the same bytes; the fields are the file's."""
    folder = new_dir()
    original = jsonl(rows).encode()
    (folder / "in.jsonl").write_bytes(original)
    requests, report = load_trace(folder / "in.jsonl")
    assert report.lines() == []  # nothing dropped, clipped or synthesised
    assert [(r.request_id, r.input_tokens, r.output_tokens, r.hash_ids, r.session_id, r.turn) for r in requests] \
        == [(i, row["input_length"], row["output_length"], tuple(row["hash_ids"]), row.get("session_id"),
             row.get("turn")) for i, row in enumerate(rows)]
    assert [round(r.arrival_s * 1000) for r in requests] == [row["timestamp"] for row in rows]
    write_trace(requests, folder / "out.jsonl")
    assert (folder / "out.jsonl").read_bytes() == original
    write_trace(requests, folder / "out.jsonl.gz")
    assert gzip.decompress((folder / "out.jsonl.gz").read_bytes()) == original
    assert read_trace(folder / "out.jsonl.gz") == requests


@PROPS
@given(rows=mooncake_rows())
def test_valid_jsonl_converts_through_parquet_and_back_byte_for_byte(rows, new_dir):
    folder = new_dir()
    original = jsonl(rows).encode()
    (folder / "in.jsonl").write_bytes(original)
    requests = read_trace(folder / "in.jsonl")
    write_trace(requests, folder / "t.parquet")
    assert read_trace(folder / "t.parquet") == requests
    write_trace(read_trace(folder / "t.parquet"), folder / "out.jsonl")
    assert (folder / "out.jsonl").read_bytes() == original


@PROPS
@given(requests=parquet_requests())
def test_parquet_is_lossless(requests, new_dir):
    """Float times to the last bit, any int64 ids, sessions and turns (null or not) come back equal."""
    folder = new_dir()
    write_trace(requests, folder / "t.parquet")
    back, report = load_trace(folder / "t.parquet")
    assert back == requests
    assert report.lines() == []


@PROPS
@given(rows=mooncake_rows(), data=st.data())
def test_any_json_lines_spelling_loads_the_same_requests(rows, data, new_dir):
    """JSON Lines allows any JSON whitespace inside a line, any key order, CRLF endings and blank
    lines; none of it may change what loads (line numbers count '\\n' only)."""
    ws = st.text(" \t\r", max_size=2)
    lines = []
    for row in rows:
        items = data.draw(st.permutations(list(row.items())))
        sep_item, sep_key, pad = data.draw(ws), data.draw(ws), data.draw(ws)
        body = ("," + sep_item).join(f"{json.dumps(k)}{sep_key}:{sep_key}{json.dumps(v)}" for k, v in items)
        lines.append(pad + "{" + body + "}" + pad)
        lines.extend(data.draw(st.lists(st.sampled_from(["", " ", "\t", "\r"]), max_size=2)))
    ending = data.draw(st.sampled_from(["\n", "\r\n"]))
    folder = new_dir()
    (folder / "canonical.jsonl").write_text(jsonl(rows), encoding="utf-8", newline="\n")
    (folder / "spelled.jsonl").write_bytes("".join(line + ending for line in lines).encode())
    assert read_trace(folder / "spelled.jsonl") == read_trace(folder / "canonical.jsonl")


# ---------------------------------------------------------------------------------------------
# 2. Corrupted JSONL fails as InputError on the broken line, or still loads


@PROPS
@given(case=corrupted_jsonl())
def test_corrupted_jsonl_fails_on_its_line_or_loads(case, new_dir):
    rows, lines, broken, outcome = case
    folder = new_dir()
    path = folder / "c.jsonl"
    path.write_bytes("".join(line + "\n" for line in lines).encode())
    try:
        requests = read_trace(path)
    except InputError as err:
        assert outcome != "loads", f"a still-valid file was rejected: {err}"
        if outcome == "empty":
            assert str(err).startswith(f"{path}: ") and "\n" not in str(err)
        else:
            assert_names_line(err, path, {broken} if outcome == "error" else {broken, broken + 1})
        return
    assert outcome in ("loads", "either"), f"line {broken} ({lines[broken - 1][:80]!r}) was accepted"
    if outcome == "loads":
        assert len(requests) in (len(rows), len(rows) - 1)
    assert_parquet_keeps(requests, folder)


@PROPS
@given(rows=mooncake_rows(), data=st.data())
def test_jsonl_line_of_random_bytes_fails_as_input_error(rows, data, new_dir):
    """Bytes that are not UTF-8 (or not JSON) are an InputError naming the file, never a traceback."""
    lines = [json.dumps(r).encode() for r in rows]
    i = data.draw(st.integers(0, len(lines) - 1))
    lines[i] = data.draw(st.binary(min_size=1, max_size=40).filter(lambda b: b"\n" not in b))
    path = new_dir() / "b.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    try:
        read_trace(path)
    except InputError as err:
        assert str(err).startswith(f"{path}:") and "\n" not in str(err)


# ---------------------------------------------------------------------------------------------
# 3. Azure CSV with random rows

_LETTERS = st.text(string.ascii_lowercase + "_ ", min_size=1, max_size=6).filter(
    lambda s: s.strip() not in ("now", "today"))  # pandas reads those two words as datetimes
_BASE = datetime(2023, 11, 16, 18, 15, 46)


def _stamp(us: int) -> str:
    """An Azure-style datetime: 7 fractional digits (`2023-11-16 18:15:46.6805900`)."""
    return (_BASE + timedelta(microseconds=us)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"


@st.composite
def _int_cell(draw, low: int, high: int) -> tuple[str, int | None]:
    """(cell text, value), value None when the cell is bad."""
    good = draw(st.integers(low, high))
    return draw(st.sampled_from([
        (str(good), good), (f" {good} ", good), (f"+{good}", good),
        (f"-{good + 1}", None), (f"{good}.5", None), (f"{good}e3", None), ("", None),
        (str(2**63 + good), None), (draw(_LETTERS), None)]))


@st.composite
def azure_file(draw) -> tuple[list[str], set[int], list[tuple[float, int, int]], bool]:
    """(file lines, bad line numbers, (arrival_s, input, output) of each good row, datetime mode)."""
    datetimes = draw(st.booleans())
    lines, bad, good = [CSV_HEADER], set(), []
    last = draw(st.integers(0, 10**9)) if datetimes else draw(st.floats(0, 1e6))
    first_us, prev_ts_good = None, False
    for _ in range(draw(st.integers(1, 8))):
        lines.extend(draw(st.lists(st.sampled_from(["", "  "]), max_size=1)))  # blank lines are no rows
        row_ok = True
        step = draw(st.integers(0, 10**7)) if datetimes else draw(st.sampled_from([0.0]) | st.floats(0, 1e3))
        ts_kind = draw(st.sampled_from(["good"] * 4 + ["back", "letters", "other"]))
        if ts_kind == "back" and not prev_ts_good:  # "back" needs a known time on the line before
            ts_kind = "letters"
        prev_ts_good = ts_kind == "good"
        if ts_kind == "good":
            last = last + step
            ts_text, ts = (_stamp(last), last) if datetimes else (draw(st.sampled_from([repr(last), f" {last!r}"])),
                                                                  last)
        elif ts_kind == "back":  # earlier than the row before: bad (negative when there is no room)
            row_ok, ts = False, last - draw(st.integers(1, 10**6))
            ts_text = _stamp(ts) if datetimes else repr(float(ts))
        elif ts_kind == "letters":
            row_ok, ts_text = False, draw(_LETTERS)
        else:
            row_ok = False
            ts_text = draw(st.sampled_from(["2023-02-30 10:00:00", "2023-13-01 00:00:00"] if datetimes
                                           else ["inf", "-inf", "nan", "1e400", "-1.5"]))
        (ctx_text, ctx), (gen_text, gen) = draw(_int_cell(0, 3 * BLOCK)), draw(_int_cell(0, 10**5))
        row_ok = row_ok and ctx is not None and gen is not None
        cells = [ts_text, ctx_text, gen_text]
        shape = draw(st.sampled_from(["row"] * 6 + ["short", "long"]))
        if shape == "short":
            cells, row_ok = cells[:draw(st.integers(1, 2))], False
        elif shape == "long":
            cells, row_ok = [*cells, str(draw(st.integers(0, 99)))], False
        lines.append(",".join(cells))
        if row_ok:
            if datetimes:
                first_us = last if first_us is None else first_us
            good.append((ts, ctx, gen))
        else:
            bad.add(len(lines))  # this row's 1-based line number
    if datetimes and good:
        good = [((us - first_us) / 1e6, ctx, gen) for us, ctx, gen in good]
    return lines, bad, good, datetimes


@PROPS
@given(case=azure_file())
def test_azure_csv_loads_good_rows_or_names_a_bad_line(case, new_dir):
    lines, bad, good, _datetimes = case
    path = new_dir() / "a.csv"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8", newline="\n")
    try:
        requests = read_trace(path)
    except InputError as err:
        msg = str(err)
        assert "\n" not in msg, msg
        if not bad:
            assert all(ctx == 0 for _, ctx, _ in good), f"a file of good rows was rejected: {msg}"
            assert msg.startswith(f"{path}: "), msg  # every prompt empty: no line to name
            return
        if msg.startswith(f"{path}: cannot parse as CSV"):
            m = re.search(r"line (\d+)", msg)
            assert m is not None and int(m.group(1)) in bad, f"expected one of lines {sorted(bad)}: {msg}"
        else:
            assert_names_line(err, path, bad)
        return
    assert not bad, f"bad line(s) {sorted(bad)} were accepted: {[lines[n - 1] for n in sorted(bad)]}"
    kept = [(t, ctx, max(gen, 1)) for t, ctx, gen in good if ctx > 0]
    assert [(r.input_tokens, r.output_tokens) for r in requests] == [(c, g) for _, c, g in kept]
    assert [r.arrival_s for r in requests] == pytest.approx([t for t, _, _ in kept], rel=1e-12, abs=1e-9)
    ids = [h for r in requests for h in r.hash_ids]
    assert [len(r.hash_ids) for r in requests] == [n_ids(c) for _, c, _ in kept] and len(set(ids)) == len(ids)


# ---------------------------------------------------------------------------------------------
# 4. Damaged Parquet


@PROPS
@given(requests=parquet_requests(), data=st.data())
def test_damaged_parquet_loads_or_fails_as_input_error(requests, data, new_dir):
    folder = new_dir()
    write_trace(requests, folder / "t.parquet")
    raw = bytearray((folder / "t.parquet").read_bytes())
    if data.draw(st.booleans()):
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    else:
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    path = folder / "damaged.parquet"
    path.write_bytes(bytes(raw))
    try:
        read_trace(path)
    except InputError as err:
        assert str(err).startswith(f"{path}:") and "\n" not in str(err)


# ---------------------------------------------------------------------------------------------
# Pinned counterexamples: each was a traceback or a wrong line number when found.

_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 5}'


@pytest.mark.parametrize(("text", "line"), [
    pytest.param(_ROW + "\n" + '{"timestamp": 1, "input_length": %s, "output_length": 5}\n' % ("1" * 5000), 2,
                 id="integer-of-5000-digits"),
    pytest.param(_ROW + "\n" + "[" * 100_000 + "]" * 100_000 + "\n", 2, id="json-nested-100000-deep"),
    pytest.param(f'{{"timestamp": 0, "input_length": {2**70}, "output_length": 5}}\n', 1,
                 id="input-length-beyond-int64"),
    pytest.param(f'{{"timestamp": {10**400}, "input_length": 5, "output_length": 5}}\n', 1,
                 id="timestamp-beyond-float-range"),
    pytest.param('{"timestamp": 0,\r "input_length": 10, "output_length": 5}\n', None,
                 id="carriage-return-as-json-whitespace-is-valid"),
    pytest.param(" \r" + _ROW + "\n" + '{"timestamp": 0, "input_length": 10, "output_length": -5}\n', 2,
                 id="line-numbers-count-newlines-only"),
])
def test_jsonl_pinned_cases(tmp_path, text, line):
    path = tmp_path / "p.jsonl"
    path.write_bytes(text.encode())
    if line is None:
        assert len(read_trace(path)) == text.count("\n")
    else:
        with pytest.raises(InputError) as info:
            read_trace(path)
        assert_names_line(info.value, path, {line})


@pytest.mark.parametrize("row", [
    pytest.param(f'{{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [{2**64}]}}',
                 id="hash-id-beyond-int64"),
    pytest.param(f'{{"timestamp": 0, "input_length": 5, "output_length": 5, "session_id": {2**70}}}',
                 id="session-id-beyond-int64"),
    pytest.param(f'{{"timestamp": 0, "input_length": 5, "output_length": 5, "hash_ids": [{INT64_MAX}]}}\n'
                 '{"timestamp": 0, "input_length": 5, "output_length": 5}',
                 id="synthesised-ids-after-the-largest-int64"),
])
def test_what_jsonl_accepts_converts_to_parquet(tmp_path, row):
    """A trace the JSONL reader accepts must survive `harness-trace convert` to Parquet (or be
    rejected on load, naming the line), not crash the writer."""
    path = tmp_path / "p.jsonl"
    path.write_text(row + "\n")
    try:
        requests = read_trace(path)
    except InputError as err:
        assert_names_line(err, path, {1, 2})
        return
    assert_parquet_keeps(requests, tmp_path)


@pytest.mark.parametrize(("rows", "line"), [
    pytest.param(["0,10,5", "", "1,x,5"], 4, id="blank-line-before-a-bad-row"),
    pytest.param(["0,10,5", "  ", "1,2,-3"], 4, id="whitespace-line-before-a-bad-row"),
    pytest.param(["0.5,10,5,99", "1.5,20,6,98"], 2, id="extra-field-in-every-row"),
    pytest.param(["0.5,10,5,99", "1.5,20,6"], 2, id="extra-field-in-the-first-row"),
    pytest.param(["0,99999999999999999999,5"], 2, id="context-tokens-beyond-int64"),
])
def test_azure_pinned_cases(tmp_path, rows, line):
    path = tmp_path / "p.csv"
    path.write_text("".join(r + "\n" for r in [CSV_HEADER, *rows]))
    with pytest.raises(InputError) as info:
        read_trace(path)
    msg = str(info.value)
    if msg.startswith(f"{path}: cannot parse as CSV"):
        assert f"line {line}" in msg, msg
    else:
        assert_names_line(info.value, path, {line})


def test_parquet_column_name_that_is_not_utf8_is_an_input_error(tmp_path):
    """One overwritten byte in a column name of the footer (found by the damaged-Parquet property)."""
    write_trace([Request(i, i * 0.5, 600, 10, (i, i + 100)) for i in range(3)], tmp_path / "t.parquet")
    raw = (tmp_path / "t.parquet").read_bytes()
    at = raw.find(b"input_tokens")
    path = tmp_path / "bad.parquet"
    path.write_bytes(raw[:at] + b"\xff" + raw[at + 1:])
    with pytest.raises(InputError) as info:
        read_trace(path)
    assert str(info.value).startswith(f"{path}:")
