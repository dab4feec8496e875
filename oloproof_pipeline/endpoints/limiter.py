"""One limiter per model endpoint, shared by every case running in the process (after
Oloproof's `oloproof_core/execution/limiter.py`, for threads rather than asyncio).

At most `limit` requests to one endpoint are in flight at once, and a server's Retry-After
(on a 429 or 503) pauses every request to that endpoint until then, not only the one that
got it. A request's slot is held only while it is on the wire: backoff sleeps happen
outside it. What a request waited for the limiter is handed back, so it never counts as the
model's latency.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Iterator

from .deadline import check_deadline, remaining_s


class EndpointLimiter:
    """Slots and a shared pause for one endpoint."""

    def __init__(self, limit: int):
        if limit < 1:
            raise ValueError("limit must be at least 1")
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self._resume_at = 0.0

    @contextmanager
    def slot(self) -> Iterator[float]:
        """Hold a slot for one request, after any pause; yields how long that took (s). A
        case whose deadline passes while it waits stops with CaseTimedOut."""
        started = time.monotonic()
        while not self._slots.acquire(timeout=_wait_step()):
            _check_in_time()
        try:
            while (delay := self._pause_left()) > 0:
                time.sleep(min(delay, _wait_step()))
                _check_in_time()
            yield time.monotonic() - started
        finally:
            self._slots.release()

    def pause(self, seconds: float) -> None:
        """Hold back every request to this endpoint for `seconds` from now (a later pause
        already set stands)."""
        with self._lock:
            self._resume_at = max(self._resume_at, time.monotonic() + seconds)

    def _pause_left(self) -> float:
        with self._lock:
            return self._resume_at - time.monotonic()


# How long one wait lasts before the case's deadline is looked at again.
WAIT_STEP_S = 0.25


def _wait_step() -> float:
    left = remaining_s()
    return WAIT_STEP_S if left is None else max(0.0, min(WAIT_STEP_S, left))


def _check_in_time() -> None:
    check_deadline()  # a case whose deadline passed while it waited ends here


_limiters: dict[str, EndpointLimiter] = {}
_limiters_lock = threading.Lock()


def endpoint_limiter(base_url: str, limit: int) -> EndpointLimiter:
    """This process's limiter for `base_url` (made on first use with `limit` slots)."""
    key = base_url.rstrip("/")
    with _limiters_lock:
        if key not in _limiters:
            _limiters[key] = EndpointLimiter(limit)
        return _limiters[key]
