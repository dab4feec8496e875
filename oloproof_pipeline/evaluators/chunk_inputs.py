"""What judging reads, a chunk of clusters at a time: the chunk's cases, the recordings they
and their sources made, and the replays of their fault plans, decoded into the models the
evaluators read; nothing of the other chunks. A copy is judged against its source's
recording, so a chunk holds whole clusters (a source and its copies)."""

from __future__ import annotations


import numpy as np
import pandas as pd

from ..model.cases import CaseRecord
from ..model.faults import FaultReplay
from ..model.records import RecordedRun
from ..store.decoding import GroupedRows
from ..store.stored import StoredTable
from ..store.tables import CASE_NESTED, FAULT_REPLAY_NESTED, RUN_NESTED, null_to_none
from .base import JudgingContext

# Clusters (a source and its copies) judged together: the models of one chunk are dropped
# before the next is parsed. Small, as the recordings' parsed trajectories are most of a
# run's transient memory.
CLUSTERS_PER_CHUNK = 50


def chunks_of_clusters(entries: np.ndarray, evaluators: int, case_keys: pd.DataFrame) -> list[np.ndarray]:
    """The entries (case position times `evaluators` plus the evaluator's) split into chunks
    of `CLUSTERS_PER_CHUNK` clusters (in the order their clusters first appear), each in entry
    order."""
    groups = np.asarray(null_to_none(case_keys["group_id"]), dtype=object)[entries // max(evaluators, 1)].tolist()
    chunk_of = {group: index // CLUSTERS_PER_CHUNK for index, group in enumerate(dict.fromkeys(groups))}
    numbers = np.fromiter((chunk_of[group] for group in groups), dtype=np.int64, count=len(groups))
    order = np.argsort(numbers, kind="stable")
    return np.split(entries[order], np.flatnonzero(np.diff(numbers[order])) + 1)


def made_from(replay: FaultReplay, recording: RecordedRun | None) -> bool:
    """Whether a stored replay was made from this recording (else it is no evidence here)."""
    return recording is not None and (replay.case_digest, replay.recorded_by_run) == (recording.case_digest, recording.recorded_by_run)


class ChunkReader:
    """The stored cases, recordings and replays, decoded a chunk's worth at a time."""

    def __init__(self, cases: StoredTable, runs: StoredTable, replays: StoredTable):
        self.cases = GroupedRows(cases, CaseRecord, CASE_NESTED)
        self.run_positions = {case_id: position for position, case_id in enumerate(null_to_none(runs.columns("case_id")["case_id"]))}
        self.replay_positions = replay_rows(replays)
        self.judged_under = replay_judging_digests(replays)
        self.runs, self.replays = GroupedRows(runs, RecordedRun, RUN_NESTED), GroupedRows(replays, FaultReplay, FAULT_REPLAY_NESTED)

    def read(self, case_positions: list[int], replays_wanted: list[tuple[str, str]]) -> tuple[dict[int, CaseRecord], JudgingContext]:
        """Position -> case for the chunk's cases, and what judging them may look at: their
        recordings and their sources', and of the `replays_wanted` (case id, criterion) those
        made from the recordings judged."""
        chunk_cases = self.cases.models(case_positions)
        needed_runs = {case.case_id for case in chunk_cases.values()} | {
            case.source_id for case in chunk_cases.values() if case.source_id
        }
        run_rows = [self.run_positions[case_id] for case_id in needed_runs if case_id in self.run_positions]
        recordings = {run.case_id: run for run in self.runs.models(run_rows).values()}
        replay_rows_wanted = [self.replay_positions[key] for key in replays_wanted if key in self.replay_positions]
        chunk_replays = {(replay.case_id, replay.criterion): replay for replay in self.replays.models(replay_rows_wanted).values()}
        context = JudgingContext(
            cases={case.case_id: case for case in chunk_cases.values()},
            recordings=recordings,
            replays={key: replay for key, replay in chunk_replays.items() if made_from(replay, recordings.get(key[0]))},
            replays_judged_under={key: self.judged_under[self.replay_positions[key]] for key in chunk_replays} if self.judged_under else {},
        )
        return chunk_cases, context


def replay_rows(replays: StoredTable) -> dict[tuple[str, str], int]:
    """(case id, criterion) -> row of the replays table (one per source case and fault plan)."""
    if not replays.exists or not len(replays):
        return {}
    keys = replays.columns("case_id", "criterion")
    return {key: position for position, key in enumerate(zip(null_to_none(keys["case_id"]), null_to_none(keys["criterion"])))}


def replay_judging_digests(replays: StoredTable) -> list[str | None]:
    """Per row of the replays table, the judging digest its outcome was judged under (none
    for a table stored before replays kept it)."""
    if not replays.exists or not len(replays) or "judging_digest" not in replays.names:
        return []
    return null_to_none(replays.columns("judging_digest")["judging_digest"])
