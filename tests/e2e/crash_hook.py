"""`python -m tests.e2e.crash_hook [--every-process HOOK_DIR] <module.function> <command module> [args...]`:
the command as `python -m <command module> [args...]` runs it, with <module.function> replaced by one that
raises ZeroDivisionError.

tests/e2e/test_exit_codes.py runs it in a new process (`-m` and the caller's environment). The function is
replaced before the command's module runs, as that hook replaces it at start-up; `sys.argv` is what
`python -m` has until the module runs (`-m` first, then the module's file), so the harness sets up its
signal handlers as in a new process.

With `--every-process HOOK_DIR` (a folder with the `sitecustomize.py` that tests/e2e/test_exit_codes.py writes),
the function is broken in every process of the run, as when the whole command starts with HOOK_DIR on
PYTHONPATH: here (the hook run in this process) and in each Python the command starts (a parallel
sweep's joblib workers), which inherit HARNESS_TEST_CRASH and PYTHONPATH from this process's
environment. The hook replaces the function when its module is first imported, not at start-up, so
the helpers that never import it (joblib's resource trackers) start as they would without it. This
process's pid goes to HOOK_DIR/command.pid, and HARNESS_TEST_CRASH_DIR=HOOK_DIR tells the hook where to
say which processes crashed.
"""

from __future__ import annotations

import importlib
import os
import runpy
import sys


def _crash(*args: object, **kwargs: object) -> None:
    raise ZeroDivisionError("injected crash for a test")


def main() -> None:
    hook_dir = None
    if sys.argv[1] == "--every-process":
        hook_dir = sys.argv[2]
        del sys.argv[1:3]
    target, command, *args = sys.argv[1:]
    sys.argv = ["-m", *args]
    if hook_dir is None:
        module_name, name = target.rsplit(".", 1)
        setattr(importlib.import_module(module_name), name, _crash)
    else:
        paths = [hook_dir, *(p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p), os.getcwd()]
        os.environ.update(HARNESS_TEST_CRASH=target, HARNESS_TEST_CRASH_DIR=hook_dir, PYTHONPATH=os.pathsep.join(paths))
        with open(os.path.join(hook_dir, "command.pid"), "w") as f:
            f.write(str(os.getpid()))
        runpy.run_path(os.path.join(hook_dir, "sitecustomize.py"))
    runpy.run_module(command, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
