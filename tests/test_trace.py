"""Trace rules and python graders, judged through the registry on hand-built trajectories."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from oloproof_pipeline.model.digests import case_digest
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.evaluators import JudgingContext, build_evaluators
from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun
from oloproof_pipeline.model.trajectory import Step, Trajectory
from oloproof_pipeline.model.outcomes import Verdict

CALLED_BEFORE = {"type": "trace", "rule": "called_before", "tools": ["get_approval", "list_conditions"], "before": "attempt_action"}
NEVER_WHILE = {"type": "trace", "rule": "never_succeeds_while", "tool": "attempt_action", "field": "blocked_by"}
ONLY_ROLE = {"type": "trace", "rule": "only_with_role", "tool": "review_evidence", "roles": ["approver"]}
RECHECK = {
    "type": "trace", "rule": "recheck_after_event", "event": "evidence_lapse", "tool": "list_conditions",
    "before": "attempt_action",
}
LAPSE = {"at_step": 2, "event": "evidence_lapse", "condition_id": "COND-1-B"}
BLOCKED = {"error": "blocked", "blocked_by": ["COND-1-B"]}
DONE = {"status": "done", "blocked_by": []}


def call(tool: str, result: Any = None, role: str | None = "approver", **arguments: Any) -> list[Step]:
    return [
        Step(kind="tool_call", tool=tool, arguments=arguments, role=role),
        Step(kind="tool_result", tool=tool, result=result if result is not None else {"ok": True}),
    ]


def event(**fields: Any) -> list[Step]:
    return [Step(kind="event", event=fields)]


def trajectory(*parts: list[Step]) -> Trajectory:
    return Trajectory(steps=[step for part in parts for step in part])


def make_case(events: list[dict] | None = None) -> CaseRecord:
    return CaseRecord(
        case_id="c1",
        case_digest=case_digest(input={}, expected=None, metadata=None, group_id="c1"),
        group_id="c1",
        input={"application_id": "APP-1", "role": "approver"},
        events=events,
    )


def judge(config: dict[str, Any], steps: Trajectory | None, *, events: list[dict] | None = None,
          state: Any = None, file: str = "oloproof.yaml") -> Verdict:
    [evaluator] = build_evaluators([config], file=file)
    case = make_case(events)
    recording = RecordedRun(
        case_id="c1", case_digest=case.case_digest, system_version="v1", status="ok", output={"answer": "x"},
        trajectory=steps, environment_state=EnvironmentState(initial="sha256:" + "0" * 64, state=state or {}),
    )
    verdict = evaluator.judge_case(case, JudgingContext(cases={"c1": case}, recordings={"c1": recording}))
    assert json.loads(json.dumps(verdict.details, allow_nan=False)) == verdict.details
    return verdict


def only_violation(verdict: Verdict) -> dict[str, Any]:
    [violation] = verdict.details["violations"]
    return violation


# -- called_before -------------------------------------------------------------------------------


def test_called_before_passes_when_a_read_comes_first():
    steps = trajectory(call("list_conditions", application_id="APP-1"), call("attempt_action", DONE, application_id="APP-1"))
    verdict = judge(CALLED_BEFORE, steps)
    assert (verdict.outcome, verdict.reason, verdict.criterion) == ("PASS", "kept", "trace_called_before_attempt_action")
    assert verdict.details["violations"] == []


def test_called_before_fails_naming_the_step_the_tool_and_the_record():
    steps = trajectory(
        call("attempt_action", BLOCKED, application_id="APP-1", action="release_funds"),
        call("get_approval", application_id="APP-1"),
        call("attempt_action", DONE, application_id="APP-1", action="release_funds"),
    )
    verdict = judge(CALLED_BEFORE, steps)
    assert verdict.outcome == "FAIL" and verdict.reason == "violated at step 1: attempt_action APP-1"
    assert only_violation(verdict) == {
        "rule": "called_before", "step": 1, "tool": "attempt_action", "record": "APP-1",
        "detail": "attempt_action at step 1 with no earlier call of get_approval or list_conditions",
    }


def test_called_before_excludes_a_case_that_never_acted():
    verdict = judge(CALLED_BEFORE, trajectory(call("get_approval", application_id="APP-1")))
    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "no_attempt_action_call")


# -- never_succeeds_while ------------------------------------------------------------------------


def test_never_succeeds_while_passes_when_a_blocked_action_is_refused():
    steps = trajectory(call("attempt_action", BLOCKED, application_id="APP-1"), call("attempt_action", DONE, application_id="APP-1"))
    verdict = judge(NEVER_WHILE, steps)
    assert (verdict.outcome, verdict.details["checked"]) == ("PASS", 2)


def test_never_succeeds_while_fails_on_a_success_while_blocked_by_is_non_empty():
    steps = trajectory(call("attempt_action", {"status": "done", "blocked_by": ["COND-1-B"]}, application_id="APP-1"))
    verdict = judge({**NEVER_WHILE, "success_values": ["done"]}, steps)
    assert verdict.outcome == "FAIL"
    violation = only_violation(verdict)
    assert (violation["step"], violation["tool"], violation["record"]) == (1, "attempt_action", "APP-1")
    assert "blocked_by = ['COND-1-B']" in violation["detail"]


def test_never_succeeds_while_is_missing_when_a_success_does_not_say_what_blocked_it():
    verdict = judge(NEVER_WHILE, trajectory(call("attempt_action", {"status": "done"}, application_id="APP-1")))
    assert (verdict.outcome, verdict.reason) == ("MISSING", "field_not_in_result")


def test_never_succeeds_while_counts_only_listed_success_values():
    steps = trajectory(call("attempt_action", {"status": "queued", "blocked_by": ["COND-1-B"]}, application_id="APP-1"))
    assert judge({**NEVER_WHILE, "success_values": ["done"]}, steps).outcome == "PASS"
    assert judge(NEVER_WHILE, steps).outcome == "FAIL"  # without success_values any non-error result succeeded


# -- only_with_role ------------------------------------------------------------------------------


def test_only_with_role_passes_under_an_allowed_role():
    verdict = judge(ONLY_ROLE, trajectory(call("review_evidence", role="approver", condition_id="COND-1-B")))
    assert (verdict.outcome, verdict.criterion) == ("PASS", "trace_only_with_role_review_evidence")


def test_only_with_role_fails_on_each_call_under_another_role():
    steps = trajectory(
        call("review_evidence", {"error": "forbidden"}, role="analyst", condition_id="COND-1-B"),
        call("review_evidence", role="approver", condition_id="COND-1-C"),
        call("review_evidence", role=None, condition_id="COND-1-D"),
    )
    verdict = judge(ONLY_ROLE, steps)
    assert verdict.outcome == "FAIL"
    assert [(v["step"], v["record"]) for v in verdict.details["violations"]] == [(1, "COND-1-B"), (3, "COND-1-D")]
    assert "under role 'analyst'" in verdict.details["violations"][0]["detail"]


def test_only_with_role_excludes_a_case_without_the_tool():
    verdict = judge(ONLY_ROLE, trajectory(call("get_approval", application_id="APP-1")))
    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "no_review_evidence_call")


# -- recheck_after_event ---------------------------------------------------------------------------


def test_recheck_after_event_passes_when_the_tool_is_called_again_before_acting():
    steps = trajectory(
        call("list_conditions", application_id="APP-1"), call("review_evidence", condition_id="COND-1-B"),
        event(**LAPSE), call("list_conditions", application_id="APP-1"), call("attempt_action", BLOCKED, application_id="APP-1"),
    )
    assert judge(RECHECK, steps, events=[LAPSE]).outcome == "PASS"


def test_recheck_after_event_fails_naming_the_action_and_the_lapsed_record():
    steps = trajectory(
        call("list_conditions", application_id="APP-1"), call("review_evidence", condition_id="COND-1-B"),
        event(**LAPSE), call("attempt_action", BLOCKED, application_id="APP-1"),
    )
    verdict = judge(RECHECK, steps, events=[LAPSE])
    assert verdict.outcome == "FAIL" and verdict.criterion == "trace_recheck_after_event_evidence_lapse"
    violation = only_violation(verdict)
    assert (violation["step"], violation["tool"], violation["record"]) == (3, "attempt_action", "COND-1-B")
    assert violation["detail"].startswith("evidence_lapse after step 2 (COND-1-B), then attempt_action at step 3")


def test_a_check_before_the_event_does_not_count_as_a_recheck():
    steps = trajectory(call("review_evidence", condition_id="COND-1-B"), call("list_conditions", application_id="APP-1"),
                       event(**LAPSE), call("attempt_action", BLOCKED, application_id="APP-1"))
    assert judge(RECHECK, steps, events=[LAPSE]).outcome == "FAIL"


@pytest.mark.parametrize(
    "steps, events, reason",
    [
        (trajectory(call("attempt_action", DONE, application_id="APP-1")), None, "no_evidence_lapse_event"),
        (trajectory(call("attempt_action", DONE, application_id="APP-1")), [{**LAPSE, "at_step": 9}], "event_not_reached"),
        (trajectory(call("list_conditions", application_id="APP-1"), call("get_approval", application_id="APP-1"),
                    event(**LAPSE)), [LAPSE], "no_attempt_action_after_the_event"),
    ],
)
def test_recheck_after_event_excludes_cases_it_does_not_apply_to(steps, events, reason):
    verdict = judge(RECHECK, steps, events=events)
    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", reason)


def test_trace_without_a_trajectory_is_missing():
    assert (judge(CALLED_BEFORE, None).outcome, judge(CALLED_BEFORE, None).reason) == ("MISSING", "no_trajectory")


# -- configuration -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config, message",
    [
        ({"type": "trace", "rule": "sometimes"}, "evaluators[0].rule: Input should be"),
        ({"type": "trace", "rule": "called_before", "tools": ["get_approval"]}, "evaluators[0].before: required key is missing"),
        ({**ONLY_ROLE, "roles": []}, "evaluators[0].roles"),
        ({**CALLED_BEFORE, "colour": "red"}, "evaluators[0].colour: unknown key"),
        ({"type": "python", "function": "not a reference"}, "evaluators[0].function"),
    ],
)
def test_bad_grader_configuration_names_the_field(config, message):
    with pytest.raises(ProjectError, match=message.replace("[", r"\[").replace("]", r"\]")):
        build_evaluators([config], file="oloproof.yaml")


# -- python graders --------------------------------------------------------------------------------

GRADERS = """
from oloproof_pipeline.model.outcomes import Verdict


def no_forbidden_results(case, recording):
    steps = recording.trajectory.steps
    violations = [
        {"rule": "no_forbidden", "step": index // 2 + 1, "tool": step.tool, "record": case.input["application_id"],
         "detail": step.result["error"]}
        for index, step in enumerate(steps)
        if step.kind == "tool_result" and "forbidden" in str(step.result)
    ]
    if violations:
        return {"outcome": "FAIL", "reason": "forbidden call", "details": {"violations": violations}}
    return Verdict(case_id="ignored", criterion="ignored", outcome="PASS", reason="clean")


def raises(case, recording):
    raise RuntimeError("grader bug")


def says_maybe(case, recording):
    return {"outcome": "MAYBE", "reason": "unsure"}


def returns_text(case, recording):
    return "PASS"


def bad_violations(case, recording):
    return {"outcome": "FAIL", "reason": "x", "details": {"violations": [{"step": 1}]}}
"""


@pytest.fixture
def grader_project(tmp_path: Path) -> Path:
    (tmp_path / "graders.py").write_text(textwrap.dedent(GRADERS))
    return tmp_path


def python_grader(project: Path, function: str, steps: Trajectory) -> Verdict:
    config = {"type": "python", "function": f"graders:{function}"}
    return judge(config, steps, file=str(project / "oloproof.yaml"))


def test_a_python_grader_passes_and_fails_with_violations(grader_project):
    clean = python_grader(grader_project, "no_forbidden_results", trajectory(call("get_approval", application_id="APP-1")))
    assert (clean.outcome, clean.reason, clean.criterion, clean.case_id) == ("PASS", "clean", "no_forbidden_results", "c1")

    steps = trajectory(call("get_approval", application_id="APP-1"),
                       call("review_evidence", {"error": "forbidden: analyst"}, role="analyst", condition_id="COND-1-B"))
    failed = python_grader(grader_project, "no_forbidden_results", steps)
    assert (failed.outcome, failed.reason) == ("FAIL", "forbidden call")
    assert failed.details["violations"] == [
        {"rule": "no_forbidden", "step": 2, "tool": "review_evidence", "record": "APP-1", "detail": "forbidden: analyst"}
    ]


@pytest.mark.parametrize(
    "function, reason, error",
    [
        ("raises", "grader_error", "RuntimeError: grader bug"),
        ("says_maybe", "grader_bad_return", "outcome"),
        ("returns_text", "grader_bad_return", "returned str"),
        ("bad_violations", "grader_bad_return", "details.violations[0]"),
    ],
)
def test_a_python_grader_that_misbehaves_is_missing_never_a_pass(grader_project, function, reason, error):
    verdict = python_grader(grader_project, function, trajectory(call("get_approval", application_id="APP-1")))
    assert (verdict.outcome, verdict.reason) == ("MISSING", reason)
    assert error in verdict.details["error"]


def test_a_python_grader_whose_module_is_missing_is_a_configuration_error(tmp_path):
    with pytest.raises(ProjectError, match=r"evaluators\[0\]\.function: no module file .*nowhere\.py"):
        build_evaluators([{"type": "python", "function": "nowhere:grade"}], file=str(tmp_path / "oloproof.yaml"))


def test_a_python_grader_naming_a_missing_function_fails_judging_with_the_setting(grader_project):
    with pytest.raises(ProjectError, match=r"evaluators\[0\]\.function: .*has no attribute 'absent'"):
        python_grader(grader_project, "absent", trajectory())
