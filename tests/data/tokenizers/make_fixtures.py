"""Build the two tiny tokenizer fixtures beside this file (run once; the JSON files are committed).

- wordpiece.json: BERT-style (lowercase normaliser, whitespace+punctuation pre-tokeniser, WordPiece
  with `##` continuations), a hand-written 40-entry vocabulary.
- bpe.json: GPT-2-style byte-level BPE (`Ġ` marks a leading space), trained by the `tokenizers`
  library on a small generated corpus in which " the" is frequent and " tok" is rare, as in English.

Both split the emulator's old token text " tok" into two tokens and keep " the" whole: the property
a real vocabulary has and the test relies on. Nothing is downloaded.
    python tests/data/tokenizers/make_fixtures.py
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

HERE = Path(__file__).resolve().parent


def wordpiece() -> Tokenizer:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "a", "to", "of", "and", "in", "is", "it", "cat", "sat",
             "on", "mat", "hello", "there", "t", "o", "k", "e", "h", "w", "##k", "##e", "##o", "##t", "##h",
             "##s", "##ing", "##ed", ".", ",", "!", "?", "0", "1", "2", "3"]
    tok = Tokenizer(models.WordPiece({w: i for i, w in enumerate(vocab)}, unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    return tok


def bpe() -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    words = ["the"] * 50 + ["to"] * 20 + ["cat", "sat", "on", "mat", "tool", "taken"] * 3 + ["tok"]
    corpus = [" ".join(words[i:i + 7]) for i in range(0, len(words), 7)]
    trainer = trainers.BpeTrainer(vocab_size=280, min_frequency=2, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus, trainer)
    return tok


if __name__ == "__main__":
    for name, build in (("wordpiece", wordpiece), ("bpe", bpe)):
        tokenizer = build()
        tokenizer.save(str(HERE / f"{name}.json"), pretty=False)
        for text in (" the the", " tok tok"):
            print(name, repr(text), tokenizer.encode(text).tokens)
