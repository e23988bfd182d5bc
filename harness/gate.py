"""`harness-gate DIR... --gate conf/gates/<name>.yaml`: pass/fail perf checks on a sweep report.

Exit status: 0 every check passed, 1 some check failed (the table names it) or the command crashed
(one `error: harness-gate crashed ...` line), 2 bad input (gate file or results folder), 130 interrupted.
"""

from __future__ import annotations

import argparse

from harness.errors import ArgumentParser, exits_on_input_error, run_command


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = ArgumentParser(prog="harness-gate",
                            description="Pass/fail perf checks on a sweep report; exit 0 pass, 1 fail, 2 bad input.")
    parser.add_argument("dirs", nargs="+", metavar="DIR",
                        help="results folders (run dirs are re-read) or report.parquet files")
    parser.add_argument("--gate", required=True, metavar="FILE", help="gate file, e.g. conf/gates/paper_case.yaml")
    return parser.parse_args(argv)


@exits_on_input_error
def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from harness.analysis import gates, runs

    gate = gates.load_gate(gate_file(args.gate))  # a bad gate file fails before any data is read
    report = runs.collect(args.dirs)
    results = gates.evaluate(gate, report, runs.collect_plans(args.dirs, report))
    print(f"gate {gate.name} ({gate.path}) on {', '.join(args.dirs)}")
    print(gates.format_results(gate, results))
    return 0 if all(res.passed for res in results) else 1


def gate_file(path: str) -> str:
    """A relative path that is not under the current directory but is in the harness's own conf/ tree
    (`conf/gates/...`, installed or source) means that file."""
    from pathlib import Path

    from harness.resources import data_root

    packaged = data_root() / path
    return str(packaged) if not Path(path).exists() and not Path(path).is_absolute() and packaged.is_file() else path


def main(argv: list[str] | None = None) -> None:
    # A crash exits 1 like a failed gate, but its one line says "crashed (a bug, ...)" and where the
    # traceback went, so CI logs tell the two apart; bad input is 2, Ctrl-C/SIGTERM 130.
    run_command(lambda: run(argv), "harness-gate")


if __name__ == "__main__":
    main()
