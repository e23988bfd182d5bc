"""The request validator and the app under hypothesis: bad input is a 4xx OpenAI error, never a crash.

Claims, each checked on generated input:
  1. any JSON value as a body, and any body whose known fields (prompt, messages, model, max_tokens,
     min_tokens, n, stream, stream_options, ignore_eos, ...) hold values of any JSON type, is either
     accepted or rejected with `ApiError`: a 4xx status and an OpenAI error object
     {message, type, param, code}; nothing else is raised;
  2. any bytes either parse (`load_body`) or raise ValueError, which the app answers with a 400;
  3. the numpy fast path of `load_body` changes nothing: the body it returns validates exactly like
     json.loads' body;
  4. valid bodies built by a strategy are accepted with every field preserved;
  5. over HTTP, the real app answers generated bodies with 200 or 4xx plus a JSON error object (never
     a 5xx) and still answers /health afterwards.
Counterexamples found on the way are pinned as table cases at the end, one test id per defect.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.live.app import ServeOptions
from harness.live.protocol import ApiError, GenerationParams, load_body, parse_generation

SERVED = "m"
OPTS = {"served_model": SERVED, "max_model_len": 4096, "default_max_tokens": 16}
FIELDS = ("prompt", "messages", "model", "max_tokens", "max_completion_tokens", "min_tokens", "n", "stream",
          "stream_options", "ignore_eos", "temperature", "top_p")
TOKEN_ID_LIMIT = 2**63  # token ids are int64 on the way to the block hashes

PROPS = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow])

# ---------------------------------------------------------------------------------------------
# Strategies: JSON as json.loads can return it (any int, NaN and Infinity, lone surrogates from
# "\ud800" escapes), bodies with the known fields of any type, and valid bodies.

# Boundaries weighted in: lone surrogates, and integers at the edges of int64/uint64.
json_text = st.text(st.characters(exclude_categories=()) | st.sampled_from("\ud800\udfff \n"), max_size=12)
json_ints = st.integers() | st.sampled_from([-1, 0, 2**31, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64])
json_scalars = st.none() | st.booleans() | json_ints | st.floats() | json_text
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(FIELDS) | json_text, inner, max_size=4),
    max_leaves=12)
token_ids = st.integers(0, TOKEN_ID_LIMIT - 1)
edge_texts = st.lists(st.sampled_from(["\ud800", "\udfff", "ok", " "]), min_size=1, max_size=3).map("".join)
edge_ids = st.lists(st.sampled_from([0, 1, 2**62, 2**63 - 1, 2**63, 2**64 - 1]), min_size=1, max_size=3)
prompt_like = st.one_of(edge_texts, edge_ids, json_values, json_text, st.lists(json_ints, min_size=1, max_size=6),
                        st.lists(st.lists(json_ints, max_size=3) | json_text, min_size=1, max_size=2))
messages_like = json_values | st.lists(
    st.fixed_dictionaries({}, optional={"role": json_values | st.sampled_from(["user", "system"]),
                                        "content": edge_texts | json_values | json_text
                                        | st.lists(st.fixed_dictionaries({"type": st.just("text") | json_text,
                                                                          "text": json_values | json_text}),
                                                   max_size=2)}),
    max_size=3)
FIELD_VALUES = {"prompt": prompt_like, "messages": messages_like,
                "max_tokens": st.integers(-5, 5000) | json_values,
                "max_completion_tokens": st.integers(-5, 5000) | json_values,
                "min_tokens": st.integers(-5, 50) | json_values}
apis = st.sampled_from(["completions", "chat"])

words = st.text("abcdefghij", min_size=1, max_size=6)


@st.composite
def valid_bodies(draw) -> tuple[str, dict, int, list[int] | None]:
    """(api, body, prompt tokens, exact ids or None for text) for a body the validator must accept."""
    api = draw(apis)
    body: dict = {}
    if api == "completions":
        if draw(st.booleans()):
            ids = draw(st.lists(token_ids, min_size=1, max_size=40))
            body["prompt"], exact, n_tokens = ([ids] if draw(st.booleans()) else ids), ids, len(ids)
        else:
            text_words = draw(st.lists(words, min_size=1, max_size=30))
            text = draw(st.sampled_from([" ", "  ", "\n", "\t"])).join(text_words)
            body["prompt"], exact, n_tokens = ([text] if draw(st.booleans()) else text), None, len(text_words)
    else:
        messages, n_tokens = [], 0
        for _ in range(draw(st.integers(1, 4))):
            text_words = draw(st.lists(words, max_size=10))
            n_tokens += len(text_words)
            content = " ".join(text_words)
            if draw(st.booleans()):
                content = [{"type": "text", "text": content}]
            messages.append({"role": draw(st.sampled_from(["system", "user", "assistant"])), "content": content})
        if n_tokens == 0:
            messages.append({"role": "user", "content": "hello"})
            n_tokens = 1
        body["messages"], exact = messages, None
    max_key = "max_tokens" if api == "completions" else draw(st.sampled_from(["max_tokens", "max_completion_tokens"]))
    if draw(st.booleans()):
        body[max_key] = draw(st.integers(1, OPTS["max_model_len"] - n_tokens))
    max_tokens = body.get(max_key, OPTS["default_max_tokens"])
    if draw(st.booleans()):
        body["min_tokens"] = draw(st.integers(0, max_tokens))
    for key in ("ignore_eos", "stream"):
        if draw(st.booleans()):
            body[key] = draw(st.booleans() | st.none())
    if body.get("stream") and draw(st.booleans()):
        body["stream_options"] = {"include_usage": draw(st.booleans())}
    if draw(st.booleans()):
        body["model"] = draw(st.sampled_from([SERVED, None]))
    if draw(st.booleans()):
        body.update(temperature=draw(st.floats(0, 2)), top_p=1.0, n=1)
    return api, body, n_tokens, exact


# The fields that decide what runs come up most often.
MUTATED_KEYS = st.sampled_from(("prompt",) * 4 + ("messages",) * 3 + ("model", "max_tokens", "stream") * 2 + FIELDS)


@st.composite
def mutated_bodies(draw) -> tuple[dict, str]:
    """A valid body with one or two fields set to values of any JSON type (or boundary values)."""
    api, body, _, _ = draw(valid_bodies())
    body = dict(body)
    for key in draw(st.lists(MUTATED_KEYS, min_size=1, max_size=2, unique=True)):
        body[key] = draw(FIELD_VALUES.get(key, json_values))
    return body, api


# Bodies for the validator: any JSON value at all, or a nearly valid body.
any_case = st.tuples(json_values, apis) | mutated_bodies()


def parse(body, api):
    return parse_generation(body, api, **OPTS)


def assert_openai_error(err: ApiError) -> None:
    """4xx, and the body the server sends is {"error": {message, type, param, code}}, JSON-encodable."""
    assert 400 <= err.status < 500, (err.status, err.message)
    payload = err.body()
    assert set(payload) == {"error"} and set(payload["error"]) == {"message", "type", "param", "code"}
    e = payload["error"]
    assert isinstance(e["message"], str) and e["message"]
    assert e["type"] == "invalid_request_error"
    assert e["param"] is None or e["param"] in FIELDS, e["param"]
    assert e["code"] is None or isinstance(e["code"], (str, int))
    json.dumps(payload)


def assert_sane(p: GenerationParams, api: str) -> None:
    """What an accepted body may hand the engine: in-range counts and int64 token ids >= 0."""
    assert p.api == api and p.model == SERVED
    ids = np.asarray(p.prompt_ids)
    assert len(ids) >= 1 and ids.dtype.kind == "i" and ids.min() >= 0
    assert p.max_tokens >= 1 and 0 <= p.min_tokens <= p.max_tokens
    assert len(ids) + p.max_tokens <= OPTS["max_model_len"]
    assert all(type(v) is bool for v in (p.stream, p.ignore_eos, p.include_usage))


def outcome(body, api):
    """What validation makes of a body: the accepted fields, or the error's status/param/code."""
    try:
        p = parse(body, api)
    except ApiError as err:
        return ("error", err.status, err.param, err.code)
    return ("ok", np.asarray(p.prompt_ids).tolist(), p.max_tokens, p.min_tokens, p.ignore_eos, p.stream,
            p.include_usage)


# ---------------------------------------------------------------------------------------------
# 1-2. Anything in, an ApiError (or a ValueError from the JSON layer) out


@PROPS
@given(case=any_case)
def test_any_body_is_accepted_or_an_openai_4xx(case):
    body, api = case
    try:
        p = parse(body, api)
    except ApiError as err:
        assert_openai_error(err)
        return
    assert_sane(p, api)
    prompt = body.get("prompt") if api == "completions" and isinstance(body, dict) else None
    if isinstance(prompt, list) and prompt and all(type(v) is int for v in prompt):
        assert np.asarray(p.prompt_ids).tolist() == prompt


def _mangled(data) -> bytes:
    """JSON text of a generated body, then maybe cut short or with one byte overwritten."""
    raw = json.dumps(data.draw(any_case)[0]).encode()
    how = data.draw(st.sampled_from(["whole", "cut", "byte"]))
    if how == "cut" and raw:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    elif how == "byte" and raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw = raw[:at] + bytes([data.draw(st.integers(0, 255))]) + raw[at + 1:]
    return raw


@PROPS
@given(data=st.data(), api=apis)
def test_any_bytes_parse_or_fail_as_value_error(data, api):
    """`load_body` raises nothing but ValueError (the app's 400 `invalid_json`); what it returns
    validates like any body."""
    raw = data.draw(st.binary(max_size=64)) if data.draw(st.booleans()) else _mangled(data)
    try:
        body = load_body(raw)
    except ValueError:
        return
    try:
        assert_sane(parse(body, api), api)
    except ApiError as err:
        assert_openai_error(err)


# ---------------------------------------------------------------------------------------------
# 3. The fast path of load_body agrees with json.loads


@st.composite
def token_list_bodies(draw) -> bytes:
    """Bodies the fast path may take (a `"prompt": [ids]` somewhere), spelled with random spacing."""
    ids = st.lists(st.integers(0, 10**6), min_size=2, max_size=8)
    top = draw(ids | st.none() | json_values)
    extra = draw(st.dictionaries(st.sampled_from(["prompt", "model", "x"]), ids | json_values, max_size=2))
    items = [("prompt", top), ("nested", extra), ("max_tokens", draw(st.integers(1, 64)))]
    items = draw(st.permutations(items))
    sep = draw(st.sampled_from([(",", ":"), (", ", ": "), (" ,", " : ")]))
    return ("{" + sep[0].join(json.dumps(k) + sep[1] + json.dumps(v, separators=sep) for k, v in items)
            + "}").encode()


@PROPS
@given(raw=token_list_bodies(), api=st.just("completions"))
def test_fast_path_validates_like_json_loads(raw, api):
    assert outcome(load_body(raw), api) == outcome(json.loads(raw), api), raw


# ---------------------------------------------------------------------------------------------
# 4. Valid bodies keep every field


@PROPS
@given(case=valid_bodies(), through_bytes=st.booleans())
def test_valid_bodies_are_accepted_with_their_fields(case, through_bytes):
    api, body, n_tokens, exact = case
    p = parse(load_body(json.dumps(body).encode()) if through_bytes else body, api)
    max_key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    assert (p.api, p.model) == (api, SERVED)
    assert len(p.prompt_ids) == n_tokens
    if exact is not None:
        assert np.asarray(p.prompt_ids).tolist() == exact
    assert p.max_tokens == body.get(max_key, OPTS["default_max_tokens"])
    assert p.min_tokens == body.get("min_tokens", 0)
    assert p.ignore_eos is bool(body.get("ignore_eos")) and p.stream is bool(body.get("stream"))
    assert p.include_usage is bool(body.get("stream_options", {}).get("include_usage", False))


# ---------------------------------------------------------------------------------------------
# 5. The real app, over HTTP

APP_OPTIONS = ServeOptions(served_model=SERVED, max_model_len=4096, stream_interval_tokens=64,
                           max_body_bytes=64 * 1024)


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    return json.dumps(value).encode()  # may hold lone surrogates: json.dumps escapes them ("\ud800")


async def _post_all(serve_fake, posts: list[tuple[str, bytes]]) -> tuple[list[tuple[int, str, bytes]], int]:
    """Each (path, body) POSTed in turn; then GET /health. Time runs 1000x fast (fake timeline)."""
    out = []
    async with serve_fake(APP_OPTIONS, time_scale=1000.0) as (url, _), aiohttp.ClientSession() as s:
        for path, raw in posts:
            async with s.post(url + path, data=raw, headers={"Content-Type": "application/json"},
                              timeout=aiohttp.ClientTimeout(total=30)) as resp:
                out.append((resp.status, resp.content_type, await resp.read()))
        async with s.get(url + "/health", timeout=aiohttp.ClientTimeout(total=30)) as resp:
            health = resp.status
    return out, health


def _assert_http_answer(status: int, content_type: str, raw: bytes) -> None:
    if status == 200:
        if content_type == "text/event-stream":
            assert raw.rstrip().endswith(b"data: [DONE]")
        else:
            assert json.loads(raw)["choices"]
        return
    assert 400 <= status < 500, (status, raw[:300])
    err = json.loads(raw)["error"]
    assert set(err) == {"message", "type", "param", "code"} and isinstance(err["message"], str)


http_bodies = (st.binary(max_size=48) | any_case.map(lambda case: _as_bytes(case[0]))
               | valid_bodies().map(lambda case: _as_bytes(case[1])))


@settings(max_examples=8, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(posts=st.lists(st.tuples(st.sampled_from(["/v1/completions", "/v1/chat/completions"]), http_bodies),
                      min_size=3, max_size=6))
def test_app_answers_generated_bodies_with_200_or_4xx_and_stays_healthy(serve_fake, posts):
    """`serve_fake` is a factory (each example starts and stops its own server), so sharing it
    across examples is safe."""
    answers, health = asyncio.run(_post_all(serve_fake, posts))
    for (path, raw), answer in zip(posts, answers, strict=False):
        try:
            _assert_http_answer(*answer)
        except (AssertionError, ValueError, KeyError) as exc:
            raise AssertionError(f"POST {path} {raw[:200]!r} -> {answer[0]} {answer[2][:300]!r}") from exc
    assert health == 200


# ---------------------------------------------------------------------------------------------
# Pinned counterexamples: each was a traceback, a 500 or a silently wrong body when found.


@pytest.mark.parametrize(("body", "api"), [
    pytest.param({"prompt": "\ud800"}, "completions", id="lone-surrogate-in-text-prompt"),
    pytest.param({"messages": [{"role": "user", "content": "hi \udc00"}]}, "chat", id="lone-surrogate-in-chat"),
])
def test_pinned_bodies_are_accepted_or_openai_4xx(body, api):
    """json.loads turns a "\\ud800" escape into a lone surrogate; tokenising it may succeed or be a
    400, but must not raise UnicodeEncodeError (a 500 over HTTP)."""
    try:
        assert_sane(parse(body, api), api)
    except ApiError as err:
        assert_openai_error(err)


@pytest.mark.parametrize("prompt", [
    pytest.param([2**63], id="token-id-2-to-the-63"),
    pytest.param([2**64 - 1, 2**63], id="token-ids-in-uint64-range"),
])
def test_pinned_token_ids_beyond_int64_are_rejected(prompt):
    """numpy makes these a uint64 array; cast to int64 they would become negative ids."""
    with pytest.raises(ApiError) as info:
        parse({"prompt": prompt}, "completions")
    assert_openai_error(info.value)
    assert info.value.param == "prompt"


@pytest.mark.parametrize("raw", [
    pytest.param(b"[" * 5000 + b"]" * 5000, id="json-nested-5000-deep"),
    pytest.param(b'{"prompt": ' + b"[" * 5000 + b"]" * 5000 + b"}", id="prompt-nested-5000-deep"),
])
def test_pinned_bytes_fail_as_value_error(raw):
    """The app answers ValueError from load_body with 400 invalid_json; anything else becomes a 500."""
    with pytest.raises(ValueError):
        load_body(raw)


@pytest.mark.parametrize("raw", [
    pytest.param(b'{"a": {"prompt": [1, 2]}, "prompt": null}', id="nested-prompt-list-top-level-null"),
    pytest.param(b'{"prompt": [1, 2], "prompt": null}', id="duplicate-key-last-one-wins"),
])
def test_pinned_fast_path_agrees_with_json_loads(raw):
    assert outcome(load_body(raw), "completions") == outcome(json.loads(raw), "completions")


def test_pinned_bodies_over_http_are_never_5xx(serve_fake):
    posts = [("/v1/completions", b'{"prompt": "\\ud800"}'),
             ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "\\udc00"}]}'),
             ("/v1/completions", b"[" * 5000 + b"]" * 5000),
             ("/v1/completions", b'{"prompt": [9223372036854775808]}')]
    answers, health = asyncio.run(_post_all(serve_fake, posts))
    assert [a[0] for a in answers[2:]] == [400, 400], [(a[0], a[2][:200]) for a in answers]
    for answer in answers:
        _assert_http_answer(*answer)
    assert health == 200
