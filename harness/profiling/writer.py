"""The fitted profile as a model config (`conf/model/<name>.yaml` format) with its provenance.

The file is a complete model config: the architecture the served model really has (so KV bytes
derive from it) and `profiles.<hardware>` holding the fitted prefill polynomial and linear decode
step. Put its directory on Hydra's search path (`--config-dir DIR`, DIR holding `model/<name>.yaml`)
or copy it into conf/model/, and `model=<name>` selects it.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputError, require

ARCH_KEYS = ("hidden_size", "layers", "q_heads", "kv_heads", "head_dim", "params_b", "weight_dtype_bytes",
             "kv_dtype_bytes")


# GGUF value types (ggml's gguf.h): the fixed-size ones by their struct code; 8 string, 9 array.
_GGUF_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_GGUF_STRING, _GGUF_ARRAY = 8, 9


def gguf_header(path: str | Path) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """(metadata, (elements, bytes) per tensor) of a GGUF file, from its header alone. Array values (a
    vocabulary's 32,000 tokens) are stepped over, not decoded (their keys map to None): gguf.GGUFReader
    decodes every element, ~1 s of CPU for this project's engine model, for the few numbers
    `architecture_from_gguf` needs."""
    import mmap

    from gguf import GGML_QUANT_SIZES

    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise InputError(f"{path}: not a GGUF model file (it does not start with 'GGUF')")
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    with data:
        try:
            order = "<" if struct.unpack_from("<I", data, 4)[0] & 0xFFFF else ">"  # as GGUFReader tells byte order
            version = struct.unpack_from(order + "I", data, 4)[0]
            require(version in (2, 3), f"{path}: GGUF version {version}; readable: 2, 3")
            pos = 8

            def take(code: str) -> Any:
                nonlocal pos
                (value,) = struct.unpack_from(order + code, data, pos)
                pos += struct.calcsize(code)
                return value

            def text() -> str:
                nonlocal pos
                n = take("Q")
                pos += n
                return bytes(data[pos - n:pos]).decode("utf-8")

            def value(kind: int) -> Any:
                nonlocal pos
                if kind == _GGUF_STRING:
                    return text()
                if kind == _GGUF_ARRAY:
                    item, count = take("I"), take("Q")
                    if item in _GGUF_SCALARS:
                        pos += count * struct.calcsize(_GGUF_SCALARS[item])
                    else:
                        for _ in range(count):
                            value(item)
                    return None
                return take(_GGUF_SCALARS[kind])

            tensors, entries = take("Q"), take("Q")
            meta: dict[str, Any] = {}
            for _ in range(entries):
                key = text()
                meta[key] = value(take("I"))
            sizes = []
            for _ in range(tensors):
                text()
                elements = math.prod(take("Q") for _ in range(take("I")))
                block, type_bytes = GGML_QUANT_SIZES[take("I")]
                take("Q")  # the tensor's data offset
                sizes.append((elements, elements // block * type_bytes))
        except (struct.error, KeyError, UnicodeDecodeError) as err:
            raise InputError(f"{path}: not a readable GGUF model file ({type(err).__name__}: {err})") from err
    return meta, sizes


def architecture_from_gguf(path: str | Path) -> dict[str, Any]:
    """The dims of a GGUF model file: a decoder of full-attention GQA layers (llama-style)."""
    meta, tensors = gguf_header(path)

    def get(key: str, default: Any = None) -> Any:
        found = meta.get(key)
        return default if found is None else found

    arch = get("general.architecture")
    require(arch is not None, f"{path}: not a GGUF model (no general.architecture)")
    hidden = int(get(f"{arch}.embedding_length"))
    heads = int(get(f"{arch}.attention.head_count"))
    params = sum(elements for elements, _ in tensors)
    size = sum(nbytes for _, nbytes in tensors)
    return {
        "architecture": str(arch),
        "hidden_size": hidden,
        "layers": int(get(f"{arch}.block_count")),
        "q_heads": heads,
        "kv_heads": int(get(f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(get(f"{arch}.attention.key_length", hidden // heads)),
        "params_b": params / 1e9,
        "weight_dtype_bytes": size / params,
        "kv_dtype_bytes": 2.0,  # llama.cpp's default f16 KV cache (-ctk/-ctv change it)
    }


def check_architecture(arch: Any) -> dict[str, Any]:
    if not isinstance(arch, dict):
        raise InputError(f"profile.architecture must be a mapping with {', '.join(ARCH_KEYS)}, got {arch!r}")
    missing = [k for k in ARCH_KEYS if arch.get(k) is None]
    require(not missing, f"profile.architecture is missing {', '.join(missing)} (needed for KV bytes and the "
                         f"roofline); valid keys: {', '.join(ARCH_KEYS)}")
    return dict(arch)


def model_config(name: str, hardware: str, arch: dict[str, Any], prefill: dict[str, Any],
                 decode: dict[str, Any], provenance: dict[str, str], display_name: str) -> dict[str, Any]:
    """The model config document (plain data; keys in the order conf/model/*.yaml use)."""
    return {
        "defaults": ["base_model", "_self_"],
        "name": name,
        "display_name": display_name,
        "family": "dense",
        "hidden_size": int(arch["hidden_size"]),
        "total_params_b": float(arch["params_b"]),
        "active_params_b": float(arch["params_b"]),
        "weight_dtype_bytes": float(arch["weight_dtype_bytes"]),
        "kv_dtype_bytes": float(arch["kv_dtype_bytes"]),
        "full_attention": {"layers": int(arch["layers"]), "kind": "gqa", "q_heads": int(arch["q_heads"]),
                           "kv_heads": int(arch["kv_heads"]), "k_head_dim": int(arch["head_dim"]),
                           "v_head_dim": int(arch["head_dim"])},
        "profiles": {hardware: {"gpus_per_instance": 1, "prefill": prefill, "decode": decode}},
        "provenance": provenance,
    }


def write_model_config(doc: dict[str, Any], out_dir: str | Path, header: str) -> Path:
    path = Path(out_dir) / "model" / f"{doc['name']}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    comment = "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())
    path.write_text(comment + yaml.safe_dump(doc, sort_keys=False, width=110))
    return path
