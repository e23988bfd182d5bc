"""`/metrics` in the Prometheus text format (0.0.4): counters and histograms fed by request
records, gauges read from the deployment at scrape time. Latencies are emulated seconds (the
deployment's clock), as in the run's Parquet files. No client library: the format is a few lines.

Beside the `harness_*` names, the vLLM names for what the emulator has (`vllm:num_requests_running`,
`vllm:time_to_first_token_seconds`, ...; label `model_name`), so dashboards and autoscalers built
for vLLM read the emulator unchanged.
"""

from __future__ import annotations

import bisect
from collections import Counter, defaultdict
from typing import Any

TTFT_BUCKETS_S = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0)
TPOT_BUCKETS_S = (0.005, 0.01, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.25, 0.5, 1.0)
E2E_BUCKETS_S = (0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0)


class Histogram:
    __slots__ = ("bounds", "counts", "total", "n")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        if value != value:  # NaN: not observed
            return
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value
        self.n += 1

    def lines(self, name: str, labels: str = "") -> list[str]:
        """Exposition lines; `labels` is extra `key="value"` pairs (comma-separated) on every sample."""
        out, cumulative = [], 0
        pre = f"{labels}," if labels else ""
        for bound, count in zip(self.bounds, self.counts, strict=False):
            cumulative += count
            out.append(f'{name}_bucket{{{pre}le="{bound:g}"}} {cumulative}')
        out.append(f'{name}_bucket{{{pre}le="+Inf"}} {self.n}')
        tail = f"{{{labels}}}" if labels else ""
        out.append(f"{name}_sum{tail} {self.total!r}")
        out.append(f"{name}_count{tail} {self.n}")
        return out


class ServerMetrics:
    """What the server has seen since it started."""

    def __init__(self, model_name: str = "") -> None:
        self.model_name = model_name  # the `model_name` label of the vllm:* metrics
        self.received = 0
        self.finished: Counter[tuple[str, str]] = Counter()  # (status, route): completed, failed, abandoned
        self.refused: Counter[int] = Counter()  # HTTP status -> requests answered before the deployment saw them
        self.http: Counter[tuple[str, int]] = Counter()  # (endpoint, status)
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.cache_hit_tokens = 0
        self.cache_hit_requests = 0
        self.cache_query_tokens = 0  # prompt tokens of ended requests (vllm:prefix_cache_queries)
        self.kv_bytes: defaultdict[str, float] = defaultdict(float)  # route -> KV bytes moved to decode
        self.disconnects = 0  # clients that went away mid-response (stream or not)
        self.disconnects_mid_body = 0  # clients that hung up while their request body was arriving
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.tpot = Histogram(TPOT_BUCKETS_S)
        self.e2e = Histogram(E2E_BUCKETS_S)

    def on_submit(self, request: Any) -> None:
        self.received += 1
        self.prompt_tokens += request.input_tokens

    def on_refused(self, status: int) -> None:
        self.refused[status] += 1

    def on_record(self, record: dict[str, Any]) -> None:
        route = record.get("route") or "none"
        ok = record.get("error") is None
        self.finished["completed" if ok else "abandoned" if record.get("abandoned") else "failed", route] += 1
        cached = int(record.get("cached_tokens") or 0)
        self.cache_query_tokens += int(record.get("input_tokens") or 0)
        self.cache_hit_tokens += cached
        self.cache_hit_requests += cached > 0
        self.kv_bytes[route] += float(record.get("kv_bytes_sent") or 0.0)
        if ok:
            self.generation_tokens += int(record["output_tokens"])
            self.ttft.observe(record["ttft_s"])
            self.tpot.observe(record["tpot_s"])
            self.e2e.observe(record["e2e_s"])

    def render(self, engine: Any) -> str:
        """The exposition text; `engine` supplies the deployment and clock gauges."""
        dep, clock = engine.deployment, engine.clock
        lines: list[str] = []

        def metric(name: str, kind: str, doc: str, samples: list[tuple[str, Any]]) -> None:
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} {kind}")
            lines.extend(f"{name}{labels} {value}" for labels, value in samples)

        metric("harness_requests_received_total", "counter", "Generation requests accepted for emulation.",
               [("", self.received)])
        metric("harness_requests_finished_total", "counter",
               "Requests that ended, by status (completed, failed, abandoned: its client left) and route.",
               [(f'{{status="{s}",route="{r}"}}', n) for (s, r), n in sorted(self.finished.items())])
        metric("harness_requests_refused_total", "counter",
               "Generation requests answered with an error status before reaching the deployment, by code.",
               [(f'{{code="{c}"}}', n) for c, n in sorted(self.refused.items())])
        metric("harness_http_responses_total", "counter", "HTTP responses by endpoint and status code.",
               [(f'{{endpoint="{e}",code="{c}"}}', n) for (e, c), n in sorted(self.http.items())])
        metric("harness_client_disconnects_total", "counter",
               "Clients that went away: mid-response (stream; also while a non-streaming request waited) or "
               "while sending the request (body).",
               [('{phase="stream"}', self.disconnects), ('{phase="body"}', self.disconnects_mid_body)])
        metric("harness_prompt_tokens_total", "counter", "Prompt tokens submitted.", [("", self.prompt_tokens)])
        metric("harness_generation_tokens_total", "counter", "Output tokens of completed requests.",
               [("", self.generation_tokens)])
        metric("harness_prefix_cache_hit_tokens_total", "counter", "Prompt tokens served from a prefix cache.",
               [("", self.cache_hit_tokens)])
        metric("harness_prefix_cache_hit_requests_total", "counter", "Requests with a prefix-cache hit.",
               [("", self.cache_hit_requests)])
        metric("harness_kv_transfer_bytes_total", "counter",
               "KV bytes moved to the decode side, by route (prfaas: across the cross-DC link).",
               [(f'{{route="{r}"}}', repr(b)) for r, b in sorted(self.kv_bytes.items())])
        link = getattr(dep, "cross_link", None)
        metric("harness_egress_bytes_total", "counter", "Bytes sent over the cross-DC link so far.",
               [("", repr(float(link.bytes_sent) if link is not None else 0.0))])
        metric("harness_requests_in_flight", "gauge", "Requests inside the deployment.",
               [("", len(dep.in_flight))])
        queue, running = [], []
        for cluster, instances in sorted(dep.prefill.items()):
            queue.append((f'{{cluster="{cluster}"}}', sum(len(p.queue) for p in instances)))
            running.append((f'{{cluster="{cluster}"}}', sum(len(p.running) for p in instances)))
        metric("harness_prefill_queue_requests", "gauge", "Requests queued for prefill, by cluster.", queue)
        metric("harness_prefill_running_requests", "gauge", "Requests in a prefill pass, by cluster.", running)
        metric("harness_decode_waiting_requests", "gauge", "Requests with KV ready, waiting for a decode slot.",
               [("", len(dep.waiting))])
        metric("harness_decode_running_requests", "gauge", "Requests in a decode batch.",
               [("", sum(d.running for d in dep.decode))])
        metric("harness_emulated_time_seconds", "gauge", "The deployment's clock.", [("", repr(clock.now()))])
        metric("harness_time_scale", "gauge", "Emulated seconds per wall second.", [("", repr(clock.time_scale))])
        metric("harness_timer_lag_max_seconds", "gauge", "Largest emulator timer lag so far (wall seconds).",
               [("", repr(clock.max_lag_s / clock.time_scale))])
        for name, hist, doc in (("harness_ttft_seconds", self.ttft, "Time to first token (emulated)."),
                                ("harness_tpot_seconds", self.tpot, "Time per output token after the first."),
                                ("harness_e2e_seconds", self.e2e, "End-to-end latency (emulated).")):
            lines.append(f"# HELP {name} {doc}")
            lines.append(f"# TYPE {name} histogram")
            lines.extend(hist.lines(name))
        lines.extend(self._vllm_lines(queue, running, dep))
        return "\n".join(lines) + "\n"

    def _vllm_lines(self, queue: list, running: list, dep: Any) -> list[str]:
        """The same quantities under vLLM's metric names (label model_name)."""
        label = f'model_name="{_escape(self.model_name)}"'
        out: list[str] = []

        def metric(name: str, kind: str, doc: str, value: Any) -> None:
            out.extend((f"# HELP {name} {doc}", f"# TYPE {name} {kind}", f"{name}{{{label}}} {value}"))

        n_running = sum(n for _, n in running) + sum(d.running for d in dep.decode)
        n_waiting = sum(n for _, n in queue) + len(dep.waiting)
        metric("vllm:num_requests_running", "gauge", "Requests in a prefill pass or a decode batch.", n_running)
        metric("vllm:num_requests_waiting", "gauge", "Requests queued for prefill or for a decode slot.", n_waiting)
        metric("vllm:prompt_tokens_total", "counter", "Prompt tokens submitted.", self.prompt_tokens)
        metric("vllm:generation_tokens_total", "counter", "Output tokens of completed requests.",
               self.generation_tokens)
        metric("vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.",
               self.cache_query_tokens)
        metric("vllm:prefix_cache_hits_total", "counter", "Prompt tokens served from the prefix cache.",
               self.cache_hit_tokens)
        ok = sum(n for (status, _), n in self.finished.items() if status == "completed")
        out.extend(("# HELP vllm:request_success_total Requests that finished (max_tokens reached).",
                    "# TYPE vllm:request_success_total counter",
                    f'vllm:request_success_total{{{label},finished_reason="length"}} {ok}'))
        for name, hist, doc in (
                ("vllm:time_to_first_token_seconds", self.ttft, "Time to first token (emulated seconds)."),
                ("vllm:time_per_output_token_seconds", self.tpot, "Time per output token after the first."),
                ("vllm:e2e_request_latency_seconds", self.e2e, "End-to-end request latency (emulated).")):
            out.extend((f"# HELP {name} {doc}", f"# TYPE {name} histogram"))
            out.extend(hist.lines(name, label))
        return out


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
