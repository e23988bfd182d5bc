"""Does the probe design cover the configuration being predicted? The calibration fits a decode step per
batch size and a prefill curve between the probed lengths; a deployment with more sequences than the probes
ran together, or a workload with prompts outside the probed lengths, would be predicted by extrapolation
(the miss issue-level validation found at 6 slots with probes for 1-4). Refused before the engine starts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from harness.errors import InputError, require


def check_coverage(cal: Any, *, slots: int, input_tokens: Sequence[int]) -> None:
    """InputError (one line naming the key) unless `cal.batches` reach `slots` without passing them and
    `cal.lengths` span the workload's prompt lengths `input_tokens`."""
    batches = sorted({int(b) for b in cal.batches})
    require(bool(batches), "experiment.calibration.batches is empty: probe decode batches 1.." + str(slots))
    require(batches[-1] >= slots,
            f"experiment.calibration.batches={batches} reach {batches[-1]} streams together but deployment.slots="
            f"{slots}: the decode step of {batches[-1] + 1}..{slots} streams would be extrapolated; probe batches up "
            f"to {slots}")
    require(batches[-1] <= slots,
            f"experiment.calibration.batches={batches} run {batches[-1]} streams together but deployment.slots="
            f"{slots}: the ones beyond the slots would queue, not decode together; probe batches up to {slots}")
    lengths = sorted({int(n) for n in cal.lengths})
    if not input_tokens:
        return
    lo, hi = min(input_tokens), max(input_tokens)
    require(bool(lengths) and lengths[0] <= lo and lengths[-1] >= hi,
            f"experiment.calibration.lengths span {lengths[0] if lengths else '-'}..{lengths[-1] if lengths else '-'}"
            f" tokens but the workload's prompts span {lo}..{hi}: the prefill curve would be extrapolated; probe "
            f"lengths from {lo} or less to {hi} or more")


def check_probe_design(config: Any) -> None:
    """`check_coverage` of validate_engine's config: its probes against its slots and its workload's prompts
    (generated from `workload.*` with its seed, shared prefixes included)."""
    from harness.workload import instantiate_workload

    requests = instantiate_workload(config.workload).generate()
    check_coverage(config.experiment.calibration, slots=int(config.deployment.slots),
                   input_tokens=[int(r.input_tokens) for r in requests])


def check_engine(config: Any) -> None:
    """validate_engine starts only the project's llama-server; another engine's preset needs that engine's URL."""
    name = str((config.get("engine") or {}).get("name", "llama_server"))
    if name != "llama_server" and not config.target.url:
        raise InputError(f"engine={name}: validate_engine starts only llama-server (make engine); start {name} "
                         f"yourself and set target.url=http://127.0.0.1:PORT")
