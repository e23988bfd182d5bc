"""The truncated-normal quantiles that replace scipy.stats at start-up: the same numbers to the last bit,
and no scipy.stats import on the way."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import scipy  # scipy.stats imports on first use (~0.5 s): only where these tests run

from harness.workload.lengths import truncnorm_ppf

ROOT = Path(__file__).resolve().parents[3]
# Both inversion branches (a < 0: lower tail; a >= 0: upper tail), intervals in either tail, a
# symmetric sliver, and the paper's workload (mu 9.90, sigma 1.00 on [128, 131072]).
BOUNDS = [(-5.0, 1.9), (1.3, 3.0), (-3.0, -1.0), (0.0, 2.0), (2.0, 40.0), (-40.0, -2.0), (-1e-9, 1e-9),
          ((np.log(128) - 9.9) / 1.0, (np.log(131072) - 9.9) / 1.0)]


@pytest.mark.parametrize(("a", "b"), BOUNDS)
def test_bit_identical_to_scipy_stats(a, b):
    q = np.concatenate([np.random.default_rng(1).random(20_000), [0.0, 1.0, 1e-300, 1.0 - 1e-16, 0.5]])
    assert np.array_equal(truncnorm_ppf(q, a, b), scipy.stats.truncnorm.ppf(q, a, b), equal_nan=True)


def test_sampling_the_paper_workload_does_not_import_scipy_stats():
    code = ("import sys, numpy as np\n"
            "from harness.workload.lengths import TruncatedLogNormal\n"
            "d = TruncatedLogNormal(9.9, 1.0, 128, 131072)\n"
            "d.sample(100, np.random.default_rng(0)); d.grid(100); d.mean()\n"
            "print('scipy.stats' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"
