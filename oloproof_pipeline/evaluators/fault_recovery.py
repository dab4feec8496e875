"""`fault_recovery`: how the agent behaves when one tool call fails.

The `fault_replays` asset replays each case with the `occurrence`-th call of `tool` answered by
a fixed fault; this evaluator judges the stored replay (see `oloproof_pipeline.replay`): a
recorded constraint that failed is FAIL (`acted_wrongly`), an escalation after the fault PASS
(`escalated`), then truncated MISSING, success PASS (`recovered`), failure FAIL. A replay that
cannot be trusted (the control run did not reproduce the recording, the fault never reached the
agent) is MISSING, never a pass. Cases that never made the call are EXCLUDED.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..project import CaseRecord
from ..recording import RecordedRun
from ..replay import FaultKind, FaultPlan, judge_fault_replay
from ..verdicts import Verdict
from .base import Evaluator, EvaluatorConfig, JudgingContext


class FaultRecoveryConfig(EvaluatorConfig):
    tool: str = Field(min_length=1)
    fault: FaultKind
    occurrence: int = Field(default=1, ge=1)
    # Calling any of these after the fault counts as handing the case to a person (a PASS).
    escalate_tools: list[str]


class FaultRecovery(Evaluator):
    type: ClassVar[str] = "fault_recovery"
    config_model: ClassVar[type[EvaluatorConfig]] = FaultRecoveryConfig
    config: FaultRecoveryConfig

    def default_criterion(self) -> str:
        return f"recovers_from_{self.config.fault}_at_{self.config.tool}"

    @property
    def fault_plan(self) -> FaultPlan:
        """What `fault_replays` replays for this evaluator (found there by this attribute)."""
        return FaultPlan(
            criterion=self.criterion,
            tool=self.config.tool,
            fault=self.config.fault,
            occurrence=self.config.occurrence,
            escalate_tools=tuple(self.config.escalate_tools),
        )

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        plan = self.fault_plan
        replay = context.replays.get((case.case_id, self.criterion))
        if replay is not None and not replay.belongs_to(recording, plan):
            replay = None  # made from an older recording or another plan: not evidence for this one
        judgement = judge_fault_replay(recording.trajectory, plan, replay)
        return self.verdict(case, judgement.outcome, judgement.reason, judgement.details)
