"""Case certification: cases that test nothing or cannot be passed are flagged, with why, and
a release policy that requires certified cases leaves them out of the gate (never as passes)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from dagster import DagsterInstance

from oloproof_pipeline.decide.certification import UNCERTIFIED_EXCLUDED
from oloproof_pipeline.decide.version_gate import FLAGGED_FAILURES
from oloproof_pipeline.defs.instance import instance_home
from oloproof_pipeline.defs.launch import run_certification, run_evaluation
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.outcomes import (
    COPY_LEAVES_FIELD_UNCHANGED,
    EXIT_CASES_FLAGGED,
    JUDGED_BY_NO_CRITERION,
    PASS,
    PASSES_WHEN_NOTHING_IS_DONE,
    REFERENCE_FAILS,
    SAME_INPUT_DIFFERENT_EXPECTED,
)
from oloproof_pipeline.model.transforms import derive_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.certification import certify_cases, flagged_rows, play_references
from oloproof_pipeline.store.layout import table_path
from oloproof_pipeline.store.tables import CERTIFICATION_NESTED, rows_from_frame

from conftest import REPO, write_project
from helpers import oloproof

APPROVALS = REPO / "example_project" / "conditional_approval"
# The example cases whose expectations are deliberately impossible (see the README's examples).
BROKEN = {"refund_desk": "ord-024", "conditional_approval": "ca-025"}
# The refund desk's cases whose expected state is their starting state: declined refunds.
DECLINED = [f"ord-{number:03d}" for number in range(13, 24)]


def flags_by_case(frame: pd.DataFrame) -> dict[str, set[tuple[str, str | None]]]:
    found: dict[str, set[tuple[str, str | None]]] = {}
    for row in flagged_rows(frame):
        found.setdefault(row["case_id"], set()).add((row["flag"], row["criterion"]))
    return found


@pytest.fixture
def instance(tmp_path):
    (tmp_path / "dagster").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "dagster")) as instance:
        yield instance


def test_certify_on_the_refund_desk_flags_the_broken_case_and_the_do_nothing_passes(refund_desk):
    certified = oloproof("certify", cwd=refund_desk, columns=80)
    assert certified.returncode == EXIT_CASES_FLAGGED, certified.stdout + certified.stderr
    frame = pd.read_parquet(table_path(refund_desk, "case_certification"))
    flags = flags_by_case(frame)
    assert flags[BROKEN["refund_desk"]] == {(REFERENCE_FAILS, "state_correct")}
    # Declining leaves the world as it was, so a desk that does nothing passes state_correct there.
    assert sorted(flags) == sorted([*DECLINED, BROKEN["refund_desk"]])
    assert all(flags[case_id] == {(PASSES_WHEN_NOTHING_IS_DONE, "state_correct")} for case_id in DECLINED)
    # Every source has a reference, played through the desk's tool box; the others pass it.
    sources = frame[frame.source_id.isna()]
    assert sources.has_reference.all() and (sources.reference_status == "ok").all()
    out = certified.stdout
    said = " ".join(out.split())  # rich folds the lines to the width
    assert "12 flagged (passes_when_nothing_is_done 11, reference_fails 1)" in said
    assert 'expected "cancelled", got "delivered"' in said
    assert max(len(line) for line in out.splitlines()) <= 80
    # The broken case first; the eleven cases doing nothing passes in one entry after it.
    table = out[out.index("Flagged cases"):]
    assert table.index(BROKEN["refund_desk"]) < table.index(PASSES_WHEN_NOTHING_IS_DONE)
    assert table.count(PASSES_WHEN_NOTHING_IS_DONE) == 1 and all(case_id in table for case_id in DECLINED)

    # Nothing changed: nothing is launched, the stored certification is shown as it stands.
    with DagsterInstance.from_config(str(instance_home(refund_desk))) as instance:
        runs = instance.get_runs_count()
    again = oloproof("certify", cwd=refund_desk, columns=80)
    assert again.returncode == EXIT_CASES_FLAGGED, again.stdout + again.stderr
    assert "certification is up to date" in " ".join(again.stdout.split())
    assert again.stdout[again.stdout.index("Flagged cases"):] == table
    with DagsterInstance.from_config(str(instance_home(refund_desk))) as instance:
        assert instance.get_runs_count() == runs

    # Flagged cases still count in the gate (no require_certified_cases): each rule that FAILs
    # the broken case says so, in the gate's reasons, the run's summary and the report.
    ran = oloproof("run", cwd=refund_desk, columns=120)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    named = f"{FLAGGED_FAILURES}: FAIL on 1 case certification flagged: {BROKEN['refund_desk']} ({REFERENCE_FAILS})"
    gate = pd.read_parquet(table_path(refund_desk, "gate", "1.0.0")).set_index("rule_id")
    noted = {rule for rule, reasons in gate["reasons"].items() if named in json.loads(reasons)}
    assert noted == {"answers", "end_state", "refund_failures"}
    assert " ".join(ran.stdout.split()).count(named) >= 3
    assert named in (refund_desk / ".oloproof" / "reports" / "report-1.0.0.html").read_text()


def test_certify_on_the_approvals_desk_flags_its_broken_case(tmp_path, instance):
    root = tmp_path / "approvals"
    shutil.copytree(APPROVALS, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    certification = run_certification(root, instance=instance)
    assert certification.errors == []
    frame = pd.read_parquet(table_path(root, "case_certification"))
    # The reference (reads, the lapse rechecked, evidence requested) cannot release funds the
    # case expects released while a condition has lapsed: the case is broken, not the desk.
    assert flags_by_case(frame) == {BROKEN["conditional_approval"]: {(REFERENCE_FAILS, "state_correct")}}
    assert frame.has_reference.sum() == len(frame) == 26


def test_the_gate_leaves_flagged_cases_out_when_the_policy_requires_certified_cases(refund_desk, instance):
    release = refund_desk / "release.yaml"
    release.write_text(release.read_text() + "\nrequire_certified_cases: true\n")
    evaluation = run_evaluation(refund_desk, instance=instance)
    assert evaluation.errors == []
    gate = pd.read_parquet(table_path(refund_desk, "gate", "1.0.0")).set_index("rule_id")
    verdicts = pd.read_parquet(table_path(refund_desk, "verdicts", "1.0.0"))
    # The stored verdicts stay as judged; the gate counts the flagged ones as EXCLUDED.
    state = verdicts[verdicts.criterion == "state_correct"].set_index("case_id")
    assert state.loc[DECLINED[0], "outcome"] == PASS
    end_state = gate.loc["end_state"]
    assert (end_state["observed"], end_state["excluded"]) == (12, 12)
    assert end_state["passed"] == 12  # the eligible, urgent and high-value cases, which the desk gets right
    assert f"{UNCERTIFIED_EXCLUDED}: 12 (passes_when_nothing_is_done 11, reference_fails 1)" in json.loads(end_state["reasons"])
    # The broken case is left out of every criterion it is judged on, not only state_correct.
    answers = gate.loc["answers"]
    assert (answers["observed"], answers["excluded"]) == (23, 1)
    assert f"{UNCERTIFIED_EXCLUDED}: 1 (reference_fails 1)" in json.loads(answers["reasons"])


SYSTEM = """
from oloproof_pipeline.toolbox import ToolBox

class System:
    def __init__(self):
        self.world = {}
        self.toolbox = ToolBox({"set_status": self.set_status})

    def reset(self, state):
        self.world = state

    def snapshot(self):
        return dict(self.world)

    def set_status(self, status):
        self.world["status"] = status
        return {"status": status}

    def __call__(self, input):
        self.toolbox.call("set_status", status="done")
        return {"answer": "done"}
"""


def small_case(case_id: str, message: str, *, expected: dict | None = None, actions: list | None = None) -> dict:
    expected = dict(expected if expected is not None else {"answer": "done", "state": {"status": "done"}})
    if actions is not None:
        expected["actions"] = actions
    return {"id": case_id, "input": {"message": message}, "initial_state": {"status": "open"}, "expected": expected}


DONE = [{"tool": "set_status", "arguments": {"status": "done"}}]


def test_each_kind_of_flag_with_its_reason_and_references_kept_by_case_digest(tmp_path):
    cases = [
        small_case("good", "please finish it", actions=DONE),
        small_case("idle", "leave it", expected={"answer": "done", "state": {"status": "open"}}),
        small_case("twin-a", "same words", actions=DONE),
        small_case("twin-b", "same words", expected={"answer": "done", "state": {"status": "closed"}}),
        small_case("nothing", "no expectations", expected={}),
        small_case("wrong-tool", "finish", actions=[{"tool": "set_status", "arguments": {"status": "closed"}}]),
        small_case("typo", "finish now", actions=[{"tool": "set_statu", "arguments": {}}]),
        small_case("malformed", "finish later", actions=[{"tool": "set_status", "args": {"status": "done"}}]),
    ]
    root = write_project(
        tmp_path / "tiny", app=SYSTEM, cases=cases,
        evaluators=[
            {"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "expected.answer"},
            {"type": "state_matches", "mode": "subset", "criterion": "state_correct"},
        ],
    )
    config = json.loads((root / "oloproof.yaml").read_text())
    config["metamorphic"] = {"transforms": [{"name": "shout", "field": "message", "replace": [["please", "PLEASE"]]}]}
    (root / "oloproof.yaml").write_text(json.dumps(config))
    # The transform leaves every case but "good" unchanged, which is an error: keep it to "good".
    project = load_project(root)
    sources = load_cases(project)
    copies = derive_cases(project, [case for case in sources if case.case_id == "good"]).copies
    plays: list[int] = []

    def counted_play(project, to_play):
        plays.append(len(to_play))
        return play_references(project, to_play, timeout_s=5.0)

    frame, summary = certify_cases(project, [*sources, *(copy.as_case() for copy in copies)], play=counted_play)
    flags = {row["case_id"]: (row["flag"], row["criterion"], row["reason"]) for row in flagged_rows(frame)}
    assert flags["idle"][:2] == (PASSES_WHEN_NOTHING_IS_DONE, "state_correct")
    assert flags["twin-a"][:2] == (SAME_INPUT_DIFFERENT_EXPECTED, None) and "twin-b" in flags["twin-a"][2]
    assert flags["nothing"][:2] == (JUDGED_BY_NO_CRITERION, None) and "no_expected_state" in flags["nothing"][2]
    assert flags["wrong-tool"][:2] == (REFERENCE_FAILS, "state_correct") and 'expected "done", got "closed"' in flags["wrong-tool"][2]
    assert flags["good~shout"][:2] == (COPY_LEAVES_FIELD_UNCHANGED, None)
    # A reference the tool box cannot play is a reference_fails with the reason, never a pass.
    assert flags["typo"][0] == REFERENCE_FAILS and "no tool named 'set_statu'" in flags["typo"][2]
    # Actions that are not {tool, arguments} are not played; the flag names the file, line and field.
    assert flags["malformed"][0] == REFERENCE_FAILS
    assert "data/cases.jsonl:8: expected.actions[0].args: Extra inputs are not permitted" in flags["malformed"][2]
    assert "good" not in flags and summary.played == 4 and plays == [4]
    # Again with the table stored: no reference is played while its case and the code hold;
    # an edited case's reference is played again.
    again, summary = certify_cases(project, [*sources, *(copy.as_case() for copy in copies)], frame, play=counted_play)
    assert (summary.played, summary.reused, plays[-1]) == (0, 4, 0)
    assert flagged_rows(again) == flagged_rows(frame)
    edited = [case.model_copy(update={"case_digest": "sha256:edited"}) if case.case_id == "good" else case for case in sources]
    _, summary = certify_cases(project, edited, frame, play=counted_play)
    assert (summary.played, summary.reused) == (1, 3)


def test_a_reference_callable_plays_cases_without_actions_and_its_answer_is_judged(tmp_path):
    cases = [
        small_case("right", "finish it"),
        small_case("wrong-answer", "finish it too", expected={"answer": "closed", "state": {"status": "done"}}),
        small_case("own-actions", "close it", expected={"answer": "done", "state": {"status": "closed"}},
                   actions=[{"tool": "set_status", "arguments": {"status": "closed"}}]),
    ]
    root = write_project(
        tmp_path / "tiny", app=SYSTEM, cases=cases,
        evaluators=[
            {"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "expected.answer"},
            {"type": "state_matches", "mode": "subset", "criterion": "state_correct"},
        ],
    )
    (root / "refs.py").write_text(
        "def correct(input, toolbox):\n"
        "    toolbox.call('set_status', status='done')\n"
        "    return {'answer': 'done'}\n"
    )
    config = json.loads((root / "oloproof.yaml").read_text())
    (root / "oloproof.yaml").write_text(json.dumps({**config, "reference": "refs:correct"}))
    project = load_project(root)
    frame, summary = certify_cases(project, load_cases(project))
    assert summary.played == 3 and frame.has_reference.all()
    flags = {row["case_id"]: (row["flag"], row["criterion"], row["reason"]) for row in flagged_rows(frame)}
    # The callable answers, so its answer is judged; a case with actions plays those instead.
    assert list(flags) == ["wrong-answer"]
    assert flags["wrong-answer"][:2] == (REFERENCE_FAILS, "answer_correct")
    # Editing the reference's module plays the references again: they are keyed by it.
    (root / "refs.py").write_text((root / "refs.py").read_text() + "# edited\n")
    _, summary = certify_cases(project, load_cases(project), frame)
    assert (summary.played, summary.reused) == (3, 0)


UTILITY = '''
def utility(case, recording):
    """As AgentDojo's `utility`: the world is right and the answer says so."""
    answer = (recording.output or {}).get("answer", "")
    ok = recording.environment_state.state.get("status") == "done" and "done" in str(answer)
    return {"outcome": "PASS" if ok else "FAIL", "reason": "utility" if ok else "utility_not_met"}
'''


def test_a_reference_with_actions_and_its_final_answer_is_judged_by_every_criterion(tmp_path):
    answered = {"answer": "done", "state": {"status": "done"}, "output": {"answer": "it is done"}}
    cases = [
        small_case("answers", "finish it", expected={**answered, "answer": "it is done"}, actions=DONE),
        small_case("answers-wrongly", "finish it too", expected={**answered, "output": {"answer": "closed"}}, actions=DONE),
        small_case("silent", "finish it now", expected={"answer": "done", "state": {"status": "done"}}, actions=DONE),
    ]
    root = write_project(
        tmp_path / "tiny", app=SYSTEM, cases=cases,
        evaluators=[
            {"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "expected.answer"},
            {"type": "state_matches", "mode": "subset", "criterion": "state_correct"},
            {"type": "python", "criterion": "utility", "function": "graders:utility"},
        ],
    )
    (root / "graders.py").write_text(UTILITY)
    project = load_project(root)
    frame, summary = certify_cases(project, load_cases(project))
    flags: dict[str, list[tuple[str, str | None, str]]] = {}
    for row in flagged_rows(frame):
        flags.setdefault(row["case_id"], []).append((row["flag"], row["criterion"], row["reason"]))
    runs = {row["case_id"]: row["reference_run"] for row in rows_from_frame(frame, CERTIFICATION_NESTED)}

    # The reference ends with the case's answer, so the answer readers judge it and it passes them all.
    assert "answers" not in flags and summary.played == 3
    assert runs["answers"]["output"] == {"answer": "it is done"}
    assert runs["silent"]["output"]["reference_results"] == [{"status": "done"}]
    # A wrong final answer fails exact_match and the utility grader, each named.
    assert sorted(criterion for _, criterion, _ in flags["answers-wrongly"]) == ["answer_correct", "utility"]
    # Without a final answer, exact_match cannot judge it; a grader that reads the answer fails, and says why.
    [(name, criterion, reason)] = flags["silent"]
    assert (name, criterion) == (REFERENCE_FAILS, "utility")
    assert "give the output they end with as expected.output" in reason
