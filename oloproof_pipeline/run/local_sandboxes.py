"""A stage's items on several local sandboxes at once, without Dask.

Each local sandbox is a supervised worker process of its own (run/supervisor.py, forked from
the one fork server) holding a system instance of its own, so no state crosses cases, and a
case that crashes or hangs its sandbox costs that case only (a fresh worker takes that
sandbox's next one). The driver (the stage's loop, which journals) runs them all from its
own thread: it sends an item's tasks to an idle sandbox, waits on every busy sandbox's
channel at once, and reads an answer where one came (or ends the task whose deadline
passed). It hands a sandbox its next item only once the last one's result was yielded and
journalled: a run killed at any point has lost at most the items in flight, one per
sandbox. Results are yielded as they come back, in any order (the stages file each by its
case, as they do Dask's). No thread per sandbox: a case costs no hand-over between threads,
and nothing else contends for the interpreter while the driver journals.

A stage starts with one sandbox and adds one only when that pays (`Growth`), up to the
project's `concurrency.system` and never more than there are items to hand out: a system
that waits (on a model, a tool, a sleep) gets as many as keep the driver busy; one that
does not (a scripted agent, a CPU-bound system) gets another only on a long stage, up to
the cores this process may use, so the driver's work on one result overlaps a worker's on
the next; a short stage (a small suite) keeps its one worker.
"""

from __future__ import annotations

import os
import select
import statistics
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator

from .channel import AnyTask, SystemFacts
from .spec import SandboxSettings
from .supervisor import SupervisedSandbox


@dataclass(frozen=True)
class SandboxTask:
    """What a sandbox does with one item of a stage's work (`one`), and, where it can, with
    a stream of them on one sandbox (`each`: one worker for the stream, each item sent
    once the one before is journalled). Both plain functions, so a Dask worker can be sent them.

    Local sandboxes run an item as its `tasks` (sent together, the worker running them in
    turn), then make its result from their answers (`result`, given the sandbox and each
    (task, answer)); `check` sees what each new worker's system says about itself before it
    gets a task (and refuses it by raising a ProjectError)."""

    one: Callable[[SupervisedSandbox, Any], Any]
    each: Callable[[SupervisedSandbox, Iterable[Any]], Iterator[tuple[Any, Any]]] | None = None
    tasks: Callable[[Any], list[AnyTask]] | None = None
    result: Callable[[SupervisedSandbox, Any, list[tuple[AnyTask, Any]]], Any] | None = None
    check: Callable[[SystemFacts], None] | None = None


# No item in hand.
_IDLE = object()


class LocalSandbox:
    """One sandbox and the item it was handed, if any."""

    def __init__(self, settings: SandboxSettings, task: SandboxTask):
        self.sandbox = SupervisedSandbox(settings)
        self.task = task
        self.item: Any = _IDLE  # handed to it, its result not yielded yet
        self.served = 0  # results it gave back

    @property
    def busy(self) -> bool:
        return self.item is not _IDLE

    def hand(self, item: Any) -> None:
        assert self.task.tasks is not None
        self.item = item
        self.sandbox.begin(self.task.tasks(item), self.task.check)

    def advance(self) -> Any:
        """Read what its worker said; the item's result once it is done, else _IDLE."""
        answers = self.sandbox.advance()
        if answers is None:
            return _IDLE
        assert self.task.result is not None
        return self.task.result(self.sandbox, self.item, answers)


def on_local_sandboxes(settings: SandboxSettings, items: Iterable[Any], task: SandboxTask) -> Iterator[tuple[Any, Any]]:
    """(item, its result) for each item as its sandbox gives it back, on up to
    `settings.local_sandboxes` sandboxes. Each sandbox gets its next item only once the
    caller has taken its last result (and journalled it). A system that cannot be built
    (a ProjectError), or a failure of the pipeline's own code, stops the whole run, as it does
    on one sandbox."""
    waiting = iter(items)
    sandboxes: list[LocalSandbox] = []
    done: deque[tuple[LocalSandbox, Any]] = deque()  # results in hand, not yielded yet
    growth = Growth(settings.local_sandboxes)
    wanted = 1
    exhausted = False
    try:
        while True:
            while not exhausted:
                idle = next((sandbox for sandbox in sandboxes if not sandbox.busy), None)
                if idle is None and sandboxes and len(sandboxes) >= wanted:
                    wanted = growth.wanted(len(sandboxes), time.monotonic())
                    if len(sandboxes) >= wanted:
                        break
                item = next(waiting, _IDLE)
                if item is _IDLE:
                    exhausted = True
                    break
                if idle is None:  # the first sandbox, or more that pay: each started with an item in hand
                    idle = LocalSandbox(settings, task)
                    sandboxes.append(idle)
                idle.hand(item)
            if not done and not any(sandbox.busy for sandbox in sandboxes):
                return
            asked = time.monotonic()
            while not done:
                done.extend(answered(sandboxes))
            sandbox, result = done.popleft()
            item, sandbox.item = sandbox.item, _IDLE
            sandbox.served += 1
            now = time.monotonic()
            growth.observe(result, now, waited_s=now - asked, newest=sandbox is sandboxes[-1] and sandbox.served == 1)
            yield item, result
    finally:
        for sandbox in sandboxes:
            sandbox.sandbox.close()  # one still busy ends its case with its worker: never journalled, so run again


def answered(sandboxes: list[LocalSandbox]) -> Iterator[tuple[LocalSandbox, Any]]:
    """Wait until a busy sandbox has something to read (or a deadline passes), read it, and
    give each item that is done with its result."""
    busy = [sandbox for sandbox in sandboxes if sandbox.busy]
    ready = [sandbox for sandbox in busy if sandbox.sandbox.answer_held]
    if not ready:
        timeout_s = max(0.0, min(sandbox.sandbox.deadline for sandbox in busy) - time.monotonic())
        waiting = select.poll()  # poll, not select: a channel's descriptor may be past select's 1,024
        for sandbox in busy:
            waiting.register(sandbox.sandbox.channel, select.POLLIN)
        readable = {descriptor for descriptor, _ in waiting.poll(timeout_s * 1000)}
        now = time.monotonic()
        ready = [
            sandbox for sandbox in busy if sandbox.sandbox.channel.fileno() in readable or sandbox.sandbox.deadline <= now
        ]
    for sandbox in ready:
        result = sandbox.advance()
        if result is not _IDLE:
            yield sandbox, result


# Results per sandbox a measurement window holds before it decides anything; twice as many
# unless the system's share of each case is already clearly over CLEAR_SHARE (a window of a
# few milliseconds on a fast system is mostly noise; one of a system that plainly waits is not).
WINDOW_PER_SANDBOX = 4
CLEAR_SHARE = 0.9
# A system that waits: its case's system time (the median's, so one case stalled by a busy
# machine does not count) is more than this share of a sandbox's time per case. Below it a
# sandbox's time is mostly CPU (the system's or the pipeline's per-case handling in the
# worker), which more sandboxes than cores would only contend for.
SYSTEM_SHARE = 2 / 3
# A system that does not wait gets another sandbox only after this many results per sandbox
# it has: a worker's start (a fork, the system built, its memory) pays only over a long
# stage, and the window of a fast system is then long enough not to be noise.
LONG_WINDOW_PER_SANDBOX = 128
# Sandboxes are added up to as many as would keep the driver busy this share of the time (by
# the window's pace per sandbox), not all of it: each costs a worker's start and its memory,
# and the driver's time per case grows with the sandboxes it waits on.
DRIVER_BUSY = 0.75
# A sandbox added to k must add at least this share of what one of the k brought (the results
# per second over k); else none is added again. Cases that slow each other down (a CPU-bound
# system on a busy machine) add less; so does a driver near its own pace.
PAID_SHARE = 0.5


class Growth:
    """How many local sandboxes pay, from what the driver measures over a window of results
    (from the newest sandboxes' first result on, so a sandbox's start-up is never counted,
    and of at least WINDOW_PER_SANDBOX results per sandbox, twice as many unless the
    system's share of each case is clearly over CLEAR_SHARE, and always twice as many where
    it judges the sandboxes added last). More pay when:

    - the driver waited for results longer than it worked on them (journalling, judging
      rows, reading the next items): the sandboxes set the pace, not the driver.

    A system that waits (a case's system time, `duration_s` measured in the worker, the
    window's median, more than SYSTEM_SHARE of a sandbox's time per case) is given as many
    as would keep the driver busy DRIVER_BUSY of the time at the window's pace per sandbox,
    at least one and at most as many again: it reaches its number in a few windows. One
    that does not wait is busy on a core: it is given one more, after a window of
    LONG_WINDOW_PER_SANDBOX results per sandbox, while there are fewer sandboxes than
    `cores` (a worker's time on a result then overlaps the driver's on another's, where
    with one sandbox each waits for the other). Those last added must
    raise the results per second by at least PAID_SHARE of a sandbox's share before them
    each (a CPU-bound system on a busy machine does not): once they did not, none is added
    again. Never more than `most` sandboxes. A window that decides against growing starts
    again, so the rule follows a system whose pace changes."""

    def __init__(self, most: int, cores: int | None = None):
        self.most = most
        self.cores = cores if cores is not None else len(os.sched_getaffinity(0))
        self.settled = False  # sandboxes added did not pay
        # Results per second, and sandboxes, before the last ones were added.
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

    def wanted(self, sandboxes: int, now: float) -> int:
        """How many sandboxes to run now that `sandboxes` run."""
        if self.settled or sandboxes >= self.most or self._opened_at is None:
            return sandboxes
        if self._results < WINDOW_PER_SANDBOX * sandboxes:
            return sandboxes
        window_s = max(now - self._opened_at, 1e-9)
        sandbox_s = sandboxes * window_s / self._results  # a sandbox's time per case
        system_share = statistics.median(self._system_s) / sandbox_s
        clear = system_share > CLEAR_SHARE and self._before is None  # whether the last ones paid is never rushed
        if self._results < 2 * WINDOW_PER_SANDBOX * sandboxes and not clear:
            return sandboxes
        waits = system_share > SYSTEM_SHARE
        if not waits and self._results < LONG_WINDOW_PER_SANDBOX * sandboxes:
            return sandboxes
        rate = self._results / window_s
        if self._before is not None:
            rate_before, fewer = self._before
            if rate - rate_before < PAID_SHARE * (sandboxes - fewer) * rate_before / fewer:
                self.settled = True
                return sandboxes
            self._before = None
        driver_s = window_s - self._waited_s
        if self._waited_s > driver_s and (waits or sandboxes < self.cores):
            kept_busy = int(DRIVER_BUSY * sandboxes * window_s / max(driver_s, 1e-9)) if waits else sandboxes + 1
            self._before = (rate, sandboxes)
            self._restart(None)  # opened again by the newest sandbox's first result
            return min(self.most, 2 * sandboxes, max(sandboxes + 1, kept_busy))
        self._restart(now)
        return sandboxes
