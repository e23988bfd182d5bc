"""Build llama.cpp's llama-server from the pinned llama-cpp-python sdist, and a random-weight model.

Both land under ``~/.cache/prfaas-harness/`` (``PRFAAS_CACHE`` overrides), keyed by version (the
binary) and by model spec + seed (the model), so only the first run on a machine pays for them.
Network: PyPI only (``pip download`` of the sdist). Run: ``python -m harness.engine.build``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from harness.engine.model import ModelSpec, build_model

LLAMA_CPP_PYTHON = "0.3.36"  # vendors llama.cpp 0c1e570 (server 0.5.0-dev)

CMAKE_FLAGS = [
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # its default downloads a web UI: no network here
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DGGML_CCACHE=OFF",
]


class BuildError(RuntimeError):
    """A missing tool or a failed step, in one line."""


@dataclass(frozen=True)
class Engine:
    binary: Path
    model: Path
    version: str


def cache_root() -> Path:
    return Path(os.environ.get("PRFAAS_CACHE", Path.home() / ".cache" / "prfaas-harness"))


def _need(tool: str, package: str) -> None:
    if shutil.which(tool) is None:
        raise BuildError(f"{tool} not found: install it with `apt-get install -y {package}`")


def _run(cmd: list[str], log: Path, cwd: Path | None = None) -> None:
    with log.open("a") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        done = subprocess.run(cmd, cwd=cwd, stdout=fh, stderr=subprocess.STDOUT, check=False)
    if done.returncode != 0:
        raise BuildError(f"`{' '.join(cmd[:3])} ...` failed (exit {done.returncode}); see {log}")


def build_server(version: str = LLAMA_CPP_PYTHON, jobs: int = 2) -> Path:
    """Return the cached llama-server binary for ``version``, building it when missing."""
    root = cache_root() / f"llama-cpp-python-{version}"
    binary = root / "bin" / "llama-server"
    if binary.is_file():
        return binary
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one build at a time; a waiter finds the binary built
        if binary.is_file():
            return binary
        return _build(version, root, binary, jobs)


def _build(version: str, root: Path, binary: Path, jobs: int) -> Path:
    for tool, pkg in (("cmake", "cmake"), ("cc", "build-essential"), ("c++", "build-essential"),
                      ("make", "build-essential")):
        _need(tool, pkg)
    log = root / "build.log"
    sdist = root / f"llama_cpp_python-{version}.tar.gz"
    if not sdist.is_file():
        print(f"engine: downloading llama-cpp-python=={version} sdist from PyPI", file=sys.stderr)
        _run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
              "--dest", str(root), f"llama-cpp-python=={version}"], log)
        found = sorted(root.glob("llama_cpp_python-*.tar.gz"))
        if not found:
            raise BuildError(f"pip download produced no sdist in {root}; see {log}")
        sdist = found[0]
    src = root / "src"
    if not (src / "vendor" / "llama.cpp" / "CMakeLists.txt").is_file():
        shutil.rmtree(src, ignore_errors=True)
        tmp = root / "src.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp, filter="data")
        (top,) = list(tmp.iterdir())
        top.rename(src)
        tmp.rmdir()
    llama = src / "vendor" / "llama.cpp"
    build = root / "build"
    print(f"engine: building llama-server (~10 min on 2 cores; log {log})", file=sys.stderr)
    nice = ["nice", "-n", "10"] if shutil.which("nice") else []
    _run([*nice, "cmake", "-S", str(llama), "-B", str(build), *CMAKE_FLAGS], log)
    _run([*nice, "cmake", "--build", str(build), "--target", "llama-server", "-j", str(jobs)], log)
    built = build / "bin" / "llama-server"
    if not built.is_file():
        raise BuildError(f"the build finished without {built}; see {log}")
    binary.parent.mkdir(parents=True, exist_ok=True)
    tmp_bin = binary.with_suffix(".tmp")
    shutil.copy2(built, tmp_bin)
    tmp_bin.rename(binary)  # atomic: a half-copied binary is never taken as built
    shutil.rmtree(build, ignore_errors=True)
    shutil.rmtree(src, ignore_errors=True)
    return binary


def ensure_engine(spec: ModelSpec | None = None, version: str = LLAMA_CPP_PYTHON) -> Engine:
    """The cached binary and model, built when missing (the fixture and `make engine` share this)."""
    binary = build_server(version)
    model = build_model(spec or ModelSpec(), cache_root() / "models")
    return Engine(binary=binary, model=model, version=version)


def main(argv: list[str] | None = None) -> int:
    try:
        engine = ensure_engine()
    except BuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"engine: {engine.binary}")
    print(f"model: {engine.model}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
