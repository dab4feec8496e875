"""Cases of one partition across sandboxes: one here, or several on Dask distributed.

A sandbox is one system instance in a supervised worker process of its own
(run/supervisor.py), so the system never runs in the evaluating process, nor in a Dask
worker's: a crash inside it costs the case it crashed on, and the Dask worker lives on.
Each Dask worker process holds one sandbox and runs one case at a time
(`threads_per_worker=1`); the driver journals each recording or replay as it comes back.
Without Dask the cases run in order on one sandbox.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from dataclasses import dataclass
from itertools import islice, tee
from typing import Any, Callable, Iterable, Iterator

from ..model.cases import CaseRecord
from ..model.config import ExecutionConfig
from ..model.digests import canonical_json
from ..model.errors import PipelineError, ProjectError
from ..model.records import RecordedRun
from .budget import BudgetExhausted
from .spec import SandboxSettings
from .supervisor import SupervisedSandbox, start_fork_server


@dataclass(frozen=True)
class SandboxTask:
    """What a sandbox does with one item of a stage's work (`one`), and, where it can, with
    a stream of them on one sandbox (`each`: one worker for the stream, each item sent
    once the one before is journalled). Both plain functions, so a Dask worker can be sent them."""

    one: Callable[[SupervisedSandbox, Any], Any]
    each: Callable[[SupervisedSandbox, Iterable[Any]], Iterator[tuple[Any, Any]]] | None = None


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
    for key, sandbox in list(_WORKER_SANDBOXES.items()):
        if sandbox.close(wait=False):
            del _WORKER_SANDBOXES[key]


def run_on_worker(settings: SandboxSettings, one: Callable[[SupervisedSandbox, Any], Any], item: Any) -> Any:
    """Runs inside a Dask worker, on that worker's own sandbox."""
    return one(_worker_sandbox(settings), item)


def in_sandboxes(
    settings: SandboxSettings, items: Iterable[Any], task: SandboxTask, *, sandboxes: "Sandboxes | None" = None
) -> Iterator[tuple[Any, Any]]:
    """(item, its result) for each item as soon as it finishes: in order on one sandbox, or
    spread over the Dask workers' sandboxes. A Dask worker that died yields its exception as
    the result, so it costs that item only; a system that cannot be built (a ProjectError)
    stops the whole run, as it would every item, and so does an exception of the pipeline's
    own code (a PipelineError): it is never an item's result."""
    client = sandboxes.client() if sandboxes is not None else None
    if client is None:
        with SupervisedSandbox(settings) as sandbox:
            if task.each is not None:
                yield from task.each(sandbox, items)
            else:
                for item in items:
                    yield item, task.one(sandbox, item)
        return
    yield from _on_dask(client, settings, items, task.one)


def _on_dask(client: Any, settings: SandboxSettings, items: Iterable[Any], one: Callable) -> Iterator[tuple[Any, Any]]:
    """No more items in flight than the cluster has threads: a Dask worker then holds only
    the case it is running, so if it dies no case waiting behind it is blamed."""
    from dask.distributed import KilledWorker, as_completed

    waiting = iter(items)
    futures: dict[Any, Any] = {}
    finished = as_completed()
    threads = ClusterThreads(client)

    def submit(count: int) -> None:
        for item in islice(waiting, count):
            future = client.submit(run_on_worker, settings, one, item, pure=False)
            futures[future] = item
            finished.add(future)

    try:
        submit(threads.count())
        for future in finished:
            item = futures.pop(future)
            try:
                result = future.result()
            except KilledWorker as lost:  # the Dask worker died running it: that item's loss
                result = lost
            except (ProjectError, PipelineError):
                raise
            except Exception as error:
                raise pipeline_failed_on_worker(error) from error
            yield item, result
            # Only once the caller journalled it: the worker that ran it then takes the next,
            # so a killed run has lost at most the case each worker was running.
            submit(max(1, threads.count() - len(futures)))
    finally:
        if futures:
            client.cancel(list(futures))
        client.run(close_worker_sandboxes, on_error="ignore")


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


def record_case(sandbox: SupervisedSandbox, item: Tagged) -> RecordedRun:
    return sandbox.record(item[1])


def record_cases_in_turn(sandbox: SupervisedSandbox, items: Iterable[Tagged]) -> Iterator[tuple[Tagged, RecordedRun]]:
    """(item, its case's recording) in order, on one worker (`SupervisedSandbox.record_each`)."""
    asked, answered = tee(items)
    for run in sandbox.record_each(case for _, case in asked):  # one recording per case, in order
        yield next(answered), run


RECORD = SandboxTask(one=record_case, each=record_cases_in_turn)


def lost_recording(case: CaseRecord, result: RecordedRun | Exception, version: str) -> RecordedRun:
    """A case's recording; for a Dask worker that died running it (KilledWorker), an error naming that."""
    if not isinstance(result, Exception):
        return result
    return RecordedRun(
        case_id=case.case_id, case_digest=case.case_digest, system_version=version, status="error",
        error=str(result) if isinstance(result, BudgetExhausted)
        else f"the Dask worker running this case failed: {type(result).__name__}: {result}",
    )


def record_each(settings: SandboxSettings, cases: Iterable[CaseRecord], *, sandboxes: "Sandboxes | None" = None) -> Iterator[RecordedRun]:
    """Each case's recording, yielded as soon as it finishes."""
    for (_, case), result in in_sandboxes(settings, ((None, case) for case in cases), RECORD, sandboxes=sandboxes):
        yield lost_recording(case, result, settings.version)


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
