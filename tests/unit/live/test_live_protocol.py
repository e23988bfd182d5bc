"""Request validation: every bad body names its field and gets the OpenAI status; good ones parse."""

from __future__ import annotations

import json

import numpy as np
import pytest

from harness.live.protocol import ApiError, load_body, parse_generation

OPTS = {"served_model": "m", "max_model_len": 100, "default_max_tokens": 16}


def parse(body, api="completions"):
    return parse_generation(body, api, **OPTS)


@pytest.mark.parametrize(("body", "status", "param", "code"), [
    ([1, 2], 400, None, None),
    ({"model": "other", "prompt": "hi"}, 404, "model", "model_not_found"),
    ({"model": "m"}, 400, "prompt", None),
    ({"prompt": ""}, 400, "prompt", None),
    ({"prompt": []}, 400, "prompt", None),
    ({"prompt": 5}, 400, "prompt", None),
    ({"prompt": [1, -2]}, 400, "prompt", None),
    ({"prompt": [1, 2.5]}, 400, "prompt", None),
    ({"prompt": [1, "a"]}, 400, "prompt", None),
    ({"prompt": ["a", "b"]}, 400, "prompt", None),
    ({"prompt": "hi", "max_tokens": -1}, 400, "max_tokens", None),
    ({"prompt": "hi", "max_tokens": 0}, 400, "max_tokens", None),
    ({"prompt": "hi", "max_tokens": "7"}, 400, "max_tokens", None),
    ({"prompt": "hi", "max_tokens": True}, 400, "max_tokens", None),
    ({"prompt": "hi", "max_tokens": 4, "min_tokens": 5}, 400, "min_tokens", None),
    ({"prompt": "hi", "n": 2}, 400, "n", None),
    ({"prompt": "hi", "stream": "yes"}, 400, "stream", None),
    ({"prompt": "hi", "stream_options": {"include_usage": True}}, 400, "stream_options", None),
    ({"prompt": list(range(90)), "max_tokens": 11}, 400, "prompt", "context_length_exceeded"),
])
def test_bad_completion_bodies(body, status, param, code):
    """Each mistake is a 4xx ApiError naming the offending parameter."""
    with pytest.raises(ApiError) as info:
        parse(body)
    err = info.value
    assert (err.status, err.param, err.code) == (status, param, code)
    assert set(err.body()["error"]) == {"message", "type", "param", "code"}
    assert err.body()["error"]["type"] == "invalid_request_error"


@pytest.mark.parametrize(("body", "status", "param"), [
    ({}, 400, "messages"),
    ({"messages": []}, 400, "messages"),
    ({"messages": [{"content": "hi"}]}, 400, "messages"),
    ({"messages": [{"role": "user", "content": 3}]}, 400, "messages"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, 400, "messages"),
    ({"messages": [{"role": "user", "content": "a b"}], "max_completion_tokens": -3}, 400, "max_completion_tokens"),
])
def test_bad_chat_bodies(body, status, param):
    with pytest.raises(ApiError) as info:
        parse(body, "chat")
    assert (info.value.status, info.value.param) == (status, param)


def test_completion_prompt_forms():
    """Text, token ids, and a batch of one of either all parse; defaults fill the rest."""
    assert len(parse({"prompt": "a b c"}).prompt_ids) == 3
    assert list(parse({"prompt": [5, 6, 7, 8]}).prompt_ids) == [5, 6, 7, 8]
    assert list(parse({"prompt": [[5, 6]]}).prompt_ids) == [5, 6]
    assert len(parse({"prompt": ["x y"]}).prompt_ids) == 2
    p = parse({"prompt": "hi", "model": "m", "max_tokens": 5, "min_tokens": 5, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}, "temperature": 0.7})
    assert (p.max_tokens, p.min_tokens, p.ignore_eos, p.stream, p.include_usage) == (5, 5, True, True, True)
    q = parse({"prompt": "hi"})
    assert (q.model, q.max_tokens, q.stream, q.include_usage) == ("m", 16, False, False)


def test_chat_uses_content_only():
    """Roles add no tokens; text parts count like strings; max_completion_tokens wins over max_tokens."""
    p = parse({"messages": [{"role": "system", "content": "be brief"},
                            {"role": "user", "content": [{"type": "text", "text": "one two three"}]},
                            {"role": "assistant", "content": None}],
               "max_completion_tokens": 7, "max_tokens": 3}, "chat")
    assert (len(p.prompt_ids), p.max_tokens, p.api) == (5, 7, "chat")


@pytest.mark.parametrize("raw", [
    b'{"prompt":[1,2,3],"max_tokens":4}',
    b'{"max_tokens":4, "prompt" : [ 10 , 20,30 ] }',
    b'{"prompt":[1,-2,3]}',
    b'{"prompt":[1,2,],"x":1}',
    b'{"a":"\\"prompt\\":[1,2]","prompt":"hi"}',
    b'{"a":{"prompt":[1,2]},"prompt":[3,4]}',
    b'{"prompt":[99999999999999999999,1]}',
    b'{"prompt":[7]}',
])
def test_load_body_matches_json(raw):
    """The numpy fast path returns what json.loads returns (ids as an array), or falls back to it."""
    try:
        expected = json.loads(raw)
    except ValueError:
        with pytest.raises(ValueError):
            load_body(raw)
        return
    got = load_body(raw)
    assert set(got) == set(expected)
    for key, value in expected.items():
        actual = got[key]
        if isinstance(actual, np.ndarray):
            assert actual.tolist() == value
        else:
            assert actual == value


def test_load_body_rejects_malformed_json():
    with pytest.raises(ValueError):
        load_body(b'{"prompt": [1, 2')
