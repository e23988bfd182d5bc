"""`python -m tests.e2e.count_compositions <args...>`: `harness <args...>` (harness.cli's main) with Hydra's
compositions counted. Prints `compositions N` at exit (atexit: a command that exits still prints it) and,
once main() returns, `modules <every module imported>`.

tests/e2e/test_fast_start.py runs it in a new interpreter where it reads what a run imports, and forked
from the CLI zygote (tools/cli_zygote.py) where it only counts compositions. It imports
`hydra._internal.hydra` first (to count): a run imports it anyway, so the module set is the run's own."""

from __future__ import annotations

import atexit
import sys
from typing import Any

from hydra._internal.hydra import Hydra


def main() -> None:
    calls: list[Any] = []
    compose = Hydra.compose_config

    def counted(self: Hydra, *args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs.get("run_mode"))
        return compose(self, *args, **kwargs)

    Hydra.compose_config = counted  # type: ignore[method-assign]
    atexit.register(lambda: print("compositions", len(calls)))
    sys.argv = ["harness", *sys.argv[1:]]
    from harness.cli import main as harness_main

    harness_main()
    print("modules", " ".join(sorted(sys.modules)))


if __name__ == "__main__":
    main()
