"""The gate of one version, from its stored tables: decided again only when what it is
decided from changed (the verdicts, the copies' labels, the later trials, the policy)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..model.config import Project
from ..store.reuse import stored_if_digest
from ..store.stored import StoredTable
from .certification import decide_certified_gate, exclude_uncertified
from .gate import (
    GATED_TRIAL_COLUMNS,
    GATED_VERDICT_COLUMNS,
    VALIDITY_COLUMNS,
    GateDecision,
    decide_release_gate,
    gate_from_table,
    gate_inputs_digest,
    gate_table,
)
from .trials import CriterionTrials, project_trial_summaries


@dataclass(frozen=True)
class VersionGate:
    """A version's gate: its table (stored or decided now), the decision it holds, whether
    it was reused and why not, and the trial summaries decided alongside (None with one trial)."""

    frame: pd.DataFrame
    decision: GateDecision
    reused: bool
    reasons: list[str]
    trials: list[CriterionTrials] | None


def stored_trial_verdicts(project: Project, table: StoredTable) -> pd.DataFrame | None:
    """The verdicts of trials 2..k the gate reads (None with one trial)."""
    if project.config.execution.trials == 1:
        return None
    table = table.readable("the gate is decided from trial 1 alone")
    return table.columns(*GATED_TRIAL_COLUMNS) if table.exists else None


def gate_of_version(
    project: Project, stored: dict[str, StoredTable], version: str, *, run_id: str, flags: list[dict[str, Any]] | None
) -> VersionGate:
    """The gate over the version's stored verdicts (`stored` as `store.reuse.stored_tables`
    gives them); `flags` are the certification's when the policy requires certified cases."""
    validity = stored["derived_cases"].columns(*VALIDITY_COLUMNS) if stored["derived_cases"].exists else None
    gated = stored["verdicts"].columns(*GATED_VERDICT_COLUMNS, "case_id")
    later_trials = stored_trial_verdicts(project, stored["trial_verdicts"])
    inputs_digest = gate_inputs_digest(
        project, gated if flags is None else exclude_uncertified(gated, flags)[0], validity, later_trials
    )
    stored_gate = stored_if_digest(
        stored["gate"], inputs_digest, table="gate", made="gate decided", again_because="its verdicts, labels or release policy changed"
    )
    if stored_gate.frame is not None:
        frame, decision = stored_gate.frame, gate_from_table(stored_gate.frame)
    else:
        decision = (
            decide_release_gate(project, gated, validity, later_trials) if flags is None
            else decide_certified_gate(project, gated, validity, flags, later_trials)
        )
        frame = gate_table(decision, version=version, judged_by_run=run_id, inputs_digest=inputs_digest)
    return VersionGate(
        frame=frame, decision=decision, reused=stored_gate.reused, reasons=stored_gate.reasons,
        trials=project_trial_summaries(project, gated, later_trials),
    )
