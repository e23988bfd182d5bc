"""Schema of the `analysis` config group: SLOs, time-series binning, steady window, figures."""

from __future__ import annotations

from dataclasses import dataclass, field

from hydra.core.config_store import ConfigStore


@dataclass
class SloConfig:
    """Per-request service-level objectives; a request meets the SLO when it meets both."""

    ttft_s: float = 10.0  # [assumed] the paper states no TTFT SLO
    tpot_s: float = 0.025  # [P] 40 tokens/s decode SLO -> 25 ms per output token


@dataclass
class TimeseriesConfig:
    bin_s: float = 1.0  # width of one time-series row (egress, queues, utilisation)


@dataclass
class AnalysisConfig:
    slo: SloConfig = field(default_factory=SloConfig)
    timeseries: TimeseriesConfig = field(default_factory=TimeseriesConfig)
    # Share of the arrival span excluded at the start of steady-state metrics (pipeline fill).
    warmup_fraction: float = 0.2
    figures: bool = True  # write PNG figures with the report and next to each run
    # Percentiles in summary.json's vLLM keys (p<q>_ttft_ms, p99.9_itl_ms, ...), vLLM's --metric-percentiles.
    percentiles: list[float] = field(default_factory=lambda: [50.0, 90.0, 99.0])


def register(cs: ConfigStore) -> None:
    cs.store(group="analysis", name="base_analysis", node=AnalysisConfig)
