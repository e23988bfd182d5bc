"""`make engine`'s build script: a cached build is reused as is, and a missing tool is one line naming
the package to install (exit 2), before anything is downloaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.engine import build

ROOT = Path(__file__).resolve().parents[3]


def test_a_cached_binary_is_returned_without_building(tmp_path, monkeypatch):
    monkeypatch.setenv("PRFAAS_CACHE", str(tmp_path))
    binary = tmp_path / f"llama-cpp-python-{build.LLAMA_CPP_PYTHON}" / "bin" / "llama-server"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    monkeypatch.setattr(build, "_build", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rebuilt")))
    assert build.build_server() == binary


def test_missing_cmake_is_one_line_with_the_apt_package(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with python's own directory only: no cmake, no compiler
    bin_dir.mkdir()
    env = {**os.environ, "PRFAAS_CACHE": str(tmp_path / "cache"), "PATH": str(bin_dir)}
    proc = subprocess.run([sys.executable, "-m", "harness.engine.build"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: cmake not found: install it with `apt-get install -y cmake`"]
    assert not list((tmp_path / "cache").rglob("*.tar.gz"))  # nothing downloaded


def test_the_build_flags_keep_the_web_ui_download_off():
    assert "-DLLAMA_USE_PREBUILT_UI=OFF" in build.CMAKE_FLAGS  # its default fetches a UI: no network here
