"""experiment.engine.cpus: the engine's threads on its CPUs, the harness's on the others (no engine: a
child process with two threads stands in for it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.errors import InputError
from harness.validation.cpus import pin_apart

pytestmark = pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                                reason="needs CPU affinity and at least two CPUs")

CHILD = ("import threading, time; threading.Thread(target=time.sleep, args=(60,)).start(); "
         "print('up', flush=True); time.sleep(60)")


def _sets(pid: int | str) -> list[set[int]]:
    return [os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")]


@pytest.fixture
def child():
    mine = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"  # both its threads exist
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        for tid, cpus in mine.items():  # this test process gets its CPUs back
            try:
                os.sched_setaffinity(tid, cpus)
            except ProcessLookupError:
                pass


def test_engine_threads_go_to_their_cpus_and_this_process_to_the_others(child):
    allowed = sorted(os.sched_getaffinity(0))
    engine_cpu = allowed[-1]
    got = pin_apart(child.pid, [engine_cpu], "experiment.engine.cpus")
    assert got == {"engine": [engine_cpu], "harness": allowed[:-1]}
    child_sets = _sets(child.pid)
    assert len(child_sets) >= 2 and all(s == {engine_cpu} for s in child_sets)  # every thread, not just the main one
    assert all(s == set(allowed[:-1]) for s in _sets("self"))


def test_a_cpu_this_process_may_not_use_or_a_set_leaving_none_is_one_clear_error(child):
    allowed = sorted(os.sched_getaffinity(0))
    before = _sets(child.pid)
    with pytest.raises(InputError, match=r"experiment\.engine\.cpus=\[9999\]: CPU \[9999\].*valid: "):
        pin_apart(child.pid, [9999], "experiment.engine.cpus")
    with pytest.raises(InputError, match="leaves no CPU for the load generator"):
        pin_apart(child.pid, allowed, "experiment.engine.cpus")
    assert _sets(child.pid) == before  # nothing pinned on a refused setting


def test_the_suite_refuses_to_pin_an_engine_it_did_not_start(tmp_path):
    from omegaconf import OmegaConf

    from harness.validation.callback import ValidateCallback

    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "target": {"url": "http://127.0.0.1:9"},
                               "experiment": {"engine": {"nice": None, "cpus": [1]}}})
    with pytest.raises(InputError, match=r"experiment\.engine\.cpus pins an engine this run starts"):
        ValidateCallback()._prepare(config)


def test_auto_gives_the_engine_the_last_cpus_one_per_thread_and_leaves_the_harness_at_least_one():
    from harness.validation.cpus import resolve

    allowed = sorted(os.sched_getaffinity(0))
    assert resolve("auto", 1, "k") == allowed[-1:]
    assert resolve("auto", len(allowed) - 1, "k") == allowed[1:]
    assert resolve("auto", len(allowed), "k") is None  # nothing would be left apart: the scheduler places both
    assert resolve(None, 1, "k") is None and resolve([1, "0"], 1, "k") == [1, 0]
    for bad in ("first", ["x"], 3):
        with pytest.raises(InputError, match=r"k=.*valid: null, auto or a list of CPU numbers"):
            resolve(bad, 1, "k")


def test_auto_with_an_engine_at_a_url_pins_nothing_and_a_bad_setting_is_refused(tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from harness.validation.callback import ValidateCallback

    def config(cpus):  # a profile file given: no built-in probes, so no probe design to check (calibration is stubbed)
        return OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}, "target": {"url": "http://127.0.0.1:9"},
                                 "experiment": {"engine": {"nice": None, "cpus": cpus}, "profile": "given.yaml"}})

    with pytest.raises(InputError, match=r"experiment\.engine\.cpus='everywhere'; valid: null, auto"):
        ValidateCallback()._prepare(config("everywhere"))
    monkeypatch.setattr(ValidateCallback, "_calibrate", lambda self, config: None)
    monkeypatch.setattr(ValidateCallback, "_capacity", lambda self, config: None)
    before = _sets("self")
    callback = ValidateCallback()
    callback._prepare(config("auto"))  # the engine is not this run's: auto leaves it (and this process) alone
    assert callback.meta["engine"] == {"url": "http://127.0.0.1:9", "started_here": False}
    assert _sets("self") == before
