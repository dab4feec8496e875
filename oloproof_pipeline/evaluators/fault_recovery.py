"""`fault_recovery`: how the agent behaves when one tool call fails.

The `fault_replays` asset replays each case with the `occurrence`-th call of `tool` answered by
a fixed fault (see `run/replaying.py`); this evaluator judges the stored replay: a
recorded constraint that failed is FAIL (`acted_wrongly`), an escalation after the fault PASS
(`escalated`), then truncated MISSING, success PASS (`recovered`), failure FAIL. A replay that
cannot be trusted (the control run did not reproduce the recording, the fault never reached the
agent) is MISSING, never a pass. Cases that never made the call are EXCLUDED.

With `state: expected` the world is judged too, not only the agent's report: a replay the agent
recovered must leave the case's `expected.state` (compared as `state_mode` says), and one it
escalated must leave the records the case writes (those its expected state changes from its
`initial_state`) as they started, so a half-done write fails either way. The reason names the
part that failed (`recovered_but_state_differs: <path>`, `escalated_but_state_changed: <path>`).
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, ClassVar, Literal

from pydantic import Field

from ..model.cases import CaseRecord
from ..model.fingerprints import producer_code_version, row_key
from ..model.faults import FaultKind, FaultPlan, FaultReplay, NoTextToChange, ResultTemplate, checkpoint_before
from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS, Judgement, Verdict
from ..model.records import RecordedRun, ReplayResult
from ..model.trajectory import Checkpoint, Trajectory, first_difference, plain_json
from ..model.paths import ABSENT, join_path, read_path
from .base import Evaluator, EvaluatorConfig, JudgingContext
from .state_matches import Mode, StateComparison, expected_state_of, first_difference as first_state_difference


class FaultRecoveryConfig(EvaluatorConfig):
    tool: str = Field(min_length=1)
    # A fixed fault, or `{kind: template, ...}`: the tool's real result with its text changed.
    fault: FaultKind | ResultTemplate
    occurrence: int = Field(default=1, ge=1)
    # Calling any of these after the fault counts as handing the case to a person (a PASS).
    escalate_tools: list[str]
    # Ours (Oloproof judges only the agent's report): `expected` also judges the world the
    # faulted replay leaves, against the case's expected state.
    state: Literal["expected"] | None = None
    # How the replay's end state is compared with `expected.state`, as `state_matches`'s `mode`.
    state_mode: Mode = "exact"


class FaultRecovery(Evaluator):
    type: ClassVar[str] = "fault_recovery"
    config_model: ClassVar[type[EvaluatorConfig]] = FaultRecoveryConfig
    replay_driven: ClassVar[bool] = True
    config: FaultRecoveryConfig

    def default_criterion(self) -> str:
        return f"recovers_from_{self._fault_kind}_at_{self.config.tool}"

    @property
    def _fault_kind(self) -> str:
        fault = self.config.fault
        return fault.kind if isinstance(fault, ResultTemplate) else fault

    @cached_property
    def fault_plan(self) -> FaultPlan:
        """What `fault_replays` replays for this evaluator (found there by this attribute); made
        once, not per case judged (its config is set when the evaluator is built)."""
        fault = self.config.fault
        return FaultPlan(
            criterion=self.criterion,
            tool=self.config.tool,
            fault=self._fault_kind,
            occurrence=self.config.occurrence,
            escalate_tools=tuple(self.config.escalate_tools),
            result_template=fault if isinstance(fault, ResultTemplate) else None,
        )

    @cached_property
    def judging_digest(self) -> str:
        return judging_digest(self.fault_plan)

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        plan = self.fault_plan
        key = (case.case_id, self.criterion)
        replay = context.replays.get(key)
        if replay is not None and not replay.belongs_to(recording, plan):
            replay = None  # made from an older recording or another plan: not evidence for this one
        if self.config.state == "expected" and expected_state_of(case) is ABSENT:
            # Judged on the world or not at all: excluding only the cases that would pass skews the rate.
            return self.verdict(case, EXCLUDED, "no_expected_state")
        if replay is not None and context.replays_judged_under.get(key) == self.judging_digest:
            # `fault_replays` judged this very replay of this recording, by this code and plan:
            # its judgement is what judging it again would give.
            judgement = Judgement(outcome=replay.outcome, reason=replay.reason, details=replay.details)
        else:
            judgement = judge_fault_replay(recording.trajectory, plan, replay)
        if self.config.state == "expected" and judgement.outcome == PASS and replay is not None:
            judgement = judge_world_after_fault(case, replay, judgement, self.config.state_mode)
        return self.verdict(case, judgement.outcome, judgement.reason, judgement.details)


def judging_digest(plan: FaultPlan) -> str:
    """The whole plan a stored outcome was judged under, and the judge's version: when the
    escalation tools change, stored replays are judged again (not replayed), and a verdict
    takes a stored replay's judgement only while this holds."""
    return row_key("fault_judging", plan.model_dump_json(), producer_code_version("verdicts"))


# -- judging the world a replay leaves (`state: expected`) --------------------------------------


def written_records(initial: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """The paths of the records the expected state changes: a `table.record` whose value
    differs, or a whole top-level entry when it is not a table of records on both sides."""
    paths = []
    for table in dict.fromkeys([*initial, *expected]):
        before, after = initial.get(table, ABSENT), expected.get(table, ABSENT)
        if before == after:
            continue
        if isinstance(before, dict) and isinstance(after, dict):
            keys = dict.fromkeys([*before, *after])
            paths += [join_path([table, key]) for key in keys if before.get(key, ABSENT) != after.get(key, ABSENT)]
        else:
            paths.append(join_path([table]))
    return paths


def judge_world_after_fault(case: CaseRecord, replay: FaultReplay, agent: Judgement, mode: Mode) -> Judgement:
    """An agent-level PASS that also holds in the world, or the FAIL naming what does not."""
    faulted = replay.faulted()
    if faulted is None or faulted.environment_state is None:
        return Judgement(outcome=MISSING, reason="no_replayed_state", details=agent.details)
    expected, initial = expected_state_of(case), case.initial_state or {}
    if agent.reason == "escalated":
        # Handed to a person: what the case would have written must not be half written.
        paths, comparison, want = written_records(initial, expected), StateComparison("exact"), initial
        part, checked = "escalated_but_state_changed", "written_records_as_they_started"
    else:
        paths, comparison, want = [""], StateComparison(mode), expected
        part, checked = "recovered_but_state_differs", "expected_state"
    after = faulted.state_after
    rows = [row for path in paths for row in comparison.rows(path, read_path(want, path), read_path(after, path))]
    details = {**agent.details, "state_checked": checked, "state_rows": rows}
    first = first_state_difference(rows)
    if first is None:
        return Judgement(outcome=PASS, reason=agent.reason, details=details)
    return Judgement(outcome=FAIL, reason=f"{part}: {first}", details=details)


# -- judging a replay (pure) ---------------------------------------------------------------


def describe_call(signatures: list[tuple[str | None, Any]], index: int) -> dict[str, Any] | None:
    if index >= len(signatures):
        return None
    tool, arguments = signatures[index]
    return {"tool": tool, "arguments": arguments}


def call_difference(
    recorded: list[tuple[str | None, Any]], replayed: list[tuple[str | None, Any]], upto: int | None = None
) -> dict[str, Any] | None:
    """Where the replay's calls first differ from the recording's (among the first `upto`),
    each given as its `call_signatures`."""
    ours, theirs = recorded[:upto], replayed[:upto]
    at = first_difference(ours, theirs)
    if at is None:
        return None
    return {"at_call": at, "recorded": describe_call(ours, at), "replayed": describe_call(theirs, at)}


def control_divergence(recorded: Trajectory, control: Trajectory, recorded_calls: list[tuple[str | None, Any]]) -> dict[str, Any] | None:
    """Why the control replay does not reproduce the recording (whose `call_signatures` are
    `recorded_calls`), or None when it does."""
    difference = call_difference(recorded_calls, control.call_signatures())
    if difference is not None:
        return difference
    if control.terminal_status != recorded.terminal_status:
        return {"terminal_status": {"recorded": recorded.terminal_status, "replayed": control.terminal_status}}
    return None


def injection_problem(
    call_index: int, expected_result: Any, result: Any,
    calls: tuple[list[tuple[str | None, Any]], list[tuple[str | None, Any]]],
) -> dict[str, Any] | None:
    """None when the faulted replay made the recorded call at `call_index` and the injected
    result (`expected_result`, the plan's `result_at` the recording) came back right after it
    (`result`: `injected_result` of the faulted replay). `calls`: both trajectories'
    `call_signatures`."""
    recorded_call = describe_call(calls[0], call_index)
    replayed_call = describe_call(calls[1], call_index)
    if replayed_call == recorded_call and result == plain_json(expected_result):
        return None
    return {
        "at_call": call_index,
        "recorded": recorded_call,
        "replayed": replayed_call,
        "expected_result": expected_result,
        "result": result,
    }


def replay_problem(which: str, result: ReplayResult | None) -> Judgement | None:
    """A replay that did not finish makes the case MISSING, named after what went wrong."""
    if result is None:
        return Judgement(outcome=MISSING, reason="not_replayed", details={"replay": which})
    if result.status == "ok" and result.trajectory is not None:
        return None
    reason = "system_not_replayable" if result.status == "not_replayable" else f"replay_{result.status}"
    if result.status == "ok":
        reason = "replay_without_trajectory"
    return Judgement(outcome=MISSING, reason=reason, details={"replay": which, "error": result.error})


def judge_fault_replay(recording: Trajectory | None, plan: FaultPlan, replay: FaultReplay | None) -> Judgement:
    """Trust checks first (any failure is MISSING, never a pass), then the verdict in order:
    a failed recorded constraint, an escalation after the fault, truncated, success, failure."""
    call_index = plan.faulted_call_index(recording)
    if recording is None or call_index is None:
        return Judgement(
            outcome=EXCLUDED, reason="fault_target_not_called", details={"tool": plan.tool, "occurrence": plan.occurrence}
        )
    try:
        expected_result = plan.result_at(recording, call_index)
    except NoTextToChange as problem:
        # The recorded result holds no text to change: like a call never made, not a pass.
        return Judgement(outcome=EXCLUDED, reason="fault_target_has_no_text", details={"problem": str(problem)})
    checkpoint = checkpoint_before(recording, call_index)
    if checkpoint is None:
        return Judgement(outcome=MISSING, reason="no_checkpoint_recorded", details={"faulted_call": call_index})
    control, faulted = (replay.control(), replay.faulted()) if replay is not None else (None, None)
    recorded_calls = recording.call_signatures()  # each trajectory's calls made plain JSON once
    for which, result in (("control", control), ("faulted", faulted)):
        problem = replay_problem(which, result)
        if problem is not None:
            return problem
        if which == "control":
            divergence = control_divergence(recording, control.trajectory, recorded_calls)
            if divergence is not None:
                return Judgement(outcome=MISSING, reason="control_diverged", details=divergence)
    faulted_calls = faulted.trajectory.call_signatures()
    before = call_difference(recorded_calls, faulted_calls, upto=call_index)
    if before is not None:
        return Judgement(outcome=MISSING, reason="replay_diverged_before_checkpoint", details=before)
    result = injected_result(faulted.trajectory, call_index)
    missing_fault = injection_problem(call_index, expected_result, result, (recorded_calls, faulted_calls))
    if missing_fault is not None:
        return Judgement(outcome=MISSING, reason="replay_did_not_inject_the_fault", details=missing_fault)
    return verdict_after_fault(faulted, call_index, checkpoint, plan, faulted_calls, result)


def injected_result(faulted: Trajectory, call_index: int) -> Any:
    """The result the agent got at the faulted call (None: the replay made no such call), as stored JSON reads back."""
    calls = faulted.calls()
    return plain_json(calls[call_index].result) if call_index < len(calls) else None


def verdict_after_fault(
    faulted: ReplayResult, call_index: int, checkpoint: Checkpoint, plan: FaultPlan, signatures: list[tuple[str | None, Any]],
    injected: Any,
) -> Judgement:
    """The verdict on what the agent did after the fault (`signatures`: the faulted replay's
    calls; `injected`: its `injected_result`, which came back as planned)."""
    trajectory = faulted.trajectory
    after = [describe_call(signatures, index) for index in range(call_index + 1, len(signatures))]
    failed = [constraint.model_dump(mode="json") for constraint in trajectory.failed_constraints()]
    escalations = [call for call in after if call["tool"] in plan.escalate_tools]
    details = {
        "faulted_call": {**describe_call(signatures, call_index), "index": call_index},
        "injected_result": injected,
        "checkpoint": checkpoint.model_dump(mode="json"),
        "calls_after_fault": after,
        "terminal_status": trajectory.terminal_status,
        "failed_constraints": failed,
        "output": faulted.output,
    }
    if failed:
        return Judgement(outcome=FAIL, reason="acted_wrongly", details=details)
    if escalations:
        return Judgement(outcome=PASS, reason="escalated", details=details)
    if trajectory.terminal_status == "truncated":
        return Judgement(outcome=MISSING, reason="replay_truncated", details=details)
    if trajectory.terminal_status == "success":
        return Judgement(outcome=PASS, reason="recovered", details=details)
    return Judgement(outcome=FAIL, reason="failed_without_escalation", details=details)
