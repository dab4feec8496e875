"""What each verdict is keyed by, and which stored verdicts still hold their key.

A verdict row carries its cache key (`inputs_key`): the digest of its evaluator (configuration
and code), its case's recording, a copy's source recording, and the replay it judged. A stored
verdict whose key still holds is reused as it is (with the run that judged it); for every
other, `why_judged` says why it is judged again.
"""

from __future__ import annotations

import inspect
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..model.config import Project
from ..model.fingerprints import ROW_KEY_CHARACTERS, RowKeyPrefix, evaluator_digest, row_key, row_key_tail
from ..store.stored import StoredTable
from ..store.tables import null_to_none
from .base import Evaluator
from .chunk_inputs import last_rows, replay_rows

JUDGED, REJUDGED = "judged", "re-judged"


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


def recording_keys(runs: StoredTable, version: str) -> pa.StringArray:
    """Per row of the recorded runs, the key of its recording (computed for rows written
    without one: only their other columns are read)."""
    keys = pa.array(runs.columns("recording_key")["recording_key"], pa.string())
    missing = keys.is_null()
    if not pc.any(missing).as_py():
        return keys
    made_of = runs.columns("case_digest", "code_fingerprint", "recorded_by_run", "status").iloc[np.flatnonzero(missing.to_numpy(zero_copy_only=False))]
    made = [row_key("recording", digest, version, *rest) for digest, *rest in zip(*(null_to_none(made_of[name]) for name in made_of.columns))]
    return pc.replace_with_mask(keys, missing, pa.array(made, pa.string()))


# Stored rows turned into Python values at a time while their keys are made.
KEYED_AT_ONCE = 8192


def replay_keys(replays: StoredTable) -> list[str]:
    """Per row of the replays table, the key of the replay a fault verdict judges."""
    if not replays.exists or not len(replays):
        return []
    made_of = replays.columns("case_digest", "plan_digest", "recorded_by_run", "replayed_by_run")
    keys = []
    for start in range(0, len(made_of), KEYED_AT_ONCE):
        part = made_of.iloc[start : start + KEYED_AT_ONCE]
        keys.extend(row_key("replay", *parts) for parts in zip(*(null_to_none(part[name]) for name in part.columns)))
    return keys


@dataclass
class WantedVerdicts:
    """One entry per case and criterion, in case then evaluator order (entry = case position
    times the number of evaluators plus the evaluator's): the cache key of the verdict it
    should hold, for tables of any size. What repeats is held once: the case ids and their
    recordings' keys per case (Arrow text, no Python string each), the criteria and evaluator
    digests per evaluator; only the inputs keys per entry."""

    case_id_column: pa.StringArray
    criterion_names: list[str]
    digests: list[str]
    recording_key_column: pa.StringArray
    # Each a `row_key` (32 characters), one after another in one buffer: no Python string each.
    inputs_keys: pa.StringArray
    evaluators: int

    def __len__(self) -> int:
        return len(self.inputs_keys)

    def recording_keys_at(self, entries: np.ndarray | list[int]) -> list[str | None]:
        return self._per_case(self.recording_key_column, entries)

    def criteria_at(self, entries: np.ndarray | list[int]) -> list[str]:
        return self._per_evaluator(self.criterion_names, entries)

    def criteria_counted(self, entries: np.ndarray) -> dict[str, int]:
        """How many of the entries each criterion has, in the order criteria first come."""
        counted: dict[str, int] = {}
        for evaluator, _, count in first_and_count(np.asarray(entries, dtype=np.int64) % max(self.evaluators, 1)):
            counted[self.criterion_names[evaluator]] = counted.get(self.criterion_names[evaluator], 0) + count
        return counted

    def digests_at(self, entries: np.ndarray | list[int]) -> list[str]:
        return self._per_evaluator(self.digests, entries)

    def _per_case(self, column: pa.StringArray, entries: np.ndarray | list[int]) -> list[str | None]:
        """The entries' values of a column held once per case."""
        if not len(entries):
            return []
        return column.take(pa.array(np.asarray(entries, dtype=np.int64) // self.evaluators)).to_pylist()

    def _per_evaluator(self, values: list[str], entries: np.ndarray | list[int]) -> list[str]:
        """The entries' values of a list held once per evaluator."""
        return [values[entry % self.evaluators] for entry in np.asarray(entries, dtype=np.int64).tolist()]

    def entry_case_ids(self) -> pa.Array:
        """Each entry's case id (an Arrow column as long as the entries)."""
        return self.case_id_column.take(pa.array(np.repeat(np.arange(len(self.case_id_column), dtype=np.int64), self.evaluators)))

    def entry_criteria(self) -> pa.Array:
        """Each entry's criterion."""
        return pa.array(self.criterion_names * len(self.case_id_column), pa.string())


def verdict_keys(project: Project, cases: pd.DataFrame, runs: StoredTable, replays: StoredTable, version: str) -> WantedVerdicts:
    """The cache key each verdict should hold: its evaluator's digest, its case's recording, a
    copy's source recording and the replay it judges, joined into one `inputs_key`. The stored
    keys are found per case position in Arrow (no dict of every recording and replay)."""
    recorded = pa.array(runs.columns("case_id")["case_id"], pa.string())
    recordings = recording_keys(runs, version)
    own = taken(recordings, last_rows(cases["case_id"], recorded))
    source = taken(recordings, last_rows(cases["source_id"], recorded))
    criteria = [evaluator.criterion for evaluator in project.evaluators]
    digests = evaluator_digests(project)
    # row_key("verdict", digest, recording, source_recording, replay): the evaluator's part
    # hashed once, the case's recordings joined once, per verdict only the rest.
    prefixes = [RowKeyPrefix("verdict", digest) for digest in digests]
    no_replay = row_key_tail(None)
    replayed = replay_keys(replays)
    replay_tails = {  # criterion -> per case, the tail of the replay it judges
        criterion: [no_replay if row < 0 else row_key_tail(replayed[row]) for row in rows.tolist()]
        for criterion, rows in replay_rows(replays, cases["case_id"]).items()
    }
    del replayed
    per_evaluator = [(prefix, replay_tails.get(criterion)) for criterion, prefix in zip(criteria, prefixes)]
    inputs = bytearray()
    for position, (recording, source_recording) in enumerate(zip(own, source)):
        recordings_tail = row_key_tail(recording, source_recording)
        for prefix, tails in per_evaluator:
            inputs += prefix.key(recordings_tail, no_replay if tails is None else tails[position]).encode()
    return WantedVerdicts(
        case_id_column=pa.array(cases["case_id"], pa.string()),
        criterion_names=criteria,
        digests=digests,
        recording_key_column=pa.array(own, pa.string()),
        inputs_keys=fixed_width_text(inputs, ROW_KEY_CHARACTERS),
        evaluators=len(criteria),
    )


def taken(values: pa.Array, rows: np.ndarray) -> list[str | None]:
    """`values` at `rows` (-1: None)."""
    return values.take(pa.array(rows, pa.int64(), mask=rows < 0)).to_pylist()


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
    wanted_cases, criteria = wanted.case_id_column, wanted.criterion_names
    if len(previous) == len(wanted) and pc.all(pc.equal(stored_cases, wanted.entry_case_ids())).as_py() and pc.all(
        pc.equal(stored_criteria, wanted.entry_criteria())
    ).as_py():
        return np.arange(len(wanted))
    if pc.count_distinct(wanted_cases, mode="all").as_py() < len(wanted_cases) or len(set(criteria)) < len(criteria):
        return _positions_by_key(wanted, previous)  # the same key twice: each entry finds the last stored row
    case_at = pc.index_in(stored_cases, value_set=wanted_cases).fill_null(-1).to_numpy()
    criterion_at = pc.index_in(stored_criteria, value_set=pa.array(criteria, pa.string())).fill_null(-1).to_numpy()
    named = np.flatnonzero((case_at >= 0) & (criterion_at >= 0))
    positions = np.full(len(wanted), -1, dtype=np.int64)
    # A stored table with a key twice (it should have none) keeps its last row, as an index would.
    positions[case_at[named] * wanted.evaluators + criterion_at[named]] = named
    return positions


def _positions_by_key(wanted: WantedVerdicts, previous: pd.DataFrame) -> np.ndarray:
    at = {key: position for position, key in enumerate(zip(null_to_none(previous["case_id"]), null_to_none(previous["criterion"])))}
    return np.array([at.get(key, -1) for key in zip(wanted.entry_case_ids().to_pylist(), wanted.entry_criteria().to_pylist())], dtype=np.int64)


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
    at the rows of those judged again; those with none counted per evaluator, not one by one).
    Each reason counted in the order it first comes among the entries."""
    known_criteria = set(stored.columns("criterion")["criterion"].unique().tolist()) if stored.exists else set()
    stored_at = positions[entries]
    evaluator_of = entries % max(wanted.evaluators, 1)
    counted: dict[tuple[str, str, str], list[int]] = {}  # reason -> [its first entry's index, count]

    def note(reason: tuple[str, str, str], index: int, count: int) -> None:
        seen = counted.setdefault(reason, [index, 0])
        seen[0], seen[1] = min(seen[0], index), seen[1] + count

    new = np.flatnonzero(stored_at < 0)
    for evaluator, first, count in first_and_count(evaluator_of[new]):
        criterion = wanted.criterion_names[evaluator]
        note((criterion, JUDGED, "new case" if criterion in known_criteria or not known_criteria else "new evaluator"), int(new[first]), count)
    again = np.flatnonzero(stored_at >= 0)
    if len(again):
        reasons = rejudged_reasons(wanted, entries[again], stored_at[again], stored)
        for code, first, count in first_and_count(evaluator_of[again] * len(REJUDGED_BECAUSE) + reasons):
            evaluator, reason = divmod(code, len(REJUDGED_BECAUSE))
            note((wanted.criterion_names[evaluator], REJUDGED, REJUDGED_BECAUSE[reason]), int(again[first]), count)
    for reason, (_, count) in sorted(counted.items(), key=lambda item: item[1][0]):
        summary.why[reason] += count


# Why a stored verdict is judged again: the first of these that holds.
REJUDGED_BECAUSE = (
    "no cache key stored with the verdict",
    "its judge did not answer last time",
    "evaluator changed",
    "recording changed",
    "fault replay or the source's recording changed",
)
STORED_KEYS = ["evaluator_digest", "inputs_key", "recording_key"]


def rejudged_reasons(wanted: WantedVerdicts, entries: np.ndarray, rows: np.ndarray, stored: StoredTable) -> np.ndarray:
    """Per entry judged again, why the stored verdict at its row was not reused (an index
    into `REJUDGED_BECAUSE`): the stored keys read a row group at a time, at those rows only
    (300,000 verdicts re-judged in a table of 1.8 million read no key column whole)."""
    reasons = np.empty(len(entries), dtype=np.int64)
    text = pa.schema([(name, pa.string()) for name in STORED_KEYS])
    for slots, keys in stored.at_positions(rows, STORED_KEYS):
        keys = keys.cast(text)
        here = entries[slots]
        checks = (  # in the order of REJUDGED_BECAUSE, the last one's being none of these
            pc.is_null(keys["evaluator_digest"]),
            pc.is_null(keys["inputs_key"]),
            differs(keys["evaluator_digest"], pa.array(wanted.digests_at(here), pa.string())),
            differs(keys["recording_key"], wanted.recording_key_column.take(pa.array(here // wanted.evaluators))),
        )
        found = np.full(len(slots), len(checks), dtype=np.int64)
        for index in reversed(range(len(checks))):
            found[checks[index].to_numpy(zero_copy_only=False)] = index
        reasons[slots] = found
    return reasons


def differs(stored: pa.ChunkedArray, wanted: pa.Array) -> pa.ChunkedArray:
    """Where stored text differs from the wanted, a null from any text (as Python's `!=`); a
    key is never empty."""
    return pc.not_equal(stored.fill_null(""), wanted.fill_null(""))


def first_and_count(values: np.ndarray) -> list[tuple[int, int, int]]:
    """Each distinct value (a small number: an evaluator's), the index it first comes at and
    how often it comes, in the order values first come."""
    distinct, first, counts = np.unique(values, return_index=True, return_counts=True)
    return [(int(distinct[at]), int(first[at]), int(counts[at])) for at in np.argsort(first)]


def reusable_entries(wanted: WantedVerdicts, stored: StoredTable) -> tuple[np.ndarray, np.ndarray]:
    """Per wanted entry, whether the stored verdict there still holds its key, and the stored
    row of its case and criterion (-1: none). The keys are compared in Arrow: no Python
    string per stored key."""
    positions = stored_positions(wanted, stored)
    reuse = positions >= 0
    named = np.flatnonzero(reuse)
    for slots, keys in stored.at_positions(positions[named], ["inputs_key"]):  # a row group at a time
        here = named[slots]
        held = pc.equal(keys["inputs_key"].cast(pa.string()), wanted.inputs_keys.take(pa.array(here)))
        reuse[here] = held.fill_null(False).to_numpy(zero_copy_only=False)
    return reuse, positions
