"""Token text real tokenizers agree on, and text prompts counted by a configurable rule.

The fixtures in tests/data/tokenizers are a BERT-style WordPiece and a GPT-2-style byte-level BPE
(built by make_fixtures.py there, no download). A client that counts output tokens by tokenising
the streamed text (AIPerf, GuideLLM) must get usage.completion_tokens with both.
"""

from __future__ import annotations

import asyncio
import gc
import time
from pathlib import Path

import aiohttp
import pytest

from harness.live.app import ServeOptions
from harness.live.protocol import ApiError, parse_generation
from harness.live.responses import TOKEN_TEXT
from harness.live.tokens import PromptTooLong, TextTokenizer

tokenizers = pytest.importorskip("tokenizers")
FIXTURES = Path(__file__).resolve().parents[2] / "data" / "tokenizers"
KINDS = ("wordpiece", "bpe")


def _count(kind: str, text: str) -> int:
    tok = tokenizers.Tokenizer.from_file(str(FIXTURES / f"{kind}.json"))
    return len(tok.encode(text, add_special_tokens=False).ids)


@pytest.mark.parametrize("kind", KINDS)
def test_the_fixtures_have_teeth(kind):
    """Each fixture splits the old token text " tok" in two: a count of it would be 2x wrong."""
    assert _count(kind, " tok" * 10) == 20
    assert _count(kind, TOKEN_TEXT * 10) == 10


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("api", ["completions", "chat"])
def test_aiperf_style_count_of_the_streamed_text_equals_usage(kind, api, serve_engine, step_engine, sse_events):
    """Join every chunk's text, tokenise it, count: equals usage.completion_tokens (interval 3, 17 tokens)."""
    options = ServeOptions(served_model="m", stream_interval_tokens=3)

    async def body():
        async with serve_engine(step_engine(late=[0, 1]), options) as url, aiohttp.ClientSession() as s:
            req = {"max_tokens": 17, "stream": True, "stream_options": {"include_usage": True}}
            if api == "chat":
                req["messages"] = [{"role": "user", "content": "hi"}]
            else:
                req["prompt"] = "hi"
            async with s.post(f"{url}/v1/{'chat/completions' if api == 'chat' else 'completions'}", json=req) as r:
                return await sse_events(r)

    events = run(body())
    pieces = [c["choices"][0].get("text") if api == "completions" else c["choices"][0]["delta"].get("content")
              for c in events[:-2]]
    usage = events[-2]["usage"]
    assert len(pieces) > 3  # several chunks, so chunk boundaries are exercised
    assert _count(kind, "".join(pieces)) == usage["completion_tokens"] == 17
    assert sum(_count(kind, p) for p in pieces) == 17  # per chunk too (ITL per token)


def run(coro):
    return asyncio.run(coro)


def test_tokens_per_word_scales_the_count_and_keeps_prefixes():
    """1.5 tokens per word: 4 words -> 6 tokens; a text's ids start with its prefix text's ids."""
    tok = TextTokenizer(1.5)
    ids = tok.ids("alpha beta gamma delta")
    assert len(ids) == 6
    assert tok.ids("alpha beta gamma delta epsilon zeta")[:6] == ids
    assert tok.ids("alpha beta")[:3] == ids[:3]
    assert len(TextTokenizer(1.0).ids("a b c")) == 3


@pytest.mark.parametrize("kind", KINDS)
def test_a_tokenizer_file_counts_text_prompts(kind):
    tok = TextTokenizer(tokenizer_file=str(FIXTURES / f"{kind}.json"))
    assert len(tok.ids(" the cat sat")) == _count(kind, " the cat sat") == 3
    assert len(tok.ids(" tok")) == 2


def test_a_huge_text_prompt_is_refused_on_a_cheap_bound():
    """30 MB of words: refused after counting max_model_len words, not after splitting 30 MB.

    The bound is the work done, not a time: a 2-word limit looks at 3 words whatever follows."""
    text = "word " * 6_000_000
    with pytest.raises(PromptTooLong) as err:
        TextTokenizer().ids(text, limit=2)
    assert err.value.n_tokens == 3 and not err.value.exact
    # the same check through the request parser: a 400 naming the context length
    with pytest.raises(ApiError) as api_err:
        parse_generation({"prompt": text, "max_tokens": 4}, "completions", served_model="m", max_model_len=100,
                         default_max_tokens=16)
    assert api_err.value.status == 400 and api_err.value.code == "context_length_exceeded"


def test_the_cheap_bound_does_not_split_the_text():
    """Counting with a limit costs what the limit needs: compared in the same run with a full split
    of the same 30 MB text. Both are timed on this thread's CPU clock, which a busy machine's
    preemption does not advance (a wall-clock interval of the ~0.3 ms bounded call did), with the
    collector off so that neither includes a collection of the test process's objects; a full
    scan costs ~1000x the bounded one here."""
    text = "word " * 6_000_000
    tokenizer = TextTokenizer()
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        t0 = time.thread_time()
        with pytest.raises(PromptTooLong):
            tokenizer.ids(text, limit=1000)
        bounded = time.thread_time() - t0
        t0 = time.thread_time()
        words = text.split()
        full = time.thread_time() - t0
    finally:
        if collecting:
            gc.enable()
    assert len(words) == 6_000_000
    assert bounded < full / 10, (bounded, full)


def test_a_tokenizer_file_is_not_run_on_text_longer_than_the_bound():
    tok = TextTokenizer(tokenizer_file=str(FIXTURES / "bpe.json"))
    with pytest.raises(PromptTooLong) as err:
        tok.ids("x" * 5_000_000, limit=100)
    assert not err.value.exact


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf")])
def test_tokens_per_word_must_be_positive(bad):
    with pytest.raises(ValueError, match="tokens_per_word"):
        TextTokenizer(bad)


def _server_cfg(**server):
    from omegaconf import OmegaConf

    from harness.schema import ServerConfig

    return OmegaConf.create({"server": {**OmegaConf.to_container(OmegaConf.structured(ServerConfig)), **server},
                             "model": {"name": "m"}})


def test_serve_options_carry_the_rule_and_refuse_bad_ones():
    from harness.errors import InputError
    from harness.live.server import serve_options

    opts = serve_options(_server_cfg(tokens_per_word=1.5, time_scale=4.0))
    assert opts.tokenizer.tokens_per_word == 1.5 and opts.time_scale == 4.0
    assert len(serve_options(_server_cfg(tokenizer_file=str(FIXTURES / "bpe.json"))).tokenizer.ids(" tok")) == 2
    with pytest.raises(InputError, match=r"server.tokens_per_word"):
        serve_options(_server_cfg(tokens_per_word=0.0))
    with pytest.raises(InputError, match=r"server.tokenizer_file"):
        serve_options(_server_cfg(tokenizer_file="/nonexistent/tokenizer.json"))
