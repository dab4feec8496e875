"""A version's stored results, read back from the Parquet tables (no system, no Dagster)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..model.errors import ProjectError
from ..model.outcomes import OUTCOMES
from ..store.layout import read_table, stored_partitions
from ..store.stored import StoredTable
from ..store.tables import (
    CASE_NESTED,
    CASES_SCHEMA,
    FAULT_REPLAY_NESTED,
    GATE_NESTED,
    RUN_NESTED,
    VERDICT_NESTED,
    from_json_text,
    null_to_none,
    rows_from_frame,
)


@dataclass
class VersionResults:
    """One system version's stored tables, kept as read (columnar, JSON as text), with each
    table indexed by case once; a case's rows are decoded only when asked for. Cases are the
    sources, then the copies."""

    version: str
    case_table: pd.DataFrame
    run_table: pd.DataFrame | None
    verdict_table: pd.DataFrame
    gate_table: pd.DataFrame | None
    slices: pd.DataFrame | None
    _case_at: dict[str, int] = field(init=False, repr=False)
    _run_at: dict[str, int] = field(init=False, repr=False)
    _verdicts_at: dict[str, Any] = field(init=False, repr=False)
    # Per table (by id): every row, each column made a list when first asked.
    _whole: dict[int, "_HeldRows"] = field(init=False, repr=False, default_factory=dict)

    def __post_init__(self) -> None:
        self._case_at = {case_id: position for position, case_id in enumerate(null_to_none(self.case_table["case_id"]))}
        runs = self.run_table
        self._run_at = {} if runs is None else {case_id: position for position, case_id in enumerate(null_to_none(runs["case_id"]))}
        verdicts = self.verdict_table
        self._verdicts_at = {} if verdicts.empty else verdicts.groupby("case_id", sort=False).indices

    def _row(self, frame: pd.DataFrame, position: int, nested: tuple[str, ...], names: Iterable[str] | None = None) -> dict[str, Any]:
        """One row as plain data (of `names`, else every column), JSON text parsed, from its
        table's columns made lists."""
        rows = self._whole.setdefault(id(frame), _HeldRows(frame))
        return {
            name: from_json_text(values[position]) if is_nested else values[position]
            for name, values, is_nested in rows.columns(tuple(frame.columns if names is None else names), nested)
        }

    @property
    def case_ids(self) -> list[str]:
        return list(self._case_at)

    def case(self, case_id: str, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        """The case's row (only `names` when given: the rest is never decoded)."""
        position = self._case_at.get(case_id)
        return None if position is None else self._row(self.case_table, position, CASE_NESTED, names)

    def recording(self, case_id: str, names: Iterable[str] | None = None) -> dict[str, Any] | None:
        position = self._run_at.get(case_id)
        if position is None or self.run_table is None:
            return None
        return self._row(self.run_table, position, RUN_NESTED, names)

    def verdicts_of(self, case_id: str, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
        positions = self._verdicts_at.get(case_id, ())
        return [self._row(self.verdict_table, int(position), VERDICT_NESTED, names) for position in positions]

    def run_column(self, name: str) -> list[Any]:
        """One column of the recordings, nulls as None (no row decoded; made for the caller, not kept)."""
        return [] if self.run_table is None else null_to_none(self.run_table[name])

    @property
    def cases(self) -> list[dict[str, Any]]:
        return [self._row(self.case_table, position, CASE_NESTED) for position in range(len(self.case_table))]

    @property
    def recorded_runs(self) -> list[dict[str, Any]]:
        return _rows(self.run_table, RUN_NESTED)

    @property
    def verdicts(self) -> list[dict[str, Any]]:
        return rows_from_frame(self.verdict_table, VERDICT_NESTED)

    @property
    def gate(self) -> list[dict[str, Any]]:
        return _rows(self.gate_table, GATE_NESTED)

    @property
    def gate_decision(self) -> str | None:
        gate = self.gate_table
        return None if gate is None or gate.empty else gate["gate_decision"].iloc[0]


@dataclass
class _HeldRows:
    """A table's rows, each column made a list when first asked."""

    frame: pd.DataFrame
    lists: dict[str, list[Any]] = field(default_factory=dict)

    # names asked together -> (name, its column, whether it holds JSON text) of each: a panel
    # asks the same few names of thousands of rows.
    picked: dict[tuple[str, ...], list[tuple[str, list[Any], bool]]] = field(default_factory=dict)

    def column(self, name: str) -> list[Any]:
        if name not in self.lists:
            self.lists[name] = null_to_none(self.frame[name])
        return self.lists[name]

    def columns(self, names: tuple[str, ...], nested: tuple[str, ...]) -> list[tuple[str, list[Any], bool]]:
        found = self.picked.get(names)
        if found is None:
            found = self.picked[names] = [(name, self.column(name), name in nested) for name in names]
        return found


def _rows(frame: pd.DataFrame | None, nested: tuple[str, ...]) -> list[dict[str, Any]]:
    return [] if frame is None else rows_from_frame(frame, nested)


def all_cases(cases: pd.DataFrame | None, derived_cases: pd.DataFrame | None) -> pd.DataFrame:
    """The sources, then the copies (with the copies' own columns: pair digests, labels)."""
    frames = [frame for frame in (cases, derived_cases) if frame is not None and not frame.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=CASES_SCHEMA.names)


def results_from_tables(
    version: str,
    *,
    cases: pd.DataFrame | None,
    derived_cases: pd.DataFrame | None,
    recorded_runs: pd.DataFrame | None,
    verdicts: pd.DataFrame,
    gate: pd.DataFrame | None,
    slices: pd.DataFrame | None,
) -> VersionResults:
    return VersionResults(
        version=version,
        case_table=all_cases(cases, derived_cases),
        run_table=recorded_runs,
        verdict_table=verdicts,
        gate_table=gate,
        slices=slices,
    )


def load_results(project_root: Path, version: str) -> VersionResults:
    """Everything stored for `version`; a version never judged is an error saying so."""
    verdicts = read_table(project_root, "verdicts", version)
    if verdicts is None:
        stored = ", ".join(stored_partitions(project_root, "verdicts")) or "none"
        raise ProjectError(f"no verdicts stored for version {version!r} (stored: {stored}); run `oloproof run` first")
    return results_from_tables(
        version,
        cases=read_table(project_root, "cases"),
        derived_cases=read_table(project_root, "derived_cases"),
        recorded_runs=read_table(project_root, "recorded_runs", version),
        verdicts=verdicts,
        gate=read_table(project_root, "gate", version),
        slices=read_table(project_root, "slices", version),
    )


def tool_calls(recording: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The recording's tool calls, each with the result that followed it."""
    steps = ((recording or {}).get("trajectory") or {}).get("steps") or []
    calls = []
    for index, step in enumerate(steps):
        if step.get("kind") == "tool_call":
            following = steps[index + 1] if index + 1 < len(steps) else {}
            result = following.get("result") if following.get("kind") == "tool_result" else None
            calls.append({"tool": step.get("tool"), "arguments": step.get("arguments"), "role": step.get("role"), "result": result})
    return calls


def scripted_events(recording: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The events applied during the recording, each with the tool calls made before it."""
    steps = ((recording or {}).get("trajectory") or {}).get("steps") or []
    events, calls = [], 0
    for step in steps:
        calls += step.get("kind") == "tool_call"
        if step.get("kind") == "event":
            events.append({"after_step": calls, "event": step.get("event")})
    return events


def compared_paths(verdict: dict[str, Any]) -> list[dict[str, Any]]:
    """State evaluators' details rows ({path, expected, actual, matched}); empty for others."""
    details = verdict.get("details")
    if isinstance(details, list) and all(isinstance(row, dict) and "path" in row for row in details):
        return details
    return []


def outcome_counts(verdicts: pd.DataFrame) -> dict[str, dict[str, int]]:
    """criterion -> {PASS, FAIL, MISSING, EXCLUDED} counts, for metadata and reports, the
    criteria in the order they first appear (counted by pandas, not row by row in Python: a
    run's metadata and summary count every verdict of the version)."""
    sizes = verdicts[["criterion", "outcome"]].groupby(["criterion", "outcome"], sort=False, dropna=False).size()
    counts: dict[str | None, dict[str, int]] = {}
    for (criterion, outcome), size in sizes.items():
        counts.setdefault(None if pd.isna(criterion) else criterion, {})[outcome] = int(size)
    return {criterion: {outcome: tally.get(outcome, 0) for outcome in OUTCOMES} for criterion, tally in counts.items()}


def stored_outcome_counts(verdicts: StoredTable) -> dict[str, dict[str, int]]:
    """`outcome_counts` of a stored verdicts table, read a row group at a time: a version of
    100,000 source cases has 1.8 million verdicts, whose two columns alone are most of a
    run's memory when held whole."""
    counts: dict[str | None, dict[str, int]] = {}
    for group in verdicts.row_groups().each(["criterion", "outcome"]):
        for criterion, tally in outcome_counts(group.to_pandas()).items():
            total = counts.setdefault(criterion, dict.fromkeys(OUTCOMES, 0))
            for outcome, count in tally.items():
                total[outcome] += count
    return counts


def replay_rows(fault_replays: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The `fault_replays` table as plain rows (trajectories parsed)."""
    return _rows(fault_replays, FAULT_REPLAY_NESTED)


def load_replays(project_root: Path, version: str) -> list[dict[str, Any]]:
    """A version's stored fault replays (none when it has no fault plan)."""
    return replay_rows(read_table(project_root, "fault_replays", version))
