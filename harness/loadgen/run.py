"""The HTTP load generator as one call: drive an OpenAI-compatible URL with a list of requests.

`drive` connects (one aiohttp session, the model named or discovered at /v1/models), offers the
requests through `run_load` and hands back the load result; each measured request is also passed
to `on_row` as it ends (its requests.parquet row and its chunk rows), so a caller can stream it to
disk. `client_rows` turns a finished result into the rows of requests.parquet, chunks.parquet and
warmup.parquet. It knows nothing of what serves the URL: the run-assembly layer (harness/runs/)
starts the live emulator when there is one and joins its view in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import pandas as pd

from harness.analysis.frames import requests_frame
from harness.errors import InputError, require
from harness.loadgen.client import OpenAIHttpTarget, auth_headers, discover_model
from harness.loadgen.clock import MonotonicClock
from harness.loadgen.engine import LoadResult, run_load
from harness.loadgen.prompts import shared_builder
from harness.loadgen.records import RequestRecord
from harness.loadgen.settings import plain_container
from harness.loadgen.timescale import detect_time_scale
from harness.workload.request import Request

CHUNK_COLUMNS = ["request_id", "chunk", "t_s"]
# A row of requests.parquet and the request's chunk rows, handed over as each measured request ends.
RowSink = Callable[[dict[str, Any], list[dict[str, Any]]], None]


def chunks_frame(rows: Any) -> pd.DataFrame:
    """chunks.parquet: (request_id, chunk index, arrival on the run clock) per token-bearing chunk."""
    return pd.DataFrame(rows, columns=CHUNK_COLUMNS)


def check_target(tcfg: Any) -> None:
    """The target's settings, checked before anything is sent (InputError naming the key)."""
    require(tcfg.timeout_s > 0, f"target.timeout_s must be > 0, got {tcfg.timeout_s}")
    require(tcfg.max_connections >= 0, f"target.max_connections must be >= 0, got {tcfg.max_connections}")
    require(tcfg.api in ("completions", "chat"), f"target.api={tcfg.api!r}; valid: completions, chat")
    headers = plain_container(tcfg.get("headers"))
    require(headers is None or isinstance(headers, dict),
            f"target.headers must be a mapping {{Name: value}} (e.g. target.headers={{X-Tenant: a}}) or null, "
            f"got {headers!r}")
    for name, value in (headers or {}).items():
        require(isinstance(value, (str, int, float)),
                f"target.headers.{name} must be a string or a number, got {value!r}")
    body = plain_container(tcfg.get("extra_body"))
    require(body is None or isinstance(body, dict),
            f"target.extra_body must be a mapping {{field: value}} (e.g. target.extra_body={{temperature: 0}}) "
            f"or null, got {body!r}")


@dataclass
class HttpLoad:
    result: LoadResult
    model: str  # the served model the requests named
    label: str  # the run's `deployment` column
    mode: str  # live | url
    time_scale_source: str = "default"  # where the run's time scale came from (server, target.time_scale, ...)


def _rows(record: RequestRecord, t0_ns: int, scale: float, label: str, mode: str) -> tuple[dict, list[dict]]:
    chunks = [dict(zip(CHUNK_COLUMNS, c, strict=False)) for c in record.chunk_rows(t0_ns, scale)]
    return record.to_row(t0_ns, scale, label, mode), chunks


async def drive(requests: Sequence[Request], url: str, tcfg: Any, lg: Any, *, mode: str, concurrency: int | None,
                time_scale: float = 1.0, start_ns: int | None = None, model: str | None = None,
                label: str | None = None, block_tokens: int = 512, stop: asyncio.Event | None = None,
                on_row: RowSink | None = None, predecessors: Mapping[int, int] | None = None) -> HttpLoad:
    """Offer `requests` to `url` (times in run-clock seconds, `time_scale` times the wall clock).

    `model`: the model to name (else `target.model`, else the first the endpoint lists); `label`:
    the deployment name of the rows (else `target.name`, else `url:<model>`). In url mode the time
    scale is the one the target announces (a scaled `harness-serve`), unless `target.time_scale`
    says otherwise. `predecessors`: a saturation run's turn order (`run_load`)."""
    check_target(tcfg)
    headers = auth_headers(tcfg.get("api_key"), dict(tcfg.get("headers") or {}))
    scale_source = "server.time_scale" if mode == "live" else "default"
    clock = MonotonicClock()
    prompts = shared_builder(block_tokens, int(tcfg.token_id_min), int(tcfg.token_id_max))
    connector = aiohttp.TCPConnector(limit=int(tcfg.max_connections), force_close=not tcfg.get("keep_alive", True))
    async with aiohttp.ClientSession(connector=connector) as session:
        if mode != "live":
            time_scale, scale_source = await detect_time_scale(session, url, tcfg.get("time_scale"), headers)
        if tcfg.model:
            model = str(tcfg.model)
        elif model is None:
            try:
                model = await discover_model(session, url, headers=headers)
            except (TimeoutError, aiohttp.ClientError, ValueError, KeyError) as err:
                raise InputError(f"target.url={url}: cannot list models ({type(err).__name__}: {err}); "
                                 f"is the server up? set target.model to skip the lookup") from err
        label = label or str(tcfg.name or f"url:{model}")
        target = OpenAIHttpTarget(session, url, model=model, clock=clock, prompts=prompts, api=str(tcfg.api),
                                  stream=bool(tcfg.stream), ignore_eos=bool(tcfg.ignore_eos),
                                  timeout_s=float(tcfg.timeout_s), api_key=tcfg.get("api_key"),
                                  headers=dict(tcfg.get("headers") or {}),
                                  extra_body=plain_container(tcfg.get("extra_body")))
        t0 = clock.now_ns() if start_ns is None else start_ns

        def done(record: RequestRecord) -> None:
            if on_row is not None and not record.warmup:
                on_row(*_rows(record, t0, time_scale, label, mode))

        result = await run_load(requests, target, clock=clock, time_scale=time_scale, concurrency=concurrency,
                                max_duration_s=lg.max_duration_s, warmup_s=float(lg.warmup_s),
                                progress=bool(lg.progress), start_ns=t0, stop=stop, on_done=done,
                                max_concurrency=lg.get("max_concurrency"), status_every_s=lg.get("status_every_s"),
                                predecessors=predecessors)
    return HttpLoad(result, model, label, mode, scale_source)


def client_rows(load: HttpLoad) -> tuple[list[dict], pd.DataFrame, pd.DataFrame | None]:
    """The measured requests' rows, their chunks (chunks.parquet) and the warm-up rows (or None)."""
    result = load.result
    t0, scale = result.t0_ns, result.time_scale
    rows, chunks, warm = [], [], []
    for record in result.records:
        row, chunk_rows = _rows(record, t0, scale, load.label, load.mode)
        if record.warmup:
            warm.append(row)
        else:
            rows.append(row)
            chunks.extend(chunk_rows)
    return rows, chunks_frame(chunks), requests_frame(warm) if warm else None
