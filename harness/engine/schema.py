"""Schema of the engine presets (conf/engine/, `engine=<name>`): what a real engine takes in a request,
where its per-request times come from, and the Prometheus series that carry them."""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore

TIMINGS = ("engine", "metrics", "client")


@dataclass
class EngineRequestFields:
    """Request fields beyond the OpenAI ones that the engine understands; a field it does not take is never
    sent (an engine may reject an unknown field, or silently ignore one the harness counts on)."""

    cache_prompt: bool = False  # llama.cpp: false keeps a cold probe off the prompt cache
    timings_per_token: bool = False  # llama.cpp: server-side `timings` on every chunk
    id_slot: bool = False  # llama.cpp: run the request on that slot (pinned probes)
    ignore_eos: bool = True  # vLLM, llama.cpp: max_tokens pins the output length
    min_tokens: bool = False  # vLLM, llama.cpp: min_tokens = max_tokens pins it too


@dataclass
class EngineMetricsNames:
    """Prometheus series (summed over label sets) that move by a probe's own time when it runs alone."""

    prompt_s: str | None = None  # seconds of prompt processing, summed over requests
    decode_s: str | None = None  # seconds from first to last token, summed over requests
    requests: str | None = None  # requests counted so far (a histogram's _count): wait until it moved


@dataclass
class EngineEmulator:
    """The aggregated deployment's mechanisms that describe this engine (validate_engine sets `deployment.*`
    from these; see conf/deployment/aggregated.yaml for each key's meaning)."""

    separate_passes: bool = False
    slot_layout: bool = False
    slot_prompt_cache: bool = False
    tile_tokens: int = 0
    chunk_tokens: int = 2048
    ubatch_tokens: int = 512
    wake_after_s: float = 0.5


@dataclass
class EngineConfig:
    name: str = "openai"
    # Where a probe's own prompt time and decode step come from: engine (each response's `timings`, llama.cpp)
    # | metrics (deltas of `metrics` around a probe sent alone) | client (the load generator's stamps).
    timings: str = "client"
    request: EngineRequestFields = field(default_factory=EngineRequestFields)
    metrics: EngineMetricsNames = field(default_factory=EngineMetricsNames)
    emulator: EngineEmulator = field(default_factory=EngineEmulator)


def register(cs: ConfigStore) -> None:
    cs.store(group="engine", name="base_engine", node=EngineConfig)
