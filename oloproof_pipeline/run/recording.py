"""Recording: each case run once on the system under test, journalled as it finishes, and
reused while its case digest and the system version are unchanged.

Only what is left to record needs the system: a version whose system is gone still
re-grades from its stored recordings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..model.cases import CaseRecord
from ..model.config import Project
from ..model.errors import SystemVersionMismatch
from ..model.records import RecordedRun
from ..store.journal import Journal, sandbox_lock, stored_work
from ..store.tables import runs_from_table
from .reuse import WorkCounts, reusable
from .sandboxes import Sandboxes, record_each
from .system import current_system_version, system_spec


TABLE = "recorded_runs"


@dataclass
class RecordingSummary(WorkCounts):
    """Cases recorded now, reused, failed, and dropped (stored, but no longer in the case set)."""

    dropped: int = 0

    def as_metadata(self, prefix: str = "cases") -> dict[str, int]:
        return super().as_metadata(prefix)


def check_partition_is_current_version(project: Project, partition_version: str, action: str = "record") -> None:
    """Refuse to record under a version the loaded system is not: that would mislabel runs."""
    loaded = current_system_version(project)
    if partition_version != loaded:
        raise SystemVersionMismatch(
            f"refusing to {action} partition {partition_version!r}: the loaded system "
            f"{project.config.system.callable} is version {loaded!r}. Record {loaded!r} instead, "
            f"or re-grade {partition_version!r} from its stored recordings."
        )


def reusable_runs(stored: list[RecordedRun], journal: Journal, version: str) -> dict[str, RecordedRun]:
    """Finished recordings of this version by case digest: the stored table, then the journal
    of a run that may have been cut short. Only clean recordings are reused."""
    return reusable(
        stored,
        journal,
        RecordedRun,
        key=lambda run: run.case_digest,
        keep=lambda run: run.status == "ok" and run.system_version == version,
    )


def record_cases(
    project: Project,
    cases: list[CaseRecord],
    *,
    version: str,
    run_id: str,
    fresh: bool = False,
    on_recorded: Callable[[RecordedRun], None] | None = None,
    sandboxes: Sandboxes | None = None,
) -> tuple[list[RecordedRun], RecordingSummary]:
    """Record every case not already recorded for this version (all of them when `fresh`).

    Each recording is journalled as it finishes, so a run killed part-way loses nothing.
    With distributed `sandboxes` the cases spread over Dask workers (see sandboxes.py).
    The system is imported, and must be this partition's version, only when something is
    left to record: a version whose system is gone still re-grades from its recordings.
    """
    journal = Journal.for_partition(project.root, TABLE, version)
    if fresh:
        journal.clear()
    # `fresh` needs nothing stored, so even a broken table never stands in its way.
    stored = [] if fresh else runs_from_table(stored_work(project.root, TABLE, version))
    reusable = {} if fresh else reusable_runs(stored, journal, version)
    previous_ids = {run.case_id for run in stored}
    to_record = [case for case in cases if case.case_digest not in reusable]

    new_runs: dict[str, RecordedRun] = {}
    if to_record:
        check_partition_is_current_version(project, version)
        with sandbox_lock(project.root):
            if not fresh:  # a run that held the sandbox before us may have recorded some already
                reusable = reusable_runs(stored, journal, version)
                to_record = [case for case in cases if case.case_digest not in reusable]
            recordings = record_each(
                system_spec(project), to_record, version=version,
                timeout_s=project.config.execution.timeout_s, sandboxes=sandboxes,
            )
            for run in recordings:
                run.recorded_by_run = run_id
                journal.append(run.model_dump(mode="json"))
                new_runs[run.case_id] = run
                if on_recorded is not None:
                    on_recorded(run)
    runs = [new_runs.get(case.case_id) or reused_for(case, reusable) for case in cases]
    summary = RecordingSummary(
        new=len(new_runs),
        reused=len(cases) - len(new_runs),
        dropped=len(previous_ids - {case.case_id for case in cases}),
        failed=sum(run.status != "ok" for run in new_runs.values()),
    )
    return runs, summary


def reused_for(case: CaseRecord, reusable: dict[str, RecordedRun]) -> RecordedRun:
    """A stored recording of the same digest, filed under this case's id (two cases may
    share a digest, e.g. identical rows, and each needs its own row)."""
    return reusable[case.case_digest].model_copy(update={"case_id": case.case_id})


