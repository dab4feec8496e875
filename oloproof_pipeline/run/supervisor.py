"""The system under test in worker processes of its own, supervised from the evaluating one.

Whatever a system does to its process (sys.exit, os._exit, a segfault, a hang, a thread
that never ends) happens in a worker process, never in the CLI's or a Dagster step's. The
supervisor sends a worker one case at a time as a JSON line and reads the recording back
as one; the worker imports and builds the system once and keeps it between cases. A worker
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..model.cases import CaseRecord
from ..model.config import PROJECT_FILE
from ..model.errors import ProjectError, SystemVersionMismatch
from ..model.records import RecordedRun, ReplayResult
from ..model.trajectory import Checkpoint, ToolChange, Trajectory
from .spec import SystemSpec

# After a case's deadline the worker interrupts the case itself and reports what it did so
# far; this is how long it gets to do so before its process is stopped.
KILL_GRACE_S = 2.0
# Importing and building the system is not a case: it gets its own, longer deadline, and
# so does starting the fork server.
START_MINIMUM_S = 60.0
# How long a fork server whose channel closed gets to exit.
STOP_GRACE_S = 2.0

_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])


@dataclass(frozen=True)
class SystemFacts:
    """What a system says about itself once built: its `version` attribute, and whether it
    can be replayed (it uses the tool box or has a `replay` method)."""

    version: str | None
    replayable: bool


class WorkerLost(Exception):
    """No answer for a case: the worker ended (`system_crashed`) or overran (`timeout`)."""

    def __init__(self, status: str, error: str):
        super().__init__(error)
        self.status = status
        self.error = error


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
        environment = dict(os.environ)
        environment["PYTHONPATH"] = os.pathsep.join(filter(None, [_PACKAGE_PARENT, environment.get("PYTHONPATH")]))
        self._process = subprocess.Popen(
            [sys.executable, "-m", "oloproof_pipeline.run.worker", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=2,  # what a system prints goes to stderr, never among the evaluation's output
            env=environment,
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
        """A new worker process for `settings`: its pid and our end of its channel."""
        ours, theirs = socket.socketpair()
        try:
            socket.send_fds(self._control, [json.dumps(settings).encode()], [theirs.fileno()])
            reply = self._control.recv(4096)
        finally:
            theirs.close()
        if not reply:
            ours.close()
            raise OSError("the fork server ended")
        return json.loads(reply)["pid"], ours

    def stop(self) -> None:
        self._finalizer()


_fork_server: ForkServer | None = None
_fork_server_lock = threading.Lock()


def fork_worker(settings: dict[str, Any]) -> tuple[int, socket.socket]:
    """A new worker process from this process's fork server (started on first use, and
    again if it ended)."""
    global _fork_server
    with _fork_server_lock:
        for _ in range(2):
            if _fork_server is None or not _fork_server.usable:
                _fork_server = ForkServer()
            try:
                return _fork_server.fork(settings)
            except OSError:
                _fork_server.stop()
                _fork_server = None
    raise ProjectError("could not start a worker process for the system under test: the fork server ended twice")


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

    Starting it waits until the system is imported and built: a system that cannot be is a
    ProjectError of one line per problem, however it failed (an exception, SystemExit,
    os._exit, a signal, a hang)."""

    def __init__(self, spec: SystemSpec, *, system_version: str, timeout_s: float):
        self.spec = spec
        self.pid, self._channel = fork_worker(
            {"spec": spec.as_json(), "system_version": system_version, "timeout_s": timeout_s}
        )
        self._finalizer = weakref.finalize(self, _end_worker, self.pid, self._channel)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._channel, selectors.EVENT_READ)
        self._buffer = bytearray()
        self.facts = self._await_ready(max(timeout_s, START_MINIMUM_S))

    def _await_ready(self, timeout_s: float) -> SystemFacts:
        where = f"{Path(self.spec.project_root) / PROJECT_FILE}: system.callable"
        try:
            message = self._receive(time.monotonic() + timeout_s)
        except WorkerLost as lost:
            self.stop()
            doing = f"importing {self.spec.module_file} and building {self.spec.callable}"
            what = f"did not finish {doing} within {timeout_s:g} s" if lost.status == "timeout" else f"{lost.error} while {doing}"
            raise ProjectError(f"{where}: the system's process {what}") from None
        if "failed" in message:
            self.stop()
            raise ProjectError(message["failed"])
        return SystemFacts(**message["ready"])

    def ask(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Send one task and wait up to `timeout_s` for its answer; WorkerLost when there is
        none (the worker has then ended or been stopped)."""
        try:
            self._channel.sendall(json.dumps(message, ensure_ascii=False).encode() + b"\n")
        except OSError:  # it ended between tasks: the answer below says how
            pass
        return self._receive(time.monotonic() + timeout_s)

    def _receive(self, deadline: float) -> dict[str, Any]:
        """The next message; the fork server's report that the worker ended is WorkerLost."""
        while True:
            line = self._next_line(deadline).strip()
            try:
                message = json.loads(line) if line else None
            except ValueError:  # a line cut short by the worker's end
                continue
            if message is None:
                continue
            if "ended" in message:
                self.stop()
                raise WorkerLost("system_crashed", describe_exit(message["ended"]))
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


class SupervisedSandbox:
    """One sandbox: the system in a supervised worker process, one case at a time.

    The same `record` and `replay` as the runner inside the worker (run/runner.py), so
    callers never see the process boundary. The worker is started on first use and kept
    between cases (warm state); after a crash or a timeout a fresh one takes the next case.
    A case costs one deadline of `timeout_s` (plus KILL_GRACE_S for the worker to report
    its own timeout), measured from when it is sent."""

    def __init__(self, spec: SystemSpec, *, system_version: str, timeout_s: float):
        self.spec = spec
        self.system_version = system_version
        self.timeout_s = timeout_s
        self._worker: WorkerProcess | None = None
        self._lock = threading.Lock()  # cases sharing one sandbox run one at a time
        self.workers_started = 0

    @property
    def facts(self) -> SystemFacts:
        with self._lock:
            return self._ready_worker().facts

    def record(self, case: CaseRecord) -> RecordedRun:
        with self._lock:
            started = time.perf_counter()
            try:
                return RecordedRun.model_validate(self._ask({"op": "record", "case": case.model_dump(mode="json")}))
            except WorkerLost as lost:
                return RecordedRun(
                    case_id=case.case_id, case_digest=case.case_digest, system_version=self.system_version,
                    status=lost.status, error=lost.error, duration_s=round(time.perf_counter() - started, 6),
                )

    def replay(
        self, case: CaseRecord, trajectory: Trajectory, checkpoint: Checkpoint, change: ToolChange | None
    ) -> ReplayResult:
        with self._lock:
            started = time.perf_counter()
            message = {
                "op": "replay",
                "case": case.model_dump(mode="json"),
                "trajectory": trajectory.model_dump(mode="json"),
                "checkpoint": checkpoint.model_dump(mode="json"),
                "change": None if change is None else change.model_dump(mode="json"),
            }
            try:
                return ReplayResult.model_validate(self._ask(message))
            except WorkerLost as lost:
                return ReplayResult(status=lost.status, error=lost.error, duration_s=round(time.perf_counter() - started, 6))

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        worker = self._ready_worker()
        try:
            answer = worker.ask(message, self.timeout_s + KILL_GRACE_S)
        except WorkerLost as lost:
            self._worker = None
            if lost.status == "timeout":
                raise WorkerLost("timeout", f"no answer within {self.timeout_s:g} s; the system's process was stopped")
            raise WorkerLost(lost.status, f"the system's process {lost.error} during this case") from None
        if "problem" in answer:  # the worker could not serve the task at all
            raise WorkerLost("error", answer["problem"])
        if answer["retire"]:  # interrupted mid-case: its state is not to be trusted
            worker.stop()
            self._worker = None
        return answer["result"]

    def _ready_worker(self) -> WorkerProcess:
        if self._worker is not None and not self._worker.idle:
            # It ended between cases (a thread of the system's, say): not the next case's fault.
            self._worker.stop()
            self._worker = None
        if self._worker is None:
            worker = WorkerProcess(self.spec, system_version=self.system_version, timeout_s=self.timeout_s)
            self.workers_started += 1
            reported = worker.facts.version
            if reported is not None and reported != self.system_version:
                worker.stop()
                raise SystemVersionMismatch(
                    f"{Path(self.spec.project_root) / PROJECT_FILE}: system.version: recording version "
                    f"{self.system_version!r}, but the system reports {reported!r}"
                )
            self._worker = worker
        return self._worker

    def close(self, *, wait: bool = True) -> bool:
        """End the worker (also one whose system left a thread running). Without `wait`, a
        sandbox busy with a case is left as it is: False."""
        if not self._lock.acquire(blocking=wait):
            return False
        try:
            if self._worker is not None:
                self._worker.stop()
                self._worker = None
            return True
        finally:
            self._lock.release()

    def __enter__(self) -> "SupervisedSandbox":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def probe_system(spec: SystemSpec, *, timeout_s: float) -> SystemFacts:
    """Import and build the system in a throwaway worker process and read what it says about
    itself: nothing the system does on import can end, crash or wedge the caller."""
    worker = WorkerProcess(spec, system_version="", timeout_s=timeout_s)
    try:
        return worker.facts
    finally:
        worker.stop()
