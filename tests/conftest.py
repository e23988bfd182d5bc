"""Suite-wide: the order xdist hands modules to its workers (`make test`: `-n 2 --dist loadscope
--no-loadscope-reorder`).

loadscope keeps a module on one worker (its module fixtures run once) and hands modules out in
collection order as workers free up. xdist's default reorder sorts modules by test count, which sends
the modules with few but long tests (the engine, Ray, the install, the CLI sweeps) last: the suite then
ends on one worker running a two-minute tail while the other sits idle. Here the longest work goes
first (longest-processing-time-first), and the hundreds of short unit modules fill the gaps at the end.
The order changes when a test runs, never what it checks.

Which worker runs a module (`pytest_xdist_make_scheduler` below, `--dist loadscope` only):
- The real engine's three modules are one unit: one worker, so one engine server for the session and
  never two at once (two would start twice and time each other's probes on a shared CPU).
- With more workers than cores (`make test` starts cores + 1), the last worker is a waiting lane: it
  runs only the modules in WAITING, which spend most of their wall time waiting on servers, timers and
  a Ray head (measured alone, CPU seconds over wall seconds: 12-58%), while the other workers, one per
  core, run everything else. The cores stay busy through those waits, and the CPU-bound work runs no
  wider than the machine (on a loaded machine a third CPU-bound worker only adds contention). When the
  lane's queue is empty it stops; a core worker with nothing left takes a waiting module still queued.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import io
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

TESTS = Path(__file__).resolve().parent


def _load_cli_zygote() -> None:
    """tools/cli_zygote.py as `cli_zygote`: test modules `import cli_zygote` to run the harness's commands
    forked from a pre-imported Python (its docstring says what stays as in a new process, and which
    tests keep real ones)."""
    spec = importlib.util.spec_from_file_location("cli_zygote", TESTS.parent / "tools" / "cli_zygote.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["cli_zygote"] = module
    spec.loader.exec_module(module)


_load_cli_zygote()


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput") and config.getoption("numprocesses", default=None):
        sys.modules["cli_zygote"].start()  # the xdist controller: one zygote its workers share


def pytest_unconfigure(config: pytest.Config) -> None:
    sys.modules["cli_zygote"].close()


@pytest.hookimpl(hookwrapper=True)
def pytest_collection(session: pytest.Session):
    """No garbage collection while the test modules are imported and their ~1,300 items made: they are
    long-lived and make no cyclic garbage worth a pass (~0.5 s of CPU per xdist worker)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


_gc_module: list[Path] = []


def _cache_yaml_parses() -> None:
    """Each Hydra composition parses its ~30 YAML files again (OmegaConf.load, a pure-Python loader):
    ~15% of a composition's CPU, and the tests compose ~300 times in-process. Here a parse is kept per
    (text, safe loader class) and each caller gets a deep copy of it: the same objects (plain data) a
    fresh parse makes.
    A text that does not parse is parsed anew every time, from a stream with the caller's name, so the
    error and its position are yaml's own. Commands run in subprocesses are untouched."""
    parse = yaml.load
    parsed: dict[tuple[str, str, str], Any] = {}

    def load(stream: Any, Loader: Any) -> Any:  # yaml's own parameter names
        if not (isinstance(Loader, type) and issubclass(Loader, yaml.SafeLoader)):  # plain data only
            return parse(stream, Loader)
        named = not isinstance(stream, str)
        text = stream.read() if named and hasattr(stream, "read") else stream
        if not isinstance(text, str):  # bytes: parsed as yaml would, not kept
            return parse(io.BytesIO(text) if named and hasattr(stream, "read") else text, Loader)
        resolvers = repr(getattr(Loader, "yaml_implicit_resolvers", None))
        key = (f"{Loader.__module__}.{Loader.__qualname__}", resolvers, text)
        if key not in parsed:
            source: Any = text
            if named:
                source = io.StringIO(text)
                source.name = getattr(stream, "name", "<file>")  # yaml's error marks name the caller's file
            parsed[key] = parse(source, Loader)
        return copy.deepcopy(parsed[key])

    yaml.load = load


_cache_yaml_parses()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """At each module's first test, what is alive (modules, collected items, session fixtures) leaves the
    collector's reach (`gc.freeze`), after one full collection, so nothing frozen is garbage. Python's
    full collections otherwise walk those ~170,000 long-lived objects again and again: 16% of the CPU of
    tests/sim and tests/unit/workload. Only the collector's work changes: what a test makes is collected
    as before. The harness's own `gc.unfreeze()` (a command's main(), a load run) undoes it: the next
    module freezes again."""
    if _gc_module and _gc_module[0] == item.path:
        return
    _gc_module[:] = [item.path]
    if gc.get_freeze_count() == 0 and gc.isenabled():
        gc.collect()
        gc.freeze()
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


# Modules that mostly wait (measured alone on this 2-core machine: CPU s / wall s, children included).
WAITING = frozenset({
    "tests/e2e/test_ray_sweep.py",                      # 17.5 / 30: a Ray head booting, sweep drivers
    "tests/integration/test_prefix_cache_live.py",      # 1.6 / 12.8: live runs paced on the wall clock
    "tests/integration/test_time_scale_url.py",         # 3.0 / 8.7: a paced load against harness-serve
    "tests/integration/test_overload.py",               # 0.9 / 5.8
    "tests/integration/test_sim_live_agreement.py",     # 1.3 / 4.8
    "tests/integration/test_fault_targets.py",          # 0.8 / 2.8
    "tests/unit/loadgen/test_loadgen_client.py",        # 0.5 / 1.6
    "tests/unit/live/test_live_app.py",                 # 0.1 / 1.4
    "tests/unit/live/test_live_server_surface.py",      # 0.0 / 0.6
    "tests/unit/live/test_live_clock.py",               # 0.0 / 0.3
})
ONE_UNIT = ("tests/engine/",)  # directories whose modules share one worker (a session fixture each starts)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        """loadscope, with ONE_UNIT directories as one unit and a waiting lane (see the module docstring)."""

        _lane: str | None = None

        def _split_scope(self, nodeid: str) -> str:
            for prefix in ONE_UNIT:
                if nodeid.startswith(prefix):
                    return prefix
            return super()._split_scope(nodeid)

        def schedule(self) -> None:
            if self.collection is None and len(self.nodes) > _cores():  # the first call: every worker is up
                self._lane = max((node.gateway.id for node in self.nodes), key=lambda gw: int(gw.lstrip("gw")))
            super().schedule()

        def _next_scope(self, node) -> str | None:
            if not self.workqueue:
                return None
            waits = node.gateway.id == self._lane
            for scope in self.workqueue:
                if (scope in WAITING) == waits:
                    return scope
            return None if waits else next(iter(self.workqueue))

        def _assign_work_unit(self, node) -> None:
            scope = self._next_scope(node)
            if scope is None:
                return
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)  # pops the first unit: this one

        def _reschedule(self, node) -> None:
            if (node.gateway.id == self._lane and not node.shutting_down and self.workqueue
                    and self._next_scope(node) is None):
                node.shutdown()  # nothing left that waits: it finishes what it holds, the cores have the rest
                return
            super()._reschedule(node)

    return LaneScheduling(config, log)
