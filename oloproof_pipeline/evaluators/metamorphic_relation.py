"""`metamorphic_relation`: each copy made by one transform against its source's recording.

A copy of a request (a paraphrase, a pasted "SYSTEM OVERRIDE") should leave the agent doing
the same thing: the same output (or one field of it), the same ordered tool calls with the
same arguments, or the same state after. Only copies are judged; sources and copies of other
transforms are EXCLUDED, and a missing recording on either side makes the pair MISSING.
Without a `transform` (Oloproof's wording), the relation holds for the copies of every
transform, under the criterion `<relation>_under_transform`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import Field, model_validator

from ..model.cases import CaseRecord
from ..model.records import RecordedRun
from ..model.trajectory import first_difference
from ..model.outcomes import ANOTHER_TRANSFORM, EXCLUDED, FAIL, MISSING, NOT_A_METAMORPHIC_PAIR, PASS, Verdict
from .base import Evaluator, EvaluatorConfig, JudgingContext
from ..model.paths import ABSENT, DottedPath, absent_as_none, read_path
from ..model.transforms import as_the_copy_started
from .state_matches import StateComparison, leaf_count, values_equal

Relation = Literal["same_output", "same_actions", "same_state"]


class MetamorphicRelationConfig(EvaluatorConfig):
    relation: Relation
    transform: str | None = Field(default=None, pattern=r"^[a-z][a-z0-9_]*$")
    # same_output only: compare one field of the output instead of all of it.
    field: DottedPath | None = None

    @model_validator(mode="after")
    def _field_only_for_outputs(self) -> "MetamorphicRelationConfig":
        if self.field is not None and self.relation != "same_output":
            raise ValueError(f"'field' applies to relation same_output only, not {self.relation}")
        return self


class MetamorphicRelation(Evaluator):
    type: ClassVar[str] = "metamorphic_relation"
    config_model: ClassVar[type[EvaluatorConfig]] = MetamorphicRelationConfig
    pair_driven: ClassVar[bool] = True
    config: MetamorphicRelationConfig

    def default_criterion(self) -> str:
        return f"{self.config.relation}_under_{self.config.transform or 'transform'}"

    def judge_selected(self, case: CaseRecord, context: JudgingContext) -> Verdict:
        if not case.is_derived:
            return self.verdict(case, EXCLUDED, NOT_A_METAMORPHIC_PAIR)
        if self.config.transform is not None and case.transform != self.config.transform:
            return self.verdict(case, EXCLUDED, ANOTHER_TRANSFORM, {"transform": case.transform})
        source = context.recording_of(case.source_id or "")
        derived = context.recording_of(case.case_id)
        for side, recording in (("source", source), ("copy", derived)):
            if recording is None:
                return self.verdict(case, MISSING, f"{side}_not_recorded", {"source": case.source_id})
            if recording.status != "ok":
                outcome = self.execution_error_outcome
                return self.verdict(case, outcome, f"{side}_run_{recording.status}", {"error": recording.error})
        assert source is not None and derived is not None
        return self.judge_pair(case, source, derived, context.cases.get(case.source_id or ""))

    def judge_pair(
        self, case: CaseRecord, source: RecordedRun, derived: RecordedRun, source_case: CaseRecord | None = None
    ) -> Verdict:
        if self.config.relation == "same_state":
            return self._same_state(case, source, derived, source_case)
        compare = {"same_output": self._same_output, "same_actions": self._same_actions}[self.config.relation]
        return compare(case, source, derived)

    # -- the relations -------------------------------------------------------------------

    def _same_output(self, case: CaseRecord, source: RecordedRun, derived: RecordedRun) -> Verdict:
        path = self.config.field or ""
        source_value, copy_value = read_path(source.output, path), read_path(derived.output, path)
        details = {"field": path or None, "source": absent_as_none(source_value), "copy": absent_as_none(copy_value)}
        if source_value is ABSENT and copy_value is ABSENT:
            return self.verdict(case, MISSING, "output_field_absent", details)
        if source_value is ABSENT or copy_value is ABSENT:
            side = "source" if source_value is ABSENT else "copy"
            return self.verdict(case, FAIL, f"output_differs: {path} absent from the {side}", details)
        if values_equal(source_value, copy_value):
            return self.verdict(case, PASS, "same_output", details)
        return self.verdict(case, FAIL, f"output_differs: {path or '(whole output)'}", details)

    def _same_actions(self, case: CaseRecord, source: RecordedRun, derived: RecordedRun) -> Verdict:
        if source.trajectory is None or derived.trajectory is None:
            side = "source" if source.trajectory is None else "copy"
            return self.verdict(case, MISSING, f"{side}_has_no_trajectory")
        source_calls = [_call(signature) for signature in source.trajectory.tool_call_signatures()]
        copy_calls = [_call(signature) for signature in derived.trajectory.tool_call_signatures()]
        index = first_difference(source_calls, copy_calls, same=same_call)
        if index is None:
            return self.verdict(case, PASS, "same_actions", {"calls": len(source_calls)})
        details = {
            "first_difference": index,
            "source_call": source_calls[index] if index < len(source_calls) else None,
            "copy_call": copy_calls[index] if index < len(copy_calls) else None,
            "source_calls": source_calls,
            "copy_calls": copy_calls,
        }
        return self.verdict(case, FAIL, f"actions_differ: call {index}: {_describe(details)}", details)

    def _same_state(
        self, case: CaseRecord, source: RecordedRun, derived: RecordedRun, source_case: CaseRecord | None
    ) -> Verdict:
        if source.environment_state is None or derived.environment_state is None:
            side = "source" if source.environment_state is None else "copy"
            return self.verdict(case, MISSING, f"{side}_has_no_recorded_state")
        source_after = source.state_after
        if source_case is not None:
            # A transform into the world started the copy elsewhere: what it changed is not a difference.
            source_after = as_the_copy_started(source_after, source_case.initial_state, case.initial_state)
        comparison, copy_after = StateComparison(mode="exact"), derived.state_after
        if source_after is not ABSENT and copy_after is not ABSENT and comparison.agrees(source_after, copy_after, []):
            # The same state (most pairs): the count of its leaves, each a matched row, without making the rows.
            return self.verdict(case, PASS, "same_state", {"compared_paths": leaf_count(source_after)})
        rows = comparison.rows("", source_after, copy_after)
        differing = [
            {"path": row["path"] or "(whole state)", "source": row["expected"], "copy": row["actual"],
             **({"absent_from": "copy"} if row.get("absent") else {}),
             **({"absent_from": "source"} if row.get("expected_absent") else {})}
            for row in rows
            if not row["matched"]
        ]
        if not differing:
            return self.verdict(case, PASS, "same_state", {"compared_paths": len(rows)})
        return self.verdict(case, FAIL, f"state_differs: {differing[0]['path']}", {"differences": differing})


def _call(signature: tuple[str | None, dict[str, Any] | None]) -> dict[str, Any]:
    tool, arguments = signature
    return {"tool": tool, "arguments": arguments}


def same_call(source_call: dict[str, Any], copy_call: dict[str, Any]) -> bool:
    """Same tool, and arguments equal as state values are (so `True` is not `1`)."""
    return source_call["tool"] == copy_call["tool"] and values_equal(source_call["arguments"], copy_call["arguments"])


def _describe(details: dict[str, Any]) -> str:
    name = lambda call: "no call" if call is None else call["tool"]  # noqa: E731
    return f"source {name(details['source_call'])}, copy {name(details['copy_call'])}"
