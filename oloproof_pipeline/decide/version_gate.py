"""The gate of one version, from its stored tables: decided again only when what it is
decided from changed (the verdicts, the copies' labels, the later trials, the policy)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pandas as pd

from ..model.config import Project
from ..model.fingerprints import frame_digest
from ..model.outcomes import FAIL
from ..store.reuse import stored_if_digest
from ..store.stored import StoredTable
from .certification import decide_certified_gate, exclude_uncertified, excluded_flags
from .gate import (
    GATED_TRIAL_COLUMNS,
    GATED_VERDICT_COLUMNS,
    VALIDITY_COLUMNS,
    GateDecision,
    Verdicts,
    decide_gate,
    decide_release_gate,
    gate_from_table,
    gate_inputs_digest,
    gate_table,
    verdict_parts,
)
from .trials import CriterionTrials, project_trial_summaries

# The stored certification (run/certification.py writes it), and the reason a rule gains when
# some of its FAILs fall on cases it flagged.
CERTIFICATION_TABLE = "case_certification"
FLAGGED_FAILURES = "fails_on_flagged_cases"


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
    later_trials = stored_trial_verdicts(project, stored["trial_verdicts"])
    # Without require_certified_cases a flagged case still counts; its FAILs are named.
    noted = stored_flags(project) if flags is None else []
    if flags is None and later_trials is None:
        gated: Verdicts = stored["verdicts"]  # read a row group at a time: its columns are never all held
    else:
        gated = stored["verdicts"].columns(*GATED_VERDICT_COLUMNS, "case_id")
        stored["verdicts"].forget()  # held by `gated` alone, so let go of once the gate is decided
    inputs_digest = gate_inputs_digest(
        project, gated if flags is None else exclude_uncertified(gated, flags)[0], validity, later_trials
    )
    if noted:
        inputs_digest = frame_digest("gate_flagged/v1", pd.DataFrame(noted), {"gate": inputs_digest}, producer="decisions")
    stored_gate = stored_if_digest(
        stored["gate"], inputs_digest, table="gate", made="gate decided", again_because="its verdicts, labels or release policy changed"
    )
    if stored_gate.frame is not None:
        frame, decision = stored_gate.frame, gate_from_table(stored_gate.frame)
    else:
        decision = (
            note_flagged_failures(decide_release_gate(project, gated, validity, later_trials), gated, noted) if flags is None
            else decide_certified_gate(project, gated, validity, flags, later_trials)
        )
        frame = gate_table(decision, version=version, judged_by_run=run_id, inputs_digest=inputs_digest)
    return VersionGate(
        frame=frame, decision=decision, reused=stored_gate.reused, reasons=stored_gate.reasons,
        trials=None if later_trials is None else project_trial_summaries(project, gated, later_trials),
    )


def stored_flags(project: Project) -> list[dict[str, Any]]:
    """The stored certification's flags (case_id, flag, criterion), none before `certify`."""
    table = StoredTable.at(project.root, CERTIFICATION_TABLE).readable("its flagged cases are not named")
    if not table.exists:
        return []
    rows = table.columns("case_id", "flags")
    return sorted(
        ({"case_id": case_id, "flag": item["flag"], "criterion": item.get("criterion")}
         for case_id, text in zip(rows["case_id"], rows["flags"]) if isinstance(text, str)
         for item in json.loads(text) or []),
        key=lambda item: (item["case_id"], item["flag"], item["criterion"] or ""),
    )


def flagged_failures_reason(failed: list[tuple[str, str]]) -> str:
    """`FAIL on 1 case certification flagged: ord-024 (reference_fails)`."""
    cases = "case" if len(failed) == 1 else "cases"
    return f"{FLAGGED_FAILURES}: FAIL on {len(failed)} {cases} certification flagged: " + ", ".join(
        f"{case_id} ({flag})" for case_id, flag in failed
    )


def note_flagged_failures(gate: GateDecision, verdicts: Verdicts, flags: list[dict[str, Any]]) -> GateDecision:
    """Each rule over a criterion names the FAIL verdicts that fall on cases certification
    flagged as broken (its reference fails, its input repeats with other expectations...): the
    case may be what is wrong, not the agent. They still count, as the policy says. A case that
    doing nothing passes is not broken: an agent failing it did something wrong."""
    if not flags:
        return gate
    by_case = excluded_flags(flags)
    failing = pd.concat(
        [part[part["outcome"] == FAIL] for part in verdict_parts(verdicts, ["criterion", "outcome", "case_id"])], ignore_index=True
    )
    rules = []
    for rule in gate.rules:
        failed = []
        for case_id in failing.loc[failing["criterion"] == rule.metric, "case_id"]:
            flag = by_case.get(case_id, {}).get(None)  # a flag on the case, not on one criterion
            if flag is not None:
                failed.append((case_id, flag))
        rules.append(rule.model_copy(update={"reasons": [*rule.reasons, flagged_failures_reason(failed)]}) if failed else rule)
    return decide_gate(rules)

