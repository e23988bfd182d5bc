"""Bad input is reported as one line and exit status 2, never as a traceback.

Every boundary (config composition, trace loading, deployment construction, HTTP parsing) raises
`InputError` with a message that names the file, line, field or key and the valid choices. The
console entry points turn it into `error: <message>` on stderr and exit status 2.
"""

from __future__ import annotations

import functools
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
