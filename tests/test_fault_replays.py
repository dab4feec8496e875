"""Fault replays: real small systems replayed with one tool call's result replaced by a fault."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance

from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.errors import ProjectError, SystemVersionMismatch
from oloproof_pipeline.evaluators import JudgingContext, build_evaluators, judge_cases
from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.run import replaying
from oloproof_pipeline.run.recording import record_case_rows, record_cases
from oloproof_pipeline.run.replaying import replay_fault_rows, replay_faults
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.evaluators.fault_recovery import judge_fault_replay
from oloproof_pipeline.evaluators.judging import judge_verdict_table, replays_for_judging
from oloproof_pipeline.model.faults import INJECTED_RESULTS, FaultPlan, FaultReplay
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.spill import SpilledRows
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import RowBatches, case_table, recorded_runs_table
from oloproof_pipeline.store.layout import table_path, write_table_file
from oloproof_pipeline.model.trajectory import Checkpoint, RecordedConstraint, Step, Trajectory

from conftest import write_project

# A tool-box system; `kind` in the input picks how the agent handles a failing `pay`.
TOOLBOX_APP = """
import copy
import uuid

from oloproof_pipeline.toolbox import ToolBox


class System:
    version = "1.0.0"

    def __init__(self):
        self.state = {}
        self.toolbox = ToolBox({"lookup": self._lookup, "pay": self._pay, "escalate": self._escalate})

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def _lookup(self, key):
        return {"value": key}

    def _pay(self, key):
        self.state["paid"].append(key)
        return {"status": "paid"}

    def _escalate(self, key):
        self.state["escalated"] = True
        return {"status": "escalated"}

    def __call__(self, request):
        kind, call = request["kind"], self.toolbox.call
        if kind == "echo":  # hands back exactly what the tool returned
            call("lookup", key="a")
            return {"saw": call("pay", key="a")}
        if kind == "twice":
            return {"saw": [call("pay", key="a"), call("pay", key="b")]}
        if kind == "once":
            return {"saw": [call("pay", key="a")]}
        if kind == "escalates":
            if "error" in call("pay", key="a"):
                call("escalate", key="a")
                self.toolbox.finish("failure")  # escalation is judged before the status
            return {"done": True}
        if kind == "retries":
            if "error" in call("pay", key="a"):
                call("pay", key="a")
            return {"done": True}
        if kind == "gives_up":
            if "error" in call("pay", key="a"):
                self.toolbox.finish("failure")
            return {"done": True}
        if kind == "claims":
            call("pay", key="a")
            self.toolbox.constraint("claims_only_what_happened", "a" in self.state["paid"])
            return {"answer": "paid"}
        if kind == "drifts":  # a new lookup argument every run: no replay can reproduce it
            call("pay", key="a")
            call("lookup", key=uuid.uuid4().hex)
            return {"done": True}
        raise ValueError(kind)
"""

# No tool box: the system keeps its own trajectory and, unless `REPLAYABLE` is False, replays
# itself. Its recording is: lookup, then pay (checkpoints before each).
OWN_TRAJECTORY_APP = """
REPLAYABLE = {replayable}


def call_steps(tool, arguments, result):
    return [
        {{"kind": "tool_call", "tool": tool, "arguments": arguments}},
        {{"kind": "tool_result", "tool": tool, "result": result}},
    ]


class System:
    version = "1.0.0"

    def __init__(self):
        self._trajectory = {{}}

    def __call__(self, request):
        checkpoints = [] if request.get("no_checkpoints") else [
            {{"step": 0, "calls_before": 0}}, {{"step": 2, "calls_before": 1}}
        ]
        self._trajectory = {{
            "steps": call_steps("lookup", {{"key": "a"}}, {{"value": 1}}) + call_steps("pay", {{"key": "a"}}, {{"status": "paid"}}),
            "checkpoints": checkpoints,
        }}
        return {{"answer": "paid"}}

    def trajectory(self):
        return self._trajectory



if REPLAYABLE:
    # The continuation after the checkpoint: the recorded one for a control replay, else the
    # changed call and an escalation (or, by `mode`, a replay that raises or ignores the change).
    def replay(self, trajectory, *, checkpoint, change):
        if self.mode == "raises":
            raise RuntimeError("cannot resume")
        if change is None and self.mode == "control_exits":
            import os
            os._exit(3)
        if change is None and self.mode == "control_hangs":
            import time
            time.sleep(600)
        if change is None or self.mode == "ignores_change":
            return {{"steps": [step.model_dump() for step in trajectory.steps[checkpoint.step:]]}}
        return {{
            "steps": call_steps(change.tool, change.arguments, change.result) + call_steps("escalate", {{"key": "a"}}, {{}}),
            "terminal_status": "success",
        }}

    System.replay = replay
    System.mode = "{mode}"
"""


def toolbox_case(case_id: str, kind: str) -> dict:
    return {"id": case_id, "input": {"kind": kind}, "initial_state": {"paid": []}, "expected": {"answer": "paid"}}


def fault_evaluator(tool: str = "pay", fault: str = "error", **extra) -> dict:
    return {"type": "fault_recovery", "tool": tool, "fault": fault, "escalate_tools": ["escalate"], **extra}


def toolbox_project(root: Path, kinds: list[str], *evaluators: dict) -> Path:
    cases = [toolbox_case(f"c-{index}-{kind}", kind) for index, kind in enumerate(kinds)]
    return write_project(root, app=TOOLBOX_APP, cases=cases, evaluators=list(evaluators) or [fault_evaluator()], rules=[])


def own_trajectory_project(
    root: Path, *, replayable: bool = True, mode: str = "escalates", cases: list[dict] | None = None, timeout_s: float = 5.0
) -> Path:
    app = OWN_TRAJECTORY_APP.format(replayable=replayable, mode=mode)
    cases = cases or [{"id": "c-1", "input": {"order": "a"}}]
    return write_project(root, app=app, cases=cases, evaluators=[fault_evaluator()], rules=[], timeout_s=timeout_s)


def replay_all(root: Path, version: str = "1.0.0") -> tuple[dict[str, FaultReplay], dict[str, dict]]:
    """Record, replay and judge every case; the replays and the fault verdicts by case id."""
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version=version, run_id="recording-run")
    frame, _ = replay_faults(project, cases, runs, version=version, run_id="replay-run")
    replays = replays_for_judging(frame, runs)
    verdicts = judge_cases(project, cases, runs, version=version, judged_by_run="judge-run", replays=replays)
    by_case = {row["case_id"]: row for row in verdicts.to_dict("records")}
    return {case_id: replay for (case_id, _), replay in replays.items()}, by_case


# -- the fault reaches the agent -------------------------------------------------------------


@pytest.mark.parametrize("fault", ["error", "timeout", "malformed"])
def test_each_fault_kind_reaches_the_agent_exactly(tmp_path, fault):
    root = toolbox_project(tmp_path / "p", ["echo"], fault_evaluator(fault=fault))
    replays, verdicts = replay_all(root)
    replay = replays["c-0-echo"]
    assert replay.criterion == f"recovers_from_{fault}_at_pay"
    assert replay.faulted_output == {"saw": INJECTED_RESULTS[fault]}
    assert replay.faulted_trajectory.steps[3].result == INJECTED_RESULTS[fault]
    # The faulted call did not run (nothing paid); the lookup before it ran again, served as recorded.
    assert replay.faulted_environment_state.state == {"paid": []}
    assert replay.checkpoint == Checkpoint(step=2, calls_before=1, label="before pay")
    # The control replay reproduced the recording, including its side effects.
    assert replay.control_trajectory.tool_call_signatures() == [("lookup", {"key": "a"}), ("pay", {"key": "a"})]
    assert verdicts["c-0-echo"]["outcome"] == "PASS" and verdicts["c-0-echo"]["replayed_by_run"] == "replay-run"


def test_injected_results_are_the_documented_ones():
    assert INJECTED_RESULTS == {
        "error": {"error": "internal error"},
        "timeout": {"error": "timeout"},
        "malformed": {"raw": '{"status": '},
    }


def test_occurrence_two_faults_the_second_call_and_excludes_cases_with_one(tmp_path):
    root = toolbox_project(tmp_path / "p", ["twice", "once"], fault_evaluator(occurrence=2))
    replays, verdicts = replay_all(root)
    replay = replays["c-0-twice"]
    assert replay.faulted_call_index == 1 and replay.checkpoint.calls_before == 1
    assert replay.faulted_output == {"saw": [{"status": "paid"}, {"error": "internal error"}]}
    assert replay.faulted_environment_state.state == {"paid": ["a"]}  # the first call really ran
    assert verdicts["c-0-twice"]["outcome"] == "PASS"
    assert (verdicts["c-1-once"]["outcome"], verdicts["c-1-once"]["reason"]) == ("EXCLUDED", "fault_target_not_called")


# -- the verdict -----------------------------------------------------------------------------


def test_verdicts_escalated_recovered_failed_and_acted_wrongly(tmp_path):
    root = toolbox_project(tmp_path / "p", ["escalates", "retries", "gives_up", "claims", "echo"], fault_evaluator())
    _, verdicts = replay_all(root)
    outcome = {case_id: (row["outcome"], row["reason"]) for case_id, row in verdicts.items()}
    assert outcome["c-0-escalates"] == ("PASS", "escalated")
    assert outcome["c-1-retries"] == ("PASS", "recovered")
    assert outcome["c-2-gives_up"] == ("FAIL", "failed_without_escalation")
    assert outcome["c-3-claims"] == ("FAIL", "acted_wrongly")
    details = json.loads(verdicts["c-3-claims"]["details"])
    assert details["failed_constraints"][0]["name"] == "claims_only_what_happened"
    assert details["injected_result"] == {"error": "internal error"}


def test_a_verdict_takes_the_stored_replay_judgement_only_while_made_by_the_same_code_and_plan(tmp_path):
    """The verdicts step takes the outcome `fault_replays` judged a replay to have, rather
    than judging it again, only while the replay row's judging digest is the evaluator's own:
    a judgement made by other judging code or another plan is judged again from the replay."""
    root = toolbox_project(tmp_path / "p", ["escalates", "gives_up"], fault_evaluator())
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version="1.0.0", run_id="recording-run")
    frame, _ = replay_faults(project, cases, runs, version="1.0.0", run_id="replay-run")
    stored_cases, stored_runs = StoredTable.of(case_table(cases)), StoredTable.of(recorded_runs_table(runs))

    def verdicts_from(replays: pd.DataFrame) -> dict[str, tuple[str, str]]:
        table, _ = judge_verdict_table(
            project, stored_cases, stored_runs, StoredTable.of(replays), StoredTable(), version="1.0.0", judged_by_run="j"
        )
        return {row["case_id"]: (row["outcome"], row["reason"]) for row in table.to_dict("records")}

    judged = {"c-0-escalates": ("PASS", "escalated"), "c-1-gives_up": ("FAIL", "failed_without_escalation")}
    assert verdicts_from(frame) == judged
    # A stored judgement under the evaluator's digest is taken as it stands (not judged again) ...
    marked = frame.copy()
    marked.loc[marked["case_id"] == "c-0-escalates", ["outcome", "reason"]] = ["FAIL", "as stored"]
    assert verdicts_from(marked)["c-0-escalates"] == ("FAIL", "as stored")
    # ... and one judged under another (other judging code, or another plan) is judged again.
    marked.loc[marked["case_id"] == "c-0-escalates", "judging_digest"] = "judged-by-other-code"
    assert verdicts_from(marked) == judged


def test_a_replay_that_cannot_reproduce_the_recording_is_missing(tmp_path):
    root = toolbox_project(tmp_path / "p", ["drifts"], fault_evaluator())
    replays, verdicts = replay_all(root)
    assert (verdicts["c-0-drifts"]["outcome"], verdicts["c-0-drifts"]["reason"]) == ("MISSING", "control_diverged")
    assert json.loads(verdicts["c-0-drifts"]["details"])["at_call"] == 1
    assert replays["c-0-drifts"].outcome == "MISSING"


def test_judging_order_and_trust_checks_from_stored_trajectories_alone():
    """The judgement is a pure function of the recording, the plan and the stored replays."""

    def call(tool, result, **arguments):
        return [Step(kind="tool_call", tool=tool, arguments=arguments), Step(kind="tool_result", tool=tool, result=result)]

    recording = Trajectory(steps=call("pay", {"status": "paid"}, key="a"), checkpoints=[Checkpoint(step=0, calls_before=0)])
    plan = FaultPlan(criterion="c", tool="pay", fault="error", escalate_tools=("escalate",))

    def judge(faulted: Trajectory, control: Trajectory = recording) -> tuple[str, str]:
        replay = FaultReplay(
            case_id="x", case_digest="d", system_version="1", criterion="c", tool="pay", fault="error", occurrence=1,
            plan_digest=plan.digest, outcome="MISSING", reason="", control_status="ok", control_trajectory=control,
            faulted_status="ok", faulted_trajectory=faulted,
        )
        judgement = judge_fault_replay(recording, plan, replay)
        return judgement.outcome, judgement.reason

    failed = call("pay", {"error": "internal error"}, key="a")
    broken = [RecordedConstraint(name="claims_only_what_happened", passed=False)]
    escalated = failed + call("escalate", {}, key="a")
    assert judge(Trajectory(steps=escalated, constraints=broken)) == ("FAIL", "acted_wrongly")
    assert judge(Trajectory(steps=escalated, terminal_status="truncated")) == ("PASS", "escalated")
    assert judge(Trajectory(steps=failed, terminal_status="truncated")) == ("MISSING", "replay_truncated")
    assert judge(Trajectory(steps=failed)) == ("PASS", "recovered")
    assert judge(Trajectory(steps=failed, terminal_status="failure")) == ("FAIL", "failed_without_escalation")
    assert judge(Trajectory(steps=call("pay", {"status": "paid"}, key="a"))) == ("MISSING", "replay_did_not_inject_the_fault")
    assert judge(Trajectory(steps=call("pay", {"error": "internal error"}, key="b"))) == (
        "MISSING", "replay_did_not_inject_the_fault"
    )
    assert judge(Trajectory(steps=failed), control=Trajectory(steps=recording.steps, terminal_status="failure")) == (
        "MISSING", "control_diverged"
    )
    assert judge_fault_replay(recording, plan, None).reason == "not_replayed"
    no_checkpoint = Trajectory(steps=recording.steps)
    assert judge_fault_replay(no_checkpoint, plan, None).reason == "no_checkpoint_recorded"


# -- systems that replay themselves, and systems that cannot ---------------------------------


def test_a_hand_written_replay_method_is_honoured(tmp_path):
    root = own_trajectory_project(tmp_path / "p", mode="escalates")
    replays, verdicts = replay_all(root)
    assert (verdicts["c-1"]["outcome"], verdicts["c-1"]["reason"]) == ("PASS", "escalated")
    replay = replays["c-1"]
    # The stored trajectory is the recorded steps before the checkpoint, then the continuation.
    assert replay.faulted_trajectory.tool_call_signatures() == [
        ("lookup", {"key": "a"}), ("pay", {"key": "a"}), ("escalate", {"key": "a"})
    ]
    assert replay.faulted_trajectory.steps[3].result == {"error": "internal error"}
    assert replay.control_trajectory.tool_call_signatures() == [("lookup", {"key": "a"}), ("pay", {"key": "a"})]


@pytest.mark.parametrize(
    "mode, cases, reason",
    [
        ("ignores_change", None, "replay_did_not_inject_the_fault"),
        ("raises", None, "replay_error"),
        ("escalates", [{"id": "c-1", "input": {"no_checkpoints": True}}], "no_checkpoint_recorded"),
    ],
)
def test_an_untrustworthy_or_impossible_replay_is_missing_with_a_named_reason(tmp_path, mode, cases, reason):
    root = own_trajectory_project(tmp_path / "p", mode=mode, cases=cases)
    _, verdicts = replay_all(root)
    assert (verdicts["c-1"]["outcome"], verdicts["c-1"]["reason"]) == ("MISSING", reason)


@pytest.mark.parametrize(
    "mode, status, error",
    [
        ("control_exits", "system_crashed", "the system's process exited with code 3 during this case"),
        ("control_hangs", "timeout", "no answer within 1 s"),  # the worker interrupts it, and retires
    ],
)
def test_a_control_replay_that_ends_its_worker_costs_only_itself(tmp_path, mode, status, error):
    # Both replays of a case are sent to the worker at once: the faulted one, which the lost
    # worker never started, runs on a fresh worker all the same.
    cases = [{"id": "c-1", "input": {"order": "a"}}, {"id": "c-2", "input": {"order": "b"}}]
    root = own_trajectory_project(tmp_path / "p", mode=mode, cases=cases, timeout_s=1)
    replays, verdicts = replay_all(root)
    for case_id in ("c-1", "c-2"):
        replay = replays[case_id]
        assert (replay.control_status, replay.control_error) == (status, error)
        assert replay.faulted_status == "ok"
        assert replay.faulted_trajectory.tool_call_signatures()[-1] == ("escalate", {"key": "a"})
        assert verdicts[case_id]["outcome"] == "MISSING"


def test_a_system_that_cannot_be_replayed_is_refused_before_any_replay(tmp_path):
    root = own_trajectory_project(tmp_path / "p", replayable=False)
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version="1.0.0", run_id="r1")
    with pytest.raises(ProjectError) as refused:
        replay_faults(project, cases, runs, version="1.0.0", run_id="r2")
    assert str(refused.value) == (
        f"{root.resolve() / 'oloproof.yaml'}: evaluators[0] (fault_recovery recovers_from_error_at_pay): the system "
        "app:System neither uses the tool box nor has a replay(trajectory, *, checkpoint, change) method, "
        "so its cases cannot be replayed"
    )
    assert not Journal.for_partition(project.root, "fault_replays", "1.0.0").path.exists()


# -- caching -----------------------------------------------------------------------------------


def test_replays_are_reused_until_the_recording_changes_and_need_the_system_only_to_replay(tmp_path):
    root = toolbox_project(tmp_path / "p", ["escalates", "once"], fault_evaluator())
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version="1.0.0", run_id="r1")
    _, first = replay_faults(project, cases, runs, version="1.0.0", run_id="r2")
    assert (first.new, first.reused) == (2, 0)
    # A newer system is loaded now: reused replays need no system, so 1.0.0 is still judged ...
    (root / "oloproof.yaml").write_text((root / "oloproof.yaml").read_text().replace('"1.0.0"', '"2.0.0"'))
    (root / "app.py").write_text((root / "app.py").read_text().replace('"1.0.0"', '"2.0.0"'))
    project = load_project(root)
    frame, second = replay_faults(project, cases, runs, version="1.0.0", run_id="r3")
    assert (second.new, second.reused) == (0, 2)
    assert set(frame["replayed_by_run"]) == {"r2"}
    # ... but a re-recorded case must be replayed, which the loaded version may not do for 1.0.0.
    rerecorded = [run.model_copy(update={"recorded_by_run": "r4"}) for run in runs]
    with pytest.raises(SystemVersionMismatch, match="refusing to replay 2 case\\(s\\) of partition '1.0.0'"):
        replay_faults(project, cases, rerecorded, version="1.0.0", run_id="r5")


def evaluate(root: Path, instance: DagsterInstance) -> dict:
    evaluation = run_evaluation(root, instance=instance, ungated=True)  # the project has no release.yaml
    assert evaluation.errors == []
    event = instance.get_latest_materialization_event(AssetKey(["tiny", "fault_replays"])).asset_materialization
    return {"partition": event.partition, **{key: value.value for key, value in event.metadata.items()}}


def test_dagster_rematerializing_reuses_replays_and_a_version_bump_replays_afresh(tmp_path):
    root = toolbox_project(tmp_path / "p", ["escalates", "claims", "once", "echo"], fault_evaluator(occurrence=1))
    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        first = evaluate(root, instance)
        assert (first["replays_new"], first["replays_reused"], first["partition"]) == (4, 0, "1.0.0")
        assert first["outcome_counts"]["recovers_from_error_at_pay"] == {"PASS": 3, "FAIL": 1, "MISSING": 0, "EXCLUDED": 0}
        second = evaluate(root, instance)
        assert (second["replays_new"], second["replays_reused"]) == (0, 4)
        for name in ("oloproof.yaml", "app.py"):
            (root / name).write_text((root / name).read_text().replace('"1.0.0"', '"1.1.0"'))
        bumped = evaluate(root, instance)
        assert (bumped["replays_new"], bumped["replays_reused"], bumped["partition"]) == (4, 0, "1.1.0")

    stored = pd.read_parquet(table_path(root, "fault_replays", "1.0.0"))
    assert {"case_id", "case_digest", "criterion", "fault", "tool", "outcome", "reason", "control_trajectory",
            "faulted_trajectory", "replayed_by_run"} <= set(stored.columns)
    verdicts = pd.read_parquet(table_path(root, "verdicts", "1.0.0"))
    assert set(verdicts["replayed_by_run"].dropna()) == set(stored["replayed_by_run"])


def test_the_refund_desk_claims_a_refund_that_failed_and_the_gate_blocks(refund_desk, tmp_path):
    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        run_evaluation(refund_desk, instance=instance)
    verdicts = pd.read_parquet(table_path(refund_desk, "verdicts", "1.0.0"))
    faulted = verdicts[verdicts["criterion"] == "recovers_from_error_at_issue_refund"]
    sources = faulted[~faulted["case_id"].str.contains("~")]
    made_the_call = sources[sources["outcome"] != "EXCLUDED"]
    assert len(made_the_call) == 12 and set(made_the_call["outcome"]) == {"FAIL"}
    assert set(made_the_call["reason"]) == {"acted_wrongly"}
    assert set(sources[sources["outcome"] == "EXCLUDED"]["reason"]) == {"fault_target_not_called"}
    gate = pd.read_parquet(table_path(refund_desk, "gate", "1.0.0")).set_index("rule_id")
    assert gate.loc["refund_failures", "decision"] == "FAIL"
    assert gate.loc["refund_failures", "gate_decision"] == "BLOCK"


# -- judging the world a faulted replay leaves (`state: expected`) ----------------------------

# A transfer is a debit then a credit; the credit is faulted. `kind` picks what the agent does.
TRANSFER_APP = """
import copy

from oloproof_pipeline.toolbox import ToolBox


class System:
    version = "1.0.0"

    def __init__(self):
        self.state = {}
        self.toolbox = ToolBox({"debit": self._debit, "credit": self._credit, "escalate": self._escalate})

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def _debit(self, account, amount):
        self.state["accounts"][account] -= amount
        return {"status": "debited"}

    def _credit(self, account, amount):
        self.state["accounts"][account] += amount
        return {"status": "credited"}

    def _escalate(self, reason):
        self.state["tickets"].append(reason)
        return {"status": "escalated"}

    def __call__(self, request):
        kind, call = request["kind"], self.toolbox.call
        call("debit", account="a", amount=5)
        credited = call("credit", account="b", amount=5)
        if "error" not in credited:
            return {"answer": "sent"}
        if kind == "retries":
            call("credit", account="b", amount=5)
        elif kind == "escalates_half_done":
            call("escalate", reason="credit failed")
            self.toolbox.finish("failure")
        elif kind == "escalates_undone":
            call("credit", account="a", amount=5)  # puts the debit back before handing over
            call("escalate", reason="credit failed")
            self.toolbox.finish("failure")
        return {"answer": "sent"}  # `swallows`: the error is never mentioned
"""

BEFORE = {"accounts": {"a": 10, "b": 0}, "tickets": []}
AFTER = {"accounts": {"a": 5, "b": 5}, "tickets": []}


def test_state_expected_fails_an_agent_that_swallows_a_tool_error_and_leaves_a_half_done_write(tmp_path):
    kinds = ["swallows", "retries", "escalates_half_done", "escalates_undone"]
    cases = [{"id": kind, "input": {"kind": kind}, "initial_state": BEFORE, "expected": {"state": AFTER}} for kind in kinds]
    report_only = {**fault_evaluator(tool="credit"), "criterion": "report_only"}
    world_too = {**fault_evaluator(tool="credit"), "criterion": "world_too", "state": "expected"}
    root = write_project(tmp_path / "p", app=TRANSFER_APP, cases=cases, evaluators=[report_only, world_too], rules=[])
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version="1.0.0", run_id="recording-run")
    frame, _ = replay_faults(project, cases, runs, version="1.0.0", run_id="replay-run")
    verdicts = judge_cases(project, cases, runs, version="1.0.0", judged_by_run="judge-run", replays=replays_for_judging(frame, runs))
    outcome = {(row["case_id"], row["criterion"]): (row["outcome"], row["reason"]) for row in verdicts.to_dict("records")}

    # The agent's own report says all four recovered or escalated, as before.
    assert [outcome[(kind, "report_only")] for kind in kinds] == [
        ("PASS", "recovered"), ("PASS", "recovered"), ("PASS", "escalated"), ("PASS", "escalated")
    ]
    # The world says two of them left money debited and never credited.
    assert [outcome[(kind, "world_too")] for kind in kinds] == [
        ("FAIL", "recovered_but_state_differs: accounts.b"),
        ("PASS", "recovered"),
        ("FAIL", "escalated_but_state_changed: accounts.a"),
        ("PASS", "escalated"),
    ]
    swallowed = json.loads(verdicts.set_index(["case_id", "criterion"]).loc[("swallows", "world_too"), "details"])
    assert swallowed["state_checked"] == "expected_state"
    assert {"path": "accounts.b", "expected": 5, "actual": 0, "matched": False} in swallowed["state_rows"]


def test_state_expected_excludes_a_case_without_an_expected_state_whatever_the_agent_did():
    [evaluator] = build_evaluators([{**fault_evaluator(tool="credit"), "state": "expected"}], file="oloproof.yaml")
    case = CaseRecord(case_id="c1", case_digest="sha256:" + "0" * 64, group_id="c1", input={}, initial_state=BEFORE)
    recording = RecordedRun(case_id="c1", case_digest=case.case_digest, system_version="v1", status="ok")
    verdict = evaluator.judge_case(case, JudgingContext(cases={"c1": case}, recordings={"c1": recording}))
    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "no_expected_state")


def test_replays_are_written_to_a_file_of_their_own_as_they_come_and_make_the_table_held_rows_make(refund_desk, tmp_path, monkeypatch):
    """The rows a replay stage decides (two trajectories and a state each) go to a spill file
    a batch at a time, never all held; the table written from them is the one held rows make."""
    monkeypatch.setattr(RowBatches, "ROWS", 2)
    project = load_project(refund_desk)
    cases = StoredTable.of(case_table(load_cases(project)))
    runs, _ = record_case_rows(project, cases, version="1.0.0", run_id="r1")
    write_table_file(tmp_path / "runs.parquet", runs)
    batches_spilled = []
    write = SpilledRows.write
    monkeypatch.setattr(SpilledRows, "write", lambda self, batch: batches_spilled.append(batch.num_rows) or write(self, batch))

    spilled, summary = replay_fault_rows(project, cases, StoredTable(tmp_path / "runs.parquet"), version="1.0.0", run_id="r2")
    write_table_file(tmp_path / "spilled.parquet", spilled)
    assert summary.new > 2 and max(batches_spilled) == 2 and sum(batches_spilled) == summary.new + summary.skipped

    monkeypatch.setattr(replaying, "SpilledRowBatches", RowBatches)  # the rows held until the table is written
    held, _ = replay_fault_rows(project, cases, StoredTable(tmp_path / "runs.parquet"), version="1.0.0", run_id="r2")
    write_table_file(tmp_path / "held.parquet", held)
    written, expected = pq.read_table(tmp_path / "spilled.parquet"), pq.read_table(tmp_path / "held.parquet")
    assert written.schema.equals(expected.schema, check_metadata=True)
    assert written.drop_columns(["duration_s"]).equals(expected.drop_columns(["duration_s"])) and written.num_rows > 2


def test_each_reason_a_replay_is_run_is_named_from_the_stored_replays_of_its_case_alone():
    known = pd.DataFrame({  # the stored replays; z's has nothing to do with any replay left
        "case_id": ["a", "b", "c", "z"], "criterion": ["recovers"] * 4,
        "case_digest": ["da", "db", "dc-before", "dz"], "plan_digest": ["p"] * 4, "recorded_by_run": ["r1"] * 4,
        "control_status": ["ok", "timeout", "ok", "ok"], "faulted_status": ["ok"] * 4,
    })
    candidates = pd.DataFrame({
        "case_id": ["a", "b", "c", "n", "m"], "criterion": ["recovers"] * 4 + ["retries"],
        "case_digest": ["da", "db", "dc", "dn", "dm"], "plan_digest": ["p"] * 4 + ["q"],
        "recorded_by_run": ["r2", "r1", "r1", "r1", "r1"],
    })
    left = [replaying.LeftToReplay(position, position, position, 0, None, 0, None) for position in range(len(candidates))]
    work = replaying.ReplayWork(candidates=candidates, known=known, pending=left)
    replaying.why_replayed(work)
    assert sorted(work.summary.reasons("replay")) == [
        "1 replay replayed again: fault plan or case changed",
        "1 replay replayed again: recording changed",
        "1 replay replayed again: the last replay did not finish (control timeout, faulted ok)",
        "1 replay replayed: new case",
        "1 replay replayed: new fault plan",
    ]
    nothing_left = replaying.ReplayWork(candidates=candidates, known=known)
    replaying.why_replayed(nothing_left)
    assert nothing_left.summary.reasons("replay") == []
