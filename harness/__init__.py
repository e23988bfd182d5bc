"""prfaas-harness: trace-driven benchmarking of cross-datacenter PD-disaggregated LLM serving."""

import os as _os
import sys as _sys

__version__ = "0.1.0"


def command_environment() -> None:
    """The process settings of a harness command, each unless the user chose otherwise. Both are read
    once, when their library loads, so this runs before pyarrow and numpy are imported; a sweep's
    worker processes inherit them. `benchmarks/bench_sim.py` calls it to measure what a command runs."""
    # Arrow's buffers from malloc, not Arrow's own mimalloc pool: a run alternates between Arrow (parts,
    # merge, columns) and numpy/Python (emulator, metrics), and one heap reuses what each phase frees
    # instead of keeping two high-water marks. 200K-request sim run: peak RSS 213 MB against 255 MB
    # (docs/results/benchmarks.md).
    _os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")
    # BLAS on one thread: the harness does no matrix work that threads would speed up, and OpenBLAS's
    # idle threads (numpy's and scipy's) spin after loading and after each call. That was ~0.2 CPU s per
    # process and ~25% of a 10,000-request sim run's CPU on a 2-core machine, taken from the other jobs
    # of a parallel sweep (docs/results/benchmarks.md).
    _os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


# A command (`python -m harness...` or a `harness*` console script) stops cleanly on SIGINT/SIGTERM
# from its first moment, imports included; a library user's signals and environment are left alone.
if _sys.argv and (_sys.argv[0] == "-m" or _sys.argv[0].replace("\\", "/").rsplit("/", 1)[-1].startswith("harness")):
    from harness.errors import install_early_signal_handlers

    install_early_signal_handlers()
    command_environment()
