"""One deadline per case, in whichever thread the case runs.

On a worker's main thread (one case at a time) a SIGALRM timer interrupts the case wherever
it is. Cases running side by side in threads of one worker (run/worker.py) cannot be
interrupted by a signal; their deadline is a time the pipeline's own code checks at each
model request and tool call (`check_deadline`, `remaining_s`), so a case that overruns stops
at the next such point, and the supervisor stops the worker of one that never reaches one.
"""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator


class CaseTimedOut(BaseException):
    """The case's deadline passed. A BaseException, so an agent's `except Exception` around
    its own work does not swallow it."""


_thread_deadline = threading.local()


def timed_out_message(timeout_s: float) -> str:
    return f"no answer within {timeout_s:g} s"


# The main thread's open deadlines (seconds), innermost last: the timer is for the last.
_main_timeouts: list[float] = []


def _on_deadline(signum: int, frame: Any) -> None:
    """SIGALRM: the open case's deadline passed (a stray alarm with no case open is ignored)."""
    if _main_timeouts:
        raise CaseTimedOut(timed_out_message(_main_timeouts[-1]))


@contextmanager
def case_deadline(timeout_s: float) -> Iterator[None]:
    """Interrupt the work inside with CaseTimedOut after `timeout_s`: one deadline per case
    (a timer on the main thread; a checked time in any other)."""
    if threading.current_thread() is not threading.main_thread():
        _thread_deadline.at, _thread_deadline.timeout_s = time.monotonic() + timeout_s, timeout_s
        try:
            yield
        finally:
            _thread_deadline.at = None
        return

    # The handler stays installed between cases (installing and restoring it per case cost
    # more than the timer); put back only when something else (a system) replaced it.
    if signal.getsignal(signal.SIGALRM) is not _on_deadline:
        signal.signal(signal.SIGALRM, _on_deadline)
    _main_timeouts.append(timeout_s)
    started = time.monotonic()
    outer_left, _ = signal.setitimer(signal.ITIMER_REAL, timeout_s)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _main_timeouts.pop()
        if _main_timeouts:  # a deadline around this one: its timer runs on
            signal.setitimer(signal.ITIMER_REAL, max(outer_left - (time.monotonic() - started), 1e-6))


def remaining_s() -> float | None:
    """Seconds left of this thread's case (None: no checked deadline here)."""
    at = getattr(_thread_deadline, "at", None)
    return None if at is None else at - time.monotonic()


def check_deadline() -> None:
    """CaseTimedOut when this thread's case has overrun its deadline."""
    left = remaining_s()
    if left is not None and left <= 0:
        raise CaseTimedOut(timed_out_message(_thread_deadline.timeout_s))
