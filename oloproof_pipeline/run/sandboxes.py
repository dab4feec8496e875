"""Cases of one partition across several sandboxes on Dask distributed.

Each Dask worker process holds one system instance (one sandbox) and runs one case at a time
(`threads_per_worker=1`); the driver journals each recording or replay as it comes back.
Without Dask the cases run in order on one sandbox in this process.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Callable, Iterator

from ..model.cases import CaseRecord
from ..model.config import ExecutionConfig
from ..model.records import RecordedRun
from .runner import SandboxRunner
from .system import SystemSpec

# One runner (one sandbox) per worker process, kept between tasks: building a system for
# every case would throw away whatever warm state a real agent keeps.
Task = Callable[[SandboxRunner, Any], Any]

_WORKER_RUNNERS: dict[tuple[SystemSpec, str, float], SandboxRunner] = {}


def _worker_runner(spec: SystemSpec, version: str, timeout_s: float) -> SandboxRunner:
    key = (spec, version, timeout_s)
    if key not in _WORKER_RUNNERS:
        _WORKER_RUNNERS[key] = SandboxRunner(spec.build, system_version=version, timeout_s=timeout_s)
    return _WORKER_RUNNERS[key]


def run_on_worker(spec: SystemSpec, version: str, timeout_s: float, task: Task, item: Any) -> Any:
    """Runs inside a Dask worker, on that worker's own sandbox."""
    return task(_worker_runner(spec, version, timeout_s), item)


def in_sandboxes(
    spec: SystemSpec,
    items: list[Any],
    task: Task,
    *,
    version: str,
    timeout_s: float,
    sandboxes: "Sandboxes | None" = None,
) -> Iterator[tuple[Any, Any]]:
    """(item, task(runner, item)) for each item as soon as it finishes: in order on one
    sandbox here, or spread over the Dask workers' sandboxes. A worker that died yields its
    exception as the result, so it costs that item only."""
    client = sandboxes.client() if sandboxes is not None else None
    if client is None:
        runner = SandboxRunner(spec.build, system_version=version, timeout_s=timeout_s)
        for item in items:
            yield item, task(runner, item)
        return
    from dask.distributed import as_completed

    futures = {client.submit(run_on_worker, spec, version, timeout_s, task, item, pure=False): item for item in items}
    for future in as_completed(futures):
        try:
            yield futures[future], future.result()
        except Exception as error:
            yield futures[future], error


def record_case(runner: SandboxRunner, case: CaseRecord) -> RecordedRun:
    return runner.record(case)


def record_each(
    spec: SystemSpec, cases: list[CaseRecord], *, version: str, timeout_s: float, sandboxes: "Sandboxes | None" = None
) -> Iterator[RecordedRun]:
    """Each case's recording, yielded as soon as it finishes."""
    recordings = in_sandboxes(spec, cases, record_case, version=version, timeout_s=timeout_s, sandboxes=sandboxes)
    for case, result in recordings:
        if isinstance(result, Exception):
            result = RecordedRun(
                case_id=case.case_id, case_digest=case.case_digest, system_version=version, status="error",
                error=f"the Dask worker running this case failed: {type(result).__name__}: {result}",
            )
        yield result


class Sandboxes:
    """Where cases run: on one sandbox in this process, or on a Dask cluster (the scheduler at
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
        """The Dask client, or None to run here."""
        if self.distributed and self._client is None:
            from dask.distributed import Client, LocalCluster

            if self.execution.scheduler_address is not None:
                self._client = self._stack.enter_context(Client(self.execution.scheduler_address))
            else:
                cluster = self._stack.enter_context(
                    LocalCluster(n_workers=self.execution.workers, threads_per_worker=1, processes=True, dashboard_address=None)
                )
                self._client = self._stack.enter_context(Client(cluster))
        return self._client

    def __enter__(self) -> "Sandboxes":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self._stack.close()
