"""vLLM's CPU build started, health-checked, warmed up and stopped by the harness, as llama-server is
(`harness.engine.server`). `python -m harness.engine.vllm` (`make engine-vllm`) installs it and writes
its model (`vllm_install.py`), then prints their paths; `--serve` also starts it and waits for Ctrl-C.

The server binds 127.0.0.1 on a free port and runs in a process group of its own, so stopping it
(SIGINT to that group, as Ctrl-C would: ~3 s) takes its engine-core and worker processes too.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from harness.engine.build import BuildError
from harness.engine.server import HOST, EngineServer, free_port, serve_until_interrupted, wait_healthy
from harness.engine.vllm_install import VllmInstall, ensure_vllm, private_env
from harness.errors import install_signal_handlers

SERVED_NAME = "random-llama"


class VllmServer(EngineServer):
    """A running vLLM OpenAI server; `stop` ends its whole process group."""

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGINT to the group, as Ctrl-C would; SIGKILL to what is left of it after `grace_s`. Returns once no
        process of the group is left: the API server exits before its engine-core and worker processes."""
        group = self.process.pid  # the group this server leads (start_new_session)
        for sig in (signal.SIGINT, signal.SIGKILL):
            if not _signal_group(group, sig):
                break
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and _signal_group(group, 0):
                if self.process.poll() is None:
                    try:
                        self.process.wait(0.2)
                    except subprocess.TimeoutExpired:
                        pass
                else:
                    time.sleep(0.2)
        if self.process.poll() is None:
            self.process.wait(grace_s)


def _signal_group(group: int, sig: int) -> bool:
    """Send `sig` (0: none, only ask) to the process group; False when no process of it is left."""
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return False
    return True


def server_args(inst: VllmInstall, port: int, *, max_num_seqs: int, max_num_batched_tokens: int,
                max_model_len: int) -> list[str]:
    return [str(inst.python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(inst.model),
            "--served-model-name", SERVED_NAME, "--host", HOST, "--port", str(port), "--dtype", "bfloat16",
            "--max-num-seqs", str(max_num_seqs), "--max-num-batched-tokens", str(max_num_batched_tokens),
            "--max-model-len", str(max_model_len), "--enable-prefix-caching", "--enable-chunked-prefill",
            "--no-enable-log-requests"]


def start_vllm(inst: VllmInstall, log: Path, *, max_num_seqs: int = 4, max_num_batched_tokens: int = 2048,
               max_model_len: int = 8192, port: int = 0, ready_timeout_s: float = 600.0) -> VllmServer:
    """Start the server; return once /health answers 200 (it compiles at every start: 45-90 s on a quiet 2-core
    machine, 3.5 min on a loaded one)."""
    port = port or free_port()
    args = server_args(inst, port, max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens,
                       max_model_len=max_model_len)
    log.parent.mkdir(parents=True, exist_ok=True)
    env = private_env(inst.root)
    with log.open("w") as fh:
        proc = subprocess.Popen(args, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                cwd=env["TMPDIR"], start_new_session=True)
    server = VllmServer(url=f"http://{HOST}:{port}", process=proc, log=log, args=args)
    return wait_healthy(server, "vLLM", ready_timeout_s, lambda: _status(server.url + "/health") == 200, 0.5)


def _status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=2.0) as resp:
        return int(resp.status)


async def _warm(url: str, rounds: list[int], prompt_tokens: int) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as session:
        async def one(i: int) -> None:
            body = {"model": SERVED_NAME, "prompt": [1000 + (i * 7919 + k) % 29000 for k in range(prompt_tokens)],
                    "max_tokens": 8, "min_tokens": 8, "ignore_eos": True, "temperature": 0.0}
            async with session.post(url + "/v1/completions", json=body,
                                    timeout=aiohttp.ClientTimeout(total=120)) as resp:
                await resp.read()

        n = 0
        for width in rounds:
            await asyncio.gather(*(one(n + i) for i in range(width)))
            n += width


def warm_up(url: str, max_num_seqs: int = 4, prompt_tokens: int = 256) -> None:
    """Two lone requests, then one round as wide as the server's sequences: [M] the first 1-2 requests after
    a start and its first wide round come back in one burst (compilation), so they are not measured."""
    asyncio.run(_warm(url, [1, 1, max_num_seqs], prompt_tokens))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.engine.vllm", description=__doc__.splitlines()[0])
    ap.add_argument("--serve", action="store_true", help="start the server, warm it up, print its URL, wait")
    ap.add_argument("--max-num-seqs", type=int, default=4)
    ap.add_argument("--max-num-batched-tokens", type=int, default=2048)
    args = ap.parse_args(argv)
    install_signal_handlers()  # Ctrl-C / SIGTERM raise KeyboardInterrupt, so the server is stopped, not orphaned
    try:
        inst = ensure_vllm()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"python: {inst.python}\nmodel: {inst.model}")
    if not args.serve:
        return 0
    server = start_vllm(inst, inst.root / "run" / "server.log", max_num_seqs=args.max_num_seqs,
                        max_num_batched_tokens=args.max_num_batched_tokens)
    try:
        warm_up(server.url, args.max_num_seqs)
    except BaseException:
        server.stop()
        raise
    print(f"listening on {server.url} (pid {server.process.pid}); Ctrl-C stops it", flush=True)
    return serve_until_interrupted(server)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
