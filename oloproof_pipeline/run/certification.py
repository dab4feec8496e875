"""Case certification: is each case one that can tell a good agent from a bad one?

Per case (the `case_certification` table, one row per case with its flags):
- a do-nothing run (the starting state left as it is, an empty answer) judged by every
  state_matches criterion: a case that passes one this way tests nothing for it
  (`passes_when_nothing_is_done`). `state_unchanged` is left out: doing nothing is what it
  asks for, so passing it by doing nothing says nothing about the case;
- a reference run where the case has `expected.actions` (the tool calls a correct agent
  makes), played through the system's tool box against its reset sandbox and judged by the
  state, trace and python criteria, or else where the project names a `reference` callable
  (a correct agent; its answer is judged too): any FAIL means the case is broken
  (`reference_fails`). Actions answer nothing, so criteria reading the answer judge them only
  where the case gives the output they end with (`expected.output`);
- a copy whose transformed field, compared without case and spacing, still reads as its
  source's (`copy_leaves_field_unchanged`); a source no criterion judges on its reference
  (or, lacking one, do-nothing) run (`judged_by_no_criterion`); sources with one input and
  starting state but different expectations (`same_input_different_expected`).

Reference runs are the only part that runs the system; each is kept while its case digest and
the system's code hold (`reference_key`), so a rerun plays only new or changed cases. The rest
is re-judged every time from stored runs: it is cheap and follows any evaluator change.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import pandas as pd

from ..evaluators.base import Evaluator, JudgingContext
from ..model.cases import CaseRecord
from ..model.config import Project
from ..model.digests import canonical_json, state_digest
from ..model.fingerprints import file_digest, row_key, system_code_fingerprint
from ..model.modules import module_file_of
from ..model.outcomes import (
    COPY_LEAVES_FIELD_UNCHANGED,
    EXCLUDED,
    FAIL,
    JUDGED_BY_NO_CRITERION,
    PASS,
    PASSES_WHEN_NOTHING_IS_DONE,
    REFERENCE_FAILS,
    SAME_INPUT_DIFFERENT_EXPECTED,
)
from ..model.paths import ABSENT, read_path
from ..model.records import EnvironmentState, RecordedRun
from ..store.journal import sandbox_lock
from ..store.tables import CERTIFICATION_NESTED, CERTIFICATION_SCHEMA, frame_from_rows, rows_from_frame
from .reference import answers_after_actions, reference_actions, reference_input
from .sandboxes import record_each
from .spec import SandboxSettings
from .system import system_spec

# The version a do-nothing or reference run is filed under: it is no version of the system.
CERTIFICATION_RUN = "certification"


@dataclass
class CertificationSummary:
    """What a certification did: reference runs played now and reused, cases flagged."""

    played: int = 0
    reused: int = 0
    flagged: int = 0
    flags: dict[str, int] = field(default_factory=dict)

    def as_metadata(self) -> dict[str, int]:
        return {"references_played": self.played, "references_reused": self.reused, "cases_flagged": self.flagged}


def flag(name: str, reason: str, criterion: str | None = None) -> dict[str, Any]:
    """One flag on a case: its name, the criterion it concerns (None: the whole case), why."""
    return {"flag": name, "criterion": criterion, "reason": reason}


# -- the runs ---------------------------------------------------------------------------------


def do_nothing_run(case: CaseRecord) -> RecordedRun:
    """What an agent that does nothing leaves: the starting state untouched, an empty answer."""
    state = case.initial_state or {}
    return RecordedRun(
        case_id=case.case_id, case_digest=case.case_digest, system_version=CERTIFICATION_RUN, status="ok",
        output={}, environment_state=EnvironmentState(initial=state_digest(state), state=state),
    )


def reference_case(case: CaseRecord, project: Project) -> CaseRecord | None:
    """The case as its reference run plays it (its actions, else the project's `reference`,
    in the input), or None when it has neither."""
    actions = reference_actions(case.expected)
    if actions is None and project.config.reference is None:
        return None
    return case.model_copy(update={"input": reference_input(case.input, actions, case.expected)})


def reference_answers(case: CaseRecord) -> bool:
    """Whether the case's reference gives an answer: the project's callable does, and its
    actions do when the case gives the output they end with (`expected.output`)."""
    return reference_actions(case.expected) is None or answers_after_actions(case.expected)


def reference_key(case: CaseRecord, code_digest: str) -> str:
    return row_key("reference", case.case_digest, code_digest)


def references_digest(project: Project) -> str:
    """The system's code and, when the project names one, the reference callable's module."""
    code = system_code_fingerprint(project).digest
    if project.config.reference is None:
        return code
    module = module_file_of(project.root, project.config.reference)
    return row_key(code, project.config.reference, file_digest(module) if module.is_file() else None)


def play_references(project: Project, cases: list[CaseRecord], *, timeout_s: float) -> dict[str, RecordedRun]:
    """case id -> its reference run, each played in a supervised sandbox of the system."""
    if not cases:
        return {}
    spec = system_spec(project)
    spec = type(spec)(**{**spec.as_json(), "plays_references": True, "reference": project.config.reference})
    with sandbox_lock(project.root):
        settings = SandboxSettings(spec, CERTIFICATION_RUN, timeout_s, checks_version=False)
        return {run.case_id: run for run in record_each(settings, cases)}


# -- judging them -----------------------------------------------------------------------------


def judged(evaluators: Iterable[Evaluator], case: CaseRecord, run: RecordedRun) -> list[Any]:
    """The verdicts of `evaluators` on one run of `case` (no replays: none exist for it)."""
    context = JudgingContext(cases={case.case_id: case}, recordings={case.case_id: run})
    return [evaluator.judge_case(case, context) for evaluator in evaluators]


def do_nothing_flags(project: Project, case: CaseRecord, nothing: RecordedRun) -> list[dict[str, Any]]:
    state_checks = [evaluator for evaluator in project.evaluators if evaluator.expects_state]
    return [
        flag(
            PASSES_WHEN_NOTHING_IS_DONE,
            f"an agent that does nothing passes {verdict.criterion}: the expected state already holds at the start",
            verdict.criterion,
        )
        for verdict in judged(state_checks, case, nothing)
        if verdict.outcome == PASS
    ]


def reference_flags(project: Project, case: CaseRecord, reference: RecordedRun) -> list[dict[str, Any]]:
    if reference.status != "ok":
        return [flag(REFERENCE_FAILS, f"the reference run ended {reference.status}: {reference.error}")]
    judges = [evaluator for evaluator in project.evaluators if judges_reference(evaluator, case)]
    return [
        flag(
            REFERENCE_FAILS,
            f"the reference actions fail {evaluator.criterion}: {verdict.reason}{_detail(verdict.details)}{_no_answer(evaluator, case)}",
            verdict.criterion,
        )
        for evaluator, verdict in zip(judges, judged(judges, case, reference))
        if verdict.outcome == FAIL
    ]


def _no_answer(evaluator: Evaluator, case: CaseRecord) -> str:
    """A hint where a criterion reading the answer fails a reference that gave none."""
    if evaluator.reads_answer and not reference_answers(case):
        return " (the reference actions give no answer: give the output they end with as expected.output)"
    return ""


def judges_reference(evaluator: Evaluator, case: CaseRecord) -> bool:
    """Whether `evaluator` judges the case's reference run: by the world and the calls it
    leaves; and by its answer too when the reference gives one (`reference_answers`)."""
    if evaluator.pair_driven or evaluator.replay_driven:
        return False
    return evaluator.reads_state or evaluator.reads_trace or (evaluator.reads_answer and reference_answers(case))


def _detail(details: Any) -> str:
    """What the first differing path of a state verdict (named in its reason) holds: `: expected X, got Y`."""
    rows = details.get("paths") if isinstance(details, dict) else details if isinstance(details, list) else None
    for row in rows or []:
        if isinstance(row, dict) and row.get("matched") is False:
            return f": expected {json.dumps(row.get('expected'))}, got {json.dumps(row.get('actual'))}"
    return ""


def unjudged_flags(project: Project, case: CaseRecord, run: RecordedRun, which: str) -> list[dict[str, Any]]:
    """A source every criterion excludes, on its reference run (or its do-nothing run)."""
    judges = [evaluator for evaluator in project.evaluators if not (evaluator.pair_driven or evaluator.replay_driven)]
    verdicts = judged(judges, case, run)
    if verdicts and all(verdict.outcome == EXCLUDED for verdict in verdicts):
        reasons = sorted({f"{verdict.criterion}: {verdict.reason}" for verdict in verdicts})
        return [flag(JUDGED_BY_NO_CRITERION, f"on its {which} run every criterion excludes it ({'; '.join(reasons)})")]
    return []


def copy_flags(project: Project, copy: CaseRecord, source: CaseRecord | None) -> list[dict[str, Any]]:
    """A copy whose transformed field reads as its source's once case and spacing are ignored."""
    transform = next((item for item in project.config.metamorphic.transforms if item.name == copy.transform), None)
    if source is None or transform is None:
        return []
    ours, theirs = read_path(copy.input, transform.field), read_path(source.input, transform.field)
    if ours is ABSENT or theirs is ABSENT or _plain_text(ours) != _plain_text(theirs):
        return []
    return [flag(
        COPY_LEAVES_FIELD_UNCHANGED,
        f"transform {transform.name} changes only case or spacing of input.{transform.field}: the copy asks what {source.case_id} asks",
    )]


def _plain_text(value: Any) -> Any:
    return " ".join(value.casefold().split()) if isinstance(value, str) else value


def duplicate_flags(sources: list[CaseRecord]) -> dict[str, list[dict[str, Any]]]:
    """case id -> flags, for sources sharing an input and starting state but not expectations."""
    by_request: dict[str, list[CaseRecord]] = defaultdict(list)
    for case in sources:
        # Scripted events are part of the world the request meets: with other events it is another case.
        request = {"input": case.input, "initial_state": case.initial_state, "events": case.events}
        by_request[canonical_json(request)].append(case)
    flags: dict[str, list[dict[str, Any]]] = {}
    for same in by_request.values():
        expectations = {canonical_json(_checked_expectation(case.expected)) for case in same}
        if len(expectations) < 2:
            continue
        for case in same:
            others = ", ".join(other.case_id for other in same if other is not case)
            flags[case.case_id] = [flag(
                SAME_INPUT_DIFFERENT_EXPECTED,
                f"the same input, starting state and events as {others}, with a different expected answer or state",
            )]
    return flags


def _checked_expectation(expected: dict[str, Any] | None) -> dict[str, Any]:
    """What the criteria check of `expected`: the reference actions and the output they end
    with are a way there, not it."""
    return {key: value for key, value in (expected or {}).items() if key not in ("actions", "output")}


# -- the table --------------------------------------------------------------------------------


def certify_cases(
    project: Project,
    cases: list[CaseRecord],
    stored: pd.DataFrame | None = None,
    *,
    certified_by_run: str | None = None,
    play: Callable[[Project, list[CaseRecord]], dict[str, RecordedRun]] | None = None,
) -> tuple[pd.DataFrame, CertificationSummary]:
    """The `case_certification` table for `cases` (sources and copies): one row per case with
    its flags. Stored reference runs whose key still holds are reused, the rest played now."""
    code_digest = references_digest(project)
    references, to_play, problems = _plan_references(project, cases, _stored_references(stored), code_digest)
    summary = CertificationSummary(reused=len(references), played=len(to_play))
    timeout_s = project.config.execution.timeout_s
    references.update((play or (lambda p, c: play_references(p, c, timeout_s=timeout_s)))(project, to_play))

    by_id = {case.case_id: case for case in cases}
    duplicates = duplicate_flags([case for case in cases if not case.is_derived])
    rows = []
    for case in cases:
        flags, reference = _case_flags(project, case, by_id, references, duplicates, problems)
        if flags:
            summary.flagged += 1
            for item in flags:
                summary.flags[item["flag"]] = summary.flags.get(item["flag"], 0) + 1
        rows.append({
            "case_id": case.case_id,
            "case_digest": case.case_digest,
            "source_id": case.source_id,
            "certified": not flags,
            "flags": flags,
            "has_reference": reference is not None,
            "reference_status": reference.status if reference is not None else None,
            "reference_run": reference.model_dump(mode="json") if reference is not None else None,
            "reference_key": reference_key(case, code_digest) if reference is not None else None,
            "certified_by_run": certified_by_run,
        })
    return frame_from_rows(rows, CERTIFICATION_SCHEMA, CERTIFICATION_NESTED), summary


def _case_flags(
    project: Project,
    case: CaseRecord,
    by_id: dict[str, CaseRecord],
    references: dict[str, RecordedRun],
    duplicates: dict[str, list[dict[str, Any]]],
    problems: dict[str, str],
) -> tuple[list[dict[str, Any]], RecordedRun | None]:
    if case.is_derived:
        return copy_flags(project, case, by_id.get(case.source_id or "")), None
    flags: list[dict[str, Any]] = []
    if case.case_id in problems:
        flags.append(flag(REFERENCE_FAILS, f"its reference cannot be played: {problems[case.case_id]}"))
    nothing = do_nothing_run(case)
    flags += do_nothing_flags(project, case, nothing)
    reference = references.get(case.case_id)
    if reference is not None:
        flags += reference_flags(project, case, reference)
    if reference is None or reference.status == "ok":
        flags += unjudged_flags(project, case, reference or nothing, "reference" if reference else "do-nothing")
    flags += duplicates.get(case.case_id, [])
    return flags, reference


def _plan_references(
    project: Project, cases: list[CaseRecord], kept: dict[tuple[str, str], RecordedRun], code_digest: str
) -> tuple[dict[str, RecordedRun], list[CaseRecord], dict[str, str]]:
    """The stored reference runs still valid (by case id), the references to play now, and
    the cases whose `expected.actions` cannot be read (case id -> why)."""
    references: dict[str, RecordedRun] = {}
    to_play: list[CaseRecord] = []
    problems: dict[str, str] = {}
    for case in cases:
        if case.is_derived:
            continue
        try:
            played_as = reference_case(case, project)
        except ValueError as error:
            problems[case.case_id] = f"{case.file}:{case.line}: {error}" if case.file else str(error)
            continue
        if played_as is None:
            continue
        previous = kept.get((case.case_id, reference_key(case, code_digest)))
        if previous is not None:
            references[case.case_id] = previous
        else:
            to_play.append(played_as)
    return references, to_play, problems


def _stored_references(stored: pd.DataFrame | None) -> dict[tuple[str, str], RecordedRun]:
    """(case id, reference key) -> the stored reference run (tables without one give none)."""
    if stored is None or "reference_key" not in stored.columns or not len(stored):
        return {}
    return {
        (row["case_id"], row["reference_key"]): RecordedRun.model_validate(row["reference_run"])
        for row in rows_from_frame(stored, CERTIFICATION_NESTED)
        if row.get("reference_key") and row.get("reference_run")
    }


def flagged_rows(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """One row per flag of the table: case id, source id, flag, criterion, reason."""
    return [
        {"case_id": row["case_id"], "source_id": row["source_id"], **item}
        for row in rows_from_frame(frame, CERTIFICATION_NESTED)
        for item in row["flags"] or []
    ]


def certification_summary_line(frame: pd.DataFrame) -> str:
    """`certified 70 of 72 cases; 2 flagged (reference_fails 1, passes_when_nothing_is_done 1); 23 references`."""
    rows = flagged_rows(frame)
    counts: dict[str, int] = defaultdict(int)
    for row in rows:
        counts[row["flag"]] += 1
    flagged_cases = len({row["case_id"] for row in rows})
    parts = ", ".join(f"{name} {count}" for name, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])))
    references = int(frame["has_reference"].fillna(False).sum()) if len(frame) else 0
    return (
        f"certified {len(frame) - flagged_cases} of {len(frame)} cases; {flagged_cases} flagged"
        + (f" ({parts})" if parts else "") + f"; {references} with a reference run"
    )
