"""Start and stop a real llama-server on a free loopback port for a validation run.

The binary and model are those `make engine` built: given explicitly, or read from the paths file
it writes (`/work/wt/_notes/engine_paths.txt`-style `key: path` or bare paths), or found in its
cache (`~/.cache/prfaas-harness`, `PRFAAS_CACHE` overrides).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from harness.errors import InputError


def _cache_root() -> Path:
    return Path(os.environ.get("PRFAAS_CACHE", Path.home() / ".cache" / "prfaas-harness"))


def _from_paths_file(path: Path) -> tuple[Path | None, Path | None]:
    binary = model = None
    if path.is_file():
        for line in path.read_text().splitlines():
            for token in line.replace("=", " ").replace(":", " ").split():
                p = Path(token)
                if token.endswith(".gguf") and p.is_file():
                    model = p
                elif p.name == "llama-server" and p.is_file():
                    binary = p
    return binary, model


def find_engine(binary: str | None, model: str | None, paths_file: str | None) -> tuple[Path, Path]:
    """(llama-server binary, GGUF model); InputError naming what is missing and how to get it."""
    found_b, found_m = _from_paths_file(Path(paths_file)) if paths_file else (None, None)
    root = _cache_root()
    if found_b is None and root.is_dir():
        found_b = next(iter(sorted(root.rglob("llama-server"), key=lambda p: p.stat().st_mtime, reverse=True)), None)
    if found_m is None and root.is_dir():
        found_m = next(iter(sorted(root.rglob("*.gguf"), key=lambda p: p.stat().st_mtime, reverse=True)), None)
    b = Path(binary) if binary else found_b
    m = Path(model) if model else found_m
    if b is None or not b.is_file():
        raise InputError(f"experiment.engine.binary: no llama-server found ({binary or root}); run `make engine` "
                         f"or set experiment.engine.binary=PATH (or target.url=http://... for a running engine)")
    if m is None or not m.is_file():
        raise InputError(f"experiment.engine.model: no GGUF model found ({model or root}); run `make engine` "
                         f"or set experiment.engine.model=PATH")
    return b, m


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class EngineProcess:
    """llama-server with `slots` parallel sequences; `url` once `start()` returns."""

    def __init__(self, binary: Path, model: Path, *, slots: int, context_tokens: int, threads: int,
                 batch_tokens: int | None = None, log_path: Path | None = None) -> None:
        self.binary, self.model = binary, model
        self.slots, self.context_tokens, self.threads, self.batch_tokens = slots, context_tokens, threads, batch_tokens
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def command(self, port: int) -> list[str]:
        cmd = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(port),
               "-t", str(self.threads), "-np", str(self.slots), "-c", str(self.context_tokens), "--metrics"]
        if self.batch_tokens is not None:
            cmd += ["-b", str(self.batch_tokens)]
        return cmd

    def start(self, timeout_s: float = 120.0) -> str:
        port = free_port()
        log = open(self.log_path, "wb") if self.log_path is not None else subprocess.DEVNULL  # noqa: SIM115
        self.proc = subprocess.Popen(self.command(port), stdout=log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with status {self.proc.returncode} (log: {self.log_path})")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return self.url
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"llama-server did not answer /health within {timeout_s:g} s (log: {self.log_path})")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def version(self) -> str:
        try:
            out = subprocess.run([str(self.binary), "--version"], capture_output=True, text=True, timeout=10,
                                 check=False)
            return (out.stdout + out.stderr).strip().splitlines()[0] if (out.stdout + out.stderr).strip() else "?"
        except (OSError, subprocess.SubprocessError):
            return "?"
