"""`harness-testbed check` / `make testbed`: the testbed's self-check on the real engines.

Stands PrfaaS-PD up, sends one prompt below the threshold (local prefill) and one above it (remote prefill,
KV across the link), and checks each record: the route, a KV file of 9,232 B/token plus a small header (the
`make engine` model's slot file), and a decode that computed one token after the restore (`cache_n` = L - 1).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path
from typing import Any

from harness.testbed.cluster import Testbed
from harness.testbed.service import ServiceThread, build_router
from harness.testbed.settings import layout_of

BYTES_PER_TOKEN = 9232  # the `make engine` model's slot file: 2 x 6 layers x 6 KV heads x 64 x f16, + 16 B/token
MAX_HEADER_BYTES = 1024  # plus a small fixed header (192-200 B, by llama.cpp version)


def _complete(url: str, prompt: list[int], request_id: str) -> dict[str, Any]:
    body = {"prompt": prompt, "max_tokens": 8, "ignore_eos": True, "stream": True, "temperature": 0.0}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "X-Request-Id": request_id})
    final: dict[str, Any] = {}
    with urllib.request.urlopen(req, timeout=300) as resp:
        for line in resp:
            if line.startswith(b"data:") and b"[DONE]" not in line:
                obj = json.loads(line[5:])
                if obj.get("timings"):
                    final = obj
    return final


def run_check(cfg: Any, log_dir: Path) -> list[str]:
    from harness.testbed.run import settings_of

    settings, layout = settings_of(cfg), layout_of(cfg.deployment)
    router = build_router(cfg.deployment.router, settings.threshold_tokens)
    threshold = int(getattr(router, "threshold_tokens", 1024) or 1024)
    cases = {"short": ("local", max(16, threshold // 2)), "long": ("prfaas", threshold + 512)}
    problems: list[str] = []
    with Testbed(settings, layout, float(cfg.link.capacity_gbps), log_dir, kind="run") as testbed:
        service = ServiceThread(testbed, router, model_name=str(cfg.model.name))
        url = service.start()
        try:
            finals = {name: _complete(url, list(range(1000 + i, 1000 + i + n)), name)
                      for i, (name, (_, n)) in enumerate(cases.items())}
        finally:
            service.stop()
        assert service.service is not None
        records = {r.request_id: r for r in service.service.front.handoff.records}
    for name, (route, n) in cases.items():
        rec, timings = records.get(name), finals[name].get("timings", {})
        if rec is None or rec.error:
            problems.append(f"{name}: {rec.error if rec else 'no record'}")
            continue
        print(f"{name}: {n} tokens, route {rec.route}, KV {rec.kv_bytes_sent:,} B, prefill {rec.prefill_s:.3f} s, "
              f"save {rec.kv_save_s:.3f} s, transfer {rec.kv_transfer_s:.3f} s, restore {rec.kv_restore_s:.3f} s, "
              f"decode cache_n {timings.get('cache_n')}", file=sys.stderr)
        if rec.route != route:
            problems.append(f"{name}: routed {rec.route}, expected {route}")
        if not 0 < rec.kv_bytes_sent - BYTES_PER_TOKEN * n < MAX_HEADER_BYTES:
            problems.append(f"{name}: KV file {rec.kv_bytes_sent} B, expected {BYTES_PER_TOKEN} B x {n} tokens + a "
                            f"header")
        if timings.get("cache_n") != n - 1:
            problems.append(f"{name}: decode reused {timings.get('cache_n')} cached tokens, expected {n - 1}")
    return problems
