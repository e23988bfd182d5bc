"""`python -m tests.e2e.peak_rss <out file> <command module> [args...]`: the command as `python -m <command
module> [args...]` runs it; at exit, once everything else the command registered with atexit has run, its
process's peak RSS in bytes (getrusage RUSAGE_SELF; Linux reports ru_maxrss in KiB) goes to <out file>.

The bounded-memory tests (tests/e2e/test_bounded_inputs.py, test_bounded_memory.py) fork it from the CLI
zygote (tools/cli_zygote.py) instead of starting a new interpreter per measured command. A forked child's
peak counts the pages it shares with the zygote (numpy, pandas, pyarrow, Hydra already imported), not a
new interpreter's start-up: the same command peaks 0-22 MB lower forked (measured: the 1e12 ms trace run
203 MB both ways, rate_rps=1e-6 176 vs 185, a 1,000-request run 134 vs 151, `harness-trace stats` of a
tiny trace 91 vs 113). What a command adds to its baseline compares two forked runs; against an absolute
bound (500 MB) that difference is small beside the margin.
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
