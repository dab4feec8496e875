"""A version's stored results, read back from the Parquet tables (no system, no Dagster)."""

from __future__ import annotations

from collections import Counter

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..model.errors import ProjectError
from ..model.outcomes import OUTCOMES
from ..store.layout import read_table, stored_partitions
from ..store.tables import CASE_NESTED, FAULT_REPLAY_NESTED, GATE_NESTED, RUN_NESTED, VERDICT_NESTED, rows_from_frame


@dataclass
class VersionResults:
    """Plain rows by table, for one system version."""

    version: str
    cases: list[dict[str, Any]]
    recorded_runs: list[dict[str, Any]]
    verdicts: list[dict[str, Any]]
    gate: list[dict[str, Any]]
    slices: pd.DataFrame | None

    def case(self, case_id: str) -> dict[str, Any] | None:
        return next((case for case in self.cases if case["case_id"] == case_id), None)

    def recording(self, case_id: str) -> dict[str, Any] | None:
        return next((run for run in self.recorded_runs if run["case_id"] == case_id), None)

    def verdicts_of(self, case_id: str) -> list[dict[str, Any]]:
        return [verdict for verdict in self.verdicts if verdict["case_id"] == case_id]

    @property
    def gate_decision(self) -> str | None:
        return self.gate[0]["gate_decision"] if self.gate else None


def _rows(frame: pd.DataFrame | None, nested: tuple[str, ...]) -> list[dict[str, Any]]:
    return [] if frame is None else rows_from_frame(frame, nested)


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
        cases=_rows(cases, CASE_NESTED) + _rows(derived_cases, CASE_NESTED),
        recorded_runs=_rows(recorded_runs, RUN_NESTED),
        verdicts=rows_from_frame(verdicts, VERDICT_NESTED),
        gate=_rows(gate, GATE_NESTED),
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
    """criterion -> {PASS, FAIL, MISSING, EXCLUDED} counts, for metadata and reports."""
    counts: dict[str, dict[str, int]] = {}
    for criterion, outcome in zip(verdicts["criterion"], verdicts["outcome"]):
        counts.setdefault(criterion, Counter())[outcome] += 1
    return {
        criterion: {outcome: int(tally.get(outcome, 0)) for outcome in OUTCOMES}
        for criterion, tally in counts.items()
    }


def replay_rows(fault_replays: pd.DataFrame | None) -> list[dict[str, Any]]:
    """The `fault_replays` table as plain rows (trajectories parsed)."""
    return _rows(fault_replays, FAULT_REPLAY_NESTED)


def load_replays(project_root: Path, version: str) -> list[dict[str, Any]]:
    """A version's stored fault replays (none when it has no fault plan)."""
    return replay_rows(read_table(project_root, "fault_replays", version))
