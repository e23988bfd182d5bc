"""A signal that lands where Python drops exceptions still stops the command (harness/errors.py)."""

from __future__ import annotations

import subprocess
import sys

_CODE = """
import signal, sys, time, weakref
from harness.errors import install_signal_handlers

restore = install_signal_handlers()

def callback(ref):  # like importlib's module-lock cleanup: a weakref callback, whose exceptions Python drops
    if sys.argv[1] == "signal":
        signal.raise_signal(signal.SIGTERM)  # the handler runs at the next bytecode: inside this callback
    else:
        raise ValueError("not a signal")
    for _ in range(10):
        pass

class Thing:
    pass

thing = Thing()
ref = weakref.ref(thing, callback)
try:
    del thing
    time.sleep(10 if sys.argv[1] == "signal" else 0)  # the signal comes back to the main thread: it ends the sleep
    print("ran on")
except KeyboardInterrupt as err:
    print("stopped:", err)
restore()
print("hook restored:", sys.unraisablehook is sys.__unraisablehook__)
"""


def _run(what: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _CODE, what], capture_output=True, text=True, timeout=60,
                          check=True)


def test_a_signal_inside_a_weakref_callback_stops_the_code_it_interrupted():
    """Before: `Exception ignored in: <function callback ...>`, a traceback on stderr, and the run went on
    (`make test-busy` caught it once in a command's imports, SIGTERM 0.15 s after start)."""
    done = _run("signal")
    assert done.stdout.splitlines() == ["stopped: signal 15", "hook restored: True"]
    assert done.stderr == ""


def test_any_other_dropped_exception_is_reported_as_python_does():
    done = _run("error")
    assert done.stdout.splitlines() == ["ran on", "hook restored: True"]
    assert "Exception ignored in" in done.stderr and "ValueError: not a signal" in done.stderr
