"""Bad input is reported as one line and exit status 2, never as a traceback.

Every boundary (config composition, trace loading, deployment construction, HTTP parsing) raises
`InputError` with a message that names the file, line, field or key and the valid choices. The
console entry points turn it into `error: <message>` on stderr and exit status 2.

Every command exits 0 ok, 1 a failed check or a crash, 2 bad input, 130 interrupted (SIGINT or
SIGTERM), each with one stderr line: `run_command` (argparse commands) and `harness.hydra_entry`
(Hydra commands) map whatever ended the command to its status (`exit_status`).
"""

from __future__ import annotations

import argparse
import errno
import functools
import os
import re
import signal
import sys
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

EXIT_BAD_INPUT = 2


class InputError(ValueError):
    """A user-facing input problem: bad trace, impossible config, unknown name."""


def choices(valid: Iterable[Any]) -> str:
    """Format valid options for an error message: `a, b, c`."""
    return ", ".join(str(v) for v in valid)


def require(cond: bool, message: str) -> None:
    """Raise InputError(message) unless cond holds (not an assert: it survives -O)."""
    if not cond:
        raise InputError(message)


def fail(message: str) -> NoReturn:
    """Print one line to stderr and exit with status 2."""
    sys.stderr.write(f"error: {message}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_BAD_INPUT)


def exits_on_input_error(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a task function so InputError becomes `error: ...` and exit status 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InputError as err:
            fail(str(err))

    return wrapper


# -- exit statuses of every command ------------------------------------------------------------------------

EXIT_OK = 0
EXIT_FAILED = 1  # a failed check (harness-gate) or a crash (a harness bug: the one line says which)
EXIT_INTERRUPTED = 130  # SIGINT or SIGTERM, at any moment from start-up to exit

# OS errors about a path the user chose (an output folder on a read-only or full filesystem, a folder
# that does not exist): bad input, not a crash.
_PATH_ERRNOS = {errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOENT, errno.ENOTDIR,
                errno.EISDIR, errno.ENAMETOOLONG, errno.EEXIST}
_WRITE_ERRNOS = {errno.EROFS, errno.ENOSPC, errno.EDQUOT}


def one_line(text: str, limit: int = 400) -> str:
    """Collapse whitespace and newlines: a message for one stderr line. Past `limit`, the middle is cut:
    a message names the thing at its start and the cause at its end, and both are kept."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    head = (limit - 5) * 2 // 5
    return f"{text[:head]} ... {text[len(text) - (limit - 5 - head):]}"


# Longest file name (one path component, bytes) of common Linux file systems (ext4, xfs, btrfs, tmpfs).
NAME_MAX_BYTES = 255


def _name_too_long(path: str) -> str:
    """The one line for ENAMETOOLONG: which name of `path` is too long, by how much, and what makes it."""
    parts = [p for p in path.replace("\\", "/").split("/") if p]
    longest = max(parts, key=lambda p: len(p.encode()), default=path)
    size = len(longest.encode())
    shown = longest if len(longest) <= 60 else f"{longest[:40]}...{longest[-16:]}"
    return (f"cannot create {shown!r}: a file name of {size} bytes (the file system's limit is {NAME_MAX_BYTES}); "
            "a run or job directory is named by hydra.run.dir or hydra.sweep.subdir: shorten the one you set "
            "(the default hydra.sweep.subdir cuts and hashes long overrides)")


_signalled: list[int] = []  # signals received since install_signal_handlers


_deferring: list[bool] = [False]  # True while a dropped interrupt is being sent again (see install_signal_handlers)


def _send_again(signum: int) -> None:
    """Send `signum` to the main thread again ~1 ms from now, from another thread: sent from the main
    thread, the handler would run at once, still where its exception is dropped. The main thread runs it at
    its next check (a blocking call is interrupted, as by the first signal), by then back in the code the
    callback interrupted."""
    import threading
    import time

    main = threading.main_thread().ident
    assert main is not None

    def trip() -> None:
        time.sleep(0.001)
        signal.pthread_kill(main, signum)

    threading.Thread(target=trip, name="harness-signal-again", daemon=True).start()


def _interrupt(signum: int, frame: object) -> None:
    if _deferring[0]:  # the hook below has not returned yet: its exception would be dropped too
        _send_again(signum)
        return
    _signalled.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_now(signum: int, frame: object) -> None:
    # Raising here could surface inside any import as another error (e.g. a RuntimeError from a class
    # body); nothing has been done yet, so leave at once.
    try:
        os.write(2, b"interrupted\n")
    finally:
        os._exit(EXIT_INTERRUPTED)


def install_early_signal_handlers() -> None:
    """While a command is still importing (nothing to save yet), SIGINT/SIGTERM exit at once with 130
    and one line; the command's main() then installs `install_signal_handlers`."""
    try:
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            signal.signal(signal.SIGINT, _stop_now)
        signal.signal(signal.SIGTERM, _stop_now)
    except ValueError:  # not the main thread
        pass


def install_signal_handlers() -> Callable[[], None]:
    """SIGINT and SIGTERM raise KeyboardInterrupt, so every phase of a command stops the same way
    (a run loop may install its own handler for its duration, e.g. harness.recording.stop_on_signals,
    and put this one back when it ends). Returns a function that restores the previous handlers."""
    previous: dict[int, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old = signal.getsignal(sig)
            if sig == signal.SIGINT and old is signal.SIG_IGN:  # e.g. started with nohup ... &: keep ignoring
                continue
            previous[sig] = old
            signal.signal(sig, _interrupt)
    except ValueError:  # not the main thread (an embedding application): leave its signals alone
        pass
    _signalled.clear()
    previous_hook = sys.unraisablehook

    def send_again(unraisable: Any) -> None:
        # A signal can land inside a callback whose exceptions Python prints and drops (a weakref callback
        # such as importlib's module-lock cleanup, a __del__): the Ctrl-C would be lost and a traceback
        # printed. Sent again instead, it stops the command from the code the callback interrupted.
        error = unraisable.exc_value
        if _signalled and isinstance(error, KeyboardInterrupt) and error.args == (f"signal {_signalled[-1]}",):
            _deferring[0] = True
            try:
                _send_again(_signalled.pop())
            finally:
                _deferring[0] = False
        else:
            previous_hook(unraisable)

    if previous:
        sys.unraisablehook = send_again

    def restore() -> None:
        if sys.unraisablehook is send_again:
            sys.unraisablehook = previous_hook
        for sig, old in previous.items():
            try:
                signal.signal(sig, old if old is not None else signal.SIG_DFL)
            except (ValueError, TypeError):
                pass

    return restore


def interrupted(err: BaseException | None = None) -> bool:
    """Whether a command was interrupted: a signal arrived, or `err` (or what caused it) is a Ctrl-C.

    A signal can surface inside library code as another exception (an import wraps it in a
    RuntimeError, a thread pool in its own error); the status is still 130."""
    if _signalled:
        return True
    seen = 0
    while err is not None and seen < 20:
        if isinstance(err, KeyboardInterrupt):
            return True
        err, seen = err.__cause__ or err.__context__, seen + 1
    return False


def forget_interrupt() -> None:
    """Exit with the status we choose after a handled Ctrl-C, not by SIGINT.

    CPython 3.11 marks a KeyboardInterrupt that ends a string `exec` (dataclasses and others build
    code that way) as unhandled even when a caller catches it, and `python -m` then kills itself with
    SIGINT at exit (status -2 instead of 130). Each string `exec` clears that mark first.
    """
    exec("pass", {})


def path_error(err: BaseException | None) -> str | None:
    """One line for an OS error about a user-chosen path (see _PATH_ERRNOS), found in `err` or what
    caused it (Hydra's log set-up wraps it in a ValueError); None for anything else."""
    seen = 0
    while err is not None and seen < 20:
        if isinstance(err, OSError):
            code = err.errno
            if code is None:  # pyarrow: "... Detail: [errno 28] No space left on device"
                found = re.search(r"\[errno (\d+)\]", str(err))
                code = int(found.group(1)) if found else None
            if code == errno.ENAMETOOLONG and err.filename:
                return one_line(_name_too_long(os.fsdecode(err.filename)))
            if code in _PATH_ERRNOS:
                text = (err.strerror or os.strerror(code)) if err.errno else str(err)
                if err.filename:
                    return one_line(f"{err.filename}: {text}")
                return one_line(f"cannot write an output file: {text}" if code in _WRITE_ERRNOS else text)
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def yaml_error(err: BaseException | None) -> str | None:
    """One line for a YAML syntax error (PyYAML's, found in `err` or what caused it): the file, line and
    column, the problem, and where the construct it breaks began; None for anything else."""
    seen = 0
    while err is not None and seen < 20:
        mark = getattr(err, "problem_mark", None)
        if mark is not None and type(err).__module__.startswith("yaml"):
            problem = getattr(err, "problem", None) or str(err)
            text = f"bad YAML in {mark.name}, line {mark.line + 1}, column {mark.column + 1}: {problem}"
            context, start = getattr(err, "context", None), getattr(err, "context_mark", None)
            if context and start is not None:
                where = f"line {start.line + 1}, column {start.column + 1}"
                if start.name != mark.name:
                    where = f"{start.name}, {where}"
                text += f" ({context} at {where})"
            return one_line(text)
        err, seen = err.__cause__ or err.__context__, seen + 1
    return None


def _input_cause(err: BaseException) -> InputError | None:
    seen = 0
    cause: BaseException | None = err
    while cause is not None and seen < 20:
        if isinstance(cause, InputError):
            return cause
        cause, seen = cause.__cause__, seen + 1
    return None


def crash_site(err: BaseException) -> str:
    """`file:line (function)` of the innermost frame of the traceback, inside the harness if any."""
    tb = err.__traceback__
    last = inner = None
    while tb is not None:
        last = tb
        if "/harness/" in tb.tb_frame.f_code.co_filename.replace("\\", "/"):
            inner = tb
        tb = tb.tb_next
    tb = inner or last
    if tb is None:
        return ""
    path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
    short = path[path.rindex("/harness/") + 1:] if "/harness/" in path else path.rsplit("/", 1)[-1]
    return f" at {short}:{tb.tb_lineno} ({tb.tb_frame.f_code.co_name})"


def save_traceback(err: BaseException, folder: str | os.PathLike[str] | None = None) -> str | None:
    """Write the traceback of `err` to `folder`/traceback.txt (or a temp file); return the path."""
    import tempfile
    import traceback

    text = "".join(traceback.format_exception(type(err), err, err.__traceback__))
    try:
        if folder is not None:
            path = os.path.join(os.fspath(folder), "traceback.txt")
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
            return path
        fd, path = tempfile.mkstemp(prefix="harness-traceback-", suffix=".txt")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return path
    except OSError:
        return None


def describe_crash(err: BaseException, prog: str) -> str:
    """The one line of a crash: what, where, and where the full traceback went."""
    saved = getattr(err, "harness_traceback", None) or save_traceback(err)
    detail = one_line(f"{type(err).__name__}: {err}" if str(err) else type(err).__name__, 300)
    site = getattr(err, "harness_where", None) or crash_site(err)
    return (f"{prog} crashed (a bug, not bad input): {detail}{site}"
            + (f"; traceback in {saved}" if saved else ""))


def exit_status(err: BaseException, prog: str) -> tuple[int, str]:
    """(exit status, one stderr line) for an exception that ended a command."""
    if interrupted(err):
        return EXIT_INTERRUPTED, "interrupted"
    cause = _input_cause(err)
    if cause is not None:
        return EXIT_BAD_INPUT, f"error: {one_line(str(cause))}"
    line = yaml_error(err) or path_error(err)
    if line is not None:
        return EXIT_BAD_INPUT, f"error: {line}"
    if isinstance(err, MemoryError):
        return EXIT_FAILED, f"error: {prog} ran out of memory{crash_site(err)}"
    return EXIT_FAILED, f"error: {describe_crash(err, prog)}"


def run_command(fn: Callable[[], int | None], prog: str) -> NoReturn:
    """Run a command's body and exit: its status (0 when None), or the status of what stopped it, with
    one stderr line and no traceback (HARNESS_TRACEBACK=1 prints it too). SIGTERM counts as Ctrl-C."""
    restore = install_signal_handlers()
    try:
        code = fn()
    except SystemExit as exc:
        if exc.code == EXIT_INTERRUPTED:
            forget_interrupt()
        raise
    except BaseException as err:  # every way out gets a status and one line
        if os.environ.get("HARNESS_TRACEBACK") and not interrupted(err):
            import traceback

            traceback.print_exc()
        status, line = exit_status(err, prog)
        _write_line(line)
        if status == EXIT_INTERRUPTED:
            forget_interrupt()
        raise SystemExit(status) from None
    finally:
        restore()
    raise SystemExit(EXIT_OK if code is None else code)


def _write_line(line: str) -> None:
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except (OSError, ValueError):  # stderr closed or a broken pipe: the status still says it
        pass


class ArgumentParser(argparse.ArgumentParser):
    """argparse with a usage error as one line (`error: PROG: ... (see PROG --help)`) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        _write_line(f"error: {self.prog}: {one_line(message)} (see {self.prog} --help)")
        raise SystemExit(EXIT_BAD_INPUT)
