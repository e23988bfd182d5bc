"""What happened over time in each run of a sweep over categories (faults, workloads, on/off switches).

One row of panels per category value: TTFT P90 of the requests arriving in each time bin,
completions per second, and cross-DC egress against link capacity; one line per deployment. Made
for the fault and traffic-shift experiments, where the story is a dip and a recovery.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from harness.analysis.frames import read_table


def _binned(df: pd.DataFrame, bin_s: float) -> pd.DataFrame:
    done = df[df["error"].isna()] if "error" in df else df
    arrival_bin = (done["arrival_s"] // bin_s) * bin_s
    ttft = done.groupby(arrival_bin)["ttft_s"].quantile(0.9)
    finish = df["finish_s"].dropna()
    completions = finish.groupby((finish // bin_s) * bin_s).size() / bin_s
    return pd.DataFrame({"ttft_p90_s": ttft, "completions_per_s": completions}).sort_index()


def timeline(runs: pd.DataFrame, category: str, bin_s: float = 20.0) -> Figure:
    """`runs`: one row per run with `deployment`, the category column and `run_dir`."""
    values = list(dict.fromkeys(runs[category].astype(str)))
    fig = Figure(figsize=(15, 3.2 * len(values)), layout="constrained")
    axes = np.atleast_2d(fig.subplots(len(values), 3, squeeze=False))
    for row, value in enumerate(values):
        group = runs[runs[category].astype(str) == value]
        ax_ttft, ax_done, ax_link = axes[row]
        for _, run in group.sort_values("deployment").iterrows():
            requests = read_table(f"{run['run_dir']}/requests.parquet")
            binned = _binned(requests, bin_s)
            label = str(run["deployment"])
            ax_ttft.plot(binned.index, binned["ttft_p90_s"], label=label)
            ax_done.plot(binned.index, binned["completions_per_s"], label=label)
            ts = read_table(f"{run['run_dir']}/timeseries.parquet")
            if ts["egress_gbps"].max() > 0:
                ax_link.plot(ts["t_s"], ts["egress_gbps"], label=f"{label} egress", lw=0.8)
                ax_link.plot(ts["t_s"], ts["link_capacity_gbps"], ls="--", color="grey", lw=0.8)
        ax_ttft.set(title=f"{category}={value}: TTFT P90 by arrival ({bin_s:g} s bins)", xlabel="arrival time (s)",
                    ylabel="TTFT P90 (s)", yscale="log")
        ax_done.set(title="completions", xlabel="time (s)", ylabel="requests / s")
        ax_link.set(title="cross-DC egress vs capacity (dashed)", xlabel="time (s)", ylabel="Gbps")
        for ax in axes[row]:
            ax.grid(alpha=0.3)
        ax_ttft.legend(fontsize=8)
    return fig
