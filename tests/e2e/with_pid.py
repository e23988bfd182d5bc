"""`python -m tests.e2e.with_pid <pid file> <command module> [args...]`: the command as `python -m <command
module> [args...]` runs it, once this process's id is in <pid file> (written to a temporary name, then
renamed: a reader sees the whole number or no file).

tests/e2e/test_interrupt.py forks it from the CLI zygote (tools/cli_zygote.py), whose `run()` waits for
the command and never says its pid: the test reads it here to signal the run midway.
"""

from __future__ import annotations

import os
import runpy
import sys


def main() -> None:
    pid_file, command, *args = sys.argv[1:]
    with open(f"{pid_file}.tmp", "w") as f:
        f.write(str(os.getpid()))
    os.replace(f"{pid_file}.tmp", pid_file)
    sys.argv = ["-m", *args]
    runpy.run_module(command, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
