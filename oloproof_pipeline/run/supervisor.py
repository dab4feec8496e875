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

Workers are forked from a fork server: one process per evaluating process that has
imported the runner once (never the system), so a fresh worker, for a probe or after a
crash, costs a fork and the system's own import rather than a new interpreter. The fork
server also reports how each of its workers ended, on that worker's channel. run/worker.py
is what runs inside both.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from pydantic import ValidationError

from ..model.cases import CaseRecord
from ..model.config import PROJECT_FILE
from ..model.errors import PipelineError, ProjectError
from ..model.records import RecordedRun, ReplayResult
from ..model.trajectory import Checkpoint, ToolChange, Trajectory
from .channel import AnyTask, EncodedTask, ReplayTask, StoredCase, SystemFacts, WorkerMessage, numbered, record_task, task_line
from .spec import SandboxSettings, SystemSpec

# After a case's deadline the worker interrupts the case itself and reports what it did so
# far; this is how long it gets to do so before its process is stopped.
KILL_GRACE_S = 2.0
# Importing and building the system is not a case: it gets its own, longer deadline, and
# so does starting the fork server.
START_MINIMUM_S = 60.0
# How long a fork server whose channel closed gets to exit.
STOP_GRACE_S = 2.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


class WorkerLost(Exception):
    """No answer for a case: the worker ended (`system_crashed`) or overran (`timeout`)."""

    def __init__(self, status: str, error: str, *, duration_s: float = 0.0):
        super().__init__(error)
        self.status = status
        self.error = error
        self.duration_s = duration_s


def describe_exit(returncode: int | None) -> str:
    if returncode is None:
        return "ended"
    if returncode < 0:
        try:
            return f"was killed by signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


# -- the fork server -----------------------------------------------------------------------


def worker_environment() -> dict[str, str]:
    """This process's environment as a worker gets it: the pipeline importable from there."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_PARENT, environment.get("PYTHONPATH")]))
    return environment


def _close_fork_server(control: socket.socket, process: subprocess.Popen) -> None:
    control.close()  # it exits when its channel closes
    try:
        process.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


class ForkServer:
    """A process (run/worker.py) that forks a fresh worker process on request, handing it
    one end of a channel the caller keeps the other end of."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "oloproof_pipeline.run.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=2,  # what a system prints goes to stderr, never among the evaluation's output
            env=worker_environment(),
            start_new_session=True,  # a Ctrl-C meant for the CLI reaches the CLI, which stops it
        )
        theirs.close()
        ours.settimeout(START_MINIMUM_S)
        self._control = ours
        self.owner = os.getpid()
        self._finalizer = weakref.finalize(self, _close_fork_server, ours, self._process)

    @property
    def usable(self) -> bool:
        """Alive, and this process's own (a forked copy of the evaluating process must not
        share its parent's fork server)."""
        return self.owner == os.getpid() and self._process.poll() is None

    def fork(self, settings: dict[str, Any]) -> tuple[int, socket.socket]:
        """A new worker process for `settings`, with this process's environment as it is now
        (the server's is the one it started with): its pid and our end of its channel."""
        ours, theirs = socket.socketpair()
        request = {"settings": settings, "environment": worker_environment()}
        try:
            socket.send_fds(self._control, [json.dumps(request).encode()], [theirs.fileno()])
            reply = self._control.recv(4096)
        finally:
            theirs.close()
        if not reply:
            ours.close()
            raise OSError("the fork server ended")
        return json.loads(reply)["pid"], ours

    def stop(self) -> None:
        self._finalizer()

    def forget(self) -> None:
        """Drop it without stopping it: it belongs to another process."""
        self._finalizer.detach()


_fork_server: ForkServer | None = None
_fork_server_lock = threading.Lock()


def _usable_fork_server() -> ForkServer:
    """This process's fork server, started if there is none (call under the lock)."""
    global _fork_server
    if _fork_server is not None and _fork_server.owner != os.getpid():
        _fork_server.forget()  # a forked copy of the evaluating process: the server is its parent's
        _fork_server = None
    if _fork_server is None or not _fork_server.usable:
        _fork_server = ForkServer()
    return _fork_server


def start_fork_server() -> None:
    """Start this process's fork server now, so it imports while other work goes on (it
    answers its first request once ready)."""
    with _fork_server_lock:
        _usable_fork_server()


def fork_worker(settings: dict[str, Any]) -> tuple[int, socket.socket]:
    """A new worker process from this process's fork server (started on first use, and
    again if it ended)."""
    global _fork_server
    with _fork_server_lock:
        for _ in range(2):
            server = _usable_fork_server()
            try:
                return server.fork(settings)
            except OSError:
                server.stop()
                _fork_server = None
    raise ProjectError("could not start a worker process for the system under test: the fork server ended twice")


def stop_fork_server() -> None:
    """End this process's fork server; the next worker starts a new one."""
    global _fork_server
    with _fork_server_lock:
        if _fork_server is not None:
            _fork_server.stop()
            _fork_server = None


# -- one worker ----------------------------------------------------------------------------


def _end_worker(pid: int, channel: socket.socket) -> None:
    """Close the channel (an idle worker exits on it) and stop the worker's process group,
    so nothing the system started outlives its sandbox."""
    channel.close()
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class WorkerProcess:
    """One worker process holding one built system, spoken to in JSON lines.

    Starting it waits until the system is imported and built (`await_ready`; unless told
    not to, at once): a system that cannot be is a ProjectError of one line per problem,
    however it failed (an exception, SystemExit, os._exit, a signal, a hang). Its `facts`
    are None until then."""

    def __init__(self, settings: SandboxSettings, *, wait: bool = True):
        self.spec = settings.spec
        self.pid, self._channel = fork_worker(settings.as_json())
        self._finalizer = weakref.finalize(self, _end_worker, self.pid, self._channel)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._channel, selectors.EVENT_READ)
        self._buffer = bytearray()
        self.start_timeout_s = max(settings.timeout_s, START_MINIMUM_S)
        self.ready_by = time.monotonic() + self.start_timeout_s
        self.facts: SystemFacts | None = None
        if wait:
            self.await_ready()

    def await_ready(self) -> SystemFacts:
        where = f"{Path(self.spec.project_root) / PROJECT_FILE}: system.callable"
        try:
            message = self.receive(self.ready_by)
        except WorkerLost as lost:
            doing = f"importing {self.spec.module_file} and building {self.spec.callable}"
            timeout_s = self.start_timeout_s
            what = f"did not finish {doing} within {timeout_s:g} s" if lost.status == "timeout" else f"{lost.error} while {doing}"
            raise ProjectError(f"{where}: the system's process {what}") from None
        if message.ready is None:
            self.stop()
            raise ProjectError(message.failed or [f"{where}: the system's process said nothing it was asked"])
        self.facts = message.ready
        return message.ready

    @property
    def channel(self) -> socket.socket:
        """What to wait on for its next message."""
        return self._channel

    @property
    def holds_line(self) -> bool:
        """A whole message already read off the channel (the second of two sent together, say)."""
        return b"\n" in self._buffer

    def send(self, line: bytes) -> None:
        """Queue a task (one JSON line) on the channel; a worker that has ended shows in the
        next receive."""
        try:
            self._channel.sendall(line)
        except OSError:
            pass

    def receive(self, deadline: float) -> WorkerMessage:
        """The next message by `deadline`. WorkerLost (the worker then stopped) when there
        is none, or when the fork server reports that the worker ended."""
        while True:
            line = self._next_line(deadline)
            if not line.strip():
                continue
            try:
                message = WorkerMessage.model_validate_json(line)
            except ValidationError:  # a line cut short by the worker's end
                continue
            if message.ended is not None:
                self.stop()
                raise WorkerLost("system_crashed", describe_exit(message.ended))
            return message

    def _next_line(self, deadline: float) -> bytes:
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not self._selector.select(remaining):
                self.stop()
                raise WorkerLost("timeout", "no answer in time")
            chunk = self._channel.recv(1 << 16)
            if not chunk:
                self.stop()
                raise WorkerLost("system_crashed", describe_exit(None))
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        return line

    @property
    def idle(self) -> bool:
        """Nothing unasked-for on its channel: anything there (the report that it ended,
        say) means it is not to be trusted with a case."""
        return not self._buffer and not self._selector.select(0)

    def stop(self) -> None:
        if self._selector.get_map() is not None:
            self._selector.close()
        self._finalizer()


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
        """Each case's recording, in order; the next case is sent when the caller asks for
        it, so whatever the caller does with a recording (journal it) happens before the
        system starts the next case."""
        for task, answer in self._run_tasks(record_task(case) for case in cases):
            yield self.recording(task, answer)

    def recording(self, task: AnyTask, answer: Any) -> RecordedRun:
        """A record task's answer as its recording (a case its worker ended or overran on: that status)."""
        if isinstance(answer, WorkerLost):
            return RecordedRun(
                case_id=task.case.case_id, case_digest=task.case.case_digest, system_version=self.settings.version,
                status=answer.status, error=answer.error, duration_s=answer.duration_s,
            )
        return answer.recorded

    def replay(
        self, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        [result] = list(self.replay_each([ReplayTask(case=case, trajectory=trajectory, checkpoint=checkpoint, change=change)]))
        return result

    def replay_each(self, tasks: Iterable[ReplayTask | EncodedTask], *, together: bool = False) -> Iterator[ReplayResult]:
        """Each replay's result, in order (one at a time, or side by side). `together`: the
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


def replay_result(answer: Any) -> ReplayResult:
    """A replay task's answer as its result (a replay its worker ended or overran on: that status)."""
    if isinstance(answer, WorkerLost):
        return ReplayResult(status=answer.status, error=answer.error, duration_s=answer.duration_s)
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
