"""`state_unchanged`: the named parts of the state are the same after the case as in `initial_state`.

A path absent at the start and at the end counts as unchanged; one that appears or disappears
is a change.
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from ..model.cases import CaseRecord
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS, Verdict
from .base import Evaluator, EvaluatorConfig, JudgingContext
from ..model.paths import DottedPath, read_path
from .state_matches import StateComparison, first_difference


class StateUnchangedConfig(EvaluatorConfig):
    # Without one, the criterion is `state_unchanged`, as in Oloproof.
    paths: list[DottedPath] = Field(min_length=1)


class StateUnchanged(Evaluator):
    type: ClassVar[str] = "state_unchanged"
    config_model: ClassVar[type[EvaluatorConfig]] = StateUnchangedConfig
    reads_state: ClassVar[bool] = True
    config: StateUnchangedConfig

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        if case.initial_state is None:
            return self.verdict(case, EXCLUDED, "no_initial_state")
        if recording.environment_state is None:
            return self.verdict(case, MISSING, "no_recorded_state")
        comparison = StateComparison("exact")
        rows = [
            row
            for path in self.config.paths
            for row in comparison.rows(path, read_path(case.initial_state, path), read_path(recording.state_after, path))
        ]
        first = first_difference(rows)
        if first is None:
            return self.verdict(case, PASS, "state_unchanged", rows)
        return self.verdict(case, FAIL, f"state_changed: {first}", rows)
