"""Cases of one partition across sandboxes: here (one, or several local ones), or on Dask distributed.

A sandbox is one system instance in a supervised worker process of its own
(run/supervisor.py), so the system never runs in the evaluating process, nor in a Dask
worker's: a crash inside it costs the case it crashed on, and the Dask worker lives on.
Each Dask worker process holds one sandbox and runs one batch of cases at a time, in order
(`threads_per_worker=1`): a case shorter than a Dask round trip would otherwise leave the
worker waiting on the driver as long as it works. What a worker holds (the batch it runs,
and where a round trip is not negligible the one next in line, `BatchSizing`) is its
cases in flight: a worker that dies costs those, each recorded as lost with it, no other.
The driver journals each case of a batch, in order, as the batch comes back, and sends the
next batch only then. Without Dask the cases run in order on one sandbox, or, for a Python
system whose `concurrency.system` allows more, on as many local sandboxes as pay
(run/local_sandboxes.py).
"""

from __future__ import annotations

import math
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import islice, tee
from typing import Any, Iterable, Iterator
from uuid import uuid4

from ..model.cases import CaseRecord
from ..model.config import ExecutionConfig
from ..model.digests import canonical_json
from ..model.errors import PipelineError, ProjectError
from ..model.records import RecordedRun, RecordingRow
from .budget import BudgetExhausted
from .local_sandboxes import SandboxTask, on_local_sandboxes
from .spec import SandboxSettings
from .channel import AnyTask, StoredCase, record_task
from .supervisor import SupervisedSandbox
from .worker_processes import start_fork_server


# One sandbox per Dask worker process, kept between the tasks of one fan-out: building a
# system for every case would throw away whatever warm state a real agent keeps. Closed when
# the fan-out is done, so the next one runs the system's code as it is then.
_WORKER_SANDBOXES: dict[str, SupervisedSandbox] = {}


def _worker_sandbox(settings: SandboxSettings) -> SupervisedSandbox:
    # Keyed by the settings' canonical JSON: they hold dicts (a chat agent's), never hashable.
    key = canonical_json(settings.as_json())
    if key not in _WORKER_SANDBOXES:
        _WORKER_SANDBOXES[key] = SupervisedSandbox(settings)
    return _WORKER_SANDBOXES[key]


def close_worker_sandboxes() -> None:
    """Runs on each Dask worker at the end of a fan-out (in its event loop, so it never
    waits for a sandbox still busy with a case)."""
    _LAST_BATCH_ENDED.clear()
    for key, sandbox in list(_WORKER_SANDBOXES.items()):
        if sandbox.close(wait=False):
            del _WORKER_SANDBOXES[key]


@dataclass(frozen=True)
class BatchDone:
    """What a Dask worker sends back for a batch: each item's result, in order, and what it
    measured: the seconds its cases took, those it took first to start the sandbox's system
    (its first batch of a fan-out, or after a crash), and how long it had waited for the
    batch since it ended its last one of this fan-out (None for its first)."""

    results: list[Any]
    worked_s: float
    starting_s: float = 0.0
    waited_s: float | None = None


# When each of this worker's threads ended its last batch of the fan-out (monotonic).
_LAST_BATCH_ENDED: dict[int, float] = {}


def run_batch_on_worker(settings: SandboxSettings, task: SandboxTask, items: list[Any]) -> BatchDone:
    """Runs inside a Dask worker: a batch's items in order on that worker's own sandbox (as
    one stream where the task has one), so the batch pays one Dask round trip."""
    arrived = time.monotonic()
    sandbox = _worker_sandbox(settings)
    sandbox.facts()  # its system started now if it is not running, timed apart from the cases
    started = time.monotonic()
    if task.each is not None:
        results = [result for _, result in task.each(sandbox, items)]
    else:
        results = [task.one(sandbox, item) for item in items]
    ended, thread = time.monotonic(), threading.get_ident()
    last_ended = _LAST_BATCH_ENDED.get(thread)
    _LAST_BATCH_ENDED[thread] = ended
    waited_s = None if last_ended is None else max(0.0, arrived - last_ended)
    return BatchDone(results, ended - started, started - arrived, waited_s)


def in_sandboxes(
    settings: SandboxSettings, items: Iterable[Any], task: SandboxTask, *, sandboxes: "Sandboxes | None" = None
) -> Iterator[tuple[Any, Any]]:
    """(item, its result) for each item as soon as it is known: in order on one sandbox,
    spread over up to `settings.local_sandboxes` local ones (as they come back), or over the
    Dask workers' sandboxes in batches (`BatchSizing`). A Dask worker that
    died yields its exception as the result of each item of the batches it held, so it costs
    those items only; a system that cannot be built (a ProjectError) stops the whole run, as
    it would every item, and so does an exception of the pipeline's own code (a
    PipelineError): it is never an item's result."""
    client = sandboxes.client() if sandboxes is not None else None
    if client is None and settings.local_sandboxes > 1:
        yield from on_local_sandboxes(settings, items, task)
        return
    if client is None:
        with SupervisedSandbox(settings) as sandbox:
            if task.each is not None:
                yield from task.each(sandbox, items)
            else:
                for item in items:
                    yield item, task.one(sandbox, item)
        return
    yield from _on_dask(client, settings, items, task)


@dataclass(frozen=True)
class SentBatch:
    """A batch in flight, as the driver sent it."""

    items: list[Any]
    sent_at: float
    # Sent while a worker had nothing to do: its time back measures a bare round trip.
    to_idle_worker: bool


def _on_dask(client: Any, settings: SandboxSettings, items: Iterable[Any], task: SandboxTask) -> Iterator[tuple[Any, Any]]:
    """Batches of items as Dask tasks, no more in flight than `BatchSizing.in_flight` allows:
    a Dask worker holds only the batch it runs (and, where a round trip is not negligible
    against a batch, the one next in line), so if it dies no other item is blamed."""
    from dask.distributed import KilledWorker, as_completed

    waiting = iter(items)
    batches: dict[Any, SentBatch] = {}
    finished = as_completed()
    threads = ClusterThreads(client)
    sizing = BatchSizing()

    def submit() -> None:
        while len(batches) < sizing.in_flight(threads.count()):
            batch = list(islice(waiting, sizing.size()))
            if not batch:
                return
            # The key names the batch and its size: a lost worker's KilledWorker says which cases went with it.
            key = f"sandbox-batch-{len(batch)}-cases-{uuid4().hex}"
            future = client.submit(run_batch_on_worker, settings, task, batch, key=key, pure=False)
            batches[future] = SentBatch(batch, time.monotonic(), to_idle_worker=len(batches) < threads.count())
            finished.add(future)

    try:
        submit()
        for future in finished:
            sent = batches.pop(future)
            try:
                done: BatchDone = future.result()
            except KilledWorker as lost:  # the Dask worker holding it died: that batch's loss
                results = [lost] * len(sent.items)
            except (ProjectError, PipelineError):
                raise
            except Exception as error:
                raise pipeline_failed_on_worker(error) from error
            else:
                results = done.results
                sizing.observe(sent, done, time.monotonic())
            for item, result in zip(sent.items, results, strict=True):
                yield item, result
            # Only once the caller journalled the batch: a killed run has lost at most the
            # batches the workers held.
            submit()
    finally:
        if batches:
            client.cancel(list(batches))
        client.run(close_worker_sandboxes, on_error="ignore")


# A batch never holds more cases than this, however short they are.
MAX_BATCH = 8
# A round trip under this share of a case is not worth a second batch in line behind the first.
NEGLIGIBLE_ROUND_TRIP = 0.05
# A batch outlasts this many round trips, so a round trip that runs long still ends before
# the worker has finished the batch in line.
ROUND_TRIPS_PER_BATCH = 2
# A worker that waited longer than this share of a case for its next batch in line was kept
# waiting by a round trip longer than the batch before it.
WAIT_TOLERANCE = 0.25


class BatchSizing:
    """How many items a Dask task carries, and how many tasks are in flight, from what the
    batches so far measured: a case's seconds on the worker (the last batch's), and a round
    trip (driver to worker and back, the driver's journalling included): that of a batch sent
    to an idle worker, lengthened, once batches wait in line, by each wait a worker reports
    for its next batch (beyond WAIT_TOLERANCE of a case: the round trip outlasted the batch
    in line, as it does when the driver gets busier).

    Where a round trip is not negligible against a case, each worker holds a second batch in
    line behind the one it runs, so it goes on without waiting on the driver, and a batch is
    as many cases as outlast ROUND_TRIPS_PER_BATCH round trips (at most MAX_BATCH). Otherwise
    (cases long against a round trip), one case per task and one task per thread, as a case
    per task always was. Nothing measured yet: one case per task, one task per thread."""

    def __init__(self) -> None:
        self.round_trip_s: float | None = None
        self.case_s: float | None = None

    def observe(self, sent: SentBatch, done: BatchDone, returned_at: float) -> None:
        self.case_s = done.worked_s / len(sent.items)
        if sent.to_idle_worker:
            self.round_trip_s = max(0.0, returned_at - sent.sent_at - done.starting_s - done.worked_s)
        elif done.waited_s is not None and done.waited_s > WAIT_TOLERANCE * self.case_s:
            # The batch in line came that much too late: batches that much longer cover it.
            self.round_trip_s = (self.round_trip_s or 0.0) + done.waited_s

    def _round_trips_per_case(self) -> float:
        if self.round_trip_s is None or not self.case_s:
            return 0.0
        return self.round_trip_s / self.case_s

    def size(self) -> int:
        return max(1, min(MAX_BATCH, math.ceil(ROUND_TRIPS_PER_BATCH * self._round_trips_per_case())))

    def in_flight(self, threads: int) -> int:
        """Batches in flight across the cluster: per thread, the one running and maybe one in line."""
        return threads * (2 if self._round_trips_per_case() > NEGLIGIBLE_ROUND_TRIP else 1)


def pipeline_failed_on_worker(error: Exception) -> PipelineError:
    """A task that raised on a Dask worker: the system runs in a supervised process of its own
    and its failures come back as results, so what raised is the pipeline's own code."""
    return PipelineError(
        f"the pipeline's own code failed running a case on a Dask worker: {type(error).__name__}: {error} "
        "(an error in oloproof_pipeline, not in the system under test)"
    )


class ClusterThreads:
    """The threads across the cluster's workers (workers join and leave), asked of the
    scheduler at most once a second."""

    def __init__(self, client: Any, refresh_s: float = 1.0):
        self._client = client
        self._refresh_s = refresh_s
        self._asked_at = -refresh_s
        self._count = 1

    def count(self) -> int:
        if time.monotonic() - self._asked_at >= self._refresh_s:
            self._count = max(1, sum(self._client.nthreads().values()))
            self._asked_at = time.monotonic()
        return self._count


# -- recording: one case, or a stream of them --------------------------------------------------

# A case to record, tagged with what its stage files the recording under (its trial, say).
Tagged = tuple[Any, CaseRecord]


def record_case(sandbox: SupervisedSandbox, item: Tagged) -> RecordingRow:
    [row] = sandbox.record_rows([item[1]])
    return row


def record_cases_in_turn(sandbox: SupervisedSandbox, items: Iterable[Tagged]) -> Iterator[tuple[Tagged, RecordingRow]]:
    """(item, its case's recording) in order, on one worker (`SupervisedSandbox.record_rows`)."""
    asked, answered = tee(items)
    for row in sandbox.record_rows(case for _, case in asked):  # one recording per case, in order
        yield next(answered), row


def record_tasks(item: Tagged) -> list[AnyTask]:
    return [record_task(item[1])]


def recorded(sandbox: SupervisedSandbox, item: Tagged, answers: list[tuple[AnyTask, Any]]) -> RecordingRow:
    [(task, answer)] = answers
    return sandbox.recording(task, answer)


RECORD = SandboxTask(one=record_case, each=record_cases_in_turn, tasks=record_tasks, result=recorded)


def lost_recording(case: CaseRecord | StoredCase, result: RecordingRow | Exception, version: str) -> RecordingRow:
    """A case's recording (as its row); for a Dask worker that died running it (KilledWorker),
    or a case the budget left unrun, an error naming that."""
    if not isinstance(result, Exception):
        return result
    return RecordingRow(
        case_id=case.case_id, case_digest=case.case_digest, system_version=version, status="error",
        error=str(result) if isinstance(result, BudgetExhausted)
        else f"the Dask worker running this case failed: {type(result).__name__}: {result}",
    )


def record_each(settings: SandboxSettings, cases: Iterable[CaseRecord], *, sandboxes: "Sandboxes | None" = None) -> Iterator[RecordedRun]:
    """Each case's recording, yielded as soon as it finishes."""
    for (_, case), result in in_sandboxes(settings, ((None, case) for case in cases), RECORD, sandboxes=sandboxes):
        yield lost_recording(case, result, settings.version).as_run()


class Sandboxes:
    """Where cases run: on one sandbox, or on a Dask cluster (the scheduler at
    `scheduler_address`, else a local cluster of `workers` processes) started on first use,
    so a rerun with nothing to record starts no cluster. Use as a context manager."""

    def __init__(self, execution: ExecutionConfig):
        self.execution = execution
        self._stack = ExitStack()
        self._client: Any = None

    @property
    def distributed(self) -> bool:
        return self.execution.scheduler_address is not None or self.execution.workers > 1

    def client(self) -> Any:
        """The Dask client, or None to run on one sandbox."""
        if self.distributed and self._client is None:
            from dask.distributed import Client, LocalCluster

            if self.execution.scheduler_address is not None:
                self._client = self._stack.enter_context(Client(self.execution.scheduler_address))
            else:
                cluster = self._stack.enter_context(
                    LocalCluster(n_workers=self.execution.workers, threads_per_worker=1, processes=True, dashboard_address=None)
                )
                self._client = self._stack.enter_context(Client(cluster))
            # Each Dask worker's fork server imports while the driver still gets ready.
            self._client.run(start_fork_server)
        return self._client

    def __enter__(self) -> "Sandboxes":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stack.close()
