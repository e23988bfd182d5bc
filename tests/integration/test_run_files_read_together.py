"""Real runs of every mode (two sim deployments, live, harness-serve, url against it) read together.

contract26 finding 1: `pd.read_parquet([...])` over summary.parquet of two deployments of one sweep
failed (`threshold_tokens` typed null), requests.parquet of a clean live run had `server_error` typed
null, serve wrote `workload`/`seed` as float NaN, url its instance counts as floats; report.parquet's
dtypes depended on the runs in it. Here every file kind of the five runs unifies under Arrow's
default promotion (any type conflict fails it), reads in every order, and has one pandas dtype per
column; url mode's unknowns are null (finding 7). The sim and live runs' summary.json have the same
documented keys (finding 6).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import math

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .cli import ROOT
from .cli import python as _python
from .serving import serving

KEYS_FILE = ROOT / "tests" / "data" / "vllm_bench_serve_keys.txt"

SMALL = ["workload=fixed", "workload.input_tokens=4096", "workload.output_tokens=16", "workload.num_requests=12",
         "loadgen.rate_rps=10", "loadgen.progress=false", "analysis.figures=false"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, compose_cfg):
    root = tmp_path_factory.mktemp("modes")
    for name, args in (("sim_homogeneous", ["deployment=homogeneous_pd"]), ("sim_prfaas", ["deployment=prfaas_pd"]),
                       ("live", ["mode=live", "server.time_scale=20"])):
        done = _python("-m", "harness", *args, *SMALL, f"hydra.run.dir={root / name}")
        assert done.returncode == 0, done.stderr[-2000:]
    _serve_and_drive_url(compose_cfg, root)
    return root


def _serve_and_drive_url(compose_cfg, root) -> None:
    """harness-serve in this process (`serve`, as the command runs it; SIGINT is `stop`), and a url run
    (`python -m harness mode=url`, in this process) against it."""
    cfg = compose_cfg(["server.port=0", "server.time_scale=20", *SMALL])

    async def main() -> None:
        async with serving(cfg, root / "serve") as server:
            done = await asyncio.to_thread(_python, "-m", "harness", "mode=url", f"target.url={server.url}", *SMALL,
                                           f"hydra.run.dir={root / 'url'}")
            assert done.returncode == 0, done.stderr[-2000:]

    asyncio.run(main())


@pytest.mark.parametrize("kind", ["requests", "summary"])  # timeseries.parquet agreed already
def test_every_file_kind_of_every_mode_reads_together(runs, kind):
    files = sorted(runs.glob(f"*/{kind}.parquet"))
    assert len(files) == 5
    schemas = [pq.read_schema(f) for f in files]
    assert [(f.parent.name, fld.name) for f, s in zip(files, schemas, strict=True) for fld in s
            if pa.types.is_null(fld.type)] == []
    pa.unify_schemas(schemas)  # default promotion: any column typed differently in two files fails
    for order in itertools.permutations(files, 2):
        pd.read_parquet(list(order))
    dtypes: dict[str, set[str]] = {}
    for f in files:
        for column, dtype in pd.read_parquet(f).dtypes.items():
            dtypes.setdefault(column, set()).add(str(dtype))
    assert {c: d for c, d in dtypes.items() if len(d) > 1} == {}
    whole = pq.read_table(files, schema=pa.unify_schemas(schemas)).to_pandas()  # every column of every run
    assert len(whole) == sum(pq.read_metadata(f).num_rows for f in files)


def test_url_mode_writes_what_the_client_cannot_know_as_null(runs):
    req = pd.read_parquet(runs / "url" / "requests.parquet")
    assert len(req) == 12 and req["error"].isna().all()
    assert req["cache_hit_tokens"].isna().all() and req["fetched_tokens"].isna().all()
    assert req["cached_tokens"].notna().all()  # harness-serve reports usage.prompt_tokens_details
    assert req["route"].isna().all() and req["kv_bytes_sent"].isna().all()
    assert (req["http_status"] == 200).all()
    s = pd.read_parquet(runs / "url" / "summary.parquet").iloc[0]
    assert math.isnan(s["cache_hit_token_frac"]) and math.isnan(s["kv_bytes_prfaas_total"])
    assert pd.isna(s["n_prfaas"]) and pd.isna(s["n_decode"])
    live = pd.read_parquet(runs / "live" / "requests.parquet")  # the emulator's view fills them in live mode
    assert live["cache_hit_tokens"].notna().all() and live["route"].notna().all()


def test_report_of_every_mode_has_the_summaries_dtypes(runs, tmp_path):
    done = _python("-m", "harness.report", str(runs), "--no-figures", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-2000:]
    report = pd.read_parquet(tmp_path / "report.parquet")
    assert len(report) == 5
    for column in ("interrupted", "loadgen_valid", "incomplete"):
        assert str(report[column].dtype) == "boolean", column
    for column in ("n_prfaas", "n_decode", "seed", "n_requests"):
        assert str(report[column].dtype) == "Int64", column
    serve = report[report["mode"] == "serve"]
    assert serve["interrupted"].tolist() == [False]  # its stop cut nothing off (it had no value: null)
    summary = pd.read_parquet(runs / "sim_prfaas" / "summary.parquet")
    shared = [c for c in summary.columns if c in report.columns]
    assert {c: (str(summary[c].dtype), str(report[c].dtype)) for c in shared
            if str(summary[c].dtype) != str(report[c].dtype)} == {}


def _measurable() -> list[str]:
    keys = []
    for line in KEYS_FILE.read_text().splitlines():
        key, _, comment = line.partition("#")
        if key.strip() and "not measured" not in comment:
            keys.append(key.strip())
    return keys


def test_sim_and_live_summary_json_have_the_same_documented_keys(runs):
    """`max_output_tokens_per_s` and the `*_itl_ms` keys in both (ITL null in sim: no chunk stamps), and
    the same `burstiness` (1.0: the workload's Poisson arrivals) in both."""
    out = {mode: json.loads((runs / name / "summary.json").read_text())
           for mode, name in (("sim", "sim_homogeneous"), ("live", "live"))}
    measurable = _measurable()
    for mode, summary in out.items():
        missing = [k for k in measurable if k not in summary]
        assert not missing, (mode, missing)
        assert summary["burstiness"] == 1.0, mode
        assert summary["max_output_tokens_per_s"] > 0, mode
    assert out["sim"]["mean_itl_ms"] is None and out["live"]["mean_itl_ms"] > 0
    vllm_keys = {k for k in out["live"] if k in measurable or (k.endswith("_itl_ms") and not k.startswith("vllm_"))}
    assert vllm_keys <= set(out["sim"])
    assert not math.isnan(out["sim"]["max_concurrent_requests"])
