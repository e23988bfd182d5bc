"""`harness-report DIR... [--out DIR] [--no-figures]`: the sweep report from Parquet alone.

Finds every run directory under the DIRs, writes report.parquet and the figures into --out (default:
the first DIR) and prints the per-deployment and per-run tables. Nothing is re-run.
"""

from __future__ import annotations

import argparse

from harness.errors import ArgumentParser, exits_on_input_error, run_command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(prog="harness-report",
                            description="Sweep report from Parquet alone: report.parquet, figures and tables.")
    parser.add_argument("dirs", nargs="+", metavar="DIR", help="results folders (multirun sweeps or run dirs)")
    parser.add_argument("--out", default=None, help="where report.parquet and figures go (default: the first DIR)")
    parser.add_argument("--no-figures", action="store_true", help="write only report.parquet and print the tables")
    parser.add_argument("--paper", default=None, metavar="GATE_FILE",
                        help="paper reference targets for the Table 6 figure (default: conf/gates/paper_table6.yaml)")
    parser.add_argument("--baseline", default=None,
                        help="deployment that capacities are divided by (default: homogeneous_pd)")
    return parser.parse_args(argv)


@exits_on_input_error
def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from harness.analysis import report

    _, text = report.write_report(args.dirs, out_dir=args.out, figures=not args.no_figures,
                                  paper_file=args.paper or report.PAPER_FILE,
                                  baseline=args.baseline or report.BASELINE)
    print(text)
    return 0


def main(argv: list[str] | None = None) -> None:
    run_command(lambda: run(argv), "harness-report")


if __name__ == "__main__":
    main()
