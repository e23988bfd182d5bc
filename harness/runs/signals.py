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

import asyncio
import contextlib
import signal
import threading
from collections.abc import Iterator
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
            outer = outer_hold(old)  # a signal an enclosing hold noted is this one's to act on now
            if outer is not None and outer.pending is not None and self.pending is None:
                self.pending = outer.take_pending()
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


class LoopStop:
    """The run's stop: `event` is set by SIGINT/SIGTERM (or a write failure); `signum` is the signal, if one."""

    def __init__(self, loop: asyncio.AbstractEventLoop, event: asyncio.Event | None = None) -> None:
        self.event = asyncio.Event() if event is None else event
        self.signum: int | None = None
        self.acted_on = False  # the load saw the stop (its requests in flight are recorded as interrupted)
        self._loop = loop

    def signalled(self, signum: int, frame: object = None) -> None:
        """A signal handler (main thread, between two bytecodes): note it now, set the event from the loop."""
        if self.signum is None:
            self.signum = signum
        self._loop.call_soon_threadsafe(self.event.set)


@contextlib.contextmanager
def stop_loop_on_signals(event: asyncio.Event | None = None) -> Iterator[LoopStop]:
    """SIGINT/SIGTERM set `event` while inside (a run stops, recording what it sent; a server stops). Inside
    a SignalHold, a signal the hold noted before sets it at once, and one the caller did not act on
    (`acted_on` false: it came after the load ended) goes back to the hold, delivered once the run's
    files are written.

    A plain handler, not `loop.add_signal_handler`: that one runs its callback a loop iteration later,
    and a signal just before the run ends would then be noted by no one."""
    stop = LoopStop(asyncio.get_running_loop(), event)
    previous: dict[int, Any] = {}
    if on_main_thread():  # else leave signals alone
        for sig in (int(signal.SIGINT), int(signal.SIGTERM)):
            if sig == signal.SIGINT and signal.getsignal(sig) is signal.SIG_IGN:
                continue  # started with SIGINT ignored: keep ignoring it
            previous[sig] = signal.signal(sig, stop.signalled)
    hold = next((h for h in map(outer_hold, previous.values()) if h is not None), None)
    early = hold.take_pending() if hold is not None else None
    if early is not None:
        stop.signalled(early)
    try:
        yield stop
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old if old is not None else signal.SIG_DFL)  # the command's own handler again
        if stop.signum is not None and not stop.acted_on:
            deliver(previous.get(stop.signum, signal.SIG_DFL), stop.signum)
