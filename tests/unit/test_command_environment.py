"""What a harness command sets in its process environment (harness/__init__.py), and what a library user keeps."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

_SHOW = ("import sys; sys.argv[0] = {argv0!r}; import harness, os; "
         "print(os.environ.get('OPENBLAS_NUM_THREADS'), os.environ.get('ARROW_DEFAULT_MEMORY_POOL'))")


def _env_seen(argv0: str, **env: str) -> list[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "ARROW_DEFAULT_MEMORY_POOL")}
    out = subprocess.run([sys.executable, "-c", _SHOW.format(argv0=argv0)], env={**clean, **env},
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return out.split()


@pytest.mark.parametrize("argv0", ["-m", "/usr/local/bin/harness-plan"])
def test_a_command_runs_blas_on_one_thread_and_arrow_on_malloc(argv0):
    assert _env_seen(argv0) == ["1", "system"]


def test_a_users_choice_is_kept():
    assert _env_seen("-m", OPENBLAS_NUM_THREADS="4", ARROW_DEFAULT_MEMORY_POOL="jemalloc") == ["4", "jemalloc"]


def test_a_library_user_gets_no_settings():
    assert _env_seen("my_script.py") == ["None", "None"]
