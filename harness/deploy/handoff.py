"""How a prefilled KV cache is handed from a prefill instance to a decode instance.

Two ways to move it (`deployment.kv_handoff`):

- `layerwise` (the default): the KV streams out layer by layer while the prefill computes (the
  transfer's bytes are produced over the prefill's duration), as engines with a KV-transfer connector do.
- `store_and_forward`: the KV leaves only once the prefill has ended and the KV has been saved, as
  llama-server's slot save (a file) -> a copy -> slot restore does.

And three per-request costs, each `base + per_token x tokens` of the request's prompt (all zero by default):

- `kv_save_s`: saving the prefilled KV on the prefill instance. llama-server runs a slot save on its main
  loop, so the instance computes nothing else meanwhile: the save extends the instance's pass.
- `kv_restore_s`: restoring it on the decode instance before the request's first token. The request
  holds its decode slot (and KV memory) meanwhile; the other sequences of the batch step on (llama-server
  restores on its main loop too, but a restore of a few ms beside steps of several ms is not modelled as
  a stall of the batch).
- `kv_bytes_overhead`: bytes on the link beyond the model's KV (a saved slot file's header and per-token
  bookkeeping: 192 + 16 x L bytes for llama-server's).

A deployment whose hand-off is all defaults has no `Handoff` (None): it runs exactly as before and its
records carry no hand-off columns. One with a `Handoff` records `kv_save_s`, `kv_transfer_s` (the KV's
time on the link, from its first byte's start to its last byte's arrival, waiting in a FIFO included)
and `kv_restore_s` per request.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harness.errors import InputError

KV_HANDOFFS = ("layerwise", "store_and_forward")


def _cost(key: str, node: Any, fields: tuple[str, str]) -> tuple[float, float]:
    """A `{a: x, b: y}` cost node: both numbers finite and >= 0 (missing ones are 0)."""
    if node is None:
        return 0.0, 0.0
    if not isinstance(node, Mapping) and not hasattr(node, "get"):
        raise InputError(f"deployment.{key} must be a mapping {{{fields[0]}: ..., {fields[1]}: ...}}, got {node!r}")
    unknown = sorted(set(node) - set(fields))
    if unknown:
        raise InputError(f"deployment.{key}: unknown key {unknown[0]!r}; valid keys: {', '.join(fields)}")
    out = []
    for name in fields:
        value = node.get(name, 0.0)
        try:
            x = float(value)
        except (TypeError, ValueError):
            x = float("nan")
        if not (x >= 0.0 and x != float("inf")):
            raise InputError(f"deployment.{key}.{name} must be a finite number >= 0, got {value!r}")
        out.append(x)
    return out[0], out[1]


@dataclass(frozen=True)
class Handoff:
    """The hand-off's mechanism and costs (see the module's docstring)."""

    store_and_forward: bool = False
    save_base_s: float = 0.0
    save_per_token_s: float = 0.0
    restore_base_s: float = 0.0
    restore_per_token_s: float = 0.0
    fixed_bytes: float = 0.0
    per_token_bytes: float = 0.0

    def save_s(self, tokens: int) -> float:
        return self.save_base_s + self.save_per_token_s * tokens

    def restore_s(self, tokens: int) -> float:
        return self.restore_base_s + self.restore_per_token_s * tokens

    def extra_bytes(self, tokens: int) -> float:
        return self.fixed_bytes + self.per_token_bytes * tokens

    @classmethod
    def from_config(cls, dep: Any) -> Handoff | None:
        """From a deployment config node; None when every hand-off option is at its default."""
        kind = dep.get("kv_handoff", "layerwise")
        if kind not in KV_HANDOFFS:
            raise InputError(f"deployment.kv_handoff must be one of {', '.join(KV_HANDOFFS)}, got {kind!r}")
        save = _cost("kv_save_s", dep.get("kv_save_s"), ("base_s", "per_token_s"))
        restore = _cost("kv_restore_s", dep.get("kv_restore_s"), ("base_s", "per_token_s"))
        extra = _cost("kv_bytes_overhead", dep.get("kv_bytes_overhead"), ("fixed_bytes", "per_token_bytes"))
        handoff = cls(kind == "store_and_forward", *save, *restore, *extra)
        return None if handoff == cls() else handoff
