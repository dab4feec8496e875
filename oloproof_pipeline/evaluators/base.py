"""What every evaluator shares: its config model, its criterion, and the rules that hold
before any evaluator looks at a case (copies excluded, failed recordings MISSING)."""

from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..model.cases import CaseRecord
from ..model.config import ProjectConfig
from ..model.paths import DottedPath, read_path
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, FAIL, METAMORPHIC_COPY, MISSING, NOT_SELECTED, Outcome, Verdict


class CaseSelector(BaseModel):
    """`applies_to`: the cases an evaluator judges; every condition given must hold. Oloproof
    scopes no evaluator to some cases, so the key is ours. A copy is selected with its source."""

    model_config = ConfigDict(extra="forbid")

    # Case id patterns (`*`, `?`, `[...]` as in shell globs), e.g. `banking-*`.
    ids: list[str] | None = Field(default=None, min_length=1)
    # Metadata paths and the value each must hold (or one of a list of values).
    metadata: dict[DottedPath, Any] | None = Field(default=None, min_length=1)
    # Any one of these in the case's `metadata.tags`.
    tags: list[str] | None = Field(default=None, min_length=1)

    def selects(self, case: CaseRecord) -> bool:
        case_id = case.source_id or case.case_id
        metadata = case.metadata or {}
        if self.ids is not None and not any(fnmatchcase(case_id, pattern) for pattern in self.ids):
            return False
        for path, wanted in (self.metadata or {}).items():
            if read_path(metadata, path) not in (wanted if isinstance(wanted, list) else [wanted]):
                return False
        tags = metadata.get("tags")
        if self.tags is not None and not (isinstance(tags, list) and any(tag in tags for tag in self.tags)):
            return False
        return True


class CaseFindings:
    """What an evaluator finds wrong with a dataset's cases, gathered over the batches a
    large set is checked in (`add`), so a problem reads the same however the set was cut:
    this one finds nothing."""

    def add(self, cases: list[CaseRecord]) -> None:
        pass

    def problems(self) -> list[str]:
        return []


class EvaluatorConfig(BaseModel):
    # `.inf` or `.nan` (a tolerance, a bar) would make a comparison pass or fail regardless.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    type: str
    criterion: str | None = None
    # Oloproof's key: a case whose system run failed (raised, timed out, returned no JSON) is
    # MISSING by default, or counts as a FAIL with `fail`.
    on_execution_error: Literal["missing", "fail"] = "missing"
    # Ours: the cases this evaluator judges; the others are EXCLUDED (`not_selected`) for it.
    applies_to: CaseSelector | None = None


@dataclass
class JudgingContext:
    """Everything judging may look at, keyed by case id. Built from stored tables, so a
    version can be re-graded without the system under test."""

    cases: dict[str, CaseRecord]
    recordings: dict[str, RecordedRun]
    # Fault replays by (case id, criterion); filled when the project declares fault plans.
    replays: dict[tuple[str, str], Any] = field(default_factory=dict)
    # The judging digest each of those replays was judged under as stored (fault_recovery's
    # `judging_digest`): a replay judged under the evaluator's own is not judged again.
    replays_judged_under: dict[tuple[str, str], str | None] = field(default_factory=dict)

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
        # Where the evaluator is declared (`oloproof.yaml:12: evaluators[2]`), for load errors;
        # set by `build_evaluators`.
        self.origin = "evaluators"

    def applies_to(self, case: CaseRecord) -> bool:
        selector = self.config.applies_to
        return selector is None or selector.selects(case)

    def case_findings(self) -> CaseFindings:
        """A fresh gathering of the load errors (one line each) this evaluator finds in the
        dataset: a path naming nothing in the cases it applies to. Fed the cases as they are
        loaded, a batch at a time."""
        return CaseFindings()

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
        if not self.applies_to(case):
            return self.verdict(case, EXCLUDED, NOT_SELECTED)
        return self.judge_selected(case, context)

    def judge_selected(self, case: CaseRecord, context: JudgingContext) -> Verdict:
        if case.is_derived and not self.pair_driven:
            return self.verdict(case, EXCLUDED, METAMORPHIC_COPY)
        return self.judge_recorded(case, context)

    def judge_recorded(self, case: CaseRecord, context: JudgingContext) -> Verdict:
        """The case judged by its own recording: MISSING (or `on_execution_error`) without a clean one."""
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
