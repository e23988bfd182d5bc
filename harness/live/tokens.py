"""Prompt content -> token ids -> prefix-chained block hashes: what makes prefix caching work over HTTP.

The emulator has no tokenizer (and never downloads one). Token-id prompts are taken as they are;
text prompts use a deterministic stand-in: one token per whitespace-separated word, its id a CRC32
of the word. Chat messages contribute their content only (no chat template, so roles add no tokens).

Block hashes follow the trace format (Mooncake `hash_ids`): the prompt is cut into blocks of
`block_tokens` ids and each block is hashed together with the previous block's hash, so two prompts
get the same leading hash ids exactly when they share those leading blocks. The trailing partial
block gets a hash as well (ceil(n / block_tokens) ids, as in the traces); it only ever equals an
identical partial block, and the deployment never counts a prompt's last token as cached.
"""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Sequence

import numpy as np

TEXT_TOKEN_ID_BASE = 1000
TEXT_VOCAB = 50000
_MASK_63 = (1 << 63) - 1


def text_token_ids(text: str) -> list[int]:
    """The stand-in tokenisation: one id per whitespace-separated word (deterministic, no download)."""
    # surrogatepass: JSON may carry lone surrogates ("\ud800"); they are still just a word here
    return [TEXT_TOKEN_ID_BASE + zlib.crc32(word.encode("utf-8", "surrogatepass")) % TEXT_VOCAB
            for word in text.split()]


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
