"""`harness-report DIR... [--out DIR] [--no-figures]`: the sweep report from Parquet alone.

Finds every run directory under the DIRs, writes report.parquet and the figures into --out and prints
the per-deployment and per-run tables. Nothing is re-run. Default --out: with one DIR, that DIR (its own
report, rewritten); with several, a new folder `report_<YYYYmmdd-HHMMSS>` in the current directory. The
combined report of several DIRs is never written into one of them (an --out that is one is bad input):
a sweep's own report.parquet keeps describing that sweep.
"""

from __future__ import annotations

import argparse
import os

from harness.errors import ArgumentParser, exits_on_input_error, run_command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(prog="harness-report",
                            description="Sweep report from Parquet alone: report.parquet, figures and tables.")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="results folders (multirun sweeps or run dirs)")
    parser.add_argument("--out", default=None,
                        help="where report.parquet and figures go (default: the DIR when there is one; with "
                             "several, a new folder report_<YYYYmmdd-HHMMSS> in the current directory: a combined "
                             "report never replaces an input's own report.parquet, so --out may not be one of them)")
    parser.add_argument("--no-figures", action="store_true", help="write only report.parquet and print the tables")
    parser.add_argument("--paper", default=None, metavar="GATE_FILE",
                        help="paper reference targets for the Table 6 figure (default: conf/gates/paper_table6.yaml); "
                             "a file given here must exist and hold targets")
    parser.add_argument("--baseline", default=None,
                        help="deployment that capacities are divided by (default: homogeneous_pd, when the report "
                             "has it); one given here must be a deployment of the report")
    return parser.parse_args(argv)


@exits_on_input_error
def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from harness.analysis import report

    paper = _paper_file(args.paper) if args.paper is not None else report.PAPER_FILE
    _, text = report.write_report(args.dirs, out_dir=args.out, figures=not args.no_figures, paper_file=paper,
                                  baseline=args.baseline or report.BASELINE, require_baseline=args.baseline is not None)
    print(text)
    return 0


def _paper_file(path: str) -> str:
    """A --paper file the user chose: it must exist (`conf/gates/...` also means the harness's own copy, as for
    harness-gate), parse as a gate file and hold reference targets; checked before any data is read."""
    from harness.analysis.gates import load_gate, reference_targets
    from harness.errors import InputError
    from harness.gate import gate_file

    found = gate_file(path)
    if not os.path.isfile(found):
        raise InputError(f"--paper {path}: no such file; give a gate file with the paper's reference targets, "
                         f"e.g. conf/gates/paper_table6.yaml")
    if reference_targets(load_gate(found)).empty:
        raise InputError(f"--paper {path}: no reference targets in it (checks with a deployment and a 'target' "
                         f"of capacity_rps, or of ttft_mean_s / ttft_p90_s at lowest_load); "
                         f"e.g. conf/gates/paper_table6.yaml")
    return found


def main(argv: list[str] | None = None) -> None:
    run_command(lambda: run(argv), "harness-report")


if __name__ == "__main__":
    main()
