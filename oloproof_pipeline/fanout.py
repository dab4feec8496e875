"""Cases of one partition across several sandboxes on Dask distributed.

Each Dask worker process holds one system instance (one sandbox) and runs one case at a time
(`threads_per_worker=1`); the driver journals each recording as it comes back. Without a
Dask client the cases run in order in this process, as they always have.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

from .project import CaseRecord, ExecutionConfig
from .recording import RecordedRun
from .runner import SandboxRunner
from .system import SystemSpec

# One runner (one sandbox) per worker process, kept between tasks: building a system for
# every case would throw away whatever warm state a real agent keeps.
_WORKER_RUNNERS: dict[tuple[SystemSpec, str, float], SandboxRunner] = {}


def _worker_runner(spec: SystemSpec, version: str, timeout_s: float) -> SandboxRunner:
    key = (spec, version, timeout_s)
    if key not in _WORKER_RUNNERS:
        _WORKER_RUNNERS[key] = SandboxRunner(spec.build, system_version=version, timeout_s=timeout_s)
    return _WORKER_RUNNERS[key]


def record_on_worker(spec: SystemSpec, version: str, timeout_s: float, case: CaseRecord) -> RecordedRun:
    """Runs inside a Dask worker."""
    return _worker_runner(spec, version, timeout_s).record(case)


def record_each(
    spec: SystemSpec, cases: list[CaseRecord], *, version: str, timeout_s: float, client: Any = None
) -> Iterator[RecordedRun]:
    """Each case's recording, yielded as soon as it finishes (in order when sequential)."""
    if client is None:
        runner = SandboxRunner(spec.build, system_version=version, timeout_s=timeout_s)
        for case in cases:
            yield runner.record(case)
        return
    from dask.distributed import as_completed

    futures = {
        client.submit(record_on_worker, spec, version, timeout_s, case, pure=False): case
        for case in cases
    }
    for future in as_completed(futures):
        case = futures[future]
        try:
            yield future.result()
        except Exception as error:  # a worker that died costs the case it was running
            yield RecordedRun(
                case_id=case.case_id, case_digest=case.case_digest, system_version=version, status="error",
                error=f"the Dask worker running this case failed: {type(error).__name__}: {error}",
            )


@contextmanager
def sandbox_client(execution: ExecutionConfig) -> Iterator[Any]:
    """A Dask client for `execution`: the scheduler at `scheduler_address`, else a local
    cluster of `workers` processes; None (run in this process) for a single worker."""
    if execution.scheduler_address is None and execution.workers <= 1:
        yield None
        return
    from dask.distributed import Client, LocalCluster

    if execution.scheduler_address is not None:
        with Client(execution.scheduler_address) as client:
            yield client
        return
    with LocalCluster(
        n_workers=execution.workers, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, Client(cluster) as client:
        yield client
