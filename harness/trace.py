"""`harness-trace`: inspect, convert and generate request traces.

    harness-trace stats FILE [--json] [--block-tokens 512] [--lru-blocks N ...]
    harness-trace convert IN OUT [--block-tokens 512]
    harness-trace generate OUT [overrides ...]     e.g. workload=paper_lognormal workload.seed=7

Formats follow the file extension: .jsonl / .jsonl.gz (Mooncake), .csv / .csv.gz (Azure-style),
.parquet (the harness's own). Bad input exits with status 2 and one `error: ...` line.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast

from harness.errors import ArgumentParser, InputError, run_command

if TYPE_CHECKING:
    from harness.workload.request import Request

_log = logging.getLogger("harness.trace")


def _block_tokens(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}")
    return value


def _note(lines: Sequence[str]) -> None:
    for line in lines:
        sys.stderr.write(f"note: {line}\n")


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def _table(stats: dict[str, Any]) -> str:
    rows = [("requests", _fmt(stats["n_requests"])),
            ("duration", f"{_fmt(stats['duration_s'])} s"),
            ("mean rate", f"{_fmt(stats['rate_rps'], 2)} req/s"),
            ("inter-arrival CV", _fmt(stats["iat_cv"], 2)),
            ("distinct arrival times", _fmt(stats["distinct_arrival_times"]))]
    for key, label in (("input_tokens", "input"), ("output_tokens", "output")):
        s = stats[key]
        rows.append((f"{label} mean / p50 / p90 / p99 / max",
                     " / ".join(_fmt(s[k], 0) for k in ("mean", "p50", "p90", "p99")) + f" / {s['max']:,}"))
    rows.append(("prefix hit, unbounded cache (tokens / per request)",
                 f"{stats['prefix_hit_token_frac_infinite']:.1%} / {stats['prefix_hit_request_mean_infinite']:.1%}"))
    for capacity, hit in stats["prefix_hit_lru"].items():
        rows.append((f"prefix hit, LRU {int(capacity):,} blocks (tokens / per request)",
                     f"{hit['token_frac']:.1%} / {hit['request_mean']:.1%}"))
    rows.append((f"block refs / unique blocks ({stats['block_tokens']} tokens)",
                 f"{stats['block_refs']:,} / {stats['unique_blocks']:,}"))
    rows.append(("block refs seen earlier in the trace", f"{stats['block_refs_seen_frac']:.1%}"))
    if stats["n_sessions"] is not None:
        rows.append(("sessions", _fmt(stats["n_sessions"])))
    width = max(len(label) for label, _ in rows)
    return "\n".join(f"{label:<{width}}  {value}" for label, value in rows)


def _stats(args: argparse.Namespace) -> None:
    from harness.workload.base import resolve_path
    from harness.workload.stats import stream_trace_stats

    for capacity in args.lru_blocks:
        if capacity < 1:
            raise InputError(f"--lru-blocks must be positive integers, got {capacity}")
    # Streamed: memory follows the requests' count and the distinct blocks, not the file's size.
    stats, report = stream_trace_stats(resolve_path(args.file), args.format, args.block_tokens, args.lru_blocks)
    _note(report.lines())
    print(json.dumps(stats) if args.json else _table(stats))


def _convert(args: argparse.Namespace) -> None:
    from harness.workload.base import resolve_path
    from harness.workload.formats import detect_format, load_trace, write_trace
    from harness.workload.formats.mooncake import rounds_time

    out_fmt = detect_format(args.output, args.output_format)
    requests, report = load_trace(resolve_path(args.input), args.input_format, args.block_tokens)
    _note(report.lines())
    if out_fmt == "csv" and any(r.session_id is not None or len(r.hash_ids) for r in requests):
        _note([f"{args.output}: Azure-style CSV keeps no hash_ids, sessions or turns (prefix sharing is lost)"])
    if out_fmt == "jsonl" and any(rounds_time(r.arrival_s) for r in requests):
        _note([f"{args.output}: Mooncake JSONL stores whole milliseconds; arrival times rounded"])
    write_trace(requests, args.output, out_fmt)
    sys.stderr.write(f"wrote {len(requests):,} requests to {args.output}\n")


def _generate(args: argparse.Namespace) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from harness.hydra_entry import CONF_DIR
    from harness.schema import register_configs
    from harness.workload.build import instantiate_workload
    from harness.workload.formats import detect_format, write_trace
    from harness.workload.formats.parquet import ROW_GROUP_ROWS
    from harness.workload.trace_workload import TraceWorkload

    out_fmt = detect_format(args.output, args.output_format)
    register_configs()
    try:
        with initialize_config_dir(config_dir=CONF_DIR, version_base=None):
            cfg = compose("config", overrides=list(args.overrides))
        rate_rps = cfg.loadgen.rate_rps if "loadgen" in cfg else None
        workload = instantiate_workload(cfg.workload)
    except (HydraException, OmegaConfBaseException) as err:
        raise InputError(" ".join(str(err).split())) from err
    requests: Sequence[Request]
    if isinstance(workload, TraceWorkload):
        requests, report = workload.load(rate_rps)
        _note(report.lines())
    elif getattr(workload, "streams_as_generated", False):  # drawn as it is written: memory of a chunk
        requests = cast(Any, workload).stream(rate_rps, chunk=ROW_GROUP_ROWS)
    else:
        requests = workload.generate(rate_rps)
    write_trace(requests, args.output, out_fmt)
    sys.stderr.write(f"wrote {len(requests):,} requests of workload {workload.name!r} to {args.output}\n")


def _parser() -> argparse.ArgumentParser:
    parser = ArgumentParser(prog="harness-trace", description="Inspect, convert and generate request "
                                     "traces (Mooncake .jsonl[.gz], Azure-style .csv[.gz], harness .parquet).")
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="{stats,convert,generate}")

    stats = verbs.add_parser("stats", help="rates, burstiness, length percentiles, prefix-cache hit rates",
                             description="Summarise a trace. Prefix hits replay the requests in file order "
                             "through a block cache (leading hash_ids already cached x block size, capped at "
                             "the input length; then all blocks inserted or touched).")
    stats.add_argument("file", help="trace file")
    stats.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    stats.add_argument("--block-tokens", type=_block_tokens, default=512, metavar="N",
                       help="tokens per hash_ids block (default 512, Mooncake's)")
    stats.add_argument("--lru-blocks", type=int, nargs="+", default=[], metavar="N",
                       help="also report hit rates of LRU caches of N blocks each (e.g. 1000 10000 100000)")
    stats.add_argument("--format", choices=("jsonl", "csv", "parquet"), default=None,
                       help="input format (default: from the extension)")
    stats.set_defaults(run=_stats)

    convert = verbs.add_parser("convert", help="convert a trace between formats (by extension)",
                               description="Read IN and write OUT; formats follow the extensions.")
    convert.add_argument("input", metavar="IN")
    convert.add_argument("output", metavar="OUT")
    convert.add_argument("--block-tokens", type=_block_tokens, default=512, metavar="N",
                         help="tokens per hash_ids block of IN (default 512)")
    convert.add_argument("--input-format", choices=("jsonl", "csv", "parquet"), default=None)
    convert.add_argument("--output-format", choices=("jsonl", "csv", "parquet"), default=None)
    convert.set_defaults(run=_convert)

    generate = verbs.add_parser(
        "generate", help="write the requests of a workload config",
        description="Compose the harness config with Hydra overrides and write the workload's requests, "
        "e.g. `harness-trace generate out.parquet workload=paper_lognormal workload.num_requests=200000 "
        "workload.seed=7`. loadgen.rate_rps=X replaces the arrival rate.")
    generate.add_argument("output", metavar="OUT")
    generate.add_argument("overrides", nargs="*", help="Hydra overrides (key=value, group=option)")
    generate.add_argument("--output-format", choices=("jsonl", "csv", "parquet"), default=None)
    generate.set_defaults(run=_generate)
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    def body() -> None:
        args = _parser().parse_args(argv)
        logging.basicConfig(level=logging.WARNING, format="note: %(message)s", stream=sys.stderr)
        args.run(args)

    run_command(body, "harness-trace")


if __name__ == "__main__":
    main()
