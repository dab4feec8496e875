"""What judging reads, a chunk of clusters at a time: the chunk's cases, the recordings they
and their sources made, and the replays of their fault plans, decoded into the models the
evaluators read; nothing of the other chunks. A copy is judged against its source's
recording, so a chunk holds whole clusters (a source and its copies)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pydantic import BaseModel

from ..model.cases import CaseRecord
from ..model.faults import FaultReplay
from ..model.records import RecordedRun
from ..store.decoding import case_models, models_in
from ..store.stored import StoredTable
from ..store.tables import FAULT_REPLAY_NESTED, RUN_NESTED, null_to_none
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
        self.cases = cases
        self.run_positions = {case_id: position for position, case_id in enumerate(null_to_none(runs.columns("case_id")["case_id"]))}
        self.replay_positions = replay_rows(replays)
        self.judged_under = replay_judging_digests(replays)
        self.runs, self.replays = GroupedRows(runs, RecordedRun, RUN_NESTED), GroupedRows(replays, FaultReplay, FAULT_REPLAY_NESTED)

    def read(self, case_positions: list[int], replays_wanted: list[tuple[str, str]]) -> tuple[dict[int, CaseRecord], JudgingContext]:
        """Position -> case for the chunk's cases, and what judging them may look at: their
        recordings and their sources', and of the `replays_wanted` (case id, criterion) those
        made from the recordings judged."""
        chunk_cases = case_models(self.cases, case_positions)
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


class GroupedRows:
    """A stored table's rows decoded for a chunk, a row group at a time (a table in memory or
    stacked is one group of the whole): only the groups holding the rows asked for, the last
    few kept as Arrow read them (the next chunks' rows mostly lie in them), so judging never
    holds its large columns whole, nor as Python strings beyond the rows it decodes."""

    # A chunk's rows lie in three runs of the table (its sources, and each transform's copies),
    # each in one row group or across two.
    GROUPS_KEPT = 6

    def __init__(self, table: StoredTable, model: type[BaseModel], nested: tuple[str, ...]):
        self.model, self.nested = model, nested
        self.groups = table.row_groups() if table.exists and len(table) else None
        self.names = [name for name in model.model_fields if name in table.names] if self.groups is not None else []
        self.kept: OrderedDict[int, pa.Table] = OrderedDict()

    def models(self, positions: list[int]) -> dict[int, Any]:
        """Position -> the model there."""
        if self.groups is None or not positions:
            return {}
        wanted = np.unique(np.asarray(positions, dtype=np.int64))
        group_of = np.searchsorted(self.groups.starts, wanted, side="right") - 1
        found: dict[int, Any] = {}
        for group in np.unique(group_of).tolist():
            start = int(self.groups.starts[group])
            local = (wanted[group_of == group] - start).tolist()
            found.update((start + position, model) for position, model in models_in(self._group(group), local, self.model, self.nested).items())
        return found

    def _group(self, group: int) -> pa.Table:
        if group in self.kept:
            self.kept.move_to_end(group)
        else:
            self.kept[group] = self.groups.read(group, self.names)
            while len(self.kept) > self.GROUPS_KEPT:
                self.kept.popitem(last=False)
        return self.kept[group]

