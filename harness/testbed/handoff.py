"""One request's path through the testbed: prefill on a slot, save, carry the file, restore into an idle
decode slot, decode streamed back.

The router owns every slot: a prefill or a restore only ever targets a slot it took from that engine's pool
(an idle one; a request waits for one rather than failing), and gives it back when the step ends. A failure
on the remote path (engine gone, link down past the transfer timeout) is recomputed on the local prefill
instance when there is one (`testbed.recompute_locally`); every request ends in exactly one record.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass
from typing import Any

import aiohttp

from harness.deploy.router.base import LOCAL, PRFAAS
from harness.testbed import engines
from harness.testbed.engines import EngineError, EngineSpec


class SlotPool:
    """The idle slots of one engine; `take()` waits for one (FIFO), and returns it when the block ends."""

    def __init__(self, slots: int) -> None:
        self._idle: asyncio.Queue[int] = asyncio.Queue()
        for slot in range(slots):
            self._idle.put_nowait(slot)

    @property
    def idle(self) -> int:
        return self._idle.qsize()

    @contextlib.asynccontextmanager
    async def take(self) -> AsyncIterator[int]:
        slot = await self._idle.get()
        try:
            yield slot
        finally:
            self._idle.put_nowait(slot)


@dataclass
class HandoffRecord:
    """The router's view of one request. Times: monotonic ns (the load generator's clock); durations: s."""

    request_id: str
    input_tokens: int
    route: str = ""
    prefill_instance: str = ""
    decode_instance: str = "decode"
    arrival_ns: int = 0
    prefill_start_ns: int | None = None
    prefill_end_ns: int | None = None
    kv_ready_ns: int | None = None
    first_token_ns: int | None = None
    finish_ns: int | None = None
    prefill_s: float | None = None
    kv_bytes_sent: int = 0
    kv_save_s: float | None = None
    kv_transfer_s: float | None = None
    kv_restore_s: float | None = None
    recomputed: str | None = None  # why a remote prefill was recomputed locally
    error: str | None = None

    def row(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Link:
    """Where a route's KV goes: the sending agent's control URL and the receiver's data address."""

    agent_url: str
    host: str
    port: int


class Handoff:
    """Runs requests through the engines; `records` holds one HandoffRecord per request, in arrival order."""

    def __init__(self, session: aiohttp.ClientSession, engine_specs: dict[str, EngineSpec], links: dict[str, Link],
                 slots: int, timeout_s: float, transfer_timeout_s: float, recompute_locally: bool,
                 on_link: Any = None) -> None:
        self.session, self.engines, self.links = session, engine_specs, links
        self.pools = {name: SlotPool(slots) for name in engine_specs}
        self.timeout_s, self.transfer_timeout_s = timeout_s, transfer_timeout_s
        self.recompute_locally = recompute_locally
        self.on_link = on_link  # LinkMonitor (in_flight_bytes) or None
        self.records: list[HandoffRecord] = []
        self._seq = itertools.count()

    def new_record(self, request_id: str | None, input_tokens: int) -> HandoffRecord:
        n = next(self._seq)
        rec = HandoffRecord(request_id=request_id or f"tb-{n}", input_tokens=input_tokens,
                            arrival_ns=time.monotonic_ns())
        self.records.append(rec)
        return rec

    async def prepare(self, rec: HandoffRecord, route: str, prompt: list[int]) -> str:
        """Prefill on `route`, save and carry the KV into the decode engine's directory; the file's name."""
        try:
            return await self._prepare_on(rec, route, prompt)
        except EngineError as err:
            if route != PRFAAS or not self.recompute_locally or "local_prefill" not in self.engines:
                raise
            rec.recomputed = str(err)
            return await self._prepare_on(rec, LOCAL, prompt)

    async def _prepare_on(self, rec: HandoffRecord, route: str, prompt: list[int]) -> str:
        engine = self.engines["remote_prefill" if route == PRFAAS else "local_prefill"]
        rec.route, rec.prefill_instance = route, engine.name
        name = f"{rec.request_id}-{id(rec):x}.bin".replace("/", "_")
        async with self.pools[engine.name].take() as slot:
            rec.prefill_start_ns = time.monotonic_ns()
            await engines.prefill(self.session, engine, prompt, slot, self.timeout_s)
            rec.prefill_end_ns = time.monotonic_ns()
            rec.prefill_s = (rec.prefill_end_ns - rec.prefill_start_ns) / 1e9
            saved = await engines.save(self.session, engine, slot, name, self.timeout_s)
            rec.kv_save_s = (time.monotonic_ns() - rec.prefill_end_ns) / 1e9
        nbytes = int(saved.get("n_written") or (engine.slot_dir / name).stat().st_size)
        rec.kv_bytes_sent = nbytes
        rec.decode_instance = self.pick_decode()
        await self._carry(rec, route, engine, name, nbytes)
        return name

    def pick_decode(self) -> str:
        """The decode instance with the most idle slots (the first on a tie)."""
        names = [n for n in self.engines if n == "decode" or n.startswith("decode_")]
        return max(names, key=lambda n: self.pools[n].idle)

    async def _carry(self, rec: HandoffRecord, route: str, engine: EngineSpec, name: str, nbytes: int) -> None:
        link = self.links[route]
        body = {"path": str(engine.slot_dir / name), "host": link.host, "port": link.port, "name": name,
                "dir": self.engines[rec.decode_instance].slot_dir.name}
        on_link = self.on_link if route == PRFAAS else None
        t0 = time.monotonic_ns()
        if on_link is not None:
            on_link.in_flight_bytes += nbytes
        try:
            async with self.session.post(link.agent_url + "/send", json=body,
                                         timeout=aiohttp.ClientTimeout(total=self.transfer_timeout_s)) as resp:
                out = await resp.json(content_type=None)
                if resp.status != 200:
                    raise EngineError(f"transfer {route}: HTTP {resp.status}: {out.get('error', out)}")
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            raise EngineError(f"transfer {route}: {type(err).__name__}: {err}") from err
        finally:
            if on_link is not None:
                on_link.in_flight_bytes -= nbytes
        rec.kv_ready_ns = time.monotonic_ns()
        rec.kv_transfer_s = (rec.kv_ready_ns - t0) / 1e9

    @contextlib.asynccontextmanager
    async def decode_slot(self, rec: HandoffRecord, name: str) -> AsyncIterator[int]:
        """An idle decode slot with the request's KV restored into it (the file is removed after)."""
        decode = self.engines[rec.decode_instance]
        async with self.pools[rec.decode_instance].take() as slot:
            t0 = time.monotonic_ns()
            try:
                await engines.restore(self.session, decode, slot, name, self.timeout_s)
            finally:
                (decode.slot_dir / name).unlink(missing_ok=True)
            rec.kv_restore_s = (time.monotonic_ns() - t0) / 1e9
            yield slot
