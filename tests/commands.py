"""The harness's commands for tests: in this process (cheap) or in a new interpreter (where a process matters).

`run(["-m", <module>, *args])` has the shape of `subprocess.run(..., capture_output=True, text=True)`'s
answer (returncode, stdout, stderr) for both:
- a harness command (`harness`, `harness.plan`, ...) runs in this process: its `main()` with `sys.argv`
  as `python -m` sets it, stdout, stderr and stdin swapped for strings, the cwd and the environment
  given, Python's default warning filters (not the suite's `error`) and the root logger put back after
  (Hydra configures logging on each run). A new interpreter costs ~1-2 s of CPU importing numpy,
  pandas, pyarrow, scipy and Hydra; this costs the command's own work only. What the processes the
  command starts (a parallel sweep's joblib workers) print goes to the test process's own stdout, not
  into the answer: tests read those runs' files instead.
- anything else (a test helper module such as tests/e2e/peak_rss.py), or `new_process=True`, runs as
  `python -m ...` in a new interpreter: signals, exit at interpreter level, memory peaks and start-up
  itself need one. tests/e2e/test_exit_codes.py and the interrupt tests keep real processes for each command.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import os
import subprocess
import sys
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# `python -m <name>` -> the module whose main() it runs (harness/__main__.py calls harness.cli's).
COMMANDS = {"harness": "harness.cli", "harness.__main__": "harness.cli", **{
    f"harness.{verb}": f"harness.{verb}" for verb in ("plan", "serve", "load", "report", "gate", "trace", "profile")}}


def run(argv: Sequence[str], *, cwd: str | Path = ROOT, input: str | None = None,
        env: Mapping[str, str] | None = None, timeout: float = 300,
        new_process: bool = False) -> subprocess.CompletedProcess[str]:
    """`python *argv` (argv starts with "-m <module>"): in this process when the module is a harness command
    and `new_process` is not set, else in a new interpreter (`timeout` then kills it)."""
    argv = list(argv)
    module = argv[1] if len(argv) > 1 and argv[0] == "-m" else None
    if new_process or module not in COMMANDS:
        return subprocess.run([sys.executable, *argv], cwd=cwd, input=input, env=None if env is None else dict(env),
                              capture_output=True, text=True, timeout=timeout, check=False)
    return in_process(module, argv[2:], cwd=cwd, input=input, env=env)


def in_process(module: str, args: Sequence[str], *, cwd: str | Path = ROOT, input: str | None = None,
               env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m <module> *args` as a call of the command's main() in this process."""
    target = importlib.import_module(COMMANDS[module])
    main_file = Path(str(target.__file__))
    if COMMANDS[module] == "harness.cli":  # `python -m harness` runs the package's __main__.py
        main_file = main_file.with_name("__main__.py")
    out, err = io.StringIO(), io.StringIO()
    status = 0
    with _as_a_process([str(main_file), *args], cwd, env, input, out, err):
        try:
            target.main()
        except SystemExit as exc:
            status = _status(exc.code, err)
        except BaseException:  # an uncaught exception: what the interpreter prints, and exit 1
            traceback.print_exc(file=err)
            status = 1
    return subprocess.CompletedProcess(["-m", module, *args], status, out.getvalue(), err.getvalue())


def _status(code: object, err: io.StringIO) -> int:
    """The exit status of `SystemExit(code)`, as the interpreter makes it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=err)
    return 1


@contextlib.contextmanager
def _as_a_process(argv: list[str], cwd: str | Path, env: Mapping[str, str] | None, stdin: str | None,
                  out: io.StringIO, err: io.StringIO) -> Iterator[None]:
    """What a command reads of its process (argv, cwd, environment, standard streams, warning filters) set
    for the call, and put back after with the root logger's handlers and level."""
    saved_argv, saved_cwd, saved_env = sys.argv, os.getcwd(), dict(os.environ)
    saved_stdin = sys.stdin
    root = logging.getLogger()
    saved_handlers, saved_level = list(root.handlers), root.level
    sys.argv = argv
    os.chdir(cwd)
    if env is not None:
        _set_environment(env)
    sys.stdin = io.StringIO(stdin or "")
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            warnings.resetwarnings()
            for category in (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning):
                warnings.simplefilter("ignore", category)  # Python's defaults
            yield
    finally:
        sys.argv, sys.stdin = saved_argv, saved_stdin
        os.chdir(saved_cwd)
        _set_environment(saved_env)
        for handler in root.handlers:
            if handler not in saved_handlers:
                handler.close()
        root.handlers[:] = saved_handlers
        root.setLevel(saved_level)


def _set_environment(env: Mapping[str, str]) -> None:
    """os.environ made equal to `env`, touching only the variables that differ (threads of earlier tests, a
    server's or a library's pool, may read the environment meanwhile)."""
    for name in [name for name in os.environ if name not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value
