"""SIGINT/SIGTERM held while a run writes what it must not lose, and delivered once that is on disk.

A run's measurement phase turns a signal into a stop of the run (harness/runs/recording.py
`stop_on_signals` for virtual time, harness/runs/http.py for live and url runs). Around it, from the
moment the run starts until its last file is written, a `SignalHold` notes a signal instead of raising
it: raised inside a flush, a close or the final writes, it would drop finished rows or leave a run
without its summary. When the hold ends, the signal is delivered to the handler that was there before
(the command's: exit status 130), so a held signal still stops the command, just after its files.

The measurement phase inside a hold takes a signal the hold already noted (`take_pending`) and stops
at once; a signal it noted but could not act on (its loop had already ended) goes back to the hold
(`deliver`), never lost.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType, TracebackType
from typing import Any

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def on_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def deliver(handler: Any, signum: int) -> None:
    """Hand `signum` to `handler` as the kernel would have: call it, ignore it, or (the default
    action) raise KeyboardInterrupt (the harness's commands stop on SIGTERM as on SIGINT)."""
    if handler is signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, None)
        return
    raise KeyboardInterrupt(f"signal {signum}")


class SignalHold:
    """While inside (on the main thread), SIGINT and SIGTERM are noted, not raised; on the way out
    the first one noted goes to the handler that was installed before. Off the main thread (no
    Python signal handler runs there) it does nothing. Nested holds pass a signal outwards."""

    def __init__(self) -> None:
        self.pending: int | None = None
        self._previous: dict[int, Any] = {}

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self.pending is None:
            self.pending = signum

    def take_pending(self) -> int | None:
        """The signal noted so far (now the caller's to act on), or None."""
        signum, self.pending = self.pending, None
        return signum

    def __enter__(self) -> SignalHold:
        if not on_main_thread():
            return self
        for sig in SIGNALS:
            old = signal.getsignal(sig)
            if sig == signal.SIGINT and old is signal.SIG_IGN:  # started with SIGINT ignored: keep ignoring it
                continue
            self._previous[sig] = old
            signal.signal(sig, self._note)
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        previous, self._previous = self._previous, {}
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
        signum = self.take_pending()
        if signum is not None and previous and not isinstance(err, KeyboardInterrupt):
            deliver(previous.get(signum, signal.SIG_DFL), signum)


def outer_hold(handler: Any) -> SignalHold | None:
    """The hold whose handler `handler` is (a measurement phase started inside it), else None."""
    owner = getattr(handler, "__self__", None)
    return owner if isinstance(owner, SignalHold) else None
