"""Plan: the chosen configuration of one deployment, its bounds, and the grid it was chosen from."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

from harness.planner.search import Grid

_GBIT = 8.0 / 1e9


def _num(x: float) -> float | None:
    """JSON-safe float: NaN and inf (a stage that does not exist or gets no traffic) become None."""
    return float(x) if x is not None and math.isfinite(x) else None


@dataclass
class Plan:
    deployment: str
    model: str
    service_time: str
    grid: Grid
    i: int  # chosen threshold index
    j: int  # chosen split index
    n_prfaas: int
    n_local: int
    threshold_applies: bool  # False: no remote cluster, or no local prefill (the threshold is moot)
    link_gbps: float | None
    price_prfaas: float  # per instance
    price_local: float
    bs_max: int
    t_decode_s: float
    mean_output_tokens: float
    notes: list[str] = field(default_factory=list)
    slo_tokens_per_s: float = 40.0
    decode_context_tokens: float | None = None  # mean context per decoding sequence (Eq. 5's step is taken there)
    decode_step: Any = field(default=None, repr=False)  # (batch, context tokens) -> s; None: constant t_decode_s
    link_efficiency: float = 1.0  # payload per byte on the wire: egress is counted on the wire, payload / this

    def decode_batch(self, rate_rps: float) -> float:
        """Mean sequences per decode instance at an offered rate (Little's law, n = a * L_out * step(n)).

        Each of the N_d instances gets rate / N_d requests/s, each holding a slot for L_out steps:
        n = a * L_out * step(n), solved by fixed-point iteration (step grows with n, so n is the
        least fixed point), capped at BS_max (beyond it requests wait for a slot instead).
        """
        a = max(float(rate_rps), 0.0) / max(self.n_decode, 1) * self.mean_output_tokens
        ctx = self.decode_context_tokens or 0.0
        n = 0.0
        for _ in range(200):
            step = self._step(max(n, 1.0), ctx)
            new = min(a * step, float(self.bs_max))
            if abs(new - n) < 1e-9:
                break
            n = new
        return n

    def _step(self, batch: float, ctx: float) -> float:
        if self.decode_step is None:
            return self.t_decode_s
        lo = int(batch)
        s_lo = self.decode_step(max(lo, 1), max(lo, 1) * ctx)
        s_hi = self.decode_step(lo + 1, (lo + 1) * ctx)
        return cast(float, s_lo + (batch - lo) * (s_hi - s_lo) if lo >= 1 else s_lo)

    def tpot_s(self, rate_rps: float) -> float:
        """Predicted mean time per output token at an offered rate: the step at the mean batch."""
        return self._step(max(self.decode_batch(rate_rps), 1.0), self.decode_context_tokens or 0.0)

    # -- the chosen point ------------------------------------------------------------------------
    @property
    def lambda_max_rps(self) -> float:
        return float(self.grid.lam[self.i, self.j])

    @property
    def offload_fraction(self) -> float:
        return float(self.grid.p[self.i])

    @property
    def threshold_tokens(self) -> float | None:
        return float(self.grid.thresholds[self.i]) if self.threshold_applies else None

    @property
    def n_prefill(self) -> int:
        return int(self.grid.n_prefill[self.j])

    @property
    def n_decode(self) -> int:
        return int(self.grid.n_decode[self.j])

    @property
    def egress_gbps(self) -> float:
        """Average PrfaaS egress at Lambda_max: Lambda * p * S_kv(l_long), in Gbit/s on the wire."""
        if self.offload_fraction <= 0:
            return 0.0
        payload = self.lambda_max_rps * self.offload_fraction * float(self.grid.s_kv_long_bytes[self.i]) * _GBIT
        return payload / self.link_efficiency

    @property
    def bound(self) -> str:
        """The stage that sets Lambda_max: prfaas_compute, prfaas_bandwidth, pd_p or pd_d."""
        g, i, j = self.grid, self.i, self.j
        terms = {"prfaas": g.prfaas_term[i], "pd_p": g.pd_p_term[i, j], "pd_d": g.theta_pd_d[j]}
        name = min(terms, key=lambda k: terms[k])
        if name == "prfaas":
            bw = g.theta_prfaas_bandwidth[i] < g.theta_prfaas_compute[i]
            return "prfaas_bandwidth" if bw else "prfaas_compute"
        return name

    def to_dict(self) -> dict[str, Any]:
        g, i, j = self.grid, self.i, self.j
        lam, p = self.lambda_max_rps, self.offload_fraction
        remote_used = self.n_prfaas > 0 and p > 0
        local_used = self.n_prefill > 0 and p < 1
        theta_prfaas = float(g.theta_prfaas[i]) if remote_used else None
        theta_pd_p = float(g.theta_pd_p[i, j]) if local_used else None
        theta_pd_d = float(g.theta_pd_d[j])
        egress, link_gbps = self.egress_gbps, self.link_gbps
        price = self.n_prfaas * self.price_prfaas + self.n_local * self.price_local
        utilisation = {
            "prfaas": _num(lam * p / g.theta_prfaas_compute[i]) if remote_used else None,
            "link": _num(egress / link_gbps) if remote_used and link_gbps else None,
            "pd_p": _num(lam * (1 - p) / theta_pd_p) if theta_pd_p is not None else None,  # None: not local_used
            "pd_d": _num(lam / theta_pd_d),
        }
        return {
            "deployment": self.deployment,
            "model": self.model,
            "service_time": self.service_time,
            "lambda_max_rps": lam,
            "theta_prfaas_rps": _num(theta_prfaas) if theta_prfaas is not None else None,
            "theta_pd_p_rps": _num(theta_pd_p) if theta_pd_p is not None else None,
            "theta_pd_d_rps": theta_pd_d,
            "threshold_tokens": self.threshold_tokens,
            "n_prfaas": self.n_prfaas,
            "n_prefill": self.n_prefill,
            "n_decode": self.n_decode,
            "offload_fraction": p,
            "egress_gbps": egress,
            "bound": self.bound,
            "l_long_tokens": _num(g.l_long[i]) if p > 0 else None,
            "l_short_tokens": _num(g.l_short[i]) if p < 1 else None,
            "t_prefill_long_s": _num(g.t_long_s[i]) if remote_used else None,
            "t_prefill_short_s": _num(g.t_short_s[i]) if p < 1 else None,
            "s_kv_long_bytes": _num(g.s_kv_long_bytes[i]) if remote_used else None,
            "theta_prfaas_compute_rps": _num(g.theta_prfaas_compute[i]) if remote_used else None,
            "bandwidth_ceiling_rps": _num(g.theta_prfaas_bandwidth[i]) if remote_used else None,
            "egress_saturation_gbps": (_num(self.n_prfaas * g.s_kv_long_bytes[i] * _GBIT / g.t_long_s[i]
                                            / self.link_efficiency) if remote_used else None),
            "link_capacity_gbps": self.link_gbps if self.n_prfaas > 0 else None,
            "bs_max": self.bs_max,
            "t_decode_s": self.t_decode_s,
            "slo_tokens_per_s": self.slo_tokens_per_s,
            "decode_context_tokens": _num(self.decode_context_tokens) if self.decode_context_tokens else None,
            "tpot_at_half_capacity_s": self.tpot_s(0.5 * lam),
            "mean_output_tokens": self.mean_output_tokens,
            "price": price,
            "cost_normalised": lam / price if price > 0 else None,
            "utilisation": utilisation,
            "notes": list(self.notes),
        }
