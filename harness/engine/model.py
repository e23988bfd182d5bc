"""A small Llama-architecture GGUF model with random weights, made deterministically from a seed.

The engine's speed does not depend on what the weights say, so random f16 weights serve for timing.
The vocabulary is synthetic ASCII words in the ``tokenizer.ggml.*`` keys (SentencePiece-style,
``llama`` tokenizer model) with no byte-fallback tokens, so every token decodes to complete UTF-8
and a stream carries one event per token. Needs only ``gguf`` + numpy (no torch).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

BUILDER_VERSION = 1  # bump when the file this writes changes for the same spec
SPECIAL = ["<unk>", "<s>", "</s>"]  # ids 0, 1, 2
N_SPECIAL = len(SPECIAL)


@dataclass(frozen=True)
class ModelSpec:
    hidden: int = 384
    layers: int = 6
    ffn: int = 1024
    heads: int = 6
    kv_heads: int = 6
    vocab: int = 32000
    context: int = 65536
    seed: int = 0
    init_std: float = 0.02

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def key(self) -> str:
        blob = json.dumps({**asdict(self), "builder": BUILDER_VERSION}, sort_keys=True)
        digest = hashlib.sha256(blob.encode()).hexdigest()[:10]
        return (f"llama-h{self.hidden}-l{self.layers}-ff{self.ffn}-a{self.heads}-kv{self.kv_heads}"
                f"-v{self.vocab}-s{self.seed}-{digest}")

    def n_params(self) -> int:
        kv = self.kv_heads * self.head_dim
        per_layer = 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.ffn
        return 2 * self.vocab * self.hidden + self.layers * per_layer


def vocabulary(n: int) -> list[str]:
    """Special tokens, then distinct lowercase words (half with the SentencePiece space marker)."""
    words = []
    for i in range(N_SPECIAL, n):
        word, k = "", i
        while True:
            word = chr(ord("a") + k % 26) + word
            k //= 26
            if k == 0:
                break
        words.append("\u2581" + word if i % 2 == 0 else word)
    return SPECIAL + words


def _write(spec: ModelSpec, path: Path) -> None:
    import gguf  # imported here: only the builder needs it

    if spec.hidden % spec.heads or spec.heads % spec.kv_heads:
        raise ValueError(f"hidden {spec.hidden} / heads {spec.heads} / kv_heads {spec.kv_heads} do not divide")
    rng = np.random.default_rng(spec.seed)

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape, dtype=np.float32) * spec.init_std).astype(np.float16)

    def ones(n: int) -> np.ndarray:
        return np.ones(n, dtype=np.float32)  # norms stay f32, as llama.cpp's converter writes them

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(f"prfaas random {spec.key()}")
    w.add_context_length(spec.context)
    w.add_embedding_length(spec.hidden)
    w.add_block_count(spec.layers)
    w.add_feed_forward_length(spec.ffn)
    w.add_head_count(spec.heads)
    w.add_head_count_kv(spec.kv_heads)
    w.add_rope_dimension_count(spec.head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(spec.vocab)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

    tokens = vocabulary(spec.vocab)
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    types += [gguf.TokenType.NORMAL] * (spec.vocab - N_SPECIAL)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([-float(i) for i in range(spec.vocab)])
    w.add_token_types(types)
    w.add_unk_token_id(0)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_add_bos_token(False)
    w.add_add_eos_token(False)

    kv = spec.kv_heads * spec.head_dim
    w.add_tensor("token_embd.weight", rand(spec.vocab, spec.hidden))
    for i in range(spec.layers):
        b = f"blk.{i}."
        w.add_tensor(b + "attn_norm.weight", ones(spec.hidden))
        w.add_tensor(b + "attn_q.weight", rand(spec.hidden, spec.hidden))
        w.add_tensor(b + "attn_k.weight", rand(kv, spec.hidden))
        w.add_tensor(b + "attn_v.weight", rand(kv, spec.hidden))
        w.add_tensor(b + "attn_output.weight", rand(spec.hidden, spec.hidden))
        w.add_tensor(b + "ffn_norm.weight", ones(spec.hidden))
        w.add_tensor(b + "ffn_gate.weight", rand(spec.ffn, spec.hidden))
        w.add_tensor(b + "ffn_up.weight", rand(spec.ffn, spec.hidden))
        w.add_tensor(b + "ffn_down.weight", rand(spec.hidden, spec.ffn))
    w.add_tensor("output_norm.weight", ones(spec.hidden))
    w.add_tensor("output.weight", rand(spec.vocab, spec.hidden))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_model(spec: ModelSpec, directory: Path) -> Path:
    """Return the cached GGUF for ``spec``, writing it (atomically) when missing."""
    path = Path(directory) / f"{spec.key()}.gguf"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write(spec, tmp)
        tmp.rename(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
