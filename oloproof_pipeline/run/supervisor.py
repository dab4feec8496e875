"""The system under test in worker processes of its own, supervised from the evaluating one.

Whatever a system does to its process (sys.exit, os._exit, a segfault, a hang, a thread
that never ends) happens in a worker process, never in the CLI's or a Dagster step's. The
supervisor sends a worker its cases as JSON lines, one at a time (the next only once the
one before is journalled, so a killed run loses at most the case running; a case's control
and faulted replays, journalled as one row, go together) and reads each recording back as
one; the worker imports and builds the system once and keeps it between cases. A worker
that ends mid-case costs that case (`system_crashed`, with its exit code or signal), one
that overruns the case's deadline is stopped (`timeout`), and a fresh worker takes the next
case.

Workers are forked from a fork server (run/worker_processes.py: the processes and their
channels; run/worker.py is what runs inside them); this module is what a sandbox does with
them: which task goes when, what a lost worker costs, and when a fresh one takes over.
"""

from __future__ import annotations

import socket
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable, Iterator

from ..model.cases import CaseRecord
from ..model.errors import PipelineError
from ..model.records import RecordedRun, RecordingRow, ReplayResult, RunText
from ..model.trajectory import Checkpoint, ToolChange, Trajectory
from .channel import AnyTask, EncodedTask, ReplayTask, StoredCase, SystemFacts, WorkerMessage, numbered, record_task, task_line
from .spec import SandboxSettings, SystemSpec
from .worker_processes import KILL_GRACE_S, WorkerLost, WorkerProcess

__all__ = ["SupervisedSandbox", "SystemFacts", "probe_system", "replay_result"]


def pipeline_failed(problem: str) -> PipelineError:
    """The worker could not serve a task: a bug of ours fails the run, never costs a case."""
    return PipelineError(f"{problem} (an error in oloproof_pipeline, not in the system under test)")


class SupervisedSandbox:
    """One sandbox: the system in a supervised worker process, one case at a time.

    The same `record` and `replay` as the runner inside the worker (run/runner.py), so
    callers never see the process boundary, and `record_each` for many cases. The worker is
    started on first use and kept between cases (warm state); after a crash or a timeout a
    fresh one takes the next case. A case costs one deadline of `timeout_s` (plus
    KILL_GRACE_S for the worker to report its own timeout), counted from when it starts.
    A worker whose system reports another version than `settings.version` answers each case
    with an error (run/worker.py), never a recording to be trusted."""

    def __init__(self, settings: SandboxSettings):
        self.settings = settings
        self._worker: WorkerProcess | None = None
        self._lock = threading.Lock()  # cases sharing one sandbox run one at a time
        self.workers_started = 0
        # The item begun: its tasks not sent yet, those sent and not answered, the answers so far.
        self._upcoming = _Upcoming(())
        self._sent: deque[tuple[AnyTask, bytes]] = deque()
        self._answers: list[tuple[AnyTask, Any]] = []
        self._check: Callable[[SystemFacts], None] | None = None
        self._started = 0.0

    def record(self, case: CaseRecord) -> RecordedRun:
        return list(self.record_each([case]))[0]

    def record_each(self, cases: Iterable[CaseRecord | StoredCase]) -> Iterator[RecordedRun]:
        """Each case's recording, in order, as a model (`record_rows`, for scripts and tests)."""
        return (row.as_run() for row in self.record_rows(cases))

    def record_rows(self, cases: Iterable[CaseRecord | StoredCase]) -> Iterator[RecordingRow]:
        """Each case's recording as its row, in order; the next case is sent when the caller
        asks for it, so whatever the caller does with a recording (journal it) happens
        before the system starts the next case."""
        for task, answer in self._run_tasks(record_task(case) for case in cases):
            yield self.recording(task, answer)

    def recording(self, task: AnyTask, answer: Any) -> RecordingRow:
        """A record task's answer as its recording's row (a case its worker ended or overran on: that status)."""
        if isinstance(answer, WorkerLost):
            return RecordingRow(
                case_id=task.case.case_id, case_digest=task.case.case_digest, system_version=self.settings.version,
                status=answer.status, error=answer.error, duration_s=answer.duration_s,
            )
        return answer.recorded

    def replay(
        self, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        [result] = list(self.replay_each([ReplayTask(case=case, trajectory=trajectory, checkpoint=checkpoint, change=change)]))
        return result.as_result()

    def replay_each(self, tasks: Iterable[ReplayTask | EncodedTask], *, together: bool = False) -> Iterator[RunText]:
        """Each replay's result as its text, in order (one at a time, or side by side). `together`: the
        tasks are one item's (a control and a faulted replay of one case), all sent at once,
        so the worker starts each as the one before ends instead of waiting on this process."""
        for _, answer in self._run_tasks(tasks, together=together):
            yield replay_result(answer)

    def facts(self) -> SystemFacts:
        """What the system in this sandbox says about itself (its worker started if none is)."""
        with self._lock:
            worker = self._ready_worker()
            return worker.facts if worker.facts is not None else worker.await_ready()

    def _run_tasks(self, tasks: Iterable[AnyTask], *, together: bool = False) -> Iterator[tuple[Any, Any]]:
        """(task, its WorkerMessage or a WorkerLost) for each task, in order (`begin` and
        `advance`, waiting on this sandbox alone). Tasks are sent one at a time, the next
        only once the caller asks for it, after it journalled this answer: a run killed at
        any point has lost at most the case running. `together` sends them all at once
        instead (the tasks of one item, journalled as one row)."""
        with self._lock:
            if self.settings.cases_at_once > 1:
                yield from self._run_side_by_side(tasks)
                return
            for item in [list(tasks)] if together else ([task] for task in tasks):
                if not item:
                    return
                self.begin(item)
                done = None
                while done is None:
                    done = self.advance()
                yield from done

    # -- an item's tasks, from a caller that may wait on many sandboxes at once (run/local_sandboxes.py)

    def begin(self, tasks: list[AnyTask], check: Callable[[SystemFacts], None] | None = None) -> None:
        """Send an item's tasks together: the worker runs them in turn, each under its own
        deadline from when the one before it answered. A worker is started first if none is
        ready (its start is awaited as an answer is); `check` sees each new worker's facts
        before it gets a task (and may refuse the system by raising)."""
        if self._sent or (self._worker is not None and not self._worker.idle):
            # Answers still on their way (the caller stopped waiting), or it ended between
            # cases (a thread of the system's, say): never trusted with the next case.
            self._drop_worker()
        self._upcoming = _Upcoming(())
        self._upcoming.put_back([(task, task_line(task)) for task in tasks])
        self._sent = deque()
        self._answers: list[tuple[AnyTask, Any]] = []
        self._check = check
        self._send_or_start()

    def _send_or_start(self) -> None:
        if self._worker is None:
            self._worker = WorkerProcess(self.settings, wait=False)
            self.workers_started += 1
            return  # the tasks go once it is ready
        while (item := self._upcoming.take()) is not None:
            self._sent.append(item)
        self._worker.send(b"".join(line for _, line in self._sent))
        self._started = time.monotonic()

    @property
    def channel(self) -> socket.socket:
        """What the item begun waits on (its worker's channel)."""
        assert self._worker is not None
        return self._worker.channel

    @property
    def answer_held(self) -> bool:
        """An answer already read off the channel, waiting for `advance` without a wait."""
        return self._worker is not None and self._worker.holds_line

    @property
    def deadline(self) -> float:
        """When the task running (or the worker starting) has overrun: `advance` then ends it."""
        assert self._worker is not None
        if self._worker.facts is None:
            return self._worker.ready_by
        return self._started + self.settings.timeout_s + KILL_GRACE_S

    def advance(self) -> list[tuple[AnyTask, Any]] | None:
        """Take the next thing said on the channel (waiting for it until `deadline`, past
        which the task running is lost): each (task, its WorkerMessage or a WorkerLost) of
        the item once every task has an answer, else None. A task whose worker ended or
        was stopped gets WorkerLost, and those it never started go to a fresh worker. A
        system that cannot be built raises its ProjectError, a failure of our own code its
        PipelineError."""
        worker = self._worker
        assert worker is not None
        if worker.facts is None:
            facts = worker.await_ready()
            if self._check is not None:
                self._check(facts)
            self._send_or_start()
            return None
        task, _ = self._sent.popleft()
        try:
            answer: Any = worker.receive(self.deadline)
        except WorkerLost as lost:
            answer = self._lost(lost, self._started)
        self._started = time.monotonic()  # the next task sent starts as this one ends
        if isinstance(answer, WorkerMessage) and answer.problem is not None:  # our code failed, not the system
            self._drop_worker()
            raise pipeline_failed(answer.problem)
        self._answers.append((task, answer))
        if isinstance(answer, WorkerLost) or answer.retire:  # ended, or interrupted mid-case: a fresh worker
            self._upcoming.put_back(list(self._sent))
            self._drop_worker()
            if self._upcoming.waiting:
                self._send_or_start()
        if self._sent or self._upcoming.waiting:
            return None
        return self._answers

    def _run_side_by_side(self, tasks: Iterable[AnyTask]) -> Iterator[tuple[Any, Any]]:
        """`_run_tasks` with up to `cases_at_once` cases in flight on one worker (each in a
        thread of its own there, on a system instance of its own), each under its own
        deadline from when it was sent; yielded in order. A case that overruns its deadline
        is the one recorded as a timeout; the cases in flight beside it start again on a
        fresh worker. A worker that ends with several cases in flight cannot say which one
        ended it: those cases run again one at a time, so the crash costs only its own."""
        upcoming = _Upcoming(numbered(task, number) for number, task in enumerate(tasks))
        in_flight: dict[int, tuple[AnyTask, bytes, float]] = {}
        done: dict[int, tuple[Any, Any]] = {}
        suspects: set[int] = set()  # in flight when a worker ended: each runs alone (first in line)
        following = 0
        try:
            while True:
                while len(in_flight) < (1 if suspects else self.settings.cases_at_once):
                    item = upcoming.take()
                    if item is None:
                        break
                    worker = self._worker if in_flight else self._ready_worker()
                    worker.send(item[1])
                    in_flight[item[0].number] = (*item, time.monotonic())
                if not in_flight:
                    return
                first_deadline = min(started for _, _, started in in_flight.values()) + self.settings.timeout_s + KILL_GRACE_S
                try:
                    message = worker.receive(first_deadline)
                except WorkerLost as lost:
                    self._drop_worker()
                    if lost.status == "timeout" or len(in_flight) == 1:
                        culprit = min(in_flight, key=lambda number: in_flight[number][2])
                        task, _, started = in_flight.pop(culprit)
                        done[culprit] = (task, self._lost(lost, started))
                        suspects.discard(culprit)
                    else:
                        suspects |= set(in_flight)
                    upcoming.put_back([(task, line) for _, (task, line, _) in sorted(in_flight.items())])
                    in_flight.clear()
                else:
                    if message.number not in in_flight:
                        continue  # not an answer to anything asked: nothing to trust it with
                    if message.problem is not None:  # our code failed, not the system (as one at a time)
                        raise pipeline_failed(message.problem)
                    task, _, _ = in_flight.pop(message.number)
                    suspects.discard(message.number)
                    done[message.number] = (task, message)
                while following in done:
                    yield done.pop(following)
                    following += 1
        finally:
            if in_flight:  # left before their answers came (the caller stopped asking): never reuse
                self._drop_worker()

    def _lost(self, lost: WorkerLost, started: float) -> WorkerLost:
        if lost.status == "timeout":
            error = f"no answer within {self.settings.timeout_s:g} s; the system's process was stopped"
        else:
            error = f"the system's process {lost.error} during this case"
        return WorkerLost(lost.status, error, duration_s=round(time.monotonic() - started, 6))

    def _drop_worker(self) -> None:
        self._sent.clear()
        if self._worker is not None:
            self._worker.stop()
            self._worker = None

    def _ready_worker(self) -> WorkerProcess:
        if self._worker is not None and not self._worker.idle:
            # It ended between cases (a thread of the system's, say): not the next case's fault.
            self._drop_worker()
        if self._worker is None:
            self._worker = WorkerProcess(self.settings)
            self.workers_started += 1
        return self._worker

    def close(self, *, wait: bool = True) -> bool:
        """End the worker (also one whose system left a thread running). Without `wait`, a
        sandbox busy with a case is left as it is: False."""
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            self._drop_worker()
            return True
        finally:
            self._lock.release()

    def __enter__(self) -> "SupervisedSandbox":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def replay_result(answer: Any) -> RunText:
    """A replay task's answer as its result's text (a replay its worker ended or overran on: that status)."""
    if isinstance(answer, WorkerLost):
        return RunText(status=answer.status, error=answer.error, duration_s=answer.duration_s)
    return answer.replayed


class _Upcoming:
    """Tasks still to send, each with its JSON line; tasks a lost worker never started go
    back to the front."""

    def __init__(self, tasks: Iterable[AnyTask]):
        self._source = iter(tasks)
        self._returned: deque[tuple[AnyTask, bytes]] = deque()

    def take(self) -> tuple[AnyTask, bytes] | None:
        if self._returned:
            return self._returned.popleft()
        task = next(self._source, None)
        return None if task is None else (task, task_line(task))

    def put_back(self, items: list[tuple[AnyTask, bytes]]) -> None:
        self._returned.extendleft(reversed(items))

    @property
    def waiting(self) -> bool:
        """Tasks put back, not sent again yet (an item's tasks are all taken at once)."""
        return bool(self._returned)


def probe_system(spec: SystemSpec, *, timeout_s: float) -> SystemFacts:
    """Import and build the system in a throwaway worker process and read what it says about
    itself: nothing the system does on import can end, crash or wedge the caller."""
    worker = WorkerProcess(SandboxSettings(spec, version="", timeout_s=timeout_s, checks_version=False))
    try:
        return worker.facts
    finally:
        worker.stop()
