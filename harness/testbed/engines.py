"""The testbed's engines: llama-server processes in the namespaces, and the calls the router makes to them.

A prefill instance answers one token on a slot the router chose (`id_slot`, `cache_prompt`), then saves that
slot to a file; a decode instance restores such a file into an idle slot and decodes the same prompt on it
(the engine then computes one token: the restored cache covers the rest). Every instance runs with the same
`-np` and KV type (a restore needs both), one thread, and a context of `slots x slot_context_tokens`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp


@dataclass(frozen=True)
class EngineSpec:
    """One llama-server instance of the testbed: its role, namespace, address and slot-save directory."""

    name: str  # remote_prefill | local_prefill | decode
    ns: str
    host: str
    port: int
    slot_dir: Path

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


def engine_args(binary: Path, model: Path, spec: EngineSpec, *, slots: int, slot_context_tokens: int,
                threads: int, extra: list[str] | None = None) -> list[str]:
    """The llama-server command line (the flags harness/engine/server.py uses, plus the slot-save path).
    `--cache-ram 0`: no host-memory prompt cache, so a slot holds exactly what the router put there."""
    return [str(binary), "-m", str(model), "--host", spec.host, "--port", str(spec.port), "-np", str(slots),
            "-t", str(threads), "-tb", str(threads), "-c", str(slots * slot_context_tokens), "--metrics",
            "--slots", "--no-webui", "--cache-ram", "0", "--slot-save-path", str(spec.slot_dir), *(extra or [])]


class EngineError(RuntimeError):
    """An engine call that failed: the step, the instance and what the engine said."""


async def _post(session: aiohttp.ClientSession, url: str, body: dict[str, Any], step: str,
                timeout_s: float) -> dict[str, Any]:
    try:
        async with session.post(url, json=body, timeout=aiohttp.ClientTimeout(total=timeout_s)) as resp:
            text = await resp.text()
            if resp.status != 200:
                raise EngineError(f"{step}: HTTP {resp.status}: {text.strip()[:200]}")
            return json.loads(text)
    except (aiohttp.ClientError, TimeoutError, ValueError) as err:
        raise EngineError(f"{step}: {type(err).__name__}: {err}") from err


async def prefill(session: aiohttp.ClientSession, engine: EngineSpec, prompt: list[int], slot: int,
                  timeout_s: float) -> dict[str, Any]:
    """Compute the prompt's KV on `slot` (one token out); returns the engine's timings."""
    body = {"prompt": prompt, "n_predict": 1, "id_slot": slot, "cache_prompt": True, "temperature": 0.0}
    out = await _post(session, engine.url + "/completion", body, f"prefill on {engine.name}", timeout_s)
    return dict(out.get("timings") or {})


async def save(session: aiohttp.ClientSession, engine: EngineSpec, slot: int, filename: str,
               timeout_s: float) -> dict[str, Any]:
    """Write the slot's KV to `engine.slot_dir/filename`; returns n_saved, n_written, timings."""
    return await _post(session, f"{engine.url}/slots/{slot}?action=save", {"filename": filename},
                       f"save on {engine.name}", timeout_s)


async def restore(session: aiohttp.ClientSession, engine: EngineSpec, slot: int, filename: str,
                  timeout_s: float) -> dict[str, Any]:
    return await _post(session, f"{engine.url}/slots/{slot}?action=restore", {"filename": filename},
                       f"restore on {engine.name}", timeout_s)


def decode_body(body: dict[str, Any], slot: int) -> dict[str, Any]:
    """The client's /v1/completions body, pinned to the restored slot with its cache in use."""
    return {**body, "id_slot": slot, "cache_prompt": True}


def wait_slots_idle(url: str, timeout_s: float = 10.0) -> None:
    """Block until no slot of the engine at `url` is processing (probes start from a quiet engine)."""
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with urllib.request.urlopen(url + "/slots", timeout=2.0) as resp:
            if not any(s.get("is_processing") for s in json.loads(resp.read())):
                return
        time.sleep(0.05)
