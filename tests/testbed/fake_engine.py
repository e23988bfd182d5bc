"""A stand-in for llama-server with the slot save/restore API the testbed uses (tests only).

It accepts llama-server's flags (`-m --host --port -np --slot-save-path ...`, the rest ignored), sleeps a
fixed time per prompt token, writes slot files of the real engine's size (200 + 9,232 B/token) and checks a
restore reads a file it wrote. Lets the testbed's plumbing (namespaces, agents, router, records) be tested
without the real engine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path

from aiohttp import web

HEADER_BYTES, BYTES_PER_TOKEN = 200, 9232
PREFILL_S_PER_TOKEN, STEP_S = 2e-5, 2e-3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-m")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("-np", type=int, default=1)
    parser.add_argument("--slot-save-path", type=Path)
    args, _ = parser.parse_known_args()
    slots: dict[int, list[int]] = {i: [] for i in range(args.np)}
    busy: set[int] = set()

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def completion(request: web.Request) -> web.Response:
        body = await request.json()
        slot, prompt = int(body["id_slot"]), list(body["prompt"])
        await asyncio.sleep(PREFILL_S_PER_TOKEN * len(prompt))
        slots[slot] = prompt
        return web.json_response({"content": "x", "timings": {"prompt_n": len(prompt), "prompt_ms": 1.0}})

    async def slot_action(request: web.Request) -> web.Response:
        slot, action = int(request.match_info["slot"]), request.query.get("action")
        name = (await request.json())["filename"]
        path = args.slot_save_path / name
        if action == "save":
            tokens = slots[slot]
            payload = json.dumps(tokens).encode()
            data = payload + b"\0" * (HEADER_BYTES + BYTES_PER_TOKEN * len(tokens) - len(payload))
            path.write_bytes(data)
            return web.json_response({"id_slot": slot, "n_saved": len(tokens), "n_written": len(data),
                                      "timings": {"save_ms": 0.1}})
        if action == "restore":
            try:
                data = path.read_bytes()
                tokens = json.loads(data[:data.index(b"\0")])
            except (OSError, ValueError):
                return web.json_response({"error": {"message": "Unable to restore slot"}}, status=400)
            slots[slot] = tokens
            return web.json_response({"id_slot": slot, "n_restored": len(tokens), "n_read": len(data),
                                      "timings": {"restore_ms": 0.1}})
        return web.json_response({"error": {"message": f"bad action {action}"}}, status=400)

    async def slots_info(_: web.Request) -> web.Response:
        return web.json_response([{"id": i, "is_processing": i in busy} for i in slots])

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "fake", "object": "model"}]})

    async def completions(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        slot, prompt, n = int(body.get("id_slot", 0)), list(body["prompt"]), int(body.get("max_tokens", 16))
        cached = len(prompt) - 1 if slots.get(slot) == prompt else 0
        busy.add(slot)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        t0 = time.perf_counter()
        await asyncio.sleep(PREFILL_S_PER_TOKEN * (len(prompt) - cached))
        for i in range(n):
            await asyncio.sleep(STEP_S)
            chunk = {"id": "cmpl-fake", "choices": [{"index": 0, "text": f"t{i}", "finish_reason": None}]}
            await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
        final = {"id": "cmpl-fake", "choices": [{"index": 0, "text": "", "finish_reason": "length"}],
                 "usage": {"prompt_tokens": len(prompt), "completion_tokens": n, "total_tokens": len(prompt) + n},
                 "timings": {"cache_n": cached, "prompt_n": len(prompt) - cached,
                             "predicted_ms": (time.perf_counter() - t0) * 1e3, "predicted_n": n}}
        await resp.write(b"data: " + json.dumps(final).encode() + b"\n\ndata: [DONE]\n\n")
        busy.discard(slot)
        return resp

    app = web.Application()
    app.add_routes([web.get("/health", health), web.post("/completion", completion),
                    web.post("/slots/{slot}", slot_action), web.get("/slots", slots_info),
                    web.get("/v1/models", models), web.post("/v1/completions", completions)])
    web.run_app(app, host=args.host, port=args.port, print=None)


if __name__ == "__main__":
    main()
