"""`python -m tests.e2e.crash_hook <module.function> <command module> [args...]`: the command as `python -m
<command module> [args...]` runs it, with <module.function> replaced by one that raises ZeroDivisionError.

tests/e2e/test_exit_codes.py forks it from the CLI zygote (tools/cli_zygote.py: `-m` and the caller's
environment), where a `sitecustomize` hook on PYTHONPATH would need a new interpreter. The function is
replaced before the command's module runs, as that hook replaces it at start-up; `sys.argv` is what
`python -m` has until the module runs (`-m` first, then the module's file), so the harness sets up its
signal handlers as in a new process."""

from __future__ import annotations

import importlib
import runpy
import sys


def _crash(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("injected crash for a test")


def main() -> None:
    target, command, *args = sys.argv[1:]
    sys.argv = ["-m", *args]
    module_name, name = target.rsplit(".", 1)
    setattr(importlib.import_module(module_name), name, _crash)
    runpy.run_module(command, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
