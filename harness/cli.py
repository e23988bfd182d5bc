"""`python -m harness` / `harness`: one run (one deployment, one workload, one offered load).

With `-m` it is a suite: Hydra sweeps the parameters the experiment sets, each run writes its own
directory, and the report callback summarises the sweep at the end (`report.parquet`, figures,
a printed table). See docs/reference/cli.md and docs/guides/configs-and-sweeps.md.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

from harness.hydra_entry import hydra_entry
from harness.runs import MODES, run, run_dir

__all__ = ["MODES", "main", "run"]

if TYPE_CHECKING:
    from omegaconf import DictConfig


def with_testbed_preset(argv: list[str]) -> list[str]:
    """`mode=testbed` without an experiment selects `experiment=testbed_scale` (the scaled deployments, model,
    workload and link the emulator predicts the testbed with); an explicit `experiment=...` wins."""
    named = {arg.split("=", 1)[0].lstrip("+~") for arg in argv if "=" in arg}
    if "mode=testbed" in argv and "experiment" not in named:
        return [*argv, "experiment=testbed_scale"]
    return argv


def main() -> None:
    sys.argv[1:] = with_testbed_preset(sys.argv[1:])
    _main()


@hydra_entry(config_name="config")
def _main(cfg: DictConfig) -> None:
    summary = run(cfg)
    keys = ("deployment", "offered_rps", "completed", "failed", "throughput_rps", "ttft_mean_s", "ttft_p90_s",
            "tpot_mean_s", "egress_gbps_mean", "offload_fraction")
    line = "  ".join(f"{k}={summary[k]:.4g}" if isinstance(summary.get(k), float) else f"{k}={summary.get(k)}"
                     for k in keys)
    print(line)
    print(f"results: {run_dir(cfg)}")
    if summary.get("interrupted"):
        raise SystemExit(130)


if __name__ == "__main__":
    main()
