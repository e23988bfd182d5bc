"""Structured-config schemas, stored in Hydra's ConfigStore as `base_<name>` in each group.

Each YAML option lists its schema first in its defaults list, so an unknown key or a wrong type
fails at compose time with the key's path. Each part of the harness owns the schemas of its own
groups (`<package>/schema.py` with a `register(cs)` function); this module only calls them.
Polymorphic nodes (anything with a `_target_`) are typed `Any` here and checked by their
constructors, which name the field and the valid range.
"""

from __future__ import annotations

import importlib
import math
from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore

from harness.config.deployment import CacheConfig, FaultsConfig, RebalancerConfig
from harness.errors import InputError, choices

# Parts that own config groups; each module defines register(cs: ConfigStore) -> None.
_PARTS = (
    "harness.workload.schema",
    "harness.costmodel.schema",
    "harness.planner.schema",
    "harness.config.deployment",
    "harness.analysis.schema",
    "harness.profiling.schema",
    "harness.engine.schema",
)


@dataclass
class CapacitySearchConfig:
    """`loadgen.rate_rps=max`: open-loop runs bisected to the highest stable rate (harness/runs/capacity.py)."""

    tolerance: float = 0.02  # relative width of the final bracket (hi / lo - 1)
    max_runs: int = 20  # open-loop probes at most
    min_goodput: float = 0.99  # stable: completions at least this share of the arrivals in the judged window
    alpha: float = 0.01  # stable: no increasing trend of the requests in the system at this significance
    # each probe offers at least this many requests where the workload is generated (a trace offers its own
    # rows): near capacity the queue relaxes slowly, and a short run reads a rate below it as unstable
    min_requests: int = 20000


@dataclass
class LoadgenConfig:
    """How requests are offered: rate (open loop) or concurrency (closed loop)."""

    # None: the workload's own rate; inf: saturate (closed loop); "max": a capacity search (harness/runs/capacity.py)
    rate_rps: Any = None
    capacity_search: CapacitySearchConfig = field(default_factory=CapacitySearchConfig)
    concurrency: int | None = None  # closed loop: this many requests in flight, arrivals ignored
    saturation_in_flight: int | None = None  # in flight when rate_rps is inf; None: sized from the planner
    saturation_headroom: float = 2.0  # x Little's-law in-flight count at the planner's Lambda_max
    max_duration_s: float | None = None  # stop offering new requests after this much run time
    progress: bool = True
    # Live/url only (the load generator over HTTP; see harness/loadgen/engine.py):
    warmup_s: float = 0.0  # requests scheduled in the first warmup_s (run clock) are sent but not measured
    max_lateness_ms: float = 10.0  # P99 send lateness (wall ms) above this marks the run invalid
    min_rate_fraction: float = 0.95  # achieved / target send rate below this marks the run invalid
    max_loop_lag_ms: float = 20.0  # P99 event-loop lag (wall ms) above this marks the run invalid
    # Open loop with a cap (vLLM's --max-concurrency): at most this many in flight; a request due
    # while the cap is reached waits in the client (its queue_s is reported). null: no cap.
    max_concurrency: int | None = None
    ramp_up_s: float | None = None  # linear ramp: the arrival rate grows from ramp_up_start_fraction x rate
    ramp_up_start_fraction: float = 0.0  # to the full rate over the first ramp_up_s run-clock seconds
    ramp_up_strategy: str = (
        "linear"  # linear | exponential (vLLM's --ramp-up-strategy names; exponential needs a start > 0)
    )
    status_every_s: float = 10.0  # wall seconds between one-line status reports on stderr (0: none)


@dataclass
class TargetConfig:
    url: str | None = None  # mode=url: any OpenAI-compatible endpoint
    model: str | None = None  # null: the first model the endpoint lists at /v1/models
    timeout_s: float = 600.0
    api: str = "completions"  # completions (token-id prompts) | chat (text prompts)
    name: str | None = None  # deployment label of a url run; null: url:<model>
    stream: bool = True  # stream responses (TTFT needs it)
    ignore_eos: bool = True  # send ignore_eos so max_tokens pins the output length
    token_id_min: int = 1000  # prompt token ids are drawn from [token_id_min, token_id_max)
    token_id_max: int = 30000  # (clear of special tokens in common vocabularies)
    max_connections: int = 0  # HTTP connection pool size; 0: unlimited
    # Reuse connections between requests. false: a new connection per request, for servers that close
    # one after a streamed response without saying so (llama-server): reusing it races their close.
    keep_alive: bool = True
    # Emulated seconds per wall second of the target; null: what the server announces
    # (harness-serve's X-Harness-Time-Scale header, /health, /v1/models), else 1 (real time).
    time_scale: float | None = None
    api_key: str | None = None  # sent as `Authorization: Bearer <api_key>`
    headers: Any = None  # {Name: value}; extra HTTP headers on every request: {Name: value}
    extra_body: Any = None  # {field: value}; extra JSON fields merged into every request body


@dataclass
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000  # 0: a free port (printed as `listening on http://HOST:PORT`)
    time_scale: float = 1.0
    model_name: str | None = None  # served model id; null: model.name
    max_model_len: int = 262144  # [assumed] context limit: prompt + max_tokens beyond it is a 400
    default_max_tokens: int = 16  # max_tokens when a request gives none (the OpenAI completions default)
    # Tokens per SSE chunk after the first (vLLM's --stream-interval); null: round(time_scale), at
    # least 1, so the chunk rate per wall second is what real time would produce.
    stream_interval_tokens: int | None = None
    max_body_bytes: int = 33554432  # request bodies beyond this get a 413
    max_lag_ms: float = 50.0  # live runs: P99 emulator timer lag (wall ms) above this marks the run invalid
    # How text prompts are counted (token-id prompts are taken as sent): tokens per whitespace word
    # ([assumed] 1.0; ~1.3 matches BPE/WordPiece vocabularies on English prose), or a local
    # tokenizer.json (needs the `tokenizers` package; overrides tokens_per_word).
    tokens_per_word: float = 1.0
    tokenizer_file: str | None = None


@dataclass
class RecordingConfig:
    """Records stream to Parquet parts as requests end; a kill loses at most one flush interval."""

    flush_s: float = 1.0  # write buffered records at least this often (wall seconds)
    flush_every: int = 5000  # ... and whenever this many are buffered


@dataclass
class RootConfig:
    mode: str = "sim"  # sim | live | url | testbed
    out_dir: str = "."
    loadgen: LoadgenConfig = field(default_factory=LoadgenConfig)
    target: TargetConfig = field(default_factory=TargetConfig)
    server: ServerConfig = field(default_factory=ServerConfig)
    recording: RecordingConfig = field(default_factory=RecordingConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    rebalancer: RebalancerConfig = field(default_factory=RebalancerConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    # Group nodes: validated by their own schemas.
    workload: Any = None
    model: Any = None
    deployment: Any = None
    link: Any = None
    planner: Any = None
    analysis: Any = None
    experiment: Any = None
    testbed: Any = None  # mode=testbed: conf/testbed/, checked by harness/testbed/settings.py
    engine: Any = None  # conf/engine/ (validate_engine: engine=<llama_server|vllm>), else null


# Schemas only one primary config uses: stored only for it (each costs ~10 ms of every other command's start).
_ONLY_FOR = {"harness.profiling.schema": "profile"}
_registered: set[str] = set()


def register_configs(config_name: str | None = None) -> None:
    """Store every schema once (idempotent; safe to call from tests and entry points). With the name
    of the primary config a command composes, the schemas only another primary config uses are left
    out (a later call stores them)."""
    parts = [part for part in _PARTS if config_name is None or _ONLY_FOR.get(part, config_name) == config_name]
    if not set(parts) - _registered:
        return
    cs = ConfigStore.instance()
    if not _registered:
        cs.store(name="base_config", node=RootConfig)
        from omegaconf import OmegaConf

        from harness.job_dirs import job_subdir
        from harness.loadgen.settings import run_label
        from harness.ray_local import local_only
        from harness.resources import help_config_groups

        OmegaConf.register_new_resolver("run_label", run_label, replace=True)  # conf/config.yaml hydra.run.dir
        OmegaConf.register_new_resolver("harness_config_groups", help_config_groups, replace=True)  # --help pages
        OmegaConf.register_new_resolver("job_subdir", job_subdir, replace=True)  # hydra.sweep.subdir
        OmegaConf.register_new_resolver("ray_local_only", local_only, replace=True)  # hydra/launcher/ray_cluster
    for part in parts:
        if part not in _registered:
            importlib.import_module(part).register(cs)
            _registered.add(part)


# -- value ranges: checked once, when a command starts (harness.hydra_entry), before anything runs --------
# The schemas above fix types; these fix ranges. (key, lowest, highest, how the ends count, null allowed,
# what null means). "(" / ")" exclude an end, "[" / "]" include it; an open upper end of inf excludes inf
# unless "]" is given. Keys absent from a config (a polymorphic group) are skipped.

@dataclass(frozen=True)
class Range:
    key: str
    low: float
    high: float = math.inf
    ends: str = "[)"
    nullable: bool = False
    null: str = ""  # what null means, for the message
    integer: bool = False
    each: bool = False  # the key holds a list: each item in the range
    words: tuple[str, ...] = ()  # text values also allowed (`max`), with what each means in `null`'s style

    def text(self) -> str:
        if self.low == 0 and self.high == math.inf and self.ends[0] == "(":
            rng = "> 0"
        elif self.high == math.inf:
            rng = f"{'>=' if self.ends[0] == '[' else '>'} {self.low:g}"
        else:
            rng = f"in {self.ends[0]}{self.low:g}, {self.high:g}{self.ends[1]}"
        inf = not self.integer and self.ends[1] == "]" and self.high == math.inf
        kind = "an integer" if self.integer else ("a number" if inf else "a finite number")
        extra = [e for e in ("inf allowed" if inf else "", f"null: {self.null}" if self.nullable else "",
                             *self.words) if e]
        text = f"{kind} {rng}" + (f" ({'; '.join(extra)})" if extra else "")
        return f"a list, each item {text}" if self.each else text

    def ok(self, value: Any) -> bool:
        if self.each:
            if value is None or isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                return False
            return all(Range(self.key, self.low, self.high, self.ends, integer=self.integer).ok(v) for v in value)
        if value is None:
            return self.nullable
        if isinstance(value, str) and any(value.strip().lower() == w.split(":")[0] for w in self.words):
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            return False
        if self.integer and not (isinstance(value, int) or float(value).is_integer()):
            return False
        if math.isinf(value) and not (value > 0 and self.high == math.inf and self.ends[1] == "]"):
            return False
        above = value >= self.low if self.ends[0] == "[" else value > self.low
        below = value <= self.high if self.ends[1] == "]" else value < self.high
        return above and below


RANGES: tuple[Range, ...] = (
    Range("analysis.timeseries.bin_s", 0, ends="()"),
    Range("analysis.warmup_fraction", 0, 1, "[)"),
    Range("analysis.slo.ttft_s", 0, ends="(]"),
    Range("analysis.slo.tpot_s", 0, ends="(]"),
    Range("analysis.percentiles", 0, 100, "(]", each=True),  # used only when the run is written: checked here
    Range("workload.num_requests", 1, integer=True, nullable=True, null="every request of a trace or phased workload"),
    Range("workload.seed", 0, integer=True, nullable=True, null="unseeded"),
    Range("workload.block_tokens", 1, integer=True),
    Range("loadgen.rate_rps", 0, ends="(]", nullable=True, null="the workload's own rate",
          words=("max: a capacity search",)),
    Range("loadgen.concurrency", 1, integer=True, nullable=True, null="open loop"),
    Range("loadgen.saturation_in_flight", 1, integer=True, nullable=True, null="sized from the planner"),
    Range("loadgen.saturation_headroom", 1),
    Range("loadgen.max_duration_s", 0, ends="(]", nullable=True, null="no limit"),
    Range("loadgen.warmup_s", 0),
    Range("loadgen.max_lateness_ms", 0, ends="(]"),
    Range("loadgen.min_rate_fraction", 0, 1, "[]"),
    Range("loadgen.max_loop_lag_ms", 0, ends="(]"),
    Range("loadgen.max_concurrency", 1, integer=True, nullable=True, null="no cap"),
    Range("loadgen.ramp_up_s", 0, ends="()", nullable=True, null="no ramp"),
    Range("loadgen.ramp_up_start_fraction", 0, 1, "[]"),
    Range("loadgen.status_every_s", 0),
    Range("target.time_scale", 0, ends="()", nullable=True, null="detected"),
    Range("target.timeout_s", 0, ends="(]"),
    Range("target.max_connections", 0, integer=True),
    Range("target.token_id_min", 0, integer=True),
    Range("server.port", 0, 65535, "[]", integer=True),
    Range("server.time_scale", 0, ends="()"),
    Range("server.max_model_len", 2, integer=True),
    Range("server.default_max_tokens", 1, integer=True),
    Range("server.stream_interval_tokens", 1, integer=True, nullable=True, null="round(time_scale)"),
    Range("server.max_body_bytes", 1024, integer=True),
    Range("server.max_lag_ms", 0, ends="(]"),
    Range("server.tokens_per_word", 0, ends="()"),
    Range("recording.flush_s", 0, ends="()"),
    Range("recording.flush_every", 1, integer=True),
    Range("cache.capacity_tokens", 0, integer=True, nullable=True, null="unlimited"),
    Range("rebalancer.period_s", 0, ends="()"),
    Range("rebalancer.window_s", 0, ends="()"),
    Range("rebalancer.switch_delay_s", 0),
    Range("rebalancer.min_gain", 0),
    Range("rebalancer.min_samples", 1, integer=True),
    Range("planner.tie_rel_tol", 0),
)


_ABSENT = object()


def _added_settings(node: Any, path: str) -> None:
    """A key in a node typed by a schema dataclass that the schema lacks: `+loadgen.rate_rpz=5` adds one
    (Hydra's `+` adds to any node), and nothing would ever read it."""
    import dataclasses
    import difflib

    from omegaconf import DictConfig, OmegaConf

    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    if path and schema is not None and dataclasses.is_dataclass(schema):
        known = [f.name for f in dataclasses.fields(schema)]
        for key in map(str, node):
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean {path}.{near[0]}? " if near else ""
                raise InputError(f"{path}.{key} is not a setting of {path} ({hint}valid: {choices(known)})")
    for key in map(str, node):
        if path or key != "hydra":
            _added_settings(node._get_node(key), f"{path}.{key}" if path else key)


def validate_config(cfg: Any) -> None:
    """Refuse a value out of its range with one line naming the key and the valid range, and a setting that
    no schema has (InputError)."""
    from omegaconf import ListConfig, OmegaConf

    _added_settings(cfg, "")

    for rule in RANGES:
        try:
            value = OmegaConf.select(cfg, rule.key, default=_ABSENT, throw_on_missing=False)
        except Exception:
            continue
        if value is _ABSENT:
            continue
        if not rule.ok(value):
            if isinstance(value, ListConfig):
                value = OmegaConf.to_container(value)
            raise InputError(f"{rule.key} must be {rule.text()}, got {value!r}")
    low, high = OmegaConf.select(cfg, "target.token_id_min"), OmegaConf.select(cfg, "target.token_id_max")
    if isinstance(low, int) and isinstance(high, int) and high <= low:
        raise InputError(f"target.token_id_max must be > target.token_id_min={low}, got {high}")
