"""`oloproof import agentdojo SUITE DIR` (the `agentdojo` extra): AgentDojo's suites as projects,
checked against AgentDojo's own runtime, tasks and ground truth."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from oloproof_pipeline.importers.agentdojo import import_agentdojo
from oloproof_pipeline.importers.agentdojo_runtime import load_suite, suite_tools, utility_grader
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.paths import read_path
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun
from oloproof_pipeline.model.trajectory import Step, Trajectory
from oloproof_pipeline.model.transforms import derive_cases
from oloproof_pipeline.project import load_project

from helpers import oloproof


@pytest.fixture(scope="module")
def banking(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("agentdojo") / "banking"
    import_agentdojo("banking", root)
    return root


def played(case, calls: list[dict], answer: str = "") -> RecordedRun:
    """The case run by calling `calls` through the imported tools: what a chat agent records."""
    tools = suite_tools("banking")()
    tools.reset(case.initial_state)
    steps = []
    for call in calls:
        result = getattr(tools, call["tool"])(**call["arguments"])
        steps += [Step(kind="tool_call", tool=call["tool"], arguments=call["arguments"]),
                  Step(kind="tool_result", tool=call["tool"], result=result)]
    return RecordedRun(case_id=case.case_id, case_digest=case.case_digest, system_version="1", status="ok",
                       output={"answer": answer}, trajectory=Trajectory(steps=steps, terminal_status="success"),
                       environment_state=EnvironmentState(initial="sha256:" + "0" * 64, state=tools.snapshot()))


def test_one_case_per_user_task_with_the_ground_truths_world(banking):
    project = load_project(banking)
    cases = {case.case_id: case for case in load_cases(project)}
    suite = load_suite("banking")
    assert len(cases) == 16 and set(cases) == set(suite.user_tasks)
    task = suite.get_user_task_by_id("user_task_3")
    case = cases["user_task_3"]
    assert case.input == task.PROMPT and case.metadata["user_task"] == "user_task_3"
    assert case.expected["actions"] == [{"tool": call.function, "arguments": dict(call.args)}
                                        for call in task.ground_truth(task.init_environment(
                                            suite.load_and_inject_default_environment({})))]
    # Playing the ground truth's calls through the imported tools leaves the expected world.
    assert played(case, case.expected["actions"]).state_after == case.expected["state"]
    assert case.metadata["changes_state"] is True and cases["user_task_1"].metadata["changes_state"] is False
    config = project.config
    assert config.system.is_chat_agent and config.system.tools == "tools:Tools"
    assert project.criteria() == ["state_correct", "utility", "same_state_under_transform"]


def test_the_tools_are_agentdojos_functions_with_their_schemas(banking):
    tools = suite_tools("banking")()
    suite = load_suite("banking")
    assert set(tools.tool_schemas) == {function.name for function in suite.tools}
    schema = tools.tool_schemas["send_money"]["parameters"]
    assert set(schema["required"]) >= {"recipient", "amount", "subject", "date"}
    case = next(case for case in load_cases(load_project(banking)) if case.case_id == "user_task_0")
    tools.reset(case.initial_state)
    assert tools.snapshot() == case.initial_state  # the reset check's round trip
    assert tools.get_balance() == case.initial_state["bank_account"]["balance"]
    assert "error" in tools.send_money(recipient="X", amount="lots", subject="s", date="2022-01-01")


def test_the_suites_utility_is_the_grader(banking):
    cases = {case.case_id: case for case in load_cases(load_project(banking))}
    utility = utility_grader("banking")
    case = cases["user_task_3"]
    assert utility(case, played(case, case.expected["actions"]))["outcome"] == "PASS"
    assert utility(case, played(case, []))["outcome"] == "FAIL"
    # An answer-judged task: the ground truth's answer passes, none fails.
    read_only = cases["user_task_1"]
    assert utility(read_only, played(read_only, read_only.expected["actions"], read_only.expected["output"]["answer"]))["outcome"] == "PASS"
    assert utility(read_only, played(read_only, read_only.expected["actions"]))["outcome"] == "FAIL"


def test_injection_vectors_are_transforms_into_the_world(banking):
    project = load_project(banking)
    transforms = {transform.name: transform for transform in project.config.metamorphic.transforms}
    assert set(transforms) == {"injection_address_change", "injection_bill_text", "injection_incoming_transaction",
                               "injection_landloard_notice"}
    assert transforms["injection_landloard_notice"].field == 'initial_state.filesystem.files["landlord-notices.txt"]'
    sources = load_cases(project)
    copies = {copy.case_id: copy for copy in derive_cases(project, sources).copies}
    assert len(copies) == 16 * 4
    goal = load_suite("banking").get_injection_task_by_id("injection_task_0").GOAL
    copy = copies["user_task_0~injection_incoming_transaction"]
    subject = read_path(copy.initial_state, "bank_account.transactions.4.subject")
    assert goal in subject and "Sushi dinner" not in subject
    assert copy.input == next(case for case in sources if case.case_id == "user_task_0").input


def test_bad_imports_are_one_line_usage_errors(tmp_path):
    with pytest.raises(ProjectError, match="expected one of banking, slack, travel, workspace"):
        import_agentdojo("bank", tmp_path / "a")
    with pytest.raises(ProjectError, match="no injection task 'injection_task_0'"):
        import_agentdojo("slack", tmp_path / "b", injection_task="injection_task_0")
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "x").write_text("")
    with pytest.raises(ProjectError, match="already exists and is not an empty folder"):
        import_agentdojo("banking", tmp_path / "c")


def certify(tmp_path: Path, suite: str) -> tuple[int, str]:
    root = tmp_path / suite
    imported = oloproof("import", "agentdojo", suite, str(root), cwd=tmp_path)
    assert imported.returncode == 0, imported.stderr
    assert re.search(rf"Wrote .*: {16 if suite == 'banking' else 21} cases", imported.stdout)
    certified = oloproof("certify", "--project", str(root), cwd=tmp_path, timeout=600)
    return certified.returncode, certified.stdout + certified.stderr


def test_slack_imports_and_certifies_every_reference(tmp_path):
    code, output = certify(tmp_path, "slack")
    assert code == 0, output
    assert "certified 126 of 126 cases; 0 flagged; 21 with a reference run" in output


def test_banking_certifies_every_reference_its_answers_included(tmp_path):
    """AgentDojo's own ground-truth pipeline passes all 16; the tasks judged by their answer
    certify too, their reference playing the ground truth's answer (`expected.output`)."""
    code, output = certify(tmp_path, "banking")
    assert code == 0, output
    assert "certified 80 of 80 cases; 0 flagged; 16 with a reference run" in output
    cases = [json.loads(line) for line in (tmp_path / "banking" / "data" / "cases.jsonl").read_text().splitlines()]
    answered = [case for case in cases if "output" in case["expected"]]
    assert answered and all(set(case["expected"]["output"]) == {"answer"} for case in answered)