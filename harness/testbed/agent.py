"""The KV transfer agent: one process per namespace, moving saved slot files over TCP, store-and-forward.

llama-server does not expose its KV memory; what it hands off is the file `POST /slots/{id}?action=save`
writes. The agent in the prefill engine's namespace reads that file whole and streams it to the agent in the
decode engine's namespace (across the shaped link, or the local namespace's loopback), which writes it into
the decode engine's slot-save directory and acks. The router triggers and times each transfer over the
control veth: `POST /send {"path", "host", "port", "name"}` answers `{"bytes", "seconds"}` once the
receiver has acked the last byte.

Run: `ip netns exec NS python -m harness.testbed.agent --ctl ADDR:PORT --data PORT --dest DIR --source DIR`.
Wire format of a transfer: one JSON line `{"name": ..., "size": N}`, then N bytes; the receiver answers one
JSON line `{"bytes": N}` (or `{"error": ...}`) after the file is in place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from pathlib import Path

from aiohttp import web

CHUNK_BYTES = 1 << 20
STREAM_LIMIT = 8 << 20


def safe_name(name: str) -> str:
    """A bare file name (no directory part): the only thing a peer may choose."""
    if not name or name != os.path.basename(name) or name in (".", ".."):
        raise ValueError(f"bad file name {name!r}: a bare name is required")
    return name


async def send_file(path: Path, host: str, port: int, name: str, timeout_s: float, dest: str | None = None) -> dict:
    """Stream `path` to the receiving agent at host:port; return bytes sent and seconds to the ack."""
    data = await asyncio.to_thread(path.read_bytes)  # store-and-forward: the whole saved file, then the wire
    t0 = time.perf_counter()
    reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
    try:
        writer.write(json.dumps({"name": safe_name(name), "size": len(data), "dir": dest}).encode() + b"\n")
        view = memoryview(data)
        for start in range(0, len(data), CHUNK_BYTES):
            writer.write(view[start:start + CHUNK_BYTES])
            await asyncio.wait_for(writer.drain(), timeout_s)
        ack = json.loads(await asyncio.wait_for(reader.readline(), timeout_s) or b"{}")
    finally:
        writer.close()
    if "error" in ack or int(ack.get("bytes", -1)) != len(data):
        raise RuntimeError(f"receiver refused {name}: {ack.get('error', ack)}")
    return {"bytes": len(data), "seconds": time.perf_counter() - t0, "recv_s": ack.get("recv_s"),
            "write_s": ack.get("write_s")}


async def receive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, dests: list[Path]) -> None:
    """One incoming transfer: header, bytes, then the file renamed into place, then the ack. The header's
    `dir` names one of the agent's destination directories (by its last component; null: the first)."""
    try:
        head = json.loads(await reader.readline())
        wanted = head.get("dir")
        dest = next(d for d in dests if wanted is None or d.name == wanted)
        t0 = time.perf_counter()
        name, size = safe_name(str(head["name"])), int(head["size"])
        data = await reader.readexactly(size)
        t1 = time.perf_counter()
        tmp = dest / f".{name}.part"
        await asyncio.to_thread(tmp.write_bytes, data)
        tmp.rename(dest / name)  # the decode engine never sees a half-written file
        ack = {"bytes": size, "recv_s": t1 - t0, "write_s": time.perf_counter() - t1}
        writer.write(json.dumps(ack).encode() + b"\n")
    except (ValueError, KeyError, StopIteration, asyncio.IncompleteReadError, OSError) as err:
        writer.write(json.dumps({"error": f"{type(err).__name__}: {err}"}).encode() + b"\n")
    try:
        await writer.drain()
    finally:
        writer.close()


def control_app(sources: list[Path], timeout_s: float) -> web.Application:
    roots = [s.resolve() for s in sources]

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def send(request: web.Request) -> web.Response:
        body = await request.json()
        path = Path(str(body["path"])).resolve()
        if not any(path.is_relative_to(root) for root in roots):
            return web.json_response({"error": f"{path} is outside the agent's source directories"}, status=400)
        try:
            out = await send_file(path, str(body["host"]), int(body["port"]), str(body["name"]), timeout_s,
                                  body.get("dir"))
        except (OSError, RuntimeError, ValueError, TimeoutError) as err:
            return web.json_response({"error": f"{type(err).__name__}: {err}"}, status=502)
        if body.get("unlink", True):
            path.unlink(missing_ok=True)  # the prefill side's copy is spent once it has crossed
        return web.json_response(out)

    async def counters(_: web.Request) -> web.Response:
        """Every device's tx/rx byte counters in this namespace (ip netns exec gives the agent its own /sys)."""
        out = {}
        for dev in Path("/sys/class/net").iterdir():
            stats = dev / "statistics"
            out[dev.name] = {k: int((stats / k).read_text()) for k in ("tx_bytes", "rx_bytes", "tx_packets")}
        return web.json_response(out)

    app = web.Application()
    app.add_routes([web.get("/health", health), web.post("/send", send), web.get("/counters", counters)])
    return app


async def serve(ctl_host: str, ctl_port: int, data_port: int, dests: list[Path], sources: list[Path],
                timeout_s: float) -> None:
    for dest in dests:
        dest.mkdir(parents=True, exist_ok=True)
    # Data on every address of this namespace (the link's and loopback): the namespace is the testbed's own.
    # A large reader limit: the stream pauses the socket only past 2 x limit, not every 128 KiB of a KV file.
    data = await asyncio.start_server(lambda r, w: receive(r, w, dests), "0.0.0.0", data_port, limit=STREAM_LIMIT)
    runner = web.AppRunner(control_app(sources, timeout_s), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, ctl_host, ctl_port).start()
    async with data:
        await data.serve_forever()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.testbed.agent", description=__doc__)
    parser.add_argument("--ctl", required=True, help="ADDR:PORT of the control API (the control veth)")
    parser.add_argument("--data", type=int, required=True, help="TCP port for incoming transfers")
    parser.add_argument("--dest", type=Path, action="append", required=True,
                        help="where received files may go (decode slot dirs; the first is the default)")
    parser.add_argument("--source", type=Path, action="append", default=[], help="directory files may be sent from")
    parser.add_argument("--timeout-s", type=float, default=120.0)
    args = parser.parse_args(argv)
    host, _, port = args.ctl.rpartition(":")
    asyncio.run(serve(host, int(port), args.data, args.dest, args.source, args.timeout_s))


if __name__ == "__main__":
    main()
