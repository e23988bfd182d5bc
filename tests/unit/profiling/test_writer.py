"""The model builder writes the GGUF it promises, and a fitted profile written as a model config
loads through the cost model as any conf/model/ file does."""

from __future__ import annotations

import hashlib
from pathlib import Path

import commands  # tests/commands.py
import pytest

from harness.engine.model import ModelSpec, build_model, vocabulary
from harness.errors import InputError
from harness.profiling.writer import (
    architecture_from_gguf,
    check_architecture,
    model_config,
    write_model_config,
)

ROOT = Path(__file__).resolve().parents[3]
TINY = ModelSpec(hidden=64, layers=2, ffn=128, heads=4, kv_heads=2, vocab=300, context=2048, seed=3)


def test_the_model_builder_is_deterministic_and_writes_the_spec_dims(tmp_path):
    a = build_model(TINY, tmp_path / "a")
    b = build_model(TINY, tmp_path / "b")
    assert hashlib.sha256(a.read_bytes()).digest() == hashlib.sha256(b.read_bytes()).digest()
    other = build_model(ModelSpec(**{**TINY.__dict__, "seed": 4}), tmp_path / "a")
    assert other != a and other.read_bytes() != a.read_bytes()  # the seed is in the key and the weights
    arch = architecture_from_gguf(a)
    assert (arch["hidden_size"], arch["layers"], arch["q_heads"], arch["kv_heads"], arch["head_dim"]) == (
        64,
        2,
        4,
        2,
        16,
    )
    assert arch["params_b"] * 1e9 == pytest.approx(TINY.n_params() + (2 * TINY.layers + 1) * TINY.hidden)  # + norms


def test_the_vocabulary_has_no_byte_tokens_and_is_distinct():
    words = vocabulary(32000)
    assert len(set(words)) == 32000
    assert not any(w.startswith("<0x") for w in words)  # no byte fallback: every token is whole UTF-8
    assert all(w.replace("\u2581", "").isascii() for w in words[3:])


def _written(tmp_path: Path, name: str = "fitted") -> Path:
    arch = {"hidden_size": 384, "layers": 6, "q_heads": 6, "kv_heads": 6, "head_dim": 64, "params_b": 0.0352,
            "weight_dtype_bytes": 2.0, "kv_dtype_bytes": 2.0}
    doc = model_config(name, "cpu_local", arch,
                       {"kind": "polynomial", "coefficients": [0.01, 2e-4, 5e-8], "provenance": "[M] test"},
                       {"kind": "linear", "base_s": 0.004, "per_seq_s": 0.001, "per_token_s": 1e-7, "bs_max": 4,
                        "provenance": "[M] test"},
                       {"date": "today"}, display_name="fitted")
    return write_model_config(doc, tmp_path, "a header\nline two")


def test_a_written_profile_loads_through_build_profile(tmp_path):
    from harness.profile import check_loads  # with scipy (~0.6 s): imported here, not at collection

    path = _written(tmp_path)
    assert path == tmp_path / "model" / "fitted.yaml"
    assert path.read_text().startswith("# a header\n# line two\n")
    prof = check_loads(path, "cpu_local")
    assert prof.prefill_s(1000) == pytest.approx(0.01 + 0.2 + 0.05)
    assert prof.decode_step_s(2, 500) == pytest.approx(0.004 + 0.002 + 0.00005)
    assert prof.bs_max == 4
    assert prof.kv_bytes(1000) == pytest.approx(1000 * 6 * 2 * 6 * 64 * 2)  # from the architecture


def test_a_written_profile_is_found_by_name_on_the_config_path(tmp_path):
    _written(tmp_path, "fitted_x")
    proc = commands.run(
        [
            "-m",
            "harness",
            "--config-dir",
            str(tmp_path),
            "model=fitted_x",
            "--cfg",
            "job",
            "--package",
            "model",
        ],
        cwd=ROOT,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-1500:]
    assert "name: fitted_x" in proc.stdout and "cpu_local" in proc.stdout


def test_architecture_must_name_every_key():
    with pytest.raises(InputError, match="missing layers"):
        check_architecture({"hidden_size": 1, "q_heads": 1, "kv_heads": 1, "head_dim": 1, "params_b": 1,
                            "weight_dtype_bytes": 2, "kv_dtype_bytes": 2})


def test_harness_profile_without_a_url_is_a_one_line_error(tmp_path):
    proc = commands.run(["-m", "harness.profile", f"hydra.run.dir={tmp_path}"], cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: harness-profile needs target.url=http://HOST:PORT "
                                                "(an OpenAI-compatible endpoint)"]


@pytest.mark.parametrize("endian", ["LITTLE", "BIG"])
def test_the_header_reader_reads_what_the_gguf_librarys_full_reader_does(tmp_path, endian):
    """`gguf_header` steps over array values instead of decoding them (~1 s for the engine's model): its metadata
    and tensor sizes are gguf.GGUFReader's, quantized tensors, string and nested arrays and both byte orders too."""
    import gguf
    import numpy as np

    from harness.profiling.writer import gguf_header

    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "llama", endianess=getattr(gguf.GGUFEndian, endian))
    w.add_block_count(3)
    w.add_embedding_length(64)
    w.add_head_count(4)
    w.add_float32("test.scale", 0.5)
    w.add_bool("test.flag", True)
    w.add_string("test.name", "caf\u00e9")
    w.add_array("test.words", ["a", "bb", "\u2581ccc"])
    w.add_array("test.nested", [[1, 2], [3]])
    w.add_array("test.ints", [1, 2, 3])
    w.add_tensor("a", np.zeros((4, 64), np.float16))
    w.add_tensor("q", np.zeros((2, 34), np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)  # 2 blocks of 32
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    meta, sizes = gguf_header(path)
    reader = gguf.GGUFReader(str(path))
    full = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    arrays = {k for k, v in full.items() if isinstance(v, list)}
    assert {k: v for k, v in full.items() if k not in arrays} == {k: v for k, v in meta.items() if v is not None}
    assert arrays == {k for k, v in meta.items() if v is None} == {"test.words", "test.nested", "test.ints"}
    assert sizes == [(int(t.n_elements), int(t.n_bytes)) for t in reader.tensors] == [(256, 512), (64, 68)]
    arch = architecture_from_gguf(path)
    assert (arch["layers"], arch["hidden_size"], arch["q_heads"], arch["head_dim"]) == (3, 64, 4, 16)
    assert arch["weight_dtype_bytes"] == 580 / 320


@pytest.mark.parametrize("content", [b"", b"GGML....", b"GGUF\x03\x00\x00\x00\x01"])
def test_a_file_that_is_not_a_readable_gguf_is_one_clear_error(tmp_path, content):
    path = tmp_path / "bad.gguf"
    path.write_bytes(content)
    with pytest.raises(InputError, match=r"bad\.gguf: not a"):
        architecture_from_gguf(path)
