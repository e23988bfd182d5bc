"""Calibration probes of a stood-up testbed (never the validation workload): the link, save/restore, the engines.

Writes one JSON document (schema below, `SCHEMA_VERSION`) whose `overrides` list are emulator options by the
names the emulator uses, so a calibrated sim run is `python -m harness ... <overrides>`:

    {"schema": 1, "link_capacity_gbps": R,
     "link": {"efficiency": e, "base_s": b, "sharing": "fifo"|"fair", "transfers": [[bytes, s], ...],
              "concurrent": {"bytes_each": n, "finish_s": [s1, s2], "fair_s": s}},
     "deployment": {"kv_handoff": "store_and_forward", "kv_save_s": {"base_s", "per_token_s"},
                    "kv_restore_s": {"base_s", "per_token_s"}, "points": [[tokens, save_s, restore_s], ...]},
     "instances": {"<role>": {"prefill_s": [[tokens, s], ...]}, "decode": {"step_s": s, "batch": 1}},
     "contention": {"tokens": n, "engines": [...], "alone_s": [...], "together_s": [...], "slowdown": x},
     "emulator": {"deployment.kv_save_s": {...}, "link.efficiency": e, ...},   # harness.testbed_model's keys
     "overrides": ["link.efficiency=...", ...]}      # harness.testbed_model.overrides(emulator)

Link: files of several sizes through the agents (bytes -> seconds to the receiver's ack: slope -> efficiency
against the tbf rate, intercept -> per-transfer base); two equal files at once (tbf's one FIFO: they do not
finish together as fair sharing would). Save/restore: seconds the router waits for each, by prompt length,
fitted as base + per token. Engines: the prefill time each prefill instance reports (`prompt_ms`), and the
decode instance's time per token at batch 1.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any

import aiohttp
import numpy as np

from harness.testbed import engines
from harness.testbed.cluster import Testbed

SCHEMA_VERSION = 1
LINK_SIZES_BYTES = (2_000_000, 8_000_000, 20_000_000)
SAVE_TOKENS = (256, 1024, 2048)
PREFILL_TOKENS = (256, 1024, 2048)


def _prompt(n: int, seed: int) -> list[int]:
    """Distinct ids per probe (no prefix-cache hit), inside any 32K vocabulary."""
    return [1000 + (seed * 7919 + i * 31) % 29000 for i in range(n)]


def fit_line(x: list[float], y: list[float]) -> tuple[float, float]:
    """Least-squares (intercept, slope)."""
    slope, intercept = np.polyfit(np.asarray(x, dtype=float), np.asarray(y, dtype=float), 1)
    return float(intercept), float(slope)


async def _send(session: aiohttp.ClientSession, testbed: Testbed, name: str, nbytes: int) -> float:
    topo, s = testbed.topology, testbed.settings
    src = testbed.engines["remote_prefill"].slot_dir / name
    await asyncio.to_thread(src.write_bytes, os.urandom(nbytes))
    body = {"path": str(src), "host": topo.local_link_addr, "port": s.agent_data_port, "name": name}
    t0 = time.perf_counter()
    async with session.post(testbed.agents["remote"].url + "/send", json=body,
                            timeout=aiohttp.ClientTimeout(total=s.transfer_timeout_s)) as resp:
        out = await resp.json()
    seconds = time.perf_counter() - t0
    (testbed.engines["decode"].slot_dir / name).unlink(missing_ok=True)
    if resp.status != 200:
        raise RuntimeError(f"link probe: {out}")
    return seconds


async def probe_link(session: aiohttp.ClientSession, testbed: Testbed, repeats: int = 2) -> dict[str, Any]:
    points = [(n, await _send(session, testbed, f"probe-{n}-{r}.bin", n))
              for r in range(repeats) for n in LINK_SIZES_BYTES]
    base_s, s_per_byte = fit_line([p[0] for p in points], [p[1] for p in points])
    efficiency = 8 / s_per_byte / (testbed.link_gbps * 1e9)
    each = LINK_SIZES_BYTES[1]
    both = await asyncio.gather(*(_send(session, testbed, f"probe-c{i}.bin", each) for i in range(2)))
    fair_s = base_s + 2 * each * s_per_byte  # fair sharing: both end together, when the pair has crossed
    sharing = "fifo" if min(both) < 0.8 * max(both) else "fair"
    return {"efficiency": efficiency, "base_s": base_s, "sharing": sharing,
            "transfers": [[n, s] for n, s in points],
            "concurrent": {"bytes_each": each, "finish_s": sorted(both), "fair_s": fair_s}}


async def probe_save_restore(session: aiohttp.ClientSession, testbed: Testbed) -> dict[str, Any]:
    role = "remote_prefill" if "remote_prefill" in testbed.engines else "local_prefill"
    prefill, decode = testbed.engines[role], testbed.engines["decode"]
    timeout = testbed.settings.request_timeout_s
    points = []
    for i, n in enumerate(SAVE_TOKENS):
        await engines.prefill(session, prefill, _prompt(n, 100 + i), 0, timeout)
        name = f"probe-save-{n}.bin"
        t0 = time.perf_counter()
        await engines.save(session, prefill, 0, name, timeout)
        save_s = time.perf_counter() - t0
        nbytes = (prefill.slot_dir / name).stat().st_size
        await asyncio.to_thread(shutil.move, prefill.slot_dir / name, decode.slot_dir / name)
        t0 = time.perf_counter()
        await engines.restore(session, decode, 0, name, timeout)
        restore_s = time.perf_counter() - t0
        (decode.slot_dir / name).unlink(missing_ok=True)
        points.append([n, save_s, restore_s, nbytes])
    save_base, save_per = fit_line([p[0] for p in points], [p[1] for p in points])
    rest_base, rest_per = fit_line([p[0] for p in points], [p[2] for p in points])
    file_base, file_per = fit_line([p[0] for p in points], [p[3] for p in points])
    return {"kv_handoff": "store_and_forward", "file_bytes": {"base": file_base, "per_token": file_per},
            "kv_save_s": {"base_s": max(0.0, save_base), "per_token_s": save_per},
            "kv_restore_s": {"base_s": max(0.0, rest_base), "per_token_s": rest_per}, "points": points}


async def probe_engines(session: aiohttp.ClientSession, testbed: Testbed) -> dict[str, Any]:
    timeout = testbed.settings.request_timeout_s
    out: dict[str, Any] = {}
    for role in ("remote_prefill", "local_prefill"):
        if role in testbed.engines:
            curve = []
            for i, n in enumerate(PREFILL_TOKENS):
                timings = await engines.prefill(session, testbed.engines[role], _prompt(n, 200 + i), 0, timeout)
                curve.append([n, float(timings.get("prompt_ms") or "nan") / 1e3])
            out[role] = {"prefill_s": curve}
    body = {"prompt": _prompt(64, 300), "max_tokens": 64, "ignore_eos": True, "id_slot": 0, "cache_prompt": False}
    async with session.post(testbed.engines["decode"].url + "/completion",
                            json={**body, "n_predict": 64}, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        timings = (await resp.json()).get("timings") or {}
    out["decode"] = {"step_s": float(timings.get("predicted_per_token_ms") or "nan") / 1e3, "batch": 1}
    return out


async def probe_contention(session: aiohttp.ClientSession, testbed: Testbed, tokens: int = 1024,
                           repeats: int = 3) -> dict[str, Any]:
    """Prefill time of each prefill engine alone, then of all of them at once (the machine's cores are
    shared): `slowdown` = median together / median alone."""
    roles = [r for r in ("remote_prefill", "local_prefill") if r in testbed.engines]
    timeout = testbed.settings.request_timeout_s

    async def one(role: str, seed: int) -> float:
        timings = await engines.prefill(session, testbed.engines[role], _prompt(tokens, seed), 0, timeout)
        return float(timings.get("prompt_ms") or "nan") / 1e3

    alone = [await one(role, 400 + 10 * i + j) for i in range(repeats) for j, role in enumerate(roles)]
    together: list[float] = []
    for i in range(repeats):
        together += await asyncio.gather(*(one(role, 500 + 10 * i + j) for j, role in enumerate(roles)))
    return {"tokens": tokens, "engines": roles, "alone_s": alone, "together_s": together,
            "slowdown": float(np.median(together) / np.median(alone))}


def model_kv_bytes_per_token(model: Any) -> float | None:
    """Full-attention KV bytes per token of a dense GQA model config (K and V), or None if it is not one."""
    try:
        fa = model.full_attention
        return 2.0 * fa.layers * fa.kv_heads * fa.k_head_dim * float(model.kv_dtype_bytes)
    except (AttributeError, KeyError, TypeError):
        return None


def emulator_options(doc: dict[str, Any], kv_per_token: float | None = None) -> dict[str, Any]:
    """The probe results keyed by the emulator's option names (harness/testbed_model.py's `OPTIONS`)."""
    link, dep = doc.get("link") or {}, doc["deployment"]
    out: dict[str, Any] = {"deployment.kv_handoff": dep["kv_handoff"]}
    for key in ("kv_save_s", "kv_restore_s"):
        cost = dep[key]
        per_token_s = float(f"{cost['per_token_s']:.4g}")
        out[f"deployment.{key}"] = {"base_s": round(cost["base_s"], 6), "per_token_s": per_token_s}
    if kv_per_token is not None and "file_bytes" in dep:
        out["deployment.kv_bytes_overhead"] = {"fixed_bytes": round(dep["file_bytes"]["base"]),
                                               "per_token_bytes": round(dep["file_bytes"]["per_token"] - kv_per_token)}
    if link:
        out["link.efficiency"] = round(link["efficiency"], 4)
        out["link.sharing"] = link["sharing"]
    return out


def overrides_of(doc: dict[str, Any], kv_per_token: float | None = None) -> list[str]:
    from harness.testbed_model import overrides

    return overrides(emulator_options(doc, kv_per_token))


async def run_probes(testbed: Testbed, kv_per_token: float | None = None) -> dict[str, Any]:
    """Every probe, in turn, on an idle testbed (no router traffic while it runs)."""
    async with aiohttp.ClientSession() as session:
        doc: dict[str, Any] = {"schema": SCHEMA_VERSION, "link_capacity_gbps": testbed.link_gbps}
        if testbed.layout.has_prfaas:
            doc["link"] = await probe_link(session, testbed)
        doc["deployment"] = await probe_save_restore(session, testbed)
        doc["instances"] = await probe_engines(session, testbed)
        doc["contention"] = await probe_contention(session, testbed)
    doc["emulator"] = emulator_options(doc, kv_per_token)
    doc["overrides"] = overrides_of(doc, kv_per_token)
    return doc


def write_probes(doc: dict[str, Any], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    return path
