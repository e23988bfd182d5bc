"""The fitted profile as a model config (`conf/model/<name>.yaml` format) with its provenance.

The file is a complete model config: the architecture the served model really has (so KV bytes
derive from it) and `profiles.<hardware>` holding the fitted prefill polynomial and linear decode
step. Put its directory on Hydra's search path (`--config-dir DIR`, DIR holding `model/<name>.yaml`)
or copy it into conf/model/, and `model=<name>` selects it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from harness.errors import InputError, require

ARCH_KEYS = ("hidden_size", "layers", "q_heads", "kv_heads", "head_dim", "params_b", "weight_dtype_bytes",
             "kv_dtype_bytes")


def architecture_from_gguf(path: str | Path) -> dict[str, Any]:
    """The dims of a GGUF model file: a decoder of full-attention GQA layers (llama-style)."""
    import gguf

    reader = gguf.GGUFReader(str(path))

    def get(key: str, default: Any = None) -> Any:
        field = reader.get_field(key)
        return default if field is None else field.contents()

    arch = get("general.architecture")
    require(arch is not None, f"{path}: not a GGUF model (no general.architecture)")
    hidden = int(get(f"{arch}.embedding_length"))
    heads = int(get(f"{arch}.attention.head_count"))
    params = sum(int(t.n_elements) for t in reader.tensors)
    size = sum(int(t.n_bytes) for t in reader.tensors)
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
