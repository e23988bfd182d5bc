"""`python -m tests.e2e.peak_rss <out file> <command module> [args...]`: the command as `python -m <command
module> [args...]` runs it; at exit, once everything else the command registered with atexit has run, its
process's peak RSS in bytes (getrusage RUSAGE_SELF; Linux reports ru_maxrss in KiB) goes to <out file>.

The bounded-memory tests (tests/e2e/test_bounded_inputs.py, test_bounded_memory.py) run it in a new
interpreter per measured command (tests/commands.py), so the peak includes the interpreter's start-up
(numpy, pandas, pyarrow, Hydra imported): what a command adds to its baseline compares two such runs, and
against an absolute bound (500 MB) the start-up is small beside the margin.
"""

from __future__ import annotations

import atexit
import resource
import runpy
import sys


def _write_peak(path: str) -> None:
    with open(path, "w") as f:
        f.write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024))


def main() -> None:
    out, command, *args = sys.argv[1:]
    atexit.register(_write_peak, out)  # registered first: runs last
    sys.argv = ["-m", *args]
    runpy.run_module(command, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
