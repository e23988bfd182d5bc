"""Running the harness's commands as a user would (in this process: tests/commands.py), on a small live workload."""

from __future__ import annotations

import subprocess
from pathlib import Path

import commands  # tests/commands.py

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["deployment=prfaas_pd", "workload=fixed", "workload.input_tokens=4096", "workload.output_tokens=32",
         "workload.num_requests=30", "loadgen.rate_rps=10", "loadgen.progress=false", "analysis.figures=false"]


def python(*args, timeout=120, **kw) -> subprocess.CompletedProcess[str]:
    """`python *args` (`-m <command> ...`: in this process, see tests/commands.py)."""
    return commands.run(list(args), cwd=ROOT, timeout=timeout, **kw)
