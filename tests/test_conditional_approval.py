"""The conditional-approval world: named snapshots with a hash check, scripted mid-run events,
state grading that ignores free text, and the example run through Dagster and the CLI."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pandas as pd
import pytest

from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.evaluators import JudgingContext, judge_all
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun
from oloproof_pipeline.run.runner import SandboxRunner
from oloproof_pipeline.run.system import system_spec
from oloproof_pipeline.model.trajectory import ToolChange
from oloproof_pipeline.model.trajectory import plain_json

from conftest import REPO, write_project
from helpers import oloproof

EXAMPLE = REPO / "example_project" / "conditional_approval"


def runner_for(root: Path) -> tuple:
    project = load_project(root)
    return project, SandboxRunner(system_spec(project).build, system_version="1.0.0", timeout_s=5.0)


# -- named snapshots: the state after reset must hash to the snapshot's ----------------------------

LEAKY_APP = """
import copy

from oloproof_pipeline.toolbox import ToolBox


class System:
    def __init__(self):
        self.state = {"conditions": {}, "notes": []}
        self.toolbox = ToolBox({"add_note": self._add_note})

    def _add_note(self, text):
        self.state["notes"].append({"text": text})
        return {"ok": True}

    def reset(self, state):
        # The bug under test: every table comes from the snapshot except the notes, which stay.
        self.state = {**state, "notes": self.state["notes"]}

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        self.toolbox.call("add_note", text=request["note"])
        return {"answer": "noted"}
"""

SNAPSHOT = {"clock": {"today": "2025-03-14"}, "conditions": {"COND-1-A": {"status": "open"}}, "notes": []}


def snapshot_project(root: Path, app: str, cases: list[dict], snapshot: dict = SNAPSHOT) -> Path:
    write_project(root, app=app, cases=cases)
    (root / "snapshots").mkdir()
    (root / "snapshots" / "snap_APP-1_v1.json").write_text(json.dumps(snapshot))
    return root


def test_a_table_left_behind_by_reset_makes_the_case_missing_naming_the_table(tmp_path):
    cases = [{"id": f"c{n}", "input": {"note": f"note {n}"}, "snapshot": "snap_APP-1_v1",
              "expected": {"state": {"conditions": {"COND-1-A": {"status": "open"}}}}} for n in (1, 2)]
    root = snapshot_project(tmp_path / "p", LEAKY_APP, cases)
    project, runner = runner_for(root)
    loaded = load_cases(project)
    first, second = map(runner.record, loaded)

    assert first.status == "ok"  # the sandbox starts clean
    assert second.status == "reset_not_clean"
    assert "tables that differ: notes" in second.error and "conditions" not in second.error
    assert "snapshot 'snap_APP-1_v1'" in second.error and second.error.count("sha256:") == 2
    context = JudgingContext(cases={case.case_id: case for case in loaded}, recordings={"c1": first, "c2": second})
    verdict = judge_all(project.evaluators, loaded[1:], context)[0]
    assert (verdict.outcome, verdict.reason) == ("MISSING", "run_reset_not_clean")


def test_an_edited_snapshot_is_a_new_case(tmp_path):
    cases = [{"id": "c1", "input": {"note": "x"}, "snapshot": "snap_APP-1_v1"}]
    root = snapshot_project(tmp_path / "p", LEAKY_APP, cases)
    before = load_cases(load_project(root))[0]
    edited = copy.deepcopy(SNAPSHOT)
    edited["conditions"]["COND-1-A"]["status"] = "cleared"
    (root / "snapshots" / "snap_APP-1_v1.json").write_text(json.dumps(edited))
    after = load_cases(load_project(root))[0]
    assert after.initial_state == edited and after.case_digest != before.case_digest


# -- scripted events -------------------------------------------------------------------------------

EVENT_APP = """
import copy

from oloproof_pipeline.toolbox import ToolBox


class System:
    def __init__(self):
        self.state = {}
        self.applied = []
        self.toolbox = ToolBox({"check": self._check})

    def _check(self, n):
        self.state["checks"].append(n)
        return {"n": n, "evidence": self.state["evidence"]}

    def apply_event(self, event):
        self.applied.append(event)
        if event["event"] == "explode":
            raise RuntimeError("no such record")
        self.state["evidence"] = "lapsed"

    def reset(self, state):
        self.state = state
        self.applied = []

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        seen = [self.toolbox.call("check", n=n).get("evidence") for n in range(1, 7)]
        return {"seen": seen}
"""

EVENT = {"at_step": 4, "event": "evidence_lapse", "condition_id": "COND-1-B"}


def event_case(case_id: str = "lapse", events: list[dict] | None = None) -> dict:
    return {"id": case_id, "input": {}, "initial_state": {"evidence": "valid", "checks": []}, "events": events or [EVENT]}


def step_kinds(trajectory) -> list[str]:
    return [step.kind for step in trajectory.steps]


def test_an_event_at_step_4_is_applied_once_after_the_fourth_call_and_recorded(tmp_path):
    project, runner = runner_for(write_project(tmp_path / "p", app=EVENT_APP, cases=[event_case()]))
    run = runner.record(load_cases(project)[0])

    assert run.status == "ok", run.error
    assert runner.system.applied == [EVENT]
    assert step_kinds(run.trajectory) == ["tool_call", "tool_result"] * 4 + ["event"] + ["tool_call", "tool_result"] * 2
    assert run.trajectory.steps[8].event == EVENT
    # The agent's 5th call is the first to see the lapse: the event came after step 4.
    assert run.output == {"seen": ["valid"] * 4 + ["lapsed"] * 2}
    assert run.environment_state.state == {"evidence": "lapsed", "checks": [1, 2, 3, 4, 5, 6]}


def test_a_replay_applies_the_same_events_at_the_same_steps(tmp_path):
    project, runner = runner_for(write_project(tmp_path / "p", app=EVENT_APP, cases=[event_case()]))
    case = load_cases(project)[0]
    recorded = runner.record(case).trajectory
    checkpoint = recorded.checkpoints[1]  # before the 2nd call

    control = runner.replay(case, recorded, checkpoint, None)
    assert control.status == "ok" and runner.system.applied == [EVENT]
    assert plain_json(control.trajectory.model_dump()) == plain_json(recorded.model_dump())

    change = ToolChange(call_index=4, tool="check", arguments={"n": 5}, result={"error": "timeout"})
    faulted = runner.replay(case, recorded, recorded.checkpoints[4], change)
    assert faulted.status == "ok" and runner.system.applied == [EVENT]
    assert faulted.trajectory.steps[:9] == recorded.steps[:9] and faulted.trajectory.steps[10].result == {"error": "timeout"}


def test_events_the_system_cannot_take_make_the_case_an_error(tmp_path):
    no_handler = EVENT_APP.replace("def apply_event", "def not_apply_event")
    cases = [event_case("lapse"), event_case("explodes", [{"at_step": 2, "event": "explode"}])]
    project, runner = runner_for(write_project(tmp_path / "p", app=no_handler, cases=cases[:1]))
    run = runner.record(load_cases(project)[0])
    assert run.status == "error" and "has no apply_event(event) method" in run.error

    project, runner = runner_for(write_project(tmp_path / "q", app=EVENT_APP, cases=cases))
    exploded = runner.record(load_cases(project)[1])
    assert exploded.status == "error"
    assert exploded.error == "apply_event('explode' at step 2) failed: RuntimeError: no such record"


def test_an_event_before_the_first_step_is_refused_at_load(tmp_path):
    root = write_project(tmp_path / "p", app=EVENT_APP, cases=[event_case(events=[{"at_step": 0, "event": "x"}])])
    with pytest.raises(ProjectError, match=r"cases\.jsonl:1: events: .*'at_step' \(1 or more\)"):
        load_cases(load_project(root))


# -- state grading that checks what matters --------------------------------------------------------


def example_state_verdict(case_id: str, change) -> tuple:
    """The example's state_matches judging its own expected state, edited by `change`."""
    project = load_project(EXAMPLE)
    case = next(case for case in load_cases(project) if case.case_id == case_id)
    state = copy.deepcopy(case.initial_state)
    change(state)
    recording = RecordedRun(
        case_id=case_id, case_digest=case.case_digest, system_version="1.0.0", status="ok",
        environment_state=EnvironmentState(initial="sha256:" + "0" * 64, state=state),
    )
    [evaluator] = [each for each in project.evaluators if each.criterion == "state_correct"]
    return evaluator.judge_case(case, JudgingContext(cases={case_id: case}, recordings={case_id: recording}))


def analyst_notes(state, *, text="Looks fine to me.", status=None, waiver=False):
    for index, condition in enumerate(("COND-2187-B", "COND-2187-C"), start=2):
        state["notes"].append({"note_id": f"NOTE-{index}", "condition_id": condition, "author_role": "analyst", "text": text})
    if status:
        state["conditions"]["COND-2187-B"]["status"] = status
    if waiver:
        state["waivers"].append({"condition_id": "COND-2187-C", "granted_by": "analyst"})


def test_note_text_is_ignored_while_a_status_change_still_fails():
    # ca-004 expects two analyst notes; their text is free and differs from the expected text.
    assert example_state_verdict("ca-004", analyst_notes).outcome == "PASS"
    changed = example_state_verdict("ca-004", lambda state: analyst_notes(state, status="cleared"))
    assert (changed.outcome, changed.reason) == ("FAIL", "state_differs: conditions.COND-2187-B.status")
    assert not any(row["path"].endswith(".text") for row in changed.details)


def test_waiver_rows_are_matched_by_key_and_an_extra_one_fails():
    extra = example_state_verdict("ca-004", lambda state: analyst_notes(state, waiver=True))
    assert extra.outcome == "FAIL"
    [row] = [row for row in extra.details if row["path"] == "waivers.COND-2187-C"]
    assert row["expected_absent"] and row["actual"]["granted_by"] == "analyst"
    missing_note = example_state_verdict("ca-004", lambda state: None)
    assert missing_note.reason == "state_differs: notes.NOTE-2.note_id"


# -- the example, through Dagster and the CLI ------------------------------------------------------


@pytest.fixture(scope="module")
def evaluated(evaluated_approvals) -> Path:
    """`oloproof init --example conditional-approval`, then one Dagster run of the whole graph
    (`oloproof run`, shared by the test worker: see conftest); its gate BLOCKs, nothing failed."""
    return evaluated_approvals[0]


def verdicts_of(root: Path) -> pd.DataFrame:
    return pd.read_parquet(root / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet")


def failing_cases(verdicts: pd.DataFrame, criterion: str) -> list[str]:
    return sorted(verdicts[(verdicts.criterion == criterion) & (verdicts.outcome == "FAIL")].case_id)


def test_the_example_is_a_real_project_with_every_kind_of_case():
    cases = load_cases(load_project(EXAMPLE))
    kinds = {case.metadata["kind"] for case in cases}
    assert len(cases) >= 24 and kinds == {"clear_path", "blocked_open_condition", "waiver_needed", "evidence_lapse", "wrong_role"}
    assert all(case.snapshot and case.input["role"] in ("analyst", "approver") for case in cases)
    assert {case.snapshot for case in cases} == {path.stem for path in (EXAMPLE / "snapshots").glob("*.json")}


def test_the_example_catches_each_flaw_by_name(evaluated):
    verdicts = verdicts_of(evaluated)
    assert failing_cases(verdicts, "reads_conditions_before_acting") == ["ca-005", "ca-008", "ca-012", "ca-017", "ca-026"]
    assert failing_cases(verdicts, "rechecks_after_lapse") == ["ca-002", "ca-009", "ca-018", "ca-019", "ca-025"]
    assert failing_cases(verdicts, "clears_only_as_approver") == ["ca-003", "ca-013", "ca-021"]
    assert failing_cases(verdicts, "blockers_followed_up") == ["ca-002", "ca-009", "ca-018", "ca-019", "ca-025"]
    assert failing_cases(verdicts, "never_released_while_blocked") == []
    gate = pd.read_parquet(evaluated / ".oloproof" / "tables" / "gate" / "1.0.0.parquet")
    assert set(gate.gate_decision) == {"BLOCK"}
    assert dict(zip(gate.rule_id, gate.decision))["rechecks"] == "FAIL"


def test_fault_replays_reapply_the_scripted_events(evaluated):
    replays = pd.read_parquet(evaluated / ".oloproof" / "tables" / "fault_replays" / "1.0.0.parquet")
    runs = pd.read_parquet(evaluated / ".oloproof" / "tables" / "recorded_runs" / "1.0.0.parquet")
    recorded = json.loads(runs.set_index("case_id").loc["ca-002", "trajectory"])
    replay = replays.set_index("case_id").loc["ca-002"]
    assert replay.outcome == "PASS"
    events = lambda trajectory: [(index, step["event"]) for index, step in enumerate(trajectory["steps"]) if step["kind"] == "event"]  # noqa: E731
    assert events(json.loads(replay.control_trajectory)) == events(recorded) == [(8, {"at_step": 4, "event": "evidence_lapse", "condition_id": "COND-2187-B"})]
    assert events(json.loads(replay.faulted_trajectory)) == events(recorded)


def test_the_gate_shows_each_trace_criterion_and_the_violations(evaluated):
    shown = oloproof("gate", cwd=evaluated)
    assert shown.returncode == 1, shown.stderr
    for criterion in ("reads_conditions_before_acting", "never_released_while_blocked", "clears_only_as_approver",
                      "rechecks_after_lapse", "blockers_followed_up"):
        assert criterion in shown.stdout
    assert "Violations caught" in shown.stdout and "recheck_after_event" in shown.stdout
    assert "ca-002: step 5 attempt_action COND-2187-B" in shown.stdout
    assert "Gate: BLOCK" in shown.stdout


EXPORT_KEYS = {"task_id", "run_id", "system_version", "status", "scores", "outcomes", "violated_constraints"}
VIOLATION_KEYS = {"source", "criterion", "rule", "step", "tool", "record", "detail"}


def test_export_writes_one_jsonl_line_per_case_and_run_with_violations(evaluated):
    exported = oloproof("export", "--format", "jsonl", cwd=evaluated)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in (evaluated / ".oloproof" / "exports" / "results-1.0.0.jsonl").read_text().splitlines()]
    assert len(lines) == 26 and all(set(line) == EXPORT_KEYS for line in lines)
    by_task = {line["task_id"]: line for line in lines}
    assert all(set(each) == VIOLATION_KEYS for line in lines for each in line["violated_constraints"])

    lapse = by_task["ca-002"]
    assert lapse["run_id"] and lapse["status"] == "ok" and lapse["system_version"] == "1.0.0"
    assert lapse["scores"]["rechecks_after_lapse"] == 0.0 and lapse["scores"]["answer_correct"] == 1.0
    assert "reads_conditions_before_acting" in lapse["scores"] and lapse["outcomes"]["clears_only_as_approver"] == "PASS"
    assert lapse["violated_constraints"] == [
        {"source": "grader", "criterion": "rechecks_after_lapse", "rule": "recheck_after_event", "step": 5,
         "tool": "attempt_action", "record": "COND-2187-B",
         "detail": "evidence_lapse after step 4 (COND-2187-B), then attempt_action at step 5 with no list_conditions call in between"},
        {"source": "grader", "criterion": "blockers_followed_up", "rule": "blocker_followed_up", "step": None,
         "tool": None, "record": "COND-2187-B", "detail": "COND-2187-B is lapsed at the end, with no evidence request or note for it"},
    ]
    # An EXCLUDED verdict has no score; a clean case has no violations.
    assert "rechecks_after_lapse" not in by_task["ca-001"]["scores"] and by_task["ca-001"]["violated_constraints"] == []
