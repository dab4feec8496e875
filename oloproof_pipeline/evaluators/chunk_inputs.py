"""What judging reads, a chunk of clusters at a time: the chunk's cases, the recordings they
and their sources made, and the replays of their fault plans, decoded into the models the
evaluators read; nothing of the other chunks. A copy is judged against its source's
recording, so a chunk holds whole clusters (a source and its copies)."""

from __future__ import annotations


import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..model.cases import CaseRecord
from ..model.faults import FaultReplay
from ..model.records import RecordedRun
from ..store.decoding import GroupedRows
from ..store.stored import StoredTable
from ..store.tables import CASE_NESTED, FAULT_REPLAY_NESTED, RUN_NESTED
from .base import JudgingContext

# Clusters (a source and its copies) judged together: the models of one chunk are dropped
# before the next is parsed. Small, as the recordings' parsed trajectories are most of a
# run's transient memory.
CLUSTERS_PER_CHUNK = 50


def chunks_of_clusters(entries: np.ndarray, evaluators: int, case_keys: pd.DataFrame) -> list[np.ndarray]:
    """The entries (case position times `evaluators` plus the evaluator's) split into chunks
    of `CLUSTERS_PER_CHUNK` clusters (in the order their clusters first appear), each in entry
    order."""
    case_of = entries // max(evaluators, 1)
    cases, first = np.unique(case_of, return_index=True)
    cases = cases[np.argsort(first)]  # each case once, in the order its entries first come
    groups = pa.array(case_keys["group_id"], pa.string()).take(pa.array(cases)).to_pylist()
    chunk_of = {group: index // CLUSTERS_PER_CHUNK for index, group in enumerate(dict.fromkeys(groups))}
    chunk_of_case = np.zeros(len(case_keys), dtype=np.int64)
    chunk_of_case[cases] = [chunk_of[group] for group in groups]
    numbers = chunk_of_case[case_of]
    order = np.argsort(numbers, kind="stable")
    return np.split(entries[order], np.flatnonzero(np.diff(numbers[order])) + 1)


def made_from(replay: FaultReplay, recording: RecordedRun | None) -> bool:
    """Whether a stored replay was made from this recording (else it is no evidence here)."""
    return recording is not None and (replay.case_digest, replay.recorded_by_run) == (recording.case_digest, recording.recorded_by_run)


class ChunkReader:
    """The stored cases, recordings and replays, decoded a chunk's worth at a time. Where each
    case's recordings and replays lie is found once, as row numbers per case position (Arrow
    lookups: no Python string, nor dict entry, per stored row)."""

    def __init__(self, cases: StoredTable, runs: StoredTable, replays: StoredTable, case_keys: pd.DataFrame):
        self.cases = GroupedRows(cases, CaseRecord, CASE_NESTED)
        recorded = pa.array(runs.columns("case_id")["case_id"], pa.string())
        self.own_run, self.source_run = (last_rows(case_keys[name], recorded) for name in ("case_id", "source_id"))
        self.replay_rows = replay_rows(replays, case_keys["case_id"])
        self.judged_under = replay_judging_digests(replays)
        self.runs, self.replays = GroupedRows(runs, RecordedRun, RUN_NESTED), GroupedRows(replays, FaultReplay, FAULT_REPLAY_NESTED)

    def read(self, case_positions: list[int], criteria: list[str]) -> tuple[dict[int, CaseRecord], JudgingContext]:
        """Position -> case for the chunk's cases (its entries: each case's position with a
        criterion judged there), and what judging them may look at: their recordings and their
        sources', and the replays of the entries' cases and criteria made from the recordings
        judged."""
        chunk_cases = self.cases.models(case_positions)
        at = np.unique(np.asarray(case_positions, dtype=np.int64))
        run_rows = np.concatenate([self.own_run[at], self.source_run[at]])
        recordings = {run.case_id: run for run in self.runs.models(run_rows[run_rows >= 0].tolist()).values()}
        wanted_replays = [
            int(rows[position]) for position, criterion in zip(case_positions, criteria)
            if (rows := self.replay_rows.get(criterion)) is not None and rows[position] >= 0
        ]
        found = self.replays.models(wanted_replays)
        chunk_replays = {(replay.case_id, replay.criterion): replay for replay in found.values()}
        judged_under = {}
        if self.judged_under is not None:
            digests = self.judged_under.take(pa.array(list(found), pa.int64())).to_pylist()
            judged_under = {(replay.case_id, replay.criterion): digest for replay, digest in zip(found.values(), digests)}
        context = JudgingContext(
            cases={case.case_id: case for case in chunk_cases.values()},
            recordings=recordings,
            replays={key: replay for key, replay in chunk_replays.items() if made_from(replay, recordings.get(key[0]))},
            replays_judged_under=judged_under,
        )
        return chunk_cases, context


def last_rows(values: pd.Series, among: pa.Array) -> np.ndarray:
    """Per value, the last row of `among` that holds it (-1: none, or no value)."""
    if not len(among):
        return np.full(len(values), -1, dtype=np.int64)
    backwards = among.take(pa.array(np.arange(len(among) - 1, -1, -1, dtype=np.int64)))
    found = pc.index_in(pa.array(values, pa.string()), value_set=backwards, skip_nulls=True).fill_null(-1)
    at = found.to_numpy(zero_copy_only=False).astype(np.int64)
    return np.where(at >= 0, len(among) - 1 - at, -1)


def replay_rows(replays: StoredTable, case_ids: pd.Series) -> dict[str, np.ndarray]:
    """criterion -> per case position, the row of the replays table for that case and criterion
    (-1: none; one row per source case and fault plan)."""
    if not replays.exists or not len(replays):
        return {}
    keys = replays.columns("case_id", "criterion")
    replayed, criteria = (pa.array(keys[name], pa.string()) for name in ("case_id", "criterion"))
    found = {}
    for criterion in pc.unique(criteria.drop_null()).to_pylist():
        rows = np.flatnonzero(pc.equal(criteria, criterion).fill_null(False).to_numpy(zero_copy_only=False))
        at = last_rows(case_ids, replayed.take(pa.array(rows)))
        found[criterion] = np.where(at >= 0, rows[at], -1)
    return found


def replay_judging_digests(replays: StoredTable) -> pa.Array | None:
    """Per row of the replays table, the judging digest its outcome was judged under (None for
    a table stored before replays kept it)."""
    if not replays.exists or not len(replays) or "judging_digest" not in replays.names:
        return None
    return pa.array(replays.columns("judging_digest")["judging_digest"], pa.string())
