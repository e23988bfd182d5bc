"""Cost model: model specs, hardware specs and per-instance profiles (prefill, KV bytes, decode, price).

`build_profile(model_cfg, hardware_cfg, gpus_per_instance)` is the one entry point other parts use.
"""

from __future__ import annotations

from harness.costmodel.build import build_profile
from harness.costmodel.hardware import HardwareSpec
from harness.costmodel.profile import InstanceProfile
from harness.costmodel.spec import ModelSpec

__all__ = ["HardwareSpec", "InstanceProfile", "ModelSpec", "build_profile"]
