"""One function per figure, `(data, ax) -> None`, drawn from Parquet-derived frames alone.

seaborn draws the series (lines, ECDFs, bars, heatmaps) and gives the colours (its colour-blind palette);
it is imported inside the drawing functions, so a run without figures never loads it. The figures live on
matplotlib's object API (`Figure`, no pyplot figure state) on the Agg canvas, so reports can be drawn from
any thread or Hydra callback without a display. Every axis label carries its unit.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

_DPI = 110


def _legend(ax: Axes, **kwargs: Any) -> None:
    """A legend when something is labelled (else matplotlib warns "No artists with labels found")."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**kwargs)


def palette(names: list[str], name: str = "colorblind") -> dict[str, tuple[float, float, float]]:
    """A stable colour per deployment (same order -> same colours in every figure): seaborn's palette `name`,
    cycled when there are more names than colours."""
    import seaborn as sns

    return dict(zip(names, sns.color_palette(name, max(len(names), 3)), strict=False))


def _line(ax: Axes, x: np.ndarray, y: np.ndarray, label: str, **style: Any) -> None:
    """One labelled series, sorted by x; points without a value are left out."""
    import seaborn as sns

    sns.lineplot(x=x, y=y, ax=ax, label=label, estimator=None, errorbar=None, sort=True, legend=False, **style)


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
        _line(ax, x, y, str(name), marker="o", color=colors[str(name)])
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
    _legend(ax, fontsize="small")
    ax.grid(alpha=0.3)


def ttft_vs_load(df: pd.DataFrame, ax: Axes) -> None:
    """(b) TTFT mean (solid) and P90 (dashed) vs offered load per deployment."""
    colors = palette(_names(df))
    for name, rows in df.groupby("deployment", sort=False):
        rows = rows.sort_values("load_rps")
        x = _col(rows, "load_rps")
        _line(ax, x, _col(rows, "ttft_mean_s"), f"{name} mean", marker="o", color=colors[str(name)])
        _line(ax, x, _col(rows, "ttft_p90_s"), f"{name} P90", marker="^", linestyle="--", color=colors[str(name)])
    ax.set_xlabel("offered load (req/s)")
    ax.set_ylabel("TTFT (s)")
    ax.set_yscale("log")
    ax.set_title("TTFT vs offered load")
    _legend(ax, fontsize="small")
    ax.grid(alpha=0.3, which="both")


def ttft_cdf(requests: Mapping[str, pd.DataFrame], ax: Axes, title: str = "TTFT CDF") -> None:
    """(c) Empirical CDF of TTFT (completed requests) per deployment."""
    import seaborn as sns

    colors = palette(list(requests))
    for name, req in requests.items():
        ttft = _col(req, "ttft_s")
        if "error" in req.columns:
            ttft = ttft[req["error"].astype("string").fillna("").to_numpy() == ""]
        ttft = ttft[np.isfinite(ttft)]
        if ttft.size:
            sns.ecdfplot(x=ttft, ax=ax, color=colors[name], label=name)
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    ax.set_title(title)
    _legend(ax, fontsize="small")
    ax.grid(alpha=0.3)


def egress_timeseries(ts: pd.DataFrame, ax: Axes, title: str = "Cross-DC egress") -> None:
    """(d) Egress per time bin against the link capacity (which may change during the run)."""
    t = _col(ts, "t_s")
    _line(ax, t, _col(ts, "egress_gbps"), "egress", color="tab:blue")
    if "link_capacity_gbps" in ts.columns:
        _line(ax, t, _col(ts, "link_capacity_gbps"), "link capacity", color="tab:red", linestyle="--")
    ax.set_xlabel("run time (s)")
    ax.set_ylabel("Gbps (1e9 bit/s)")
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    _legend(ax, fontsize="small")
    ax.grid(alpha=0.3)


# Panels of the Table 6 comparison: quantity column -> axis label.
TABLE6_PANELS = {"capacity_rps": "capacity (req/s)", "ttft_mean_s": "mean TTFT, lowest load (s)",
                 "ttft_p90_s": "P90 TTFT, lowest load (s)"}


def table6_comparison(df: pd.DataFrame) -> Figure:
    """(e) Harness vs paper, side by side: rows `deployment, quantity, source (harness|paper), value`; a bar
    per deployment and source that has a value."""
    import seaborn as sns

    fig = Figure(figsize=(12, 4), dpi=_DPI, layout="constrained")
    names = _names(df)
    sources = {"harness": "harness", "paper": "paper [P]"}
    colors = {"harness": "tab:blue", "paper [P]": "tab:grey"}
    for i, (quantity, label) in enumerate(TABLE6_PANELS.items()):
        ax = fig.add_subplot(1, len(TABLE6_PANELS), i + 1)
        rows = df[df["quantity"] == quantity]
        value = pd.to_numeric(rows["value"], errors="coerce").groupby([rows["deployment"], rows["source"]]).first()
        # every (deployment, source) pair, NaN where missing: seaborn then dodges both sources at every tick
        bars = pd.DataFrame([(n, label, float(value.get((n, s), np.nan)))
                             for n in names for s, label in sources.items()], columns=["deployment", "source", "value"])
        if np.isfinite(bars["value"].to_numpy()).any():
            sns.barplot(data=bars, x="deployment", y="value", hue="source", order=names, hue_order=list(colors),
                        palette=colors, saturation=1, errorbar=None, dodge=True, ax=ax, legend=False)
        ax.set_xticks(range(len(names)), names, rotation=15, fontsize="small")
        ax.set_xlabel("")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3, axis="y")
        if i == 0:
            from matplotlib.patches import Patch

            ax.legend(handles=[Patch(color=c, label=s) for s, c in colors.items()], fontsize="small")
    fig.suptitle("Table 6: harness vs paper")
    return fig


def plan_threshold(df: pd.DataFrame, ax: Axes, emulated: pd.DataFrame | None = None) -> None:
    """(f, Fig. 5b) Planner bounds vs routing threshold t: PrfaaS and PD-P bounds and Lambda_max;
    `emulated` (threshold_tokens, capacity_rps) adds the emulator's capacity at the same split."""
    df = df.sort_values("threshold_tokens")
    t_k = _col(df, "threshold_tokens") / 1e3
    for column, label, style in (("prfaas_bound_rps", "Θ_prfaas / p", "-"), ("pd_p_bound_rps", "Θ_pd-p / (1-p)", "-"),
                                 ("lambda_rps", "Λ_max", "--")):
        if column in df.columns:
            _line(ax, t_k, _col(df, column), label, linestyle=style)
    _mark_best(ax, t_k, _col(df, "lambda_rps"), "t = {x:.1f}K")
    top = np.nanmax(np.append(_col(df, "lambda_rps"), 0.0))
    if emulated is not None and len(emulated):
        emulated = emulated.sort_values("threshold_tokens")
        y = _col(emulated, "capacity_rps")
        _line(ax, _col(emulated, "threshold_tokens") / 1e3, y, "emulated capacity", marker="D", linestyle=":",
              color="black")
        top = max(top, float(np.nanmax(np.append(y, 0.0))))
    ax.set_xlabel("routing threshold t (K tokens)")
    ax.set_ylabel("throughput bound (req/s)")
    ax.set_ylim(bottom=0, top=max(1.0, 3 * top))
    ax.set_title(_plan_title("Planner: threshold sweep", df))
    _legend(ax, fontsize="small")
    ax.grid(alpha=0.3)


def plan_split(df: pd.DataFrame, ax: Axes, emulated: pd.DataFrame | None = None) -> None:
    """(f, Fig. 5a) Planner bounds vs the local PD split N_p (N_d = rest): prefill, decode, Lambda_max;
    `emulated` (n_prefill, capacity_rps) adds the emulator's capacity at the same threshold."""
    df = df.sort_values("n_prefill")
    n_p = _col(df, "n_prefill")
    for column, label, style in (("prefill_bound_rps", "prefill bound", {"marker": "o"}),
                                 ("decode_bound_rps", "decode bound", {"marker": "s"}),
                                 ("lambda_rps", "Λ_max", {"linestyle": "--"})):
        if column in df.columns:
            _line(ax, n_p, _col(df, column), label, **style)
    _mark_best(ax, n_p, _col(df, "lambda_rps"), "N_p = {x:.0f}")
    if emulated is not None and len(emulated):
        emulated = emulated.sort_values("n_prefill")
        _line(ax, _col(emulated, "n_prefill"), _col(emulated, "capacity_rps"), "emulated capacity", marker="D",
              linestyle=":", color="black")
    ax.set_xlabel("PD-P instances N_p")
    ax.set_ylabel("throughput bound (req/s)")
    ax.set_title(_plan_title("Planner: P/D split sweep", df))
    _legend(ax, fontsize="small")
    ax.grid(alpha=0.3)


def _plan_title(title: str, df: pd.DataFrame) -> str:
    names = _names(df) if "deployment" in df.columns else []
    return f"{title} ({names[0]})" if len(names) == 1 else title


def plan_panels(df: pd.DataFrame, draw, emulated: pd.DataFrame | None = None) -> Figure:
    """One panel per deployment of a planner sweep table (`draw` = plan_threshold or plan_split):
    deployments have different splits and ranges, so they do not share axes."""
    names = _names(df) if "deployment" in df.columns else [None]
    fig = Figure(figsize=(7 * len(names), 4.5), dpi=_DPI, layout="constrained")
    for i, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), i + 1)
        rows = df if name is None else df[df["deployment"] == name]
        points = emulated
        if emulated is not None and name is not None and "deployment" in emulated.columns:
            points = emulated[emulated["deployment"] == name]
        draw(rows, ax, points)
    return fig


def kv_throughput(df: pd.DataFrame, ax: Axes) -> None:
    """(g, Table 3 / Fig. 2) KV throughput Phi_kv = S_kv / T_prefill vs input length per model:
    cost-model curves (lines) and measured points (markers, same colour)."""
    names = list(dict.fromkeys(str(m) for m in df["model"]))
    colors = palette(names, "tab10")
    source = df["source"].astype(str) if "source" in df.columns else pd.Series("costmodel", index=df.index)
    for name in names:
        rows = df[df["model"] == name]
        family = rows["family"].dropna().astype(str) if "family" in rows.columns else pd.Series(dtype=str)
        tag = f" ({family.iloc[0]})" if len(family) else ""
        model_rows = rows[source.loc[rows.index] == "costmodel"].sort_values("input_tokens")
        if len(model_rows):
            _line(ax, _col(model_rows, "input_tokens"), _col(model_rows, "phi_kv_gbps"), f"{name}{tag}",
                  color=colors[name])
        measured = rows[source.loc[rows.index] == "measured"].sort_values("input_tokens")
        if len(measured):
            _line(ax, _col(measured, "input_tokens"), _col(measured, "phi_kv_gbps"), f"{name} measured",
                  color=colors[name], marker="o", linestyle="none")
    ax.set_xscale("log", base=2)
    ticks = [2.0**e for e in range(10, 18)]
    ax.set_xticks(ticks, [f"{t / 1024:g}K" for t in ticks])
    ax.set_yscale("log")
    ax.set_xlabel("input length (tokens)")
    ax.set_ylabel("KV throughput Φ_kv (Gbps)")
    hardware = df["hardware"].dropna().astype(str).unique() if "hardware" in df.columns else []
    ax.set_title("KV throughput per prefill instance" + (f" ({', '.join(hardware)})" if len(hardware) else "")
                 + "; lines: cost model, dots: measured")
    _legend(ax, fontsize="x-small", ncol=2)
    ax.grid(alpha=0.3, which="both")


# Axis labels of parameters that sweeps commonly vary (any other parameter is labelled by its key).
PARAM_LABELS = {
    "deployment.router.threshold_tokens": "routing threshold t (tokens)",
    "deployment.local.n_prefill": "PD-P instances N_p",
    "deployment.local.n_decode": "PD-D instances N_d",
    "link.capacity_gbps": "cross-DC link capacity (Gbps)",
    "workload.arrivals.cv": "inter-arrival CV (burstiness)",
    "loadgen.rate_rps": "offered load (req/s)",
}


def param_label(param: str) -> str:
    return PARAM_LABELS.get(param, param)


def _series(table: pd.DataFrame, param: str, keys: Sequence[str] | None) -> list[tuple[str, pd.DataFrame]]:
    """One line per deployment and combination of the other swept parameters (`keys`; default: the
    other dotted columns that vary)."""
    if keys is None:
        keys = [c for c in table.columns if "." in c and c != "loadgen.rate_rps" and table[c].nunique(dropna=True) > 1]
    others = [c for c in keys if c != param]
    keys = ["deployment", *others]
    out = []
    for key, rows in table.groupby(keys, sort=False, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        label = str(key[0]) + "".join(f", {c.split('.')[-1]}={v:g}" if isinstance(v, float)
                                      else f", {c.split('.')[-1]}={v}" for c, v in zip(others, key[1:], strict=True))
        out.append((label, rows.sort_values(param)))
    return out


def _param_axis(ax: Axes, table: pd.DataFrame, param: str) -> None:
    x = _col(table, param)
    x = x[np.isfinite(x)]
    if x.size and x.min() > 0 and x.max() / x.min() >= 20:
        ax.set_xscale("log")
    ax.set_xlabel(param_label(param))


def _value_label(table: pd.DataFrame, value: str) -> str:
    if value != "steady_rps":
        return value
    capacity = "saturated" in table.columns and bool(table["saturated"].all())
    return "capacity (req/s)" if capacity else "steady throughput (req/s)"


def sweep_lines(table: pd.DataFrame, param: str, ax: Axes, keys: Sequence[str] | None = None) -> None:
    """(h) A parameter sweep: emulated steady throughput (the capacity where saturated) vs the swept
    parameter, the planner's Lambda_max at each point (dashed), and goodput at the open-loop points
    (dotted; a closed-loop point queues by construction, so its goodput says nothing)."""
    series = _series(table, param, keys)
    colors = palette([label for label, _ in series])
    goodput = False
    for label, rows in series:
        x = _col(rows, param)
        _line(ax, x, _col(rows, "steady_rps"), f"{label} emulated", marker="o", color=colors[label])
        lam = _col(rows, "plan_lambda_max_rps")
        if np.isfinite(lam).any():
            _line(ax, x, lam, f"{label} planner Λ_max", marker="x", linestyle="--", color=colors[label])
        open_loop = (~rows["closed_loop"].to_numpy(dtype=bool) if "closed_loop" in rows.columns
                     else np.ones(len(rows), dtype=bool))
        if open_loop.any() and "goodput_rps" in rows.columns:
            goodput = True
            _line(ax, x[open_loop], _col(rows, "goodput_rps")[open_loop], f"{label} goodput", marker="^",
                  linestyle=":", color=colors[label])
    _param_axis(ax, table, param)
    label = _value_label(table, "steady_rps")
    ax.set_ylabel(f"{label.removesuffix(' (req/s)')}, goodput (req/s)" if goodput else label)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{label.split(' (')[0].capitalize()} vs {param_label(param)}")
    _legend(ax, fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(alpha=0.3)


def sweep_ttft(table: pd.DataFrame, param: str, ax: Axes, keys: Sequence[str] | None = None) -> None:
    """(h) A parameter sweep: TTFT mean (solid) and P90 (dashed) vs the swept parameter."""
    series = _series(table, param, keys)
    colors = palette([label for label, _ in series])
    for label, rows in series:
        x = _col(rows, param)
        _line(ax, x, _col(rows, "ttft_mean_s"), f"{label} mean", marker="o", color=colors[label])
        _line(ax, x, _col(rows, "ttft_p90_s"), f"{label} P90", marker="^", linestyle="--", color=colors[label])
    _param_axis(ax, table, param)
    ax.set_ylabel("TTFT (s)")
    ax.set_yscale("log")
    ax.set_title(f"TTFT vs {param_label(param)}")
    _legend(ax, fontsize="x-small", loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(alpha=0.3, which="both")


def sweep_heatmap(table: pd.DataFrame, x_param: str, y_param: str, value: str = "steady_rps") -> Figure:
    """(i) A two-parameter sweep: `value` on the (x, y) grid, one panel per deployment; missing
    points are blank. The mesh's array holds the values (rows: y ascending, columns: x ascending)."""
    import seaborn as sns

    names = _names(table)
    fig = Figure(figsize=(6.5 * max(len(names), 1), 5), dpi=_DPI, layout="constrained")
    for i, name in enumerate(names):
        ax = fig.add_subplot(1, len(names), i + 1)
        rows = table[table["deployment"] == name]
        grid = rows.pivot_table(index=y_param, columns=x_param, values=value, aggfunc="max")
        grid = grid.sort_index().sort_index(axis=1).astype(float)
        sns.heatmap(grid, ax=ax, cmap="viridis", annot=True, fmt=".2f", annot_kws={"fontsize": "small"},
                    xticklabels=[f"{v:g}" for v in grid.columns], yticklabels=[f"{v:g}" for v in grid.index],
                    cbar_kws={"label": _value_label(table, value)})
        ax.invert_yaxis()  # y ascending upwards, as on the line figures
        ax.tick_params(axis="y", labelrotation=0)
        ax.set_xlabel(param_label(x_param))
        ax.set_ylabel(param_label(y_param))
        ax.set_title(name)
    fig.suptitle(f"{_value_label(table, value)} by {x_param.split('.')[-1]} and {y_param.split('.')[-1]}")
    return fig


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
