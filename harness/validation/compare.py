"""Measured (engine) vs predicted (emulator) per load: validation.parquet, validation.json, a figure.

Metrics are taken from each run's own `summary.parquet`, so they mean exactly what they mean
everywhere else in the harness (throughput = completed / run span, TTFT percentiles over completed
requests, TPOT = mean time per output token after the first). With `experiment.repeat_engine` the
engine ran each load twice (same workload, fresh hash ids): `repeat` is the second run's value and
`repeat_rel_diff` = (repeat - measured) / measured, the engine's own run-to-run spread, the floor
under any prediction's error (NaN without a repeat).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

METRICS = ("throughput_rps", "ttft_p50_s", "ttft_p90_s", "ttft_mean_s", "tpot_mean_s", "e2e_mean_s")
COLUMNS = ["load_rps", "load_fraction", "metric", "measured", "predicted", "rel_error", "repeat", "repeat_rel_diff"]
# The validation targets (|rel_error| at most): reported beside the numbers, not enforced here.
TARGETS = {"throughput_rps": 0.05, "ttft_p50_s": 0.15, "ttft_p90_s": 0.15, "tpot_mean_s": 0.10}


def _summary(run_dir: str) -> dict[str, Any]:
    return pd.read_parquet(Path(run_dir) / "summary.parquet").iloc[0].to_dict()


def _e2e_mean(run_dir: str) -> float:
    frame = pd.read_parquet(Path(run_dir) / "requests.parquet", columns=["e2e_s", "error"])
    ok = frame[frame["error"].isna()]
    return float(ok["e2e_s"].mean()) if len(ok) else math.nan


def _ttfts(run_dir: str) -> np.ndarray:
    frame = pd.read_parquet(Path(run_dir) / "requests.parquet", columns=["ttft_s", "error"])
    return np.sort(frame.loc[frame["error"].isna(), "ttft_s"].to_numpy(float))


def validation_frame(runs: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for run in runs:
        measured, predicted = _summary(run["engine_dir"]), _summary(run["sim_dir"])
        measured["e2e_mean_s"], predicted["e2e_mean_s"] = _e2e_mean(run["engine_dir"]), _e2e_mean(run["sim_dir"])
        repeat: dict[str, Any] = {}
        if run.get("repeat_dir"):
            repeat = _summary(run["repeat_dir"])
            repeat["e2e_mean_s"] = _e2e_mean(run["repeat_dir"])
        for metric in METRICS:
            m, p = float(measured.get(metric, math.nan)), float(predicted.get(metric, math.nan))
            r = float(repeat.get(metric, math.nan))
            ok = bool(m) and math.isfinite(m)
            rows.append({"load_rps": float(run["load_rps"]), "load_fraction": float(run["load_fraction"]),
                         "metric": metric, "measured": m, "predicted": p,
                         "rel_error": (p - m) / m if ok else math.nan, "repeat": r,
                         "repeat_rel_diff": (r - m) / m if ok else math.nan})
    return pd.DataFrame(rows, columns=COLUMNS)


def format_table(frame: pd.DataFrame) -> str:
    """One line per load x metric; with engine repeats, the repeat and its difference from the first run."""
    rep = "repeat_rel_diff" in frame and bool(frame["repeat_rel_diff"].notna().any())
    extra = f" {'repeat':>10} {'engine-vs-engine':>16}" if rep else ""
    lines = [f"{'load_rps':>8} {'metric':<15} {'measured':>10} {'predicted':>10} {'rel_error':>9}{extra}  target"]
    for row in frame.itertuples():
        target = TARGETS.get(row.metric)
        mark = "" if target is None else (f"<= {target:.0%} " + ("ok" if abs(row.rel_error) <= target else "MISS"))
        again = f" {row.repeat:10.4f} {row.repeat_rel_diff:+16.1%}" if rep else ""
        lines.append(f"{row.load_rps:8.3f} {row.metric:<15} {row.measured:10.4f} {row.predicted:10.4f} "
                     f"{row.rel_error:+9.1%}{again}  {mark}")
    return "\n".join(lines)


def ttft_cdf_figure(runs: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(4.2 * len(runs), 3.4), squeeze=False, sharey=True)
    for ax, run in zip(axes[0], runs, strict=False):
        for label, key, style in (("engine (measured)", "engine_dir", "-"), ("emulator (predicted)", "sim_dir", "--")):
            x = _ttfts(run[key])
            if len(x):
                ax.step(x, np.arange(1, len(x) + 1) / len(x), style, where="post", label=label)
        ax.set_xscale("log")
        ax.set_title(f"{run['load_rps']:.2f} req/s ({run['load_fraction']:.0%} of predicted capacity)", fontsize=9)
        ax.set_xlabel("TTFT (s)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("CDF")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write_validation(sweep_dir: Path, runs: list[dict[str, Any]], meta: dict[str, Any],
                     experiment: dict[str, Any]) -> str:
    frame = validation_frame(runs)
    frame.to_parquet(sweep_dir / "validation.parquet", index=False)
    sidecar = {**meta, "runs": runs, "experiment": experiment,
               "note": "the profile was fitted before any validation run, on probe prompts only; nothing measured "
                       "on the validation workload feeds it", "targets_abs_rel_error": TARGETS}
    (sweep_dir / "validation.json").write_text(json.dumps(sidecar, indent=1, default=str))
    try:
        ttft_cdf_figure(runs, sweep_dir / "ttft_cdf.png")
    except Exception as err:
        print(f"warning: ttft_cdf.png not written: {err}")
    return format_table(frame)


def check_lines(found: dict[str, list[dict]], form: str) -> list[str]:
    """One console line per calibration check (`calibrate.checks`): held-out prefill lengths, mixed steps
    (at factor 1, by the deployment's step form `form` and by the other), slot layouts."""
    lines = [f"held-out prefill {c['input_tokens']} tokens: measured {c['measured_s'] * 1e3:.1f} ms, "
             f"predicted {c['predicted_s'] * 1e3:.1f} ms ({c['rel_error']:+.1%})" for c in found["prefill_holdout"]]
    lines += [f"{c['prompts']} x {c['input_tokens']}-token prompt beside {c['decoders']} decoding: "
              f"measured {c['measured_s'] * 1e3:.1f} ms, factor 1: {form} {c['predicted_s'] * 1e3:.1f} ms "
              f"({c['rel_error']:+.1%}), the other form {c['other_form_s'] * 1e3:.1f} ms "
              f"({c['other_form_rel_error']:+.1%})" for c in found["mixed"]]
    lines += [f"streams on slots {c['slots']}: measured step {c['measured_s'] * 1e3:.2f} ms, a step per run of "
              f"consecutive slots {c['predicted_s'] * 1e3:.2f} ms ({c['rel_error']:+.1%}), one step of the batch "
              f"{c['one_ubatch_s'] * 1e3:.2f} ms ({c['one_ubatch_rel_error']:+.1%})" for c in found["layouts"]]
    return lines
