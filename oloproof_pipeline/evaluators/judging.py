"""The judging step: every case on every criterion, from stored recordings and replays only
(so a version re-grades without its system), as the rows of the `verdicts` table.

Incremental: each verdict row carries its cache key (`inputs_key`): the digest of its
evaluator (configuration and code), its case's recording, a copy's source recording, and the
replay it judged. A stored verdict whose key still holds is reused as it is (with the run that
judged it); only the rest are judged, a cluster of cases at a time, so the models a judgement
needs exist only for the cases being judged.
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter, OrderedDict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, TypeAdapter

from ..model.cases import CaseRecord
from ..model.config import Project
from ..model.faults import FaultReplay
from ..model.fingerprints import ROW_KEY_CHARACTERS, RowKeyPrefix, evaluator_digest, row_key, row_key_tail
from ..model.outcomes import Verdict
from ..model.records import RecordedRun
from ..store.assembly import AssembledTable
from ..store.decoding import case_models, collection_paused, replay_models, run_models
from ..store.stored import StoredTable
from ..store.tables import (
    BATCH_ROWS,
    VERDICTS_SCHEMA,
    null_to_none,
    replays_from_table,
    to_json_text,
)
from .base import Evaluator, JudgingContext

# Clusters (a source and its copies) judged together: a copy is judged against its source's
# recording, and the models of one chunk are dropped before the next is parsed. Small, as the
# recordings' parsed trajectories are most of a run's transient memory.
CLUSTERS_PER_CHUNK = 50
JUDGED, REJUDGED = "judged", "re-judged"


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


# The columns a verdict fills, in the order `VerdictColumns.add` gives them.
VERDICT_COLUMNS = (
    "case_id", "case_digest", "group_id", "criterion", "outcome", "reason", "details", "system_version",
    "recorded_by_run", "replayed_by_run", "judged_by_run", "evaluator_digest", "recording_key", "inputs_key",
)


# A verdict's details as `Verdict.model_dump(mode="json")` gives them (its other fields are text
# already): dumping only them, and nothing for the many verdicts without any.
DETAILS: TypeAdapter[Any] = TypeAdapter(Any)


# While judged, a verdict column whose values repeat from row to row (a case's verdicts share
# its id, digest and recording; a run, an evaluator, a reason or details recur across cases)
# is held as a dictionary: each distinct value once per batch. Only the inputs key is unique.
UNIQUE_VERDICT_COLUMNS = frozenset({"inputs_key"})
COMPACT_VERDICTS_SCHEMA = pa.schema([
    field if field.name in UNIQUE_VERDICT_COLUMNS else pa.field(field.name, pa.dictionary(pa.int32(), field.type))
    for field in VERDICTS_SCHEMA
])


class VerdictColumns:
    """Verdict rows gathered as plain tuples (no dict per row), turned into Arrow record batches
    a column at a time every `BATCH_ROWS` rows (so a large table never exists as Python
    strings all at once), repeated text held as dictionaries (`COMPACT_VERDICTS_SCHEMA`), then
    one table of `VERDICTS_SCHEMA` (a column it lacks, nulls)."""

    def __init__(self) -> None:
        self._rows: list[tuple[Any, ...]] = []
        self._batches: list[pa.RecordBatch] = []

    def add(
        self, verdict: Verdict, case: CaseRecord, context: JudgingContext, version: str, judged_by_run: str,
        keys: tuple[str | None, str | None, str | None] = (None, None, None),
    ) -> None:
        """One verdict's row, naming the runs that recorded, replayed and judged it; `keys` are
        its cache key (evaluator digest, recording key, inputs key)."""
        recording = context.recording_of(verdict.case_id)
        replay = context.replays.get((verdict.case_id, verdict.criterion))
        details = verdict.details
        self._rows.append((
            verdict.case_id, case.case_digest, case.group_id, verdict.criterion, verdict.outcome, verdict.reason,
            None if details is None else to_json_text(DETAILS.dump_python(details, mode="json")), version,
            recording.recorded_by_run if recording else None, getattr(replay, "replayed_by_run", None), judged_by_run, *keys,
        ))
        if len(self._rows) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        if self._rows:
            filled = dict(zip(VERDICT_COLUMNS, zip(*self._rows)))
            arrays = [
                pa.array(filled[field.name], type=field.type) if field.name in filled else pa.nulls(len(self._rows), field.type)
                for field in COMPACT_VERDICTS_SCHEMA
            ]
            self._batches.append(pa.RecordBatch.from_arrays(arrays, schema=COMPACT_VERDICTS_SCHEMA))
            self._rows = []

    def compact(self) -> pa.Table:
        """The rows as they are held (repeated text as dictionaries): what a table assembled from
        them reads a row group at a time (store/assembly.py decodes the dictionaries)."""
        self._flush()
        batches, self._batches = self._batches, []
        return pa.Table.from_batches(batches, schema=COMPACT_VERDICTS_SCHEMA)

    def frame(self) -> pd.DataFrame:
        return self.compact().cast(VERDICTS_SCHEMA).to_pandas()


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
    for verdict in judge_all(project.evaluators, cases, context, judges_at_once=project.config.concurrency.judge):
        columns.add(verdict, context.cases[verdict.case_id], context, version, judged_by_run)
    return columns.frame()


def replays_for_judging(frame: pd.DataFrame | None, runs: list[RecordedRun]) -> dict[tuple[str, str], FaultReplay]:
    """(case id, criterion) -> replay, keeping only replays of the recordings being judged."""
    recordings = {run.case_id: run for run in runs}
    return {
        (replay.case_id, replay.criterion): replay
        for replay in replays_from_table(frame)
        if made_from(replay, recordings.get(replay.case_id))
    }


# -- cache keys -------------------------------------------------------------------------------


def evaluator_code_files(evaluator: Evaluator, project_root: Path) -> list[Path]:
    """The evaluator's module, the evaluator modules it uses, and a python grader's module."""
    module = sys.modules[type(evaluator).__module__]
    package = module.__name__.rpartition(".")[0]
    used = {module.__name__}
    for value in vars(module).values():
        name = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None)
        if isinstance(name, str) and name.startswith(package + "."):
            used.add(name)
    files = [Path(inspect.getfile(sys.modules[name])) for name in sorted(used) if name in sys.modules]
    return files + evaluator.project_code_files(project_root)


def evaluator_digests(project: Project) -> list[str]:
    """Per evaluator (in `evaluators:` order), the digest its verdicts are keyed by."""
    return [
        evaluator_digest(evaluator.config.model_dump(mode="json"), evaluator_code_files(evaluator, project.root), project.root)
        for evaluator in project.evaluators
    ]


def recording_keys(runs: StoredTable, version: str) -> dict[str, str]:
    """case id -> the key of its recording (computed for tables written without one)."""
    keys = runs.columns("case_id", "recording_key", "case_digest", "code_fingerprint", "recorded_by_run", "status")
    return {
        case_id: key or row_key("recording", digest, version, fingerprint, run, status)
        for case_id, key, digest, fingerprint, run, status in zip(*(null_to_none(keys[name]) for name in keys.columns))
    }


def replay_keys(replays: StoredTable) -> dict[tuple[str, str], str]:
    """(case id, criterion) -> the key of the replay a fault verdict judges."""
    if not replays.exists or not len(replays):
        return {}
    keys = replays.columns("case_id", "criterion", "case_digest", "plan_digest", "recorded_by_run", "replayed_by_run")
    return {
        (case_id, criterion): row_key("replay", digest, plan, recorded, replayed)
        for case_id, criterion, digest, plan, recorded, replayed in zip(*(null_to_none(keys[name]) for name in keys.columns))
    }


@dataclass
class WantedVerdicts:
    """One entry per case and criterion, in case then evaluator order (entry = case position
    times the number of evaluators plus the evaluator's): the cache key of the verdict it
    should hold, as columns (arrays), for tables of any size."""

    case_ids: np.ndarray
    criteria: np.ndarray
    evaluator_digests: np.ndarray
    recording_keys: np.ndarray
    # Each a `row_key` (32 characters), one after another in one buffer: no Python string each.
    inputs_keys: pa.StringArray
    evaluators: int

    def __len__(self) -> int:
        return len(self.inputs_keys)


def verdict_keys(project: Project, cases: pd.DataFrame, runs: StoredTable, replays: StoredTable, version: str) -> WantedVerdicts:
    """The cache key each verdict should hold: its evaluator's digest, its case's recording, a
    copy's source recording and the replay it judges, joined into one `inputs_key`."""
    recordings = recording_keys(runs, version)
    replayed = replay_keys(replays)
    case_ids = null_to_none(cases["case_id"])
    own = [recordings.get(case_id) for case_id in case_ids]
    source = [recordings.get(source_id) if source_id else None for source_id in null_to_none(cases["source_id"])]
    criteria = [evaluator.criterion for evaluator in project.evaluators]
    digests = evaluator_digests(project)
    # row_key("verdict", digest, recording, source_recording, replay): the evaluator's part
    # hashed once, the case's recordings joined once, per verdict only the rest.
    prefixes = [RowKeyPrefix("verdict", digest) for digest in digests]
    no_replay = row_key_tail(None)
    inputs = bytearray()
    for case_id, recording, source_recording in zip(case_ids, own, source):
        recordings_tail = row_key_tail(recording, source_recording)
        for criterion, prefix in zip(criteria, prefixes):
            replay = replayed.get((case_id, criterion))
            inputs += prefix.key(recordings_tail, no_replay if replay is None else row_key_tail(replay)).encode()
    count = len(criteria)
    return WantedVerdicts(
        case_ids=np.repeat(np.array(case_ids, dtype=object), count),
        criteria=np.tile(np.array(criteria, dtype=object), len(case_ids)),
        evaluator_digests=np.tile(np.array(digests, dtype=object), len(case_ids)),
        recording_keys=np.repeat(np.array(own, dtype=object), count),
        inputs_keys=fixed_width_text(inputs, ROW_KEY_CHARACTERS),
        evaluators=count,
    )


def fixed_width_text(text: bytearray, width: int) -> pa.StringArray:
    """ASCII values of one width, written one after another, as an Arrow text column (no copy)."""
    count = len(text) // width
    offsets = np.arange(0, (count + 1) * width, width, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def stored_positions(wanted: WantedVerdicts, stored: StoredTable) -> np.ndarray:
    """Per wanted entry, the row of the stored verdicts for the same case and criterion (-1:
    none). A table that lines up with the wanted entries (a rerun with the same cases and
    evaluators) is matched by position, without building an index of it; any other is
    matched in Arrow, each stored row's case and criterion turned into the entry they name."""
    if not stored.exists or not len(stored):
        return np.full(len(wanted), -1)
    previous = stored.columns("case_id", "criterion")
    stored_cases, stored_criteria = (pa.array(previous[name], pa.string()) for name in ("case_id", "criterion"))
    wanted_cases = wanted.case_ids[:: max(wanted.evaluators, 1)]
    criteria = wanted.criteria[: wanted.evaluators]
    if len(previous) == len(wanted) and pc.all(pc.equal(stored_cases, pa.array(wanted.case_ids, pa.string()))).as_py() and pc.all(
        pc.equal(stored_criteria, pa.array(wanted.criteria, pa.string()))
    ).as_py():
        return np.arange(len(wanted))
    if len(set(wanted_cases.tolist())) < len(wanted_cases) or len(set(criteria.tolist())) < len(criteria):
        return _positions_by_key(wanted, previous)  # the same key twice: each entry finds the last stored row
    case_at = pc.index_in(stored_cases, value_set=pa.array(wanted_cases, pa.string())).fill_null(-1).to_numpy()
    criterion_at = pc.index_in(stored_criteria, value_set=pa.array(criteria, pa.string())).fill_null(-1).to_numpy()
    named = np.flatnonzero((case_at >= 0) & (criterion_at >= 0))
    positions = np.full(len(wanted), -1, dtype=np.int64)
    # A stored table with a key twice (it should have none) keeps its last row, as an index would.
    positions[case_at[named] * wanted.evaluators + criterion_at[named]] = named
    return positions


def _positions_by_key(wanted: WantedVerdicts, previous: pd.DataFrame) -> np.ndarray:
    at = {key: position for position, key in enumerate(zip(null_to_none(previous["case_id"]), null_to_none(previous["criterion"])))}
    return np.array([at.get(key, -1) for key in zip(wanted.case_ids.tolist(), wanted.criteria.tolist())], dtype=np.int64)


# -- what is reused, what is judged -------------------------------------------------------------


@dataclass
class VerdictSummary:
    """Verdicts judged now and reused, per criterion, and why any was judged."""

    judged: int = 0
    reused: int = 0
    judged_by_criterion: Counter = field(default_factory=Counter)
    why: Counter = field(default_factory=Counter)
    # What model judges spent in this judging (calls, tokens, dollars): apart from the system's.
    judge_spent: Counter = field(default_factory=Counter)
    has_model_judges: bool = False

    def as_metadata(self, *trials: "VerdictSummary") -> dict[str, int | float]:
        """The counts; with model judges, what they spent here and in the later `trials`."""
        judges = {}
        if self.has_model_judges:
            spent = sum((summary.judge_spent for summary in trials), Counter(self.judge_spent))
            judges = {name: spent.get(name, 0) for name in ("judge_calls", "judge_prompt_tokens", "judge_completion_tokens")}
            judges["judge_cost_usd"] = round(float(spent.get("judge_cost_usd", 0.0)), 6)
        return {"verdicts_judged": self.judged, "verdicts_reused": self.reused, **judges}

    def reasons(self) -> list[str]:
        """`216 verdicts for state_correct re-judged: evaluator changed`, most frequent first."""
        return [
            f"{count} verdict{'' if count == 1 else 's'} for {criterion} {done}: {reason}"
            for (criterion, done, reason), count in self.why.most_common()
        ]


def why_judged(wanted: WantedVerdicts, entries: np.ndarray, positions: np.ndarray, stored: StoredTable, summary: VerdictSummary) -> None:
    """Per verdict judged now, why no stored verdict could be reused (the stored keys read only
    at the rows of those judged again)."""
    known_criteria = set(stored.columns("criterion")["criterion"].unique().tolist()) if stored.exists else set()
    stored_at = positions[entries]
    again = stored_at[stored_at >= 0]
    keys = stored.columns("evaluator_digest", "recording_key", "inputs_key").iloc[again] if len(again) else None
    stored_keys = zip(*(null_to_none(keys[name]) for name in keys.columns)) if keys is not None else iter(())
    for entry, position in zip(entries.tolist(), stored_at.tolist()):
        criterion = wanted.criteria[entry]
        if position < 0:
            reason = "new case" if criterion in known_criteria or not known_criteria else "new evaluator"
            summary.why[(criterion, JUDGED, reason)] += 1
            continue
        evaluator_digest, recording, inputs = next(stored_keys)
        if evaluator_digest is None:
            reason = "no cache key stored with the verdict"
        elif inputs is None:
            reason = "its judge did not answer last time"
        elif evaluator_digest != wanted.evaluator_digests[entry]:
            reason = "evaluator changed"
        elif recording != wanted.recording_keys[entry]:
            reason = "recording changed"
        else:
            reason = "fault replay or the source's recording changed"
        summary.why[(criterion, REJUDGED, reason)] += 1


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
    positions = stored_positions(wanted, stored)
    reuse = positions >= 0
    if reuse.any():  # compared in Arrow: no Python string per stored key
        stored_inputs = pa.array(stored.columns("inputs_key")["inputs_key"], pa.string()).take(pa.array(positions[reuse]))
        wanted_inputs = wanted.inputs_keys.take(pa.array(np.flatnonzero(reuse)))
        reuse[reuse] = pc.equal(stored_inputs, wanted_inputs).fill_null(False).to_numpy(zero_copy_only=False)
    summary = VerdictSummary(reused=int(reuse.sum()))
    entries = np.flatnonzero(~reuse)
    why_judged(wanted, entries, positions, stored, summary)
    spent_before = judge_spending(project.evaluators)
    new, new_slots = judge_wanted(project, cases, runs, replays, wanted, entries, case_keys, version=version, judged_by_run=judged_by_run)
    summary.judge_spent = judge_spending(project.evaluators) - spent_before
    summary.has_model_judges = any(evaluator.calls_model for evaluator in project.evaluators)
    summary.judged = len(entries)
    summary.judged_by_criterion.update(wanted.criteria[entries].tolist())
    del wanted  # the keys of every verdict: not needed to put the table together
    for decoded in (cases, runs, replays):  # nor the columns the judged rows were decoded from
        decoded.forget()
    reused = np.flatnonzero(reuse)
    parts = [(new, range(len(new)), new_slots)]
    del new  # the parts' own: let go a column at a time as the table takes their rows
    if len(reused):
        parts.append((stored, positions[reused], reused))
    return AssembledTable(VERDICTS_SCHEMA, parts, VERDICT_WHOLE_COLUMNS, rows_per_group=VERDICT_GROUP_ROWS), summary


# The verdict columns held whole as the table is assembled (its metadata counts outcomes);
# the rest (reasons, details, keys) taken a row group of short rows at a time.
VERDICT_WHOLE_COLUMNS = ("case_id", "criterion", "outcome")
VERDICT_GROUP_ROWS = 16384


def chunks_of_clusters(wanted: WantedVerdicts, entries: np.ndarray, case_keys: pd.DataFrame) -> list[np.ndarray]:
    """The entries split into chunks of `CLUSTERS_PER_CHUNK` clusters (in the order their
    clusters first appear), each in entry order."""
    groups = np.asarray(null_to_none(case_keys["group_id"]), dtype=object)[entries // max(wanted.evaluators, 1)].tolist()
    chunk_of = {group: index // CLUSTERS_PER_CHUNK for index, group in enumerate(dict.fromkeys(groups))}
    numbers = np.fromiter((chunk_of[group] for group in groups), dtype=np.int64, count=len(groups))
    order = np.argsort(numbers, kind="stable")
    return np.split(entries[order], np.flatnonzero(np.diff(numbers[order])) + 1)


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
) -> tuple[pa.Table, np.ndarray]:
    """Verdict rows for the wanted `entries` (case and criterion), a chunk of clusters at a
    time, only the chunk's cases, recordings and replays decoded while it is judged; and each
    row's place in the table (its entry: case, then evaluator)."""
    columns = VerdictColumns()
    slots: list[np.ndarray] = []
    if not len(entries):
        return columns.compact(), np.array([], dtype=np.int64)
    run_positions = {case_id: position for position, case_id in enumerate(null_to_none(runs.columns("case_id")["case_id"]))}
    replay_positions = replay_rows(replays)
    judged_under = replay_judging_digests(replays)
    runs_by_group, replays_by_group = GroupedRows(runs, RecordedRun), GroupedRows(replays, FaultReplay)
    for chunk_entries in chunks_of_clusters(wanted, entries, case_keys):
        # The collector is held off while a chunk is decoded and judged: its models, verdicts
        # and rows make no cycle, yet set off collections (some of the whole heap) costing a
        # tenth of judging. It runs between chunks: a grader's own garbage waits one chunk.
        with collection_paused():
            judge_chunk(project, cases, runs_by_group, replays_by_group, wanted, chunk_entries.tolist(), run_positions,
                        replay_positions, columns, version=version, judged_by_run=judged_by_run, judged_under=judged_under)
        slots.append(chunk_entries)
    return columns.compact(), np.concatenate(slots)


def judge_chunk(
    project: Project,
    cases: StoredTable,
    runs: "GroupedRows",
    replays: "GroupedRows",
    wanted: WantedVerdicts,
    chunk: list[int],
    run_positions: dict[str, int],
    replay_positions: dict[tuple[str, str], int],
    columns: VerdictColumns,
    *,
    version: str,
    judged_by_run: str,
    judged_under: list[str | None] | None = None,
) -> None:
    """The verdict rows of one chunk's entries, added to `columns` in entry order: only the
    chunk's cases, recordings and replays decoded. `judged_under`: per replay row, the
    judging digest it was judged under (`replay_judging_digests`)."""
    evaluators = project.evaluators
    case_positions = [entry // wanted.evaluators for entry in chunk]
    chunk_cases = case_models(cases, case_positions)
    needed_runs = {case.case_id for case in chunk_cases.values()} | {
        case.source_id for case in chunk_cases.values() if case.source_id
    }
    run_rows = [run_positions[case_id] for case_id in needed_runs if case_id in run_positions]
    recordings = {run.case_id: run for run in runs.models(run_models, run_rows).values()}
    replay_keys_wanted = zip(wanted.case_ids[chunk].tolist(), wanted.criteria[chunk].tolist())
    replay_rows_wanted = [replay_positions[key] for key in replay_keys_wanted if key in replay_positions]
    chunk_replays = {(replay.case_id, replay.criterion): replay for replay in replays.models(replay_models, replay_rows_wanted).values()}
    context = JudgingContext(
        cases={case.case_id: case for case in chunk_cases.values()},
        recordings=recordings,
        replays={key: replay for key, replay in chunk_replays.items() if made_from(replay, recordings.get(key[0]))},
        replays_judged_under={key: judged_under[replay_positions[key]] for key in chunk_replays} if judged_under else {},
    )
    pairs = [(evaluators[entry % wanted.evaluators], chunk_cases[entry // wanted.evaluators]) for entry in chunk]
    verdicts = judged(pairs, context, project.config.concurrency.judge)
    inputs_keys = wanted.inputs_keys.take(pa.array(chunk, pa.int64())).to_pylist()
    for entry, inputs_key, (evaluator, case), verdict in zip(chunk, inputs_keys, pairs, verdicts):
        # A verdict that is not reusable (a judge that could not be reached) keeps no key.
        inputs_key = inputs_key if evaluator.reusable(verdict) else None
        keys = (wanted.evaluator_digests[entry], wanted.recording_keys[entry], inputs_key)
        columns.add(verdict, case, context, version, judged_by_run, keys)


def made_from(replay: FaultReplay, recording: RecordedRun | None) -> bool:
    """Whether a stored replay was made from this recording (else it is no evidence here)."""
    return recording is not None and (replay.case_digest, replay.recorded_by_run) == (recording.case_digest, recording.recorded_by_run)


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
    """A stored table's rows decoded for a chunk: a table of several row groups (the recordings)
    a row group at a time, only the groups holding the rows asked for, the last few kept (the
    next chunks' rows mostly lie in them), so judging never holds its large columns whole; any
    other as `StoredTable` reads it, a column at a time."""

    # A chunk's rows lie in three runs of the table (its sources, and each transform's copies),
    # each in one row group or across two.
    GROUPS_KEPT = 6

    def __init__(self, table: StoredTable, model: type[BaseModel]):
        self.table = table
        self.groups = table.row_groups() if table.exists and len(table) else None
        self.names = [name for name in model.model_fields if name in table.names] if self.groups is not None else []
        self.kept: OrderedDict[int, StoredTable] = OrderedDict()

    def models(self, decode: Callable[[StoredTable, list[int]], dict[int, Any]], positions: list[int]) -> dict[int, Any]:
        """Position -> the model there, as `decode` (a `store.decoding` function) makes it."""
        if self.groups is None or len(self.groups.starts) < 2 or not positions:
            return decode(self.table, positions)
        wanted = np.unique(np.asarray(positions, dtype=np.int64))
        group_of = np.searchsorted(self.groups.starts, wanted, side="right") - 1
        found: dict[int, Any] = {}
        for group in np.unique(group_of).tolist():
            start = int(self.groups.starts[group])
            local = (wanted[group_of == group] - start).tolist()
            found.update((start + position, model) for position, model in decode(self._group(group), local).items())
        return found

    def _group(self, group: int) -> StoredTable:
        if group in self.kept:
            self.kept.move_to_end(group)
        else:
            self.kept[group] = StoredTable.of(self.groups.read(group, self.names).to_pandas())
            while len(self.kept) > self.GROUPS_KEPT:
                self.kept.popitem(last=False)
        return self.kept[group]
