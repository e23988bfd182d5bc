"""Suite-wide: the order xdist hands modules to its workers (`make test`: `-n 2 --dist loadscope
--no-loadscope-reorder`).

loadscope keeps a module on one worker (its module fixtures run once) and hands modules out in
collection order as workers free up. xdist's default reorder sorts modules by test count, which sends
the modules with few but long tests (the engine, Ray, the install, the CLI sweeps) last: the suite then
ends on one worker running a two-minute tail while the other sits idle. Here the longest work goes
first (longest-processing-time-first), and the hundreds of short unit modules fill the gaps at the end.
The order changes when a test runs, never what it checks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Heaviest first: modules marked `slow` and the real engine's (a server per worker), then the CLI and
# server tests that spawn processes, then the emulator runs, then the unit tests.
DIRECTORY_RANK = {"engine": 0, "e2e": 1, "integration": 1, "sim": 2, "unit": 3}


def _rank(item: pytest.Item) -> int:
    if item.get_closest_marker("slow") is not None:
        return 0
    try:
        top = item.path.resolve().relative_to(TESTS).parts[0]
    except ValueError:
        return len(DIRECTORY_RANK)
    return DIRECTORY_RANK.get(top, len(DIRECTORY_RANK))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A stable sort on the module's rank: a module's tests stay together and in their own order.
    module_rank: dict[Path, int] = {}
    for item in items:
        module_rank[item.path] = min(module_rank.get(item.path, len(DIRECTORY_RANK)), _rank(item))
    items.sort(key=lambda item: module_rank[item.path])
