"""What each asset shows on its page in Dagster, built from what the core returned."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
from dagster import MetadataValue

from ..decide.slices import SliceRow, slices_markdown
from ..decide.trials import CriterionTrials, trials_markdown
from ..decide.validity import TransformValidity, validity_markdown
from ..decide.version_gate import VersionGate
from ..model.config import Project
from ..read.results import outcome_counts
from ..store import tables
from ..store.assembly import AssembledTable
from ..store.reuse import Reuse
from ..store.tables import model_usage_totals, rows_from_frame
from .metadata import outcomes_table, rule_numbers, rules_summary, value_counts


def why(reasons: list[str]) -> dict:
    """Why anything ran again: one line per reason (`oloproof run` prints them too)."""
    return {"why": MetadataValue.json(reasons)}


def trial_metadata(project: Project, trial_frame: pd.DataFrame | None, counts: dict) -> dict:
    """The number of trials and the counts of trials 2..k (nothing with one trial)."""
    if trial_frame is None:
        return {}
    return {"trials": project.config.execution.trials, **counts, "trial_rows": len(trial_frame)}


def trials_metadata(trials: list[CriterionTrials]) -> dict:
    """pass^k, pass@1 and the flaky cases per criterion, small enough for the asset's page."""
    return {
        "trials_summary": MetadataValue.md(trials_markdown(trials)),
        "flaky_cases": MetadataValue.json({
            each.criterion: {"count": each.flaky_cases, "flips": {case.case_id: case.flips for case in each.flaky}}
            for each in trials if each.flaky_cases
        }),
    }


def copies_metadata(table: AssembledTable, validity: dict[str, TransformValidity], label_summaries: list | None) -> dict:
    """`label_summaries` is None when the stored copies were reused."""
    labels = {} if label_summaries is None else {"labels": MetadataValue.json([summary.model_dump() for summary in label_summaries])}
    return {
        "dagster/row_count": len(table),
        "copies_reused": not labels,
        "validity": MetadataValue.md(validity_markdown(validity)),
        "validity_by_transform": MetadataValue.json({name: item.model_dump() for name, item in validity.items()}),
        **labels,
        "transforms_not_checked": ", ".join(name for name, item in validity.items() if not item.checked) or "none",
    }


def recording_metadata(project: Project, frame: pd.DataFrame, summary, trial_frame: pd.DataFrame | None, trial_summary) -> dict:
    return {
        "dagster/row_count": len(frame),
        **summary.as_metadata(),
        **why(summary.reasons() + trial_summary.reasons("trial recording")),
        "status": MetadataValue.json(value_counts(frame, "status")),
        **trial_metadata(project, trial_frame, trial_summary.as_metadata("trial_runs")),
        # A chat agent's cost for the version: model calls, tokens, latency (summed).
        **model_usage_totals(frame),
    }


def replay_metadata(frame: pd.DataFrame, summary) -> dict:
    return {
        "dagster/row_count": len(frame),
        **summary.as_metadata(),
        **why(summary.reasons()),
        "outcome_counts": MetadataValue.json(outcome_counts(frame)),
    }


def verdict_metadata(project: Project, frame: pd.DataFrame, summary, trial_frame: pd.DataFrame | None, trial_summary) -> dict:
    return {
        "outcomes": outcomes_table(outcome_counts(frame)),
        "dagster/row_count": len(frame),
        **summary.as_metadata(trial_summary),
        "verdicts_judged_by_criterion": MetadataValue.json(dict(summary.judged_by_criterion)),
        **why(summary.reasons() + trial_summary.reasons()),
        **trial_metadata(project, trial_frame, {
            "trial_verdicts_judged": trial_summary.judged, "trial_verdicts_reused": trial_summary.reused,
        }),
    }


def gate_metadata(gate: VersionGate, report: Path, report_written: bool, flags: list[dict[str, Any]] | None) -> dict:
    """No row count: a gate has one row per rule, a constant the Plots view would chart."""
    rules = rows_from_frame(gate.frame, tables.GATE_NESTED)
    reasons = gate.reasons + (["report written: what it shows changed"] if report_written else [])
    return {
        "rules": rules_summary(rules),
        "decision": gate.decision.decision,
        "report": MetadataValue.path(str(Path(report).resolve())),
        "gate_reused": gate.reused,
        **({} if flags is None else {"uncertified_cases_excluded": len({flag["case_id"] for flag in flags})}),
        **why(reasons),
        **rule_numbers(rules),
        **({} if gate.trials is None else trials_metadata(gate.trials)),
    }


def slices_metadata(frame: pd.DataFrame, rows: list[SliceRow], reuse: Reuse) -> dict:
    return {
        "dagster/row_count": len(frame),
        "slices_reused": reuse.reused,
        **why(reuse.reasons),
        "slices": MetadataValue.md(slices_markdown(rows)),
        "buckets_marked_different": sum(bool(row.differs) for row in rows),
    }


def flags_markdown(rows: list[dict]) -> str:
    """The flagged cases as a Markdown table (case, flag, criterion, reason)."""
    if not rows:
        return "No case flagged."
    lines = ["| case | flag | criterion | reason |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {row['case_id']} | {row['flag']} | {row['criterion'] or 'every criterion'} | {row['reason'].replace('|', '/')} |"
        for row in rows
    ]
    return "\n".join(lines)


def certification_metadata(frame: pd.DataFrame, summary, flagged: list[dict]) -> dict:
    return {
        "dagster/row_count": len(frame),
        **summary.as_metadata(),
        "flags": MetadataValue.json(summary.flags),
        "flagged": MetadataValue.md(flags_markdown(flagged)),
    }
