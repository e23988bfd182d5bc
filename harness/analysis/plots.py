"""One function per figure, `(data, ax) -> None`, drawn from Parquet-derived frames alone.

Figures use matplotlib's object API (`Figure`, no pyplot state) on the Agg canvas, so reports can
be drawn from any thread or Hydra callback without a display. Every axis label carries its unit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

_DPI = 110


def palette(names: list[str]) -> dict[str, tuple[float, float, float]]:
    """A stable colour per deployment (same order -> same colours in every figure)."""
    return dict(zip(names, sns.color_palette("colorblind", max(len(names), 3)), strict=False))


def _names(df: pd.DataFrame) -> list[str]:
    return list(dict.fromkeys(str(d) for d in df["deployment"].dropna()))


def _col(df: pd.DataFrame, name: str) -> np.ndarray:
    return df[name].to_numpy(dtype=float, na_value=np.nan) if name in df.columns else np.full(len(df), np.nan)


def throughput_vs_load(df: pd.DataFrame, ax: Axes) -> None:
    """(a) Steady throughput vs offered load per deployment, the y = x line, and each deployment's
    planner Lambda_max (dashed) when the summaries carry `plan_lambda_max_rps`."""
    colors = palette(_names(df))
    top = 0.0
    for name, rows in df.groupby("deployment", sort=False):
        rows = rows.sort_values("load_rps")
        x, y = _col(rows, "load_rps"), _col(rows, "steady_throughput_rps")
        ax.plot(x, y, marker="o", color=colors[str(name)], label=str(name))
        lam = _col(rows, "plan_lambda_max_rps")
        lam = lam[np.isfinite(lam)]
        if lam.size:
            ax.axhline(lam[0], linestyle="--", color=colors[str(name)], linewidth=1,
                       label=f"{name} planner Λ_max = {lam[0]:.2f}")
            top = max(top, float(lam[0]))
        top = max(top, float(np.nanmax(np.concatenate([x, y, [0.0]]))))
    ax.plot([0, top * 1.05], [0, top * 1.05], color="grey", linestyle=":", linewidth=1, label="y = x")
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("steady throughput (req/s)")
    ax.set_title("Throughput vs offered load")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def ttft_vs_load(df: pd.DataFrame, ax: Axes) -> None:
    """(b) TTFT mean (solid) and P90 (dashed) vs offered load per deployment."""
    colors = palette(_names(df))
    for name, rows in df.groupby("deployment", sort=False):
        rows = rows.sort_values("load_rps")
        x = _col(rows, "load_rps")
        ax.plot(x, _col(rows, "ttft_mean_s"), marker="o", color=colors[str(name)], label=f"{name} mean")
        ax.plot(x, _col(rows, "ttft_p90_s"), marker="^", linestyle="--", color=colors[str(name)], label=f"{name} P90")
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("TTFT (s)")
    ax.set_yscale("log")
    ax.set_title("TTFT vs offered load")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, which="both")


def ttft_cdf(requests: Mapping[str, pd.DataFrame], ax: Axes, title: str = "TTFT CDF") -> None:
    """(c) Empirical CDF of TTFT (completed requests) per deployment."""
    colors = palette(list(requests))
    for name, req in requests.items():
        ttft = _col(req, "ttft_s")
        if "error" in req.columns:
            ttft = ttft[req["error"].astype("string").fillna("").to_numpy() == ""]
        ttft = np.sort(ttft[np.isfinite(ttft)])
        if ttft.size:
            ax.plot(ttft, np.arange(1, ttft.size + 1) / ttft.size, color=colors[name], label=name, drawstyle="steps-post")
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def egress_timeseries(ts: pd.DataFrame, ax: Axes, title: str = "Cross-DC egress") -> None:
    """(d) Egress per time bin against the link capacity (which may change during the run)."""
    t = _col(ts, "t_s")
    ax.plot(t, _col(ts, "egress_gbps"), label="egress", color="tab:blue")
    if "link_capacity_gbps" in ts.columns:
        ax.plot(t, _col(ts, "link_capacity_gbps"), label="link capacity", color="tab:red", linestyle="--")
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("Gbps (1e9 bit/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


# Panels of the Table 6 comparison: quantity column -> axis label.
TABLE6_PANELS = {"capacity_rps": "capacity (req/s)", "ttft_mean_s": "mean TTFT, lowest load (s)",
                 "ttft_p90_s": "P90 TTFT, lowest load (s)"}


def table6_comparison(df: pd.DataFrame) -> Figure:
    """(e) Harness vs paper, side by side: rows `deployment, quantity, source (harness|paper), value`."""
    fig = Figure(figsize=(12, 4), dpi=_DPI, layout="constrained")
    names = _names(df)
    for i, (quantity, label) in enumerate(TABLE6_PANELS.items()):
        ax = fig.add_subplot(1, len(TABLE6_PANELS), i + 1)
        rows = df[df["quantity"] == quantity]
        x = np.arange(len(names))
        for offset, source, color in ((-0.2, "harness", "tab:blue"), (0.2, "paper", "tab:grey")):
            pick = rows[rows["source"] == source].set_index("deployment")["value"]
            values = [float(pick.get(n, np.nan)) for n in names]
            ax.bar(x + offset, values, width=0.4, label=source if source == "harness" else "paper [P]", color=color)
        ax.set_xticks(x, names, rotation=15, fontsize="small")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, axis="y")
        if i == 0:
            ax.legend(fontsize="small")
    fig.suptitle("Table 6: harness vs paper")
    return fig


def plan_threshold(df: pd.DataFrame, ax: Axes) -> None:
    """(f, Fig. 5b) Planner bounds vs routing threshold t: PrfaaS and PD-P bounds and Lambda_max."""
    df = df.sort_values("threshold_tokens")
    t_k = _col(df, "threshold_tokens") / 1e3
    for column, label, style in (("prfaas_bound_rps", "Θ_prfaas / p", "-"), ("pd_p_bound_rps", "Θ_pd-p / (1-p)", "-"),
                                 ("lambda_rps", "Λ_max", "--")):
        if column in df.columns:
            ax.plot(t_k, _col(df, column), linestyle=style, label=label)
    _mark_best(ax, t_k, _col(df, "lambda_rps"), "t = {x:.1f}K")
    ax.set_xlabel("routing threshold t (K tokens)")
    ax.set_ylabel("throughput bound (req/s)")
    ax.set_ylim(bottom=0, top=max(1.0, 3 * np.nanmax(np.append(_col(df, "lambda_rps"), 0.0))))
    ax.set_title("Planner: threshold sweep")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def plan_split(df: pd.DataFrame, ax: Axes) -> None:
    """(f, Fig. 5a) Planner bounds vs the local PD split N_p (N_d = rest): prefill, decode, Lambda_max."""
    df = df.sort_values("n_prefill")
    n_p = _col(df, "n_prefill")
    for column, label, style in (("prefill_bound_rps", "prefill bound", "-o"), ("decode_bound_rps", "decode bound", "-s"),
                                 ("lambda_rps", "Λ_max", "--")):
        if column in df.columns:
            ax.plot(n_p, _col(df, column), style, label=label)
    _mark_best(ax, n_p, _col(df, "lambda_rps"), "N_p = {x:.0f}")
    ax.set_xlabel("PD-P instances N_p")
    ax.set_ylabel("throughput bound (req/s)")
    ax.set_title("Planner: P/D split sweep")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def _mark_best(ax: Axes, x: np.ndarray, y: np.ndarray, fmt: str) -> None:
    if np.isfinite(y).any():
        i = int(np.nanargmax(y))
        ax.plot([x[i]], [y[i]], marker="*", markersize=14, color="gold", markeredgecolor="black", linestyle="none",
                label=f"optimum {fmt.format(x=x[i])}, Λ = {y[i]:.2f}")


def new_axes(figsize: tuple[float, float] = (7, 4.5)) -> tuple[Figure, Axes]:
    fig = Figure(figsize=figsize, dpi=_DPI, layout="constrained")
    return fig, fig.add_subplot()


def save(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Write a PNG atomically."""
    path = Path(path)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}.png")
    fig.savefig(tmp, format="png")
    os.replace(tmp, path)
    return path


def write_run_figures(run_dir: str | os.PathLike[str], requests: pd.DataFrame, ts: pd.DataFrame,
                      summary: Mapping[str, object]) -> list[Path]:
    """Per-run figures: the TTFT CDF, and the egress time series when the run sent KV cross-DC."""
    run_dir = Path(run_dir)
    name = str(summary.get("deployment") or "run")
    fig, ax = new_axes()
    ttft_cdf({name: requests}, ax, title=f"TTFT CDF: {name}")
    written = [save(fig, run_dir / "fig_ttft_cdf.png")]
    offload = summary.get("offload_fraction")
    if len(ts) and isinstance(offload, float) and offload > 0:
        fig, ax = new_axes((9, 4))
        egress_timeseries(ts, ax, title=f"Cross-DC egress: {name}")
        written.append(save(fig, run_dir / "fig_egress.png"))
    return written
