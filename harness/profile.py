"""`harness-profile target.url=... [profile.*]` / `python -m harness.profile`: calibrate a profile from
any OpenAI-compatible endpoint by a designed experiment, and write it as a model config.

The design (conf/profile.yaml, `profile.*`): every prompt is fresh random token ids, so nothing is
cached unless a probe means it to be; fitted and held-out probes run interleaved in a seeded random
order, so a machine that drifts moves both alike.
  (d) slots: from /props or /slots when the server has them; probed (concurrency at which TTFT jumps
      by a queueing step) when `profile.slot_probe.probe`;
  (a) cold prefill vs input length, one request in flight, max_tokens=1: the server's
      timings.prompt_ms when it sends them (else client TTFT); fitted as `kind: polynomial`
      (c0 + c1*l + c2*l^2); held-out lengths are never fitted;
  (b) prefill on a cached prefix (a prompt, then that prefix + new tokens): compared with the fitted
      profile's cached-prefill prediction, not fitted;
  (c) decode step vs batch and context: N streams started together, the step measured while all N
      decode; fitted as `profile.decode.kind`: `per_batch` (default; the form validate_engine
      uses: a step per batch size + per_token_s*context tokens, sizes never fitted interpolated
      between fitted neighbours) or `linear` (base_s + per_seq_s*batch + per_token_s*context);
      held-out batch sizes are never fitted, only predicted.
Writes to the run dir: probes.parquet (one row per request sent), profile.json (fits, residuals,
held-out checks), and the model config `<profile.out_dir or run dir>/model/<profile.name>.yaml`.
Modules: harness/profiling/design.py (the settings, checked before anything is sent), experiment.py (the
probes sent), analysis.py (fits, checks, documents).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from harness.errors import require
from harness.hydra_entry import hydra_entry
from harness.profiling.analysis import analyse, check_loads, profile_documents, table
from harness.profiling.design import check_design
from harness.profiling.experiment import CLOCKS, Experiment, decode_batches, measure, server_info
from harness.profiling.writer import write_model_config

__all__ = [
    "CLOCKS",
    "Experiment",
    "analyse",
    "check_loads",
    "decode_batches",
    "main",
    "profile_documents",
    "profile_endpoint",
    "server_info",
]


def profile_endpoint(cfg: DictConfig, out_dir: Path) -> dict[str, Any]:
    require(bool(cfg.target.url), "harness-profile needs target.url=http://HOST:PORT (an OpenAI-compatible endpoint)")
    check_design(cfg)  # every profile.* setting, before the server is asked anything
    rows, info, slots, probed = asyncio.run(measure(cfg))
    out_dir.mkdir(parents=True, exist_ok=True)
    rows.to_parquet(out_dir / "probes.parquet", index=False)
    document, model_doc, header = profile_documents(cfg, rows, info, slots, probed)
    target_dir = Path(cfg.profile.out_dir) if cfg.profile.out_dir else out_dir
    path = write_model_config(model_doc, target_dir, header)
    prof = check_loads(path, str(cfg.profile.hardware))
    document["model_config"] = str(path)
    document["loads_as"] = repr(prof)
    (out_dir / "profile.json").write_text(json.dumps(document, indent=2, default=str))
    print(table(document))
    print(f"wrote {path} (loads as {prof!r})\nuse it: python -m harness --config-dir {path.parent.parent.resolve()} "
          f"model={model_doc['name']} ...")
    if not all(c["pass"] for c in document["holdout"]):
        print(f"warning: a held-out check is off by more than {100 * cfg.profile.tolerance:g}% (see above)")
    return document


@hydra_entry(config_name="profile")
def main(cfg: DictConfig) -> dict[str, Any]:
    return profile_endpoint(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
