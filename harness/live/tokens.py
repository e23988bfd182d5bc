"""Prompt content -> token ids -> prefix-chained block hashes: what makes prefix caching work over HTTP.

The emulator never downloads a tokenizer. Token-id prompts are taken as they are; text prompts are
counted by a configurable rule (`TextTokenizer`): by default `server.tokens_per_word` tokens per
whitespace-separated word (1.0: one token per word, its id a CRC32 of the word; 1.3 is about what
BPE/WordPiece vocabularies give for English prose), or a local `tokenizer.json` file
(`server.tokenizer_file`, read with the optional `tokenizers` package). Chat messages contribute
their content only (no chat template, so roles add no tokens). Length is checked on a cheap bound
before any tokenising: words are counted with an early stop, and a tokenizer file is not run on a
text longer than the limit times its longest vocabulary entry.

Block hashes follow the trace format (Mooncake `hash_ids`): the prompt is cut into blocks of
`block_tokens` ids and each block is hashed together with the previous block's hash, so two prompts
get the same leading hash ids exactly when they share those leading blocks. The trailing partial
block gets a hash as well (ceil(n / block_tokens) ids, as in the traces); it only ever equals an
identical partial block, and the deployment never counts a prompt's last token as cached.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import re
import zlib
from collections.abc import Sequence

import numpy as np

TEXT_TOKEN_ID_BASE = 1000
TEXT_VOCAB = 50000
_MASK_63 = (1 << 63) - 1


def text_token_ids(text: str) -> list[int]:
    """The default rule: one id per whitespace-separated word (deterministic, no download)."""
    # surrogatepass: JSON may carry lone surrogates ("\ud800"); they are still just a word here
    return [TEXT_TOKEN_ID_BASE + zlib.crc32(word.encode("utf-8", "surrogatepass")) % TEXT_VOCAB
            for word in text.split()]


_WORD = re.compile(r"\S+")


class PromptTooLong(Exception):
    """A text prompt with more tokens than allowed; `n_tokens` is its length or a lower bound."""

    def __init__(self, n_tokens: int, exact: bool) -> None:
        super().__init__(f"{'' if exact else 'at least '}{n_tokens} tokens")
        self.n_tokens, self.exact = n_tokens, exact


class TextTokenizer:
    """Text -> token ids by `tokens_per_word` (a word-count rule) or a local tokenizer.json file.

    With `tokens_per_word` = r, n words make round(n * r) tokens (at least one per non-empty text);
    token k belongs to word floor(k / r), so the ids of a text's leading words do not depend on what
    follows them (shared prefixes stay shared prefixes).
    """

    def __init__(self, tokens_per_word: float = 1.0, tokenizer_file: str | None = None) -> None:
        if not (math.isfinite(tokens_per_word) and tokens_per_word > 0):
            raise ValueError(f"server.tokens_per_word must be a finite number > 0, got {tokens_per_word}")
        self.tokens_per_word = float(tokens_per_word)
        self.tokenizer_file = tokenizer_file
        self._tok = None
        self._longest = 0
        if tokenizer_file:
            try:
                from tokenizers import Tokenizer
            except ImportError as err:
                raise ValueError(
                    "server.tokenizer_file needs the `tokenizers` package (pip install tokenizers)"
                ) from err
            try:
                self._tok = Tokenizer.from_file(str(tokenizer_file))
            except Exception as err:  # the library raises its own exception types
                raise ValueError(f"server.tokenizer_file={tokenizer_file}: not a tokenizer.json ({err})") from err
            self._longest = max((len(t.lstrip("#").replace("\u0120", " ")) for t in self._tok.get_vocab()), default=1)

    def ids(self, text: str, limit: int | None = None) -> list[int]:
        """The token ids of `text`; raises PromptTooLong when there are more than `limit`, having
        looked at no more of the text than the bound needs."""
        if self._tok is not None:
            bound = limit * max(1, self._longest) + 2 if limit is not None else None
            if bound is not None and len(text) > bound:  # each token covers at most `longest` non-space chars
                visible = len(text) - sum(text.count(c) for c in " \t\n\r")
                if visible > bound:
                    raise PromptTooLong(-(-visible // max(1, self._longest)), exact=False)
            out = self._tok.encode(text, add_special_tokens=False).ids
            if limit is not None and len(out) > limit:
                raise PromptTooLong(len(out), exact=True)
            return out
        r = self.tokens_per_word
        words_iter = _WORD.finditer(text)
        if limit is not None:  # stop counting once the words alone exceed the limit
            max_words = math.floor((limit + 0.5) / r)
            words = [m.group() for m in itertools.islice(words_iter, max_words + 1)]
            if len(words) > max_words or self.count(len(words)) > limit:
                raise PromptTooLong(self.count(len(words)), exact=len(words) <= max_words)
        else:
            words = [m.group() for m in words_iter]
        base = [TEXT_TOKEN_ID_BASE + zlib.crc32(w.encode("utf-8", "surrogatepass")) % TEXT_VOCAB for w in words]
        if r == 1.0:
            return base
        return [TEXT_TOKEN_ID_BASE + (base[min(len(base) - 1, int(k / r))] * 31 + k) % TEXT_VOCAB
                for k in range(self.count(len(words)))]

    def count(self, n_words: int) -> int:
        return 0 if n_words == 0 else max(1, round(n_words * self.tokens_per_word))


def block_hash_ids(token_ids: Sequence[int] | np.ndarray, block_tokens: int) -> tuple[int, ...]:
    """Prefix-chained 63-bit hashes of the prompt's blocks (the last one may be partial)."""
    if block_tokens < 1:
        raise ValueError(f"block_tokens must be >= 1, got {block_tokens}")
    data = np.asarray(token_ids, dtype=np.int64).tobytes()
    step = 8 * block_tokens
    out: list[int] = []
    prev = b"\x00" * 8
    for start in range(0, len(data), step):
        prev = hashlib.blake2b(prev + data[start:start + step], digest_size=8).digest()
        out.append(int.from_bytes(prev, "little") & _MASK_63)
    return tuple(out)
