"""`python -m <module> ...` for the tests, forked from a Python that has already imported the heavy
third-party libraries (a "zygote"), instead of a new interpreter per command.

Each command in a new interpreter spends ~0.7 s of CPU importing numpy, pandas, pyarrow, scipy,
Hydra and OmegaConf before the harness does anything; the suite runs ~100 of them. `run()` has
subprocess.run's API (returncode, stdout, stderr, timeout that kills the command) and forks the
command from one long-lived zygote: the xdist controller starts it before its workers, which share
it (its socket is in $HARNESS_TEST_CLI_ZYGOTE); a test process without one starts its own on first use.

What the child shares with a fresh `python -m`: argv (sys.argv[0] is the module's file, as -m sets
it), cwd, sys.path[0] (the cwd), a fresh `__main__` module, the module run by runpy exactly as -m
runs it, its own stdin/stdout/stderr (files; stdin is /dev/null or `input`), the interpreter's own
exit (atexit, flushing, the status of SystemExit or 1 and a traceback on a crash), and default
signal dispositions (the zygote never changes them). The zygote imports third-party modules only,
never `harness`, so every harness module, its import-time state, Hydra's global state (config store,
plugins, GlobalHydra), logging and gc.freeze are made by the command itself, as in a new process.
Random state: `random` reseeds itself after fork; numpy's global RandomState is reseeded here.

What differs, and why no caller cares (callers that do care keep real subprocesses):
- The third-party modules are already imported (so is everything they import): a command that would
  not import pandas has it in sys.modules. tests/e2e/test_fast_start.py's checks of what start-up
  imports and costs run real interpreters (its sweep-mode test, which counts compositions, forks).
- The hash seed is the zygote's (the same for all its children, random per zygote).
- A crash's traceback has one more frame at the top (this file's `_run_and_exit`).
- At exit the modules are not torn down (os._exit once atexit has run and the streams are flushed):
  no `__del__` runs for objects still alive then (Python does not promise that either). Tests about
  exiting (test_exit_codes' signal-at-exit cases) run real interpreters.
- Native threads the preloaded libraries start at import (OpenBLAS workers, jemalloc's background
  purge thread) exist in the zygote when it forks; both libraries register pthread_atfork handlers
  for this (the multiprocessing "fork" start method relies on the same). The zygote itself has no
  Python thread but the main one (checked before every fork).
- Commands whose environment differs from the zygote's (a PYTHONPATH hook, a variable a library reads
  at import time) are not forked: `run()` falls back to a real subprocess for them, as it does for
  anything but `-m <module> args`.

The children's CPU is reaped by the zygote, not by the test process: `child_cpu()` adds it up for
tools/suite_timeline.py.
"""

from __future__ import annotations

import json
import locale
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# What `python -m harness` imports from outside the harness (the heavy part of its start-up).
PRELOAD = ("numpy", "pandas", "pyarrow", "pyarrow.parquet", "pyarrow.compute", "scipy.special", "hydra",
           "hydra.utils", "hydra._internal.utils", "hydra.core.override_parser.overrides_parser", "omegaconf",
           "yaml", "tqdm", "joblib", "aiohttp")

# Set by pytest for every test, and in each xdist worker (its id; the terminal size of the controller):
# the command gets the caller's value (no preloaded library reads them at import time), so they may
# differ from the zygote's.
PER_TEST = frozenset({"PYTEST_CURRENT_TEST", "COLUMNS", "LINES"})
PER_WORKER = "PYTEST_XDIST_"
SHARED = "HARNESS_TEST_CLI_ZYGOTE"  # the socket of a zygote started by a parent test process
# Linux (pidfds, fork); elsewhere every command runs in a new interpreter.
AVAILABLE = sys.platform == "linux" and hasattr(os, "pidfd_open") and hasattr(socket, "send_fds")
_state: dict[str, Any] = {"zygote": None, "child_cpu": 0.0, "forked": 0, "real": 0}


def counts() -> tuple[int, int]:
    """(commands forked from the zygote, commands run as real subprocesses) in this process."""
    return int(_state["forked"]), int(_state["real"])


def child_cpu() -> float:
    """User + system seconds of the commands this process has run through the zygote."""
    return float(_state["child_cpu"])


# -- the zygote (its own process) ---------------------------------------------------------------------------

def _serve(listen_fd: int) -> str | None:
    """Fork a child per request. Returns only in a child: the module it runs (the caller runs it)."""
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    listener = socket.socket(fileno=listen_fd)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ, "accept")
    sel.register(sys.stdin.fileno(), selectors.EVENT_READ, "parent")  # EOF: the test process is gone
    waiting: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, connection)
    while True:
        for key, _ in sel.select():
            if key.data == "parent":
                if not os.read(sys.stdin.fileno(), 4096):
                    return None
            elif key.data == "accept":
                conn, _ = listener.accept()
                msg, fds, _, _ = socket.recv_fds(conn, 1 << 20, 3)
                request = json.loads(msg)
                if threading.active_count() != 1:
                    raise RuntimeError("the zygote must fork from a single Python thread")
                sys.stdout.flush()
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    sel.close()
                    listener.close()
                    conn.close()
                    for pidfd, (_, other) in waiting.items():
                        os.close(pidfd)
                        other.close()
                    return _become_child(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.sendall(f"{pid}\n".encode())
                pidfd = os.pidfd_open(pid)
                waiting[pidfd] = (pid, conn)
                sel.register(pidfd, selectors.EVENT_READ, "child")
            else:
                pidfd = key.fd
                pid, conn = waiting.pop(pidfd)
                sel.unregister(pidfd)
                os.close(pidfd)
                _, status, usage = os.wait4(pid, 0)
                try:
                    conn.sendall(f"{os.waitstatus_to_exitcode(status)} {usage.ru_utime + usage.ru_stime}\n".encode())
                except OSError:  # the caller gave up
                    pass
                conn.close()


def _become_child(request: dict[str, Any], fds: list[int]) -> str:
    import types

    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [request["module"], *request["args"]]  # runpy sets argv[0] to the module's file, as -m does
    sys.path[0] = os.getcwd()  # as -m sets it
    main = types.ModuleType("__main__")
    sys.modules["__main__"] = main
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # the legacy global RandomState: seeded from the OS at import in a new process
    return str(request["module"])


# -- the caller's side --------------------------------------------------------------------------------------

class _Zygote:
    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="cli-zygote-")
        self.path = os.path.join(self.folder, "socket")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.path)
        self.listener.listen(16)
        os.environ[SHARED] = self.path  # test processes started from here (xdist workers) use this zygote
        self.env = dict(os.environ)
        with open(os.path.join(self.folder, "env.json"), "w") as f:
            json.dump(self.env, f)
        self.log = open(os.path.join(self.folder, "zygote.log"), "wb")  # noqa: SIM115  # lives as long as it
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.listener.fileno())], stdin=subprocess.PIPE,
                                     stdout=subprocess.DEVNULL, stderr=self.log, pass_fds=[self.listener.fileno()],
                                     cwd=Path(__file__).resolve().parents[1], env=self.env)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.listener.close()
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


class _Shared:
    """A zygote another process (the xdist controller) started: its socket and the environment it has."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(os.path.join(os.path.dirname(path), "env.json")) as f:
            self.env = json.load(f)

    def alive(self) -> bool:
        return os.path.exists(self.path)


def start() -> None:
    """Start this process's zygote now; processes started from here afterwards share it (an xdist run
    starts one in the controller, before the workers: one zygote, not one per worker)."""
    if AVAILABLE:
        _get()


def _get() -> _Zygote | _Shared:
    zygote = _state["zygote"]
    if zygote is None or not zygote.alive():
        shared = os.environ.get(SHARED)
        if zygote is None and shared and os.path.exists(shared):
            zygote = _Shared(shared)
        else:
            zygote = _Zygote()
        _state["zygote"] = zygote
    return zygote


def close() -> None:
    zygote, _state["zygote"] = _state["zygote"], None
    if isinstance(zygote, _Zygote):
        zygote.close()


def _drop(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in PER_TEST and k != SHARED and not k.startswith(PER_WORKER)}


def _text(data: bytes) -> str:
    """As subprocess.run(text=True) decodes."""
    encoding = locale.getpreferredencoding(False)
    return data.decode(encoding).replace("\r\n", "\n").replace("\r", "\n")


def _line(conn: socket.socket, buffer: bytearray) -> str:
    """The next line from the zygote (one byte at a time: the pid and the status are its only two)."""
    while not buffer.endswith(b"\n"):
        chunk = conn.recv(1)
        if not chunk:
            raise RuntimeError("the CLI zygote closed the connection (see its zygote.log)")
        buffer += chunk
    line = buffer.decode()
    buffer.clear()
    return line


def run(args: list[str], *, cwd: str | os.PathLike[str], timeout: float | None = None, input: str | None = None,
        env: dict[str, str] | None = None, on_fork: Any = None) -> subprocess.CompletedProcess[str]:
    """subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False,
    timeout=timeout, input=input, env=env), forked from the zygote when `args` is `-m module ...` and the
    environment is the zygote's; a real subprocess otherwise. `on_fork(pid)`, when given, is called with the
    command's pid once it runs, forked or not (a caller running this in a thread can signal the command)."""
    args = [str(a) for a in args]
    zygote = _get() if AVAILABLE and len(args) >= 2 and args[0] == "-m" else None
    wanted = dict(os.environ if env is None else env)
    if zygote is None or _drop(wanted) != _drop(zygote.env):
        _state["real"] += 1
        if on_fork is None:
            return subprocess.run([sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False,
                                  timeout=timeout, input=input, env=env)
        with subprocess.Popen([sys.executable, *args], cwd=cwd, env=env, text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, stdin=subprocess.PIPE if input is not None else None) as proc:
            on_fork(proc.pid)
            try:
                out, err = proc.communicate(input, timeout=timeout)
            except subprocess.TimeoutExpired:  # as subprocess.run does
                proc.kill()
                out, err = proc.communicate()
                raise subprocess.TimeoutExpired(proc.args, timeout or 0, output=out, stderr=err) from None
        return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    cmd = [sys.executable, *args]
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stdout, \
            tempfile.TemporaryFile() as stderr:
        if input is not None:
            stdin.write(input.encode(locale.getpreferredencoding(False)))
            stdin.seek(0)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(zygote.path)
            request = {"module": args[1], "args": args[2:], "cwd": os.fspath(Path(cwd).resolve()), "env": wanted}
            fds = [stdin.fileno() if input is not None else os.open(os.devnull, os.O_RDONLY), stdout.fileno(),
                   stderr.fileno()]
            socket.send_fds(conn, [json.dumps(request).encode()], fds)
            if input is None:
                os.close(fds[0])
            buffer = bytearray()
            pid = int(_line(conn, buffer))
            if on_fork is not None:
                on_fork(pid)
            conn.settimeout(timeout)
            try:
                line = _line(conn, buffer)
                timed_out = False
            except TimeoutError:
                os.kill(pid, signal.SIGKILL)
                conn.settimeout(None)
                line = _line(conn, buffer)
                timed_out = True
            code, cpu = line.split()
            _state["child_cpu"] += float(cpu)
            _state["forked"] += 1
        finally:
            conn.close()
        stdout.seek(0)
        stderr.seek(0)
        out, err = _text(stdout.read()), _text(stderr.read())
    if timed_out:
        raise subprocess.TimeoutExpired(cmd, timeout or 0, output=out, stderr=err)
    return subprocess.CompletedProcess(cmd, int(code), out, err)


def _run_and_exit(module: str) -> None:
    """Run `module` as `python -m` does and exit as the interpreter does (Py_RunMain, Py_FinalizeEx):
    the status of SystemExit (its message on stderr when it is not a number), a crash's traceback
    through sys.excepthook and status 1, an uncaught KeyboardInterrupt killing the process with
    SIGINT, non-daemon threads joined, atexit callbacks run, stdout and stderr flushed (status 120
    when stdout cannot be). Then os._exit: tearing the modules down would copy every page the zygote
    shares with the child (~0.2 s of CPU a command, more than a whole `--help`)."""
    import atexit
    import runpy

    code, interrupted = 0, False
    try:
        runpy._run_module_as_main(module)  # type: ignore[attr-defined]
    except SystemExit as exc:
        code = _exit_status(exc)
    except BaseException as exc:  # what Python prints and how it exits for an uncaught exception
        interrupted = isinstance(exc, KeyboardInterrupt)
        sys.excepthook(type(exc), exc, exc.__traceback__)
        code = 1
    try:
        threading._shutdown()  # type: ignore[attr-defined]
    except SystemExit as exc:
        code = _exit_status(exc)
    atexit._run_exitfuncs()
    for stream, failed in ((sys.stdout, 120), (sys.stderr, None)):
        try:
            stream.flush()
        except Exception:
            if failed is not None and code == 0:
                code = failed
    if interrupted:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    os._exit(code & 0xFF)


def _exit_status(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    try:
        sys.stderr.write(f"{exc.code}\n")
    except Exception:
        pass
    return 1


if __name__ == "__main__":
    _module = _serve(int(sys.argv[1]))
    if _module is not None:  # a forked child: run the module as `python -m` does, and exit as it does
        _run_and_exit(_module)
