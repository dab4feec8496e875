"""The judging step: every case on every criterion, from stored recordings and replays only
(so a version re-grades without its system), as the rows of the `verdicts` table.

Incremental: each verdict row carries its cache key (evaluators/verdict_keys.py). A stored
verdict whose key still holds is reused as it is (with the run that judged it); only the rest
are judged, a chunk of clusters at a time (evaluators/chunk_inputs.py), so the models a
judgement needs exist only for the cases being judged.
"""

from __future__ import annotations

from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from ..model.cases import CaseRecord
from ..model.collector import collection_paused
from ..model.config import Project
from ..model.faults import FaultReplay
from ..model.outcomes import Verdict
from ..model.records import RecordedRun
from ..store.assembly import AssembledTable
from ..store.stored import StoredTable
from ..store.tables import VERDICTS_SCHEMA, replays_from_table
from .base import Evaluator, JudgingContext
from .chunk_inputs import ChunkReader, chunks_of_clusters, made_from
from .verdict_keys import VerdictSummary, WantedVerdicts, reusable_entries, verdict_keys, why_judged
from .verdict_rows import SpilledVerdictColumns, VerdictColumns


def judge_all(evaluators: list[Evaluator], cases: list[CaseRecord], context: JudgingContext, *, judges_at_once: int = 1) -> list[Verdict]:
    """One verdict per case and criterion, in case order."""
    return judged([(evaluator, case) for case in cases for evaluator in evaluators], context, judges_at_once)


def judged(pairs: list[tuple[Evaluator, CaseRecord]], context: JudgingContext, judges_at_once: int) -> list[Verdict]:
    """Each (evaluator, case)'s verdict, in order: those that call a model (a rubric judge)
    side by side in threads, `judges_at_once` at a time (`concurrency.judge`); the rest here."""
    verdicts: list[Verdict | None] = [None] * len(pairs)
    calling = [position for position, (evaluator, _) in enumerate(pairs) if evaluator.calls_model]
    for position, (evaluator, case) in enumerate(pairs):
        if not evaluator.calls_model:
            verdicts[position] = evaluator.judge_case(case, context)
    if calling:
        with ThreadPoolExecutor(max_workers=max(1, min(judges_at_once, len(calling))), thread_name_prefix="judge") as pool:
            answers = pool.map(lambda position: pairs[position][0].judge_case(pairs[position][1], context), calling)
            for position, verdict in zip(calling, answers):
                verdicts[position] = verdict
    return verdicts  # type: ignore[return-value]


def judge_spending(evaluators: list[Evaluator]) -> Counter:
    """What the model judges among `evaluators` spent live so far (calls, tokens, dollars)."""
    total: Counter = Counter()
    for evaluator in evaluators:
        total.update(getattr(evaluator, "spent", Counter()))
    return total


def judge_cases(
    project: Project,
    cases: list[CaseRecord],
    runs: list[RecordedRun],
    *,
    version: str,
    judged_by_run: str,
    replays: dict[tuple[str, str], Any] | None = None,
) -> pd.DataFrame:
    """One verdict row per case and criterion, naming the runs that recorded and judged it
    (every case judged: for cases and recordings in hand, as in scripts and tests)."""
    context = JudgingContext(
        cases={case.case_id: case for case in cases},
        recordings={run.case_id: run for run in runs},
        replays=replays or {},
    )
    columns = VerdictColumns()
    verdicts = judge_all(project.evaluators, cases, context, judges_at_once=project.config.concurrency.judge)
    columns.add(verdicts, [context.cases[verdict.case_id] for verdict in verdicts], context, version, judged_by_run)
    return columns.frame()


def replays_for_judging(frame: pd.DataFrame | None, runs: list[RecordedRun]) -> dict[tuple[str, str], FaultReplay]:
    """(case id, criterion) -> replay, keeping only replays of the recordings being judged."""
    recordings = {run.case_id: run for run in runs}
    return {
        (replay.case_id, replay.criterion): replay
        for replay in replays_from_table(frame)
        if made_from(replay, recordings.get(replay.case_id))
    }


def judge_verdict_table(
    project: Project, cases: StoredTable, runs: StoredTable, replays: StoredTable, stored: StoredTable, **run: str
) -> tuple[pd.DataFrame, VerdictSummary]:
    """`judge_verdict_rows`, the table as a frame."""
    table, summary = judge_verdict_rows(project, cases, runs, replays, stored, **run)
    return table.frame(), summary


def judge_verdict_rows(
    project: Project,
    cases: StoredTable,
    runs: StoredTable,
    replays: StoredTable,
    stored: StoredTable,
    *,
    version: str,
    judged_by_run: str,
) -> tuple[AssembledTable, VerdictSummary]:
    """The `verdicts` table, to write: each stored verdict whose key still holds, reused (left
    in the stored file until written, store/assembly.py); every other case and criterion
    judged now. In case then evaluator order."""
    case_keys = cases.columns("case_id", "source_id", "group_id")
    wanted = verdict_keys(project, case_keys, runs, replays, version)
    for keyed in (runs, replays):  # the columns their keys were made of: judging reads others
        keyed.forget()
    reuse, positions = reusable_entries(wanted, stored)
    summary = VerdictSummary(reused=int(reuse.sum()))
    entries = np.flatnonzero(~reuse)
    why_judged(wanted, entries, positions, stored, summary)
    stored.forget()  # the columns read to match cases: the table reads what it reuses again, as it is assembled
    spent_before = judge_spending(project.evaluators)
    new, new_slots = judge_wanted(project, cases, runs, replays, wanted, entries, case_keys, version=version, judged_by_run=judged_by_run)
    summary.judge_spent = judge_spending(project.evaluators) - spent_before
    summary.has_model_judges = any(evaluator.calls_model for evaluator in project.evaluators)
    summary.judged = len(entries)
    summary.judged_by_criterion.update(wanted.criteria_counted(entries))
    del wanted  # the keys of every verdict: not needed to put the table together
    for decoded in (cases, runs, replays):  # nor the columns the judged rows were decoded from
        decoded.forget()
    reused = np.flatnonzero(reuse)
    parts = [(new, range(len(new_slots)), new_slots)]
    del new  # the parts' own: let go a column at a time as the table takes their rows
    if len(reused):
        parts.append((stored, positions[reused], reused))
    return AssembledTable(VERDICTS_SCHEMA, parts, VERDICT_WHOLE_COLUMNS, rows_per_group=VERDICT_GROUP_ROWS), summary


# The verdict columns held whole as the table is assembled (its metadata counts outcomes per
# criterion); the rest (case ids, reasons, details, keys) taken a row group at a time.
VERDICT_WHOLE_COLUMNS = ("criterion", "outcome")
VERDICT_GROUP_ROWS = 16384


def judge_wanted(
    project: Project,
    cases: StoredTable,
    runs: StoredTable,
    replays: StoredTable,
    wanted: WantedVerdicts,
    entries: np.ndarray,
    case_keys: pd.DataFrame,
    *,
    version: str,
    judged_by_run: str,
) -> tuple[StoredTable | pa.Table, np.ndarray]:
    """Verdict rows for the wanted `entries` (case and criterion), a chunk of clusters at a
    time, only the chunk's cases, recordings and replays decoded while it is judged; and each
    row's place in the table (its entry: case, then evaluator). The rows are written to a file
    of their own a row group of the table at a time, as each fills (read back as the table is
    written): never all held."""
    columns = SpilledVerdictColumns(entries, VERDICT_GROUP_ROWS)
    if not len(entries):
        return columns.rows()
    reader = ChunkReader(cases, runs, replays, case_keys)
    for chunk_entries in chunks_of_clusters(entries, wanted.evaluators, case_keys):
        # The collector is held off while a chunk is decoded and judged: its models, verdicts
        # and rows make no cycle, yet set off collections (some of the whole heap) costing a
        # tenth of judging. It runs between chunks: a grader's own garbage waits one chunk.
        with collection_paused():
            judge_chunk(project, reader, wanted, chunk_entries.tolist(), columns, version=version, judged_by_run=judged_by_run)
    return columns.rows()


def judge_chunk(
    project: Project, reader: ChunkReader, wanted: WantedVerdicts, chunk: list[int], columns: VerdictColumns, *, version: str, judged_by_run: str,
) -> None:
    """The verdict rows of one chunk's entries, added to `columns` in entry order: only the
    chunk's cases, recordings and replays decoded."""
    evaluators, count = project.evaluators, wanted.evaluators
    chunk_cases, context = reader.read([entry // count for entry in chunk], wanted.criteria_at(chunk))
    pairs = [(evaluators[entry % count], chunk_cases[entry // count]) for entry in chunk]
    verdicts = judged(pairs, context, project.config.concurrency.judge)
    inputs_keys = wanted.inputs_keys.take(pa.array(chunk, pa.int64())).to_pylist()
    keys = {
        "evaluator_digest": wanted.digests_at(chunk),
        "recording_key": wanted.recording_keys_at(chunk),
        # A verdict that is not reusable (a judge that could not be reached) keeps no key.
        "inputs_key": [key if evaluator.reusable(verdict) else None for key, (evaluator, _), verdict in zip(inputs_keys, pairs, verdicts)],
    }
    columns.add(verdicts, [case for _, case in pairs], context, version, judged_by_run, keys, chunk)
