"""Suite-wide: the order xdist hands modules to its workers (`make test`: `-n <cores + 2> --dist loadscope
--no-loadscope-reorder`), and Hydra compositions kept per test process (`_cache_compositions`).

loadscope keeps a module on one worker (its module fixtures run once) and hands modules out in
collection order as workers free up. xdist's default reorder sorts modules by test count, which sends
the modules with few but long tests (the engine, Ray, the install, the CLI sweeps) last: the suite then
ends on one worker running a two-minute tail while the other sits idle. Here the longest work goes
first (longest-processing-time-first), and the hundreds of short unit modules fill the gaps at the end.
The order changes when a test runs, never what it checks.

Which worker runs a module (`pytest_xdist_make_scheduler` below, `--dist loadscope` only):
- The real engine's three modules are one unit: one worker, so its two servers (the session's and the
  validate_engine suite's own, tests/engine/conftest.py) start once each, not once per worker.
- With more workers than cores (`make test` starts cores + 2), the last worker is a waiting lane: it
  runs only the modules in WAITING, which spend most of their wall time waiting on servers, timers and
  a Ray head (measured alone, CPU seconds over wall seconds: 12-58%), while the other workers, one per
  core, run everything else. The cores stay busy through those waits, and the CPU-bound work runs no
  wider than the machine (on a loaded machine a third CPU-bound worker only adds contention). When the
  lane's queue is empty it stops; a core worker with nothing left takes a waiting module still queued.
- With two workers beyond the cores, the one before the waiting lane is the engine lane: it runs the
  engine's unit alone and stops (alone: ~20 CPU s, servers and commands included; ~28 before its
  designs shrank again and the validate_engine suite was forked from the zygote, ~40 over ~70 s, mostly
  waits, before the suite ran beside the other engine tests). In the waiting lane it would run after the
  lane's ~75 s of modules, not beside them. With one extra worker the engine's unit goes to a core
  worker, first.
"""

from __future__ import annotations

import copy
import gc
import importlib.util
import io
import os
import pickle
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

TESTS = Path(__file__).resolve().parent


@pytest.fixture
def closed_url():
    """A port bound on 127.0.0.1 that does not listen: connections to it are refused, and no one else gets it."""
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _one_error_line(proc: Any) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert "Traceback" not in proc.stderr and "crashed" not in proc.stderr
    return lines[0]


@pytest.fixture
def one_error_line():
    """one_error_line(proc) -> a command's one stderr line of bad input, after checking exit 2 and no traceback."""
    return _one_error_line


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
    if not hasattr(config, "workerinput"):
        _drop_stale_bytecode()


def _drop_stale_bytecode() -> None:
    """`make test` caches bytecode under PYTHONPYCACHEPREFIX, also for the files tests put in pytest's
    temporary dirs (a wheel installed in one, ~2 MB a run): pytest keeps the last three runs' dirs, and
    the cache's mirror of an older one goes with it."""
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if not prefix:
        return
    for source_root in Path(tempfile.gettempdir()).glob("pytest-of-*"):
        mirror_root = Path(prefix) / source_root.resolve().relative_to(source_root.resolve().anchor)
        for mirror in mirror_root.glob("pytest-*"):
            if not (source_root / mirror.name).exists():
                shutil.rmtree(mirror, ignore_errors=True)


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


def _source_state(source: Any) -> tuple:
    """What a config source's configs are made of: a directory's files (path, mtime, size; a file
    rewritten in place changes its key), the ConfigStore's nodes (by identity: storing a node again
    changes the key), a package's own path (installed files)."""
    scheme = source.scheme()
    if scheme == "file":
        files = []
        for folder, _dirs, names in os.walk(source.path, followlinks=True):
            for name in names:
                path = os.path.join(folder, name)
                try:
                    stat = os.stat(path)
                except OSError:
                    continue
                files.append((path, stat.st_mtime_ns, stat.st_size))
        return (scheme, source.provider, source.path, os.path.isdir(source.path), tuple(sorted(files)))
    if scheme == "structured":
        from hydra.core.config_store import ConfigStore

        nodes: list[Any] = []

        def walk(tree: dict, prefix: str) -> None:
            for name, value in tree.items():
                if isinstance(value, dict):
                    walk(value, f"{prefix}{name}/")
                else:
                    nodes.append((f"{prefix}{name}", value))

        walk(ConfigStore.instance().repo, "")
        return (scheme, source.provider, source.path, tuple((name, id(node)) for name, node in nodes)), nodes
    return (scheme, source.provider, source.path)


def _kept(obj: Any) -> tuple[bool, Any]:
    """What a cache keeps of `obj`: its pickle (a copy made by unpickling costs about half a deep copy of
    an OmegaConf tree), or a deep copy of it when it does not pickle."""
    try:
        return True, pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False, copy.deepcopy(obj)


def _copy(kept: tuple[bool, Any]) -> Any:
    pickled, value = kept
    return pickle.loads(value) if pickled else copy.deepcopy(value)


def _cache_compositions() -> None:
    """A Hydra composition (~0.13 s of CPU) is ~45% its defaults list (configs found, loaded, their
    defaults expanded) and ~45% merging the listed configs into one; the tests compose ~340 times
    in-process, many with the same inputs. Here the defaults list, the merge and each config file's load
    keep their result per process, keyed on everything they read: the config sources (each file's path,
    mtime and size; the ConfigStore's nodes), the primary config's name, the group choices among the
    overrides, the version base. A hit returns a copy (unpickled: ~3 ms for a whole config, flags,
    types and parents as made) of what the step returned the first time; Hydra's `${now:...}` values
    that merging resolved are evaluated again. All the rest of a composition runs as always (overrides
    applied, `hydra.runtime`, `hydra.job`, struct flags), so errors, overrides and the returned objects
    are Hydra's own: a miss ~0.08 s, a hit ~0.01 s. A step that raises keeps nothing (the next call
    raises again, the same way). tests/e2e/test_compose_cache.py checks all of it against a process
    without this cache. Commands run in subprocesses are untouched."""
    import hydra._internal.config_loader_impl as loader
    from hydra import version

    create_defaults_list = loader.create_defaults_list
    compose_from_defaults = loader.ConfigLoaderImpl._compose_config_from_defaults_list
    lists: dict[tuple, Any] = {}
    composed: dict[tuple, Any] = {}
    counts = {"defaults lists": [0, 0], "compositions": [0, 0]}  # [made, reused]: tools/suite_timeline.py

    def sources_key(repo: Any) -> tuple:
        """The key of `repo`'s sources as they are now (hydra adds the primary config's search path to a
        repository after loading that config: a new list of sources, a new key)."""
        sources = tuple(repo.get_sources())
        kept = getattr(repo, "_suite_sources", None)
        if kept is None or len(kept[0]) != len(sources) or any(
                a is not b for a, b in zip(kept[0], sources, strict=True)):
            parts: list[tuple] = []
            pinned: list[Any] = []
            for source in sources:
                state = _source_state(source)
                if source.scheme() == "structured":
                    state, nodes = state
                    pinned.append(nodes)  # the nodes stay alive with the entry: their ids are not reused
                parts.append(state)
            kept = (sources, (tuple(parts), str(version.getbase())), pinned)
            repo._suite_sources = kept
        return kept[1]

    def pinned(repo: Any) -> Any:
        return repo._suite_sources[2]

    def config_overrides(repo: Any, overrides_list: list) -> list | None:
        """The overrides that set config values (not a group's choice), as hydra's `Overrides` sorts
        them; None when that is not plain (a sweep, an override whose value does not evaluate)."""
        try:
            if any(o.is_sweep_override() for o in overrides_list):
                return None
            return [o for o in overrides_list if isinstance(o.value(), dict) or not repo.group_exists(o.key_or_group)]
        except Exception:  # hydra raises its own error for it
            return None

    def cached_defaults_list(repo: Any, config_name: Any, overrides_list: list, prepend_hydra: bool,
                             skip_missing: bool) -> Any:
        """The defaults list depends on the group choices alone; the overrides that set config values
        only ride along in it (`config_overrides`, applied after composing): they are not in the key, and
        a reused list carries this call's own. A list is kept only when hydra sorted the overrides as
        `config_overrides` did."""
        values = config_overrides(repo, overrides_list)
        if values is None:
            return create_defaults_list(repo=repo, config_name=config_name, overrides_list=overrides_list,
                                        prepend_hydra=prepend_hydra, skip_missing=skip_missing)
        choices = tuple(o.input_line for o in overrides_list if not any(o is v for v in values))
        key = (sources_key(repo), config_name, choices, prepend_hydra, skip_missing)
        if key not in lists:
            result = create_defaults_list(repo=repo, config_name=config_name, overrides_list=overrides_list,
                                          prepend_hydra=prepend_hydra, skip_missing=skip_missing)
            if [id(o) for o in result.config_overrides] == [id(o) for o in values]:
                lists[key] = (_kept(result), pinned(repo))
            counts["defaults lists"][0] += 1
            return result
        counts["defaults lists"][1] += 1
        result = _copy(lists[key][0])
        result.config_overrides = result.overrides.config_overrides = values
        return result

    def cached_compose(self: Any, defaults: list, repo: Any) -> Any:
        """Merging the listed configs resolves Hydra's `${now:...}` (its default run and sweep dirs) into
        the merged config's resolver cache, at that moment: a reused merge gets those entries evaluated
        again, now, by the `now` resolver registered now. A merge whose cache holds another resolver's
        values is not kept."""
        key = (sources_key(repo), tuple((d.config_path, d.parent, d.package, d.is_self, d.primary, d.override_key)
                                        for d in defaults))
        if key not in composed:
            result = compose_from_defaults(self, defaults=defaults, repo=repo)
            if set(result._metadata.resolver_cache) <= {"now"}:
                composed[key] = (_kept(result), pinned(repo))
            counts["compositions"][0] += 1
            return result
        counts["compositions"][1] += 1
        result = _copy(composed[key][0])
        cache = result._metadata.resolver_cache
        if cache.get("now"):
            from omegaconf.basecontainer import BaseContainer

            stale, cache["now"] = cache["now"], {}
            for args in stale:  # plain strings (patterns): `now` takes no other arguments
                BaseContainer._resolvers["now"](result, result, result, args, args)
        return result

    # One config file (or ConfigStore node) loaded, its defaults list read: kept per sources and path.
    from hydra._internal.config_repository import ConfigRepository

    load_config = ConfigRepository.load_config
    loaded: dict[tuple, Any] = {}

    def cached_load(self: Any, config_path: str) -> Any:
        key = (sources_key(self), config_path)
        if key not in loaded:
            result = load_config(self, config_path)
            if result is None or not result.config._metadata.resolver_cache:  # nothing resolved yet (see above)
                loaded[key] = (_kept(result), pinned(self))
            return result
        return _copy(loaded[key][0])

    ConfigRepository.load_config = cached_load
    loader.create_defaults_list = cached_defaults_list
    cached_defaults_list.counts = counts  # type: ignore[attr-defined]
    loader.ConfigLoaderImpl._compose_config_from_defaults_list = cached_compose

    # Each composition first deep-copies the config repository (its sources get set up on the copy),
    # the ConfigStore included: all its schemas, ~40% of what a cached composition costs. The store is
    # only read through the copy (each load deep-copies the node it returns), so the copy shares it.
    from hydra._internal.config_repository import CachingConfigRepository
    from hydra.core.config_store import ConfigStore

    def init(self: Any, delegate: Any) -> None:
        store = ConfigStore.instance()
        self.delegate = copy.deepcopy(delegate, {id(store): store})
        self.cache = {}

    CachingConfigRepository.__init__ = init


# The cache wraps Hydra's and OmegaConf's internals as these releases have them (read for it); with any
# other release the suite composes as Hydra does, uncached (slower, the same results).
_COMPOSE_CACHE_FOR = {"hydra": ("1.3.",), "omegaconf": ("2.3.",)}


def _compose_cache_applies() -> bool:
    import hydra
    import omegaconf

    return (hydra.__version__.startswith(_COMPOSE_CACHE_FOR["hydra"])
            and omegaconf.__version__.startswith(_COMPOSE_CACHE_FOR["omegaconf"]))


if _compose_cache_applies():
    _cache_compositions()


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
    "tests/integration/test_closed_loop_order_live.py", # 2.6 / 5.7: a live saturation run, paced
    "tests/e2e/test_cli_zygote.py",                     # 2.8 / 6.3: a command timed out, a zygote started
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
        """loadscope, with ONE_UNIT directories as one unit, a waiting lane and an engine lane (see the
        module docstring)."""

        _lane: str | None = None
        _engine_lane: str | None = None

        def _split_scope(self, nodeid: str) -> str:
            for prefix in ONE_UNIT:
                if nodeid.startswith(prefix):
                    return prefix
            return super()._split_scope(nodeid)

        def schedule(self) -> None:
            if self.collection is None:  # the first call: every worker is up
                extra = sorted((node.gateway.id for node in self.nodes), key=lambda gw: int(gw.lstrip("gw")))
                extra = extra[_cores():]
                if extra:
                    self._lane = extra[-1]
                if len(extra) > 1:
                    self._engine_lane = extra[-2]
            super().schedule()

        def _next_scope(self, node) -> str | None:
            if not self.workqueue:
                return None
            if node.gateway.id == self._engine_lane:
                return next((scope for scope in self.workqueue if scope in ONE_UNIT), None)
            waits = node.gateway.id == self._lane
            for scope in self.workqueue:
                if self._engine_lane is not None and scope in ONE_UNIT:
                    continue  # the engine lane's
                if (scope in WAITING) == waits:
                    return scope
            if waits:
                return None
            return next((scope for scope in self.workqueue
                         if self._engine_lane is None or scope not in ONE_UNIT), None)

        def _assign_work_unit(self, node) -> None:
            scope = self._next_scope(node)
            if scope is None:
                return
            self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)  # pops the first unit: this one
            if node.gateway.id == self._engine_lane:
                node.shutdown()  # the engine's modules and nothing else: it runs them and stops

        def _reschedule(self, node) -> None:
            if not node.shutting_down and self.workqueue and self._next_scope(node) is None:
                node.shutdown()  # nothing left for it (a lane: nothing that waits): it finishes what it holds
                return
            super()._reschedule(node)

    return LaneScheduling(config, log)
