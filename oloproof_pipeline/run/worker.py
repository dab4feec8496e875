"""What runs inside the fork server and the worker processes it forks (run/supervisor.py
starts them; the evaluating process never imports the system).

The fork server imports the runner once, then forks one worker per request and reports on
that worker's channel how it ended. A worker imports and builds the system once, says what
it is, then records or replays one case per JSON line read from its channel, answering
with one JSON line each. A system that reports another version than the one its runs are
filed under is never run: each case is answered with an error saying so. Its stdin is empty and its stdout is stderr, so nothing the system
prints can garble an answer. A worker ends when its channel closes, when it had to
interrupt a case (it says so, and the supervisor starts a fresh one), or when the system
calls sys.exit().
"""

from __future__ import annotations

import gc
import json
import os
import selectors
import signal
import socket
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

from ..model.config import PROJECT_FILE
from ..model.errors import ProjectError
from ..model.fingerprints import imported_file_digests
from ..model.records import RUN_TEXT, RecordedRun, RecordingRow, ReplayResult, RunText
from .reference import ReferencePlayer, load_reference
from .runner import SandboxRunner, can_replay
from .spec import SandboxSettings, build_system
from .channel import TASKS, RecordTask, ReplayTask, SystemFacts, WorkerMessage
from .system import reported_version


def leave(code: int = 0) -> None:
    """End the process now: a thread the system left running must not keep it alive."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def exit_code(leaving: SystemExit) -> int:
    """What sys.exit(code) would have exited with."""
    if leaving.code is None or isinstance(leaving.code, int):
        return leaving.code or 0
    print(leaving.code, file=sys.stderr)
    return 1


def send(channel: socket.socket, message: WorkerMessage) -> None:
    try:
        channel.sendall(as_line(message))
    except OSError:  # the supervisor is gone: nobody is waiting for this answer
        leave()


def tasks_on(channel: socket.socket) -> Iterator[bytes]:
    """The task lines on the channel until it closes. A supervisor killed with an answer
    still unread resets the channel instead: gone all the same, and nothing to print."""
    lines = channel.makefile("rb")
    while True:
        try:
            line = lines.readline()
        except OSError:
            return
        if not line:
            return
        yield line


def as_line(message: WorkerMessage) -> bytes:
    """The message as one JSON line (what the system recorded is JSON text in it already:
    `recording_row`, `replay_text`). Text the system gave that is not UTF-8 (an error's lone
    surrogate, say) makes the case `not_json`, never an unreadable answer."""
    try:
        return message.model_dump_json().encode() + b"\n"
    except ValueError:  # pydantic's PydanticSerializationError
        field = "recorded" if message.recorded is not None else "replayed"
        return in_json(getattr(message, field), lambda run: message.model_copy(update={field: run}).model_dump_json().encode() + b"\n")


def in_json(run: Any, convert: Callable[[Any], Any]) -> Any:
    """`convert(run)`; when what the system recorded is not JSON, `convert` of the run as
    `not_json`: its trajectory dropped, and its output and state too if they are not JSON
    either (a lone surrogate in a text, say)."""
    try:
        return convert(run)
    except ValueError as problem:  # pydantic's PydanticSerializationError
        for dropped in (("trajectory",), RUN_TEXT):
            fields = {"status": "not_json", "error": f"what the system recorded is not JSON: {problem}", **dict.fromkeys(dropped)}
            try:
                return convert(run.model_copy(update=fields))
            except ValueError:
                continue
        raise


def recording_row(run: RecordedRun) -> RecordingRow:
    """The recording as its row (one not JSON is `not_json`: `in_json`)."""
    return in_json(run, RecordedRun.as_row)


def replay_text(result: ReplayResult) -> RunText:
    """The replay as its text (one not JSON is `not_json`: `in_json`)."""
    return in_json(result, ReplayResult.as_text)


def version_refusal(settings: SandboxSettings, reported: str | None) -> str | None:
    """Why this system must not run cases filed under `settings.version`, if it must not."""
    if not settings.checks_version or reported is None or reported == settings.version:
        return None
    return (
        f"{Path(settings.spec.project_root) / PROJECT_FILE}: system.version: recording version "
        f"{settings.version!r}, but the system reports {reported!r}"
    )


def refused(task: RecordTask | ReplayTask, version: str, refusal: str) -> WorkerMessage:
    """The answer to a task the system must not run: an error, never a result to trust."""
    if isinstance(task, RecordTask):
        case = task.case
        refusing = RecordingRow(case_id=case.case_id, case_digest=case.case_digest, system_version=version, status="error", error=refusal)
        return WorkerMessage(recorded=refusing)
    return WorkerMessage(replayed=RunText(status="error", error=refusal))


def serve(runner: SandboxRunner, task: RecordTask | ReplayTask, project_root: Path) -> WorkerMessage:
    if isinstance(task, RecordTask):
        result = runner.record(task.case)
        # What the system is made of, found rather than declared: every module imported so far
        # (building it, and this case and the ones before) from outside the installed packages.
        result.found_files = imported_file_digests(project_root)
        answer = WorkerMessage(recorded=recording_row(result))
    else:
        result = runner.replay(task.case, task.trajectory, task.checkpoint, task.change)
        answer = WorkerMessage(replayed=replay_text(result))
    # A case interrupted at its deadline may have left the system half-way: retire.
    answer.retire = result.status == "timeout"
    return answer


_building = threading.Lock()


def one_build_at_a_time(build: Callable[[], Any]) -> Callable[[], Any]:
    """`build`, never run by two threads at once: building a chat agent imports its tools'
    module afresh under one name in sys.modules, which two imports at once would mix up."""

    def built() -> Any:
        with _building:
            return build()

    return built


def start(settings: SandboxSettings) -> tuple[SandboxRunner, SystemFacts]:
    """Import and build the system once; the runner, and what the system says about itself.
    `runner.another()` makes another runner over a system instance of its own."""
    spec = settings.spec
    attribute = spec.load_attribute()
    build = lambda: spec.build_from(attribute)  # noqa: E731
    if spec.plays_references:
        reference = load_reference(spec)
        build = lambda: ReferencePlayer(build_system(attribute), reference)  # noqa: E731
    build = one_build_at_a_time(build)
    runner = SandboxRunner(build, system_version=settings.version, timeout_s=settings.timeout_s)
    runner.another = lambda: SandboxRunner(build, system_version=settings.version, timeout_s=settings.timeout_s)
    return runner, SystemFacts(version=reported_version(attribute), replayable=can_replay(runner.system))


def work(settings: SandboxSettings, channel: socket.socket) -> None:
    """A worker's life: build the system, then one case per line until the channel closes."""
    gc.disable()  # importing and building the system: long-lived objects, next to no garbage
    try:
        runner, facts = start(settings)
    except ProjectError as error:
        send(channel, WorkerMessage(failed=error.problems))
        leave()
    except BaseException as error:  # noqa: BLE001 - SystemExit too: one line, never an exit
        where = f"{Path(settings.spec.project_root) / PROJECT_FILE}: system.callable"
        problem = f"{where}: building {settings.spec.callable} failed: {type(error).__name__}: {error}"
        send(channel, WorkerMessage(failed=[problem]))
        leave()
    gc.freeze()  # ... set aside from the collector's passes over what the cases make
    gc.enable()
    send(channel, WorkerMessage(ready=facts))
    root = Path(settings.spec.project_root)
    imported_file_digests(root)  # each module's file read as soon as it is found imported
    refusal = version_refusal(settings, facts.version)
    if settings.cases_at_once > 1:
        serve_side_by_side(settings, runner, channel, refusal)
    for line in tasks_on(channel):
        try:
            task = TASKS.validate_json(line)
            answer = serve(runner, task, root) if refusal is None else refused(task, settings.version, refusal)
        except SystemExit as leaving:  # the system asked its process to end: it does
            leave(exit_code(leaving))
        except Exception as error:  # the task itself could not be served (never the system's failures)
            answer = WorkerMessage(problem=f"the worker could not run this case: {type(error).__name__}: {error}")
        send(channel, answer)
        if answer.retire:
            break
    leave()


def serve_side_by_side(settings: SandboxSettings, first: SandboxRunner, channel: socket.socket, refusal: str | None) -> None:
    """Up to `cases_at_once` cases at once (the supervisor sends no more), each on a thread
    of its own with a runner, so a system instance, of that thread's own: no case sees
    another's state, and each resets and checks its own. Each answer goes back as its case
    ends, with the task's number; a case past its deadline stops at its next model request
    or tool call (endpoints/deadline.py), its instance replaced, so the worker need not retire.
    Ends the process when the channel closes."""
    spare = [first]
    local = threading.local()
    sending = threading.Lock()

    def run(task: RecordTask | ReplayTask) -> None:
        try:
            if refusal is not None:
                answer = refused(task, settings.version, refusal)
            else:
                if getattr(local, "runner", None) is None:
                    try:
                        local.runner = spare.pop()
                    except IndexError:
                        local.runner = first.another()
                answer = serve(local.runner, task, Path(settings.spec.project_root))
                answer.retire = False
        except SystemExit as leaving:  # the system asked its process to end: it does
            leave(exit_code(leaving))
        except Exception as error:  # never the system's failures: those are in the answer
            answer = WorkerMessage(problem=f"the worker could not run this case: {type(error).__name__}: {error}")
        answer.number = task.number
        with sending:
            send(channel, answer)

    pool = ThreadPoolExecutor(max_workers=settings.cases_at_once, thread_name_prefix="case")
    for line in tasks_on(channel):
        try:
            task = TASKS.validate_json(line)
        except ValueError as error:
            with sending:
                send(channel, WorkerMessage(problem=f"the worker could not read a task: {error}"))
            continue
        pool.submit(run, task)
    leave()


def report_ended(channels: dict[int, socket.socket]) -> None:
    """Reap the workers that ended and tell each one's supervisor how, on its channel (the
    leading newline ends any answer the worker was cut off in the middle of)."""
    while channels:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        channel = channels.pop(pid, None)
        if channel is None:
            continue
        channel.setblocking(False)  # a supervisor that stopped reading must not stall the server
        try:
            channel.send(b"\n" + json.dumps({"ended": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
        except OSError:
            pass
        channel.close()


def stop_all(channels: dict[int, socket.socket]) -> None:
    for pid in channels:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def fork_server(control: socket.socket) -> None:
    """Fork a worker per request on `control` (settings and the environment to run them in,
    plus the worker's end of its channel), answer with its pid; end when `control` closes, stopping any worker still
    running (its supervisor is gone, and a hung case would otherwise run on)."""
    wake_read, wake_write = os.pipe()
    os.set_blocking(wake_write, False)
    signal.set_wakeup_fd(wake_write)  # a SIGCHLD wakes the loop below
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    selector = selectors.DefaultSelector()
    selector.register(control, selectors.EVENT_READ)
    selector.register(wake_read, selectors.EVENT_READ)
    channels: dict[int, socket.socket] = {}
    while True:
        for key, _ in selector.select():
            if key.fileobj is not control:
                os.read(wake_read, 4096)
                continue
            try:
                message, fds, _, _ = socket.recv_fds(control, 1 << 20, 1)
            except OSError:  # reset by a killed evaluating process: gone all the same
                message, fds = b"", []
            if not message:  # the evaluating process is gone: so is every case it asked for
                stop_all(channels)
                leave()
            channel = socket.socket(fileno=fds[0])
            pid = os.fork()
            if pid == 0:
                # The worker: nothing of the server's stays open in it, and it leads a
                # process group of its own, which stopping it stops whole.
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                selector.close()
                control.close()
                os.close(wake_read)
                os.close(wake_write)
                for other in channels.values():
                    other.close()
                os.setsid()
                request = json.loads(message)
                # The environment of the evaluating process as it is now, not as it was when
                # this server started: a variable set since (system.env) reaches the system.
                os.environ.clear()
                os.environ.update(request["environment"])
                work(SandboxSettings.from_json(request["settings"]), channel)
            channels[pid] = channel
            control.send(json.dumps({"pid": pid}).encode())
        report_ended(channels)


def serve_forks() -> None:
    """The fork server's process (started by run/worker_processes.py, its channel's descriptor
    its one argument). What its imports made is set aside from the collector's passes
    (`gc.freeze`) before any worker is forked: never collected, so no worker copies the pages
    it shares with the server by walking them."""
    gc.freeze()
    gc.enable()
    fork_server(socket.socket(fileno=int(sys.argv[-1])))


if __name__ == "__main__":
    serve_forks()
