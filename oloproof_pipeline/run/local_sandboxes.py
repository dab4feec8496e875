"""A stage's items on several local sandboxes at once, without Dask.

Each local sandbox is a supervised worker process of its own (run/supervisor.py, forked from
the one fork server) holding a system instance of its own, so no state crosses cases, and a
case that crashes or hangs its sandbox costs that case only (a fresh worker takes that
sandbox's next one). A thread per sandbox feeds it; the driver (the stage's loop, which
journals) hands each sandbox one item at a time from one queue, and hands it the next only
once the last one's result came back and was journalled: a run killed at any point has lost
at most the items in flight, one per sandbox. Results are yielded as they come back, in any
order (the stages file each by its case, as they do Dask's).

A stage starts with one sandbox and adds one only when that pays (`Growth`), up to the
project's `concurrency.system` and never more than there are items to hand out: a fast or
CPU-bound system stays on one sandbox, a system that waits (on a model, a tool, a sleep)
gets as many as keep the driver busy.
"""

from __future__ import annotations

import queue
import statistics
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .spec import SandboxSettings
from .supervisor import SupervisedSandbox


@dataclass(frozen=True)
class SandboxTask:
    """What a sandbox does with one item of a stage's work (`one`), and, where it can, with
    a stream of them on one sandbox (`each`: one worker for the stream, each item sent
    once the one before is journalled). Both plain functions, so a Dask worker can be sent them."""

    one: Callable[[SupervisedSandbox, Any], Any]
    each: Callable[[SupervisedSandbox, Iterable[Any]], Iterator[tuple[Any, Any]]] | None = None


# Ends a local sandbox's stream of items.
_STOP = object()


class LocalSandbox:
    """One sandbox and the thread that feeds it the items the driver hands it, one at a time."""

    def __init__(self, settings: SandboxSettings, task: SandboxTask, results: "queue.SimpleQueue[Any]"):
        self.sandbox = SupervisedSandbox(settings)
        self.busy = False  # an item handed to it whose result the driver has not had yet
        self.served = 0  # results it gave back
        self._inbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # A daemon: a sandbox left busy when the run stops early ends its case (within the
        # case's deadline), then its worker, without holding up the process's exit.
        self._thread = threading.Thread(target=self._serve, args=(task, results), name="local-sandbox", daemon=True)
        self._thread.start()

    def hand(self, item: Any) -> None:
        self.busy = True
        self._inbox.put(item)

    def _serve(self, task: SandboxTask, results: "queue.SimpleQueue[Any]") -> None:
        items = iter(self._inbox.get, _STOP)
        try:
            if task.each is not None:
                for item, result in task.each(self.sandbox, items):
                    results.put((self, item, result, None))
            else:
                for item in items:
                    results.put((self, item, task.one(self.sandbox, item), None))
        except BaseException as error:  # the system cannot be built, or our own code failed: the driver raises it
            results.put((self, None, None, error))
        finally:
            self.sandbox.close()

    def stop(self, *, wait: bool) -> None:
        self._inbox.put(_STOP)
        if wait:
            self._thread.join()


def on_local_sandboxes(settings: SandboxSettings, items: Iterable[Any], task: SandboxTask) -> Iterator[tuple[Any, Any]]:
    """(item, its result) for each item as its sandbox gives it back, on up to
    `settings.local_sandboxes` sandboxes. Each sandbox gets its next item only once the
    caller has taken its last result (and journalled it). A system that cannot be built
    (a ProjectError), or a failure of the pipeline's own code, stops the whole run, as it does
    on one sandbox."""
    waiting = iter(items)
    results: queue.SimpleQueue[Any] = queue.SimpleQueue()
    sandboxes: list[LocalSandbox] = []
    growth = Growth(settings.local_sandboxes)
    exhausted = False
    try:
        while True:
            while not exhausted:
                idle = next((sandbox for sandbox in sandboxes if not sandbox.busy), None)
                if idle is None and sandboxes and not growth.pays(len(sandboxes), time.monotonic()):
                    break
                item = next(waiting, _STOP)
                if item is _STOP:
                    exhausted = True
                    break
                if idle is None:  # the first sandbox, or one more that pays: started with an item in hand
                    idle = LocalSandbox(settings, task, results)
                    sandboxes.append(idle)
                idle.hand(item)
            if not any(sandbox.busy for sandbox in sandboxes):
                return
            asked = time.monotonic()
            sandbox, item, result, error = results.get()
            if error is not None:
                raise error
            sandbox.busy = False
            sandbox.served += 1
            now = time.monotonic()
            growth.observe(result, now, waited_s=now - asked, newest=sandbox is sandboxes[-1] and sandbox.served == 1)
            yield item, result
    finally:
        for sandbox in sandboxes:
            sandbox.stop(wait=not sandbox.busy)


# Results per sandbox a measurement window holds before it decides anything.
WINDOW_PER_SANDBOX = 4
# A case's system time (the median's, so one case stalled by a busy machine does not count)
# must be more than this share of a sandbox's time per case for another sandbox to pay:
# below it, what keeps a sandbox busy is the pipeline's per-case handling (sending, reading
# back, recording), which another sandbox does not overlap.
SYSTEM_SHARE = 0.5
# A sandbox added to k must add at least this share of what one of the k brought (the results
# per second over k); else none is added again. Cases that slow each other down (a CPU-bound
# system on a busy machine) add less; so does a driver near its own pace.
PAID_SHARE = 0.5


class Growth:
    """When one more local sandbox pays, from what the driver measures over a window of
    results (from the newest sandbox's first result on, so a sandbox's start-up is never
    counted, and of at least WINDOW_PER_SANDBOX results per sandbox):

    - the driver waited for results longer than it worked on them (journalling, judging
      rows, reading the next items): the sandboxes set the pace, not the driver;
    - a case's system time (`duration_s`, measured in the worker; the window's median) is
      more than SYSTEM_SHARE of a sandbox's time per case: a fast system's sandbox is busy
      with the pipeline's per-case handling, which more sandboxes would only contend for;
    - the last sandbox added raised the results per second by at least PAID_SHARE of a
      sandbox's share before it (a CPU-bound system on a busy machine does not): once one
      did not, none is added again.

    Never more than `most` sandboxes. A window that decides against growing starts again,
    so the rule follows a system whose pace changes."""

    def __init__(self, most: int):
        self.most = most
        self.settled = False  # an added sandbox did not pay
        # Results per second, and sandboxes, before the last sandbox was added.
        self._before: tuple[float, int] | None = None
        self._opened_at: float | None = None
        self._restart(None)

    def _restart(self, at: float | None) -> None:
        self._opened_at = at
        self._results = 0
        self._waited_s = 0.0
        self._system_s: list[float] = []

    def observe(self, result: Any, now: float, *, waited_s: float, newest: bool) -> None:
        """A result came back `now` after the driver waited `waited_s` for it; `newest`: the
        newest sandbox's first (its start-up is over: the window opens now)."""
        if newest:
            self._restart(now)
            return
        if self._opened_at is None:
            return
        self._results += 1
        self._waited_s += waited_s
        # A recording and a fault replay carry the system's seconds as `duration_s`; a lost
        # case (an exception) carries none.
        self._system_s.append(float(getattr(result, "duration_s", 0.0) or 0.0))

    def pays(self, sandboxes: int, now: float) -> bool:
        if self.settled or sandboxes >= self.most or self._opened_at is None:
            return False
        if self._results < WINDOW_PER_SANDBOX * sandboxes:
            return False
        window_s = max(now - self._opened_at, 1e-9)
        rate = self._results / window_s
        if self._before is not None:
            rate_before, fewer = self._before
            if rate - rate_before < PAID_SHARE * rate_before / fewer:
                self.settled = True
                return False
            self._before = None
        driver_s = window_s - self._waited_s
        sandbox_s = sandboxes * window_s / self._results  # a sandbox's time per case
        grows = self._waited_s > driver_s and statistics.median(self._system_s) > SYSTEM_SHARE * sandbox_s
        if grows:
            self._before = (rate, sandboxes)
            self._restart(None)  # opened again by the new sandbox's first result
        else:
            self._restart(now)
        return grows
