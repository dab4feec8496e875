"""Worker processes for the system under test, forked from a fork server, each spoken to in
JSON lines over a channel of its own (run/supervisor.py hands them cases; run/worker.py is
what runs inside them).

The fork server is one process per evaluating process that has imported the runner once
(never the system), so a fresh worker, for a probe or after a crash, costs a fork and the
system's own import rather than a new interpreter. The fork server also reports how each of
its workers ended, on that worker's channel: a worker that ends or overruns is a
`WorkerLost`, never an exception of the pipeline's own.
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
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..model.config import PROJECT_FILE
from ..model.errors import ProjectError
from .channel import SystemFacts, WorkerMessage
from .spec import SandboxSettings

# After a case's deadline the worker interrupts the case itself and reports what it did so
# far; this is how long it gets to do so before its process is stopped.
KILL_GRACE_S = 2.0
# Importing and building the system is not a case: it gets its own, longer deadline, and
# so does starting the fork server.
START_MINIMUM_S = 60.0
# How long a fork server whose channel closed gets to exit.
STOP_GRACE_S = 2.0
_PACKAGE_PARENT = str(Path(__file__).resolve().parents[2])
# The fork server imports the runner with the garbage collector off (its modules make next to
# no garbage, and its passes over them were a fifth of their time); run/worker.py's
# `serve_forks` sets what they made aside before it forks any worker.
FORK_SERVER_MAIN = "import gc; gc.disable(); from oloproof_pipeline.run.worker import serve_forks; serve_forks()"


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
            [sys.executable, "-c", FORK_SERVER_MAIN, str(theirs.fileno())],
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
# Fork servers this process started: at most one per run that records (again only if one
# ended), none for a run that records nothing (the tests count them).
fork_servers_started = 0


def _usable_fork_server() -> ForkServer:
    """This process's fork server, started if there is none (call under the lock)."""
    global _fork_server, fork_servers_started
    if _fork_server is not None and _fork_server.owner != os.getpid():
        _fork_server.forget()  # a forked copy of the evaluating process: the server is its parent's
        _fork_server = None
    if _fork_server is None or not _fork_server.usable:
        _fork_server = ForkServer()
        fork_servers_started += 1
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
        while (end := self._buffer.find(b"\n")) < 0:
            try:  # what is there already (the caller mostly waited for it): no second wait
                chunk = self._channel.recv(1 << 16, socket.MSG_DONTWAIT)
            except BlockingIOError:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or not self._selector.select(remaining):
                    self.stop()
                    raise WorkerLost("timeout", "no answer in time") from None
                continue
            if not chunk:
                self.stop()
                raise WorkerLost("system_crashed", describe_exit(None))
            self._buffer += chunk
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 1]
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
