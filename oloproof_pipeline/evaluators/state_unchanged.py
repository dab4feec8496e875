"""`state_unchanged`: the named parts of the state are the same after the case as in `initial_state`.

The paths are the evaluator's `paths` and, in addition, the case's own `expected.unchanged`
(bystanders of that case only). A path that appears or disappears is a change. A path absent
at the start and at the end names no bystander, so it never passes: the load refuses a path
that names nothing in a case's starting or expected state, and a case reaching judging with
one is MISSING (`path_absent`), unless the evaluator sets `absent_ok: true` (the absence is
the point: the record must not come into being).
"""

from __future__ import annotations

from typing import Any, ClassVar, Iterator

from pydantic import Field

from ..model.cases import CaseRecord, unchanged_paths_of
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS, Verdict
from .base import CaseFindings, Evaluator, EvaluatorConfig, JudgingContext
from ..model.paths import ABSENT, DottedPath, read_path
from .state_matches import StateComparison, expected_state_of, first_difference, PathsNamingNothing


class StateUnchangedConfig(EvaluatorConfig):
    # Without one, the criterion is `state_unchanged`, as in Oloproof. Oloproof requires
    # `paths`; here a project may leave them to each case's `expected.unchanged`.
    paths: list[DottedPath] | None = Field(default=None, min_length=1)
    # Ours (Oloproof has no equivalent): a path absent before and after counts as unchanged.
    absent_ok: bool = False


class StateUnchanged(Evaluator):
    type: ClassVar[str] = "state_unchanged"
    config_model: ClassVar[type[EvaluatorConfig]] = StateUnchangedConfig
    reads_state: ClassVar[bool] = True
    config: StateUnchangedConfig

    def paths_of(self, case: CaseRecord) -> list[str]:
        """The evaluator's paths, then the case's own bystanders not already among them."""
        shared = self.config.paths or []
        return [*shared, *(path for path in unchanged_paths_of(case) if path not in shared)]

    def case_findings(self) -> CaseFindings:
        if self.config.absent_ok:
            return CaseFindings()
        return PathsNamingNothing(self, self._worlds, self.paths_of)

    def _worlds(self, cases: list[CaseRecord]) -> Iterator[tuple[CaseRecord, list[Any]]]:
        for case in cases:
            if case.initial_state is not None and self.applies_to(case):
                yield case, [case.initial_state, expected_state_of(case)]

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        if case.initial_state is None:
            return self.verdict(case, EXCLUDED, "no_initial_state")
        paths = self.paths_of(case)
        if not paths:
            return self.verdict(case, EXCLUDED, "no_unchanged_paths")
        if recording.environment_state is None:
            return self.verdict(case, MISSING, "no_recorded_state")
        before_and_after: list[tuple[str, Any, Any]] = [
            (path, read_path(case.initial_state, path), read_path(recording.state_after, path)) for path in paths
        ]
        absent = [path for path, before, after in before_and_after if before is ABSENT and after is ABSENT]
        if absent and not self.config.absent_ok:
            return self.verdict(case, MISSING, f"path_absent: {absent[0]}", {"paths": absent})
        comparison = StateComparison("exact")
        rows = [row for path, before, after in before_and_after for row in comparison.rows(path, before, after)]
        first = first_difference(rows)
        if first is None:
            return self.verdict(case, PASS, "state_unchanged", rows)
        return self.verdict(case, FAIL, f"state_changed: {first}", rows)
