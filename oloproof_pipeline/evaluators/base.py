"""What every evaluator shares: its config model, its criterion, and the rules that hold
before any evaluator looks at a case (copies excluded, failed recordings MISSING)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from ..model.cases import CaseRecord
from ..model.config import ProjectConfig
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, FAIL, METAMORPHIC_COPY, MISSING, Outcome, Verdict


class EvaluatorConfig(BaseModel):
    # `.inf` or `.nan` (a tolerance, a bar) would make a comparison pass or fail regardless.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: str
    criterion: str | None = None
    # Oloproof's key: a case whose system run failed (raised, timed out, returned no JSON) is
    # MISSING by default, or counts as a FAIL with `fail`.
    on_execution_error: Literal["missing", "fail"] = "missing"


@dataclass
class JudgingContext:
    """Everything judging may look at, keyed by case id. Built from stored tables, so a
    version can be re-graded without the system under test."""

    cases: dict[str, CaseRecord]
    recordings: dict[str, RecordedRun]
    # Fault replays by (case id, criterion); filled when the project declares fault plans.
    replays: dict[tuple[str, str], Any] = field(default_factory=dict)

    def recording_of(self, case_id: str) -> RecordedRun | None:
        return self.recordings.get(case_id)


class Evaluator:
    """Subclasses set `type`, `config_model`, and implement `judge`; and say what they read
    (the capabilities below, all False unless a kind sets them), which is how the rest of the
    pipeline picks evaluators without naming kinds."""

    type: ClassVar[str]
    config_model: ClassVar[type[EvaluatorConfig]]
    # Judges a derived copy against its source (a metamorphic relation); every other
    # evaluator excludes copies.
    pair_driven: ClassVar[bool] = False
    # Judges a fault replay of the recording (fault recovery), not the recording alone.
    replay_driven: ClassVar[bool] = False
    # Reads the world the run leaves, the tool calls it made, or its answer. A run of a case's
    # reference actions has no answer, so only state and trace readers judge it.
    reads_state: ClassVar[bool] = False
    reads_trace: ClassVar[bool] = False
    reads_answer: ClassVar[bool] = False
    # Compares the world the run leaves with the case's expected state: a run that does
    # nothing and passes it shows the expected state held at the start (certification).
    expects_state: ClassVar[bool] = False
    # Calls a model to judge (a rubric judge): judging runs these in threads, at most
    # `concurrency.judge` at once, and sums what they spent apart from the system's cost.
    calls_model: ClassVar[bool] = False

    def __init__(self, config: EvaluatorConfig):
        self.config = config

    def project_code_files(self, project_root: Path) -> list[Path]:
        """The project's own files this evaluator runs (a python grader's module): its verdicts'
        key covers them as it covers the evaluator's code."""
        return []

    def bind(self, config: ProjectConfig) -> None:
        """Called once the project is loaded: project-wide settings this evaluator follows."""

    def reusable(self, verdict: Verdict) -> bool:
        """Whether a later run may reuse this verdict while its key holds (not one that says
        only that a judge could not be reached: that is asked again)."""
        return True

    @property
    def criterion(self) -> str:
        return self.config.criterion or self.default_criterion()

    def default_criterion(self) -> str:
        return self.type

    def verdict(self, case: CaseRecord, outcome: Outcome, reason: str, details: Any = None) -> Verdict:
        return Verdict(case_id=case.case_id, criterion=self.criterion, outcome=outcome, reason=reason, details=details)

    def judge_case(self, case: CaseRecord, context: JudgingContext) -> Verdict:
        if case.is_derived and not self.pair_driven:
            return self.verdict(case, EXCLUDED, METAMORPHIC_COPY)
        recording = context.recording_of(case.case_id)
        if recording is None:
            return self.verdict(case, MISSING, "not_recorded")
        if recording.status != "ok":
            return self.verdict(case, self.execution_error_outcome, f"run_{recording.status}", {"error": recording.error})
        return self.judge(case, recording, context)

    @property
    def execution_error_outcome(self) -> Outcome:
        """What a failed system run counts as on this criterion (`on_execution_error`)."""
        return FAIL if self.config.on_execution_error == "fail" else MISSING

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        raise NotImplementedError
