"""How the harness launches vLLM, checked without installing it: loopback only, the measured fixes (module
entry point, not the console script), token budget and sequences as given, and every path it writes
under the project's cache with the Hugging Face hub offline (nothing downloaded at run time)."""

from __future__ import annotations

from pathlib import Path

from harness.engine.vllm import server_args
from harness.engine.vllm_install import VllmInstall, private_env


def test_args_bind_loopback_and_set_the_budget(tmp_path):
    inst = VllmInstall(python=tmp_path / "venv" / "bin" / "python", model=tmp_path / "model", version="0.32.0")
    args = server_args(inst, 8123, max_num_seqs=6, max_num_batched_tokens=1024, max_model_len=4096)
    assert args[:3] == [str(inst.python), "-m", "vllm.entrypoints.openai.api_server"]
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("--port") + 1] == "8123"
    assert args[args.index("--max-num-seqs") + 1] == "6"
    assert args[args.index("--max-num-batched-tokens") + 1] == "1024"


def test_every_path_it_writes_is_under_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", "/tmp")
    env = private_env(tmp_path)
    for key in ("TMPDIR", "VLLM_RPC_BASE_PATH", "VLLM_CACHE_ROOT", "TORCHINDUCTOR_CACHE_DIR", "HF_HOME"):
        assert Path(env[key]).is_relative_to(tmp_path) and Path(env[key]).is_dir(), key
    assert env["HF_HUB_OFFLINE"] == "1" and env["TRANSFORMERS_OFFLINE"] == "1"
