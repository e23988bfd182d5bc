"""Small readers of the run config for the HTTP load generator (keys added after the schema's first
version are read with a default, so older configs and hand-built DictConfigs keep working)."""

from __future__ import annotations

import re
from typing import Any

from omegaconf import DictConfig, OmegaConf


def lg_get(cfg: DictConfig, key: str, default: Any = None) -> Any:
    """`cfg.loadgen.<key>`, or `default` when the key is absent or null."""
    value = cfg.loadgen.get(key) if "loadgen" in cfg else None
    return default if value is None else value


def plain_container(node: Any) -> Any:
    """A DictConfig/ListConfig as plain Python containers (None stays None)."""
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def burstiness(cfg: DictConfig) -> float:
    """vLLM's `burstiness` (the Gamma shape of inter-arrival gaps: 1 Poisson, 1/cv^2 for a Gamma with
    coefficient of variation cv), read from the workload's arrival process; NaN for traces and others."""
    arrivals = cfg.workload.get("arrivals") if "workload" in cfg and cfg.workload is not None else None
    target = str(arrivals.get("_target_", "")) if arrivals is not None else ""
    if target.endswith(".Poisson"):
        return 1.0
    if target.endswith(".Gamma") and arrivals is not None and arrivals.get("cv"):
        return 1.0 / float(arrivals.cv) ** 2
    return float("nan")


def run_label(deployment: str, mode: str | None = None, url: str | None = None, name: str | None = None) -> str:
    """The run directory's label: the deployment's name, or for a url run (target.url set, mode not
    live) the target's: target.name, else `url_<host>_<port>` (characters safe in a path)."""
    if not url or mode == "live":
        return str(deployment)
    if name:
        label = str(name)
    else:
        from urllib.parse import urlsplit

        parts = urlsplit(str(url) if "://" in str(url) else f"http://{url}")
        label = "url_" + "_".join(p for p in (parts.hostname, str(parts.port) if parts.port else "") if p)
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "url"
