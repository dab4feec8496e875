"""Evaluators: one kind per module, each a pure function of stored records (never the runner),
and the registry that builds them from `oloproof.yaml`, keyed by `type`.

To add a kind: write `evaluators/<kind>.py` (a config model and an `Evaluator` subclass) and
add it to `EVALUATOR_TYPES` below."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from ..model.errors import ProjectError, describe_validation_error, yaml_line
from ..model.oloproof_keys import unsupported_evaluator
from .base import Evaluator, EvaluatorConfig, JudgingContext
from .contains import Contains
from .exact_match import ExactMatch
from .fault_recovery import FaultRecovery
from .json_schema import JsonSchema
from .judging import judge_all, judge_cases
from .metamorphic_relation import MetamorphicRelation
from .python_grader import PythonGrader
from .regex import Regex
from .rubric_judge import RubricJudge
from .state_matches import StateMatches
from .state_unchanged import StateUnchanged
from .trace import Trace

EVALUATOR_TYPES: dict[str, type[Evaluator]] = {
    ExactMatch.type: ExactMatch,
    StateMatches.type: StateMatches,
    StateUnchanged.type: StateUnchanged,
    FaultRecovery.type: FaultRecovery,
    MetamorphicRelation.type: MetamorphicRelation,
    Trace.type: Trace,
    PythonGrader.type: PythonGrader,
    Contains.type: Contains,
    Regex.type: Regex,
    JsonSchema.type: JsonSchema,
    RubricJudge.type: RubricJudge,
}


def build_evaluators(
    configs: list[dict[str, Any]], *, file: Path | str, yaml_root: yaml.Node | None = None
) -> list[Evaluator]:
    """Validate each `evaluators:` entry against its type's model; errors name file, line, field."""
    evaluators, problems = [], []
    for index, config in enumerate(configs):
        kind = config.get("type") if isinstance(config, dict) else None
        if kind not in EVALUATOR_TYPES:
            line = yaml_line(yaml_root, ("evaluators", index, "type"))
            known = ", ".join(sorted(EVALUATOR_TYPES))
            problem = unsupported_evaluator(kind) or f"unknown evaluator type {kind!r} (known: {known})"
            problems.append(f"{file}:{line}: evaluators[{index}].type: {problem}")
            continue
        evaluator_class = EVALUATOR_TYPES[kind]
        try:
            evaluator = evaluator_class(evaluator_class.config_model.model_validate(config))
        except ValidationError as error:
            problems.extend(
                describe_validation_error(error, file, loc_prefix=("evaluators", index), yaml_root=yaml_root)
            )
            continue
        line = yaml_line(yaml_root, ("evaluators", index))
        evaluator.origin = f"{file}:{line}: evaluators[{index}]" if line is not None else f"{file}: evaluators[{index}]"
        locate = getattr(evaluator, "locate", None)
        if locate is not None:  # evaluators that load project files (a grader's module, a rubric, a schema)
            key = getattr(evaluator, "locate_key", "function")
            line = yaml_line(yaml_root, ("evaluators", index, key))
            try:
                locate(Path(file).parent, f"{file}:{line}: evaluators[{index}].{key}")
            except ProjectError as error:
                problems.extend(error.problems)
                continue
        evaluators.append(evaluator)
    if problems:
        raise ProjectError(problems)
    return evaluators


__all__ = [
    "EVALUATOR_TYPES",
    "Evaluator",
    "EvaluatorConfig",
    "JudgingContext",
    "build_evaluators",
    "judge_all",
    "judge_cases",
]
