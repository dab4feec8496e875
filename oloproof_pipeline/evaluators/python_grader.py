"""`python`: a grader written as a function, for what the declarative rules cannot say.

```yaml
- {type: python, criterion: blockers_followed_up, function: "graders:blockers_followed_up"}
```

`function` is `module:func` with the module's file found relative to the project folder (as
`system.callable` is). It is called as `func(case, recording)` with the `CaseRecord` and the
`RecordedRun` (output, trajectory, state after) of a case that recorded cleanly, and returns a
`Verdict` or a dict `{"outcome": PASS|FAIL|MISSING|EXCLUDED, "reason": str, "details": ...}`.
With `judges: copies` (ours: Oloproof leaves copies out of every evaluator but the relations)
the grader judges the copies a transform made instead of the sources, each by its own
recording and its own (transformed) case: a check that the copy alone can fail, such as an
injection's goal carried out (AgentDojo's `security`). Sources are then EXCLUDED
(`not_a_metamorphic_pair`).
Violations go in `details["violations"]` as `[{"rule", "step", "tool", "record", "detail"}]`,
as the trace rules put them, so exports list them. A function that raises makes the case
MISSING (`grader_error`); one that returns anything else, MISSING (`grader_bad_return`): never
a pass. A module that cannot be imported is a configuration error, found before any case is
judged. The module is imported afresh with every project module it imports (found, not
declared: any module from outside the installed packages), and each of their files is part of
the verdicts' key, so an edited helper re-judges.
"""

from __future__ import annotations

import json
import traceback
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal

from pydantic import Field, ValidationError

from ..model.errors import ProjectError
from ..model.fingerprints import imports_seen
from ..model.modules import load_callable
from ..model.cases import CaseRecord
from ..model.records import RecordedRun
from ..model.outcomes import EXCLUDED, MISSING, NOT_A_METAMORPHIC_PAIR, Judgement, Verdict
from ..model.violations import Violation
from .base import Evaluator, EvaluatorConfig, JudgingContext

REFERENCE = r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$"


class PythonGraderConfig(EvaluatorConfig):
    function: str = Field(pattern=REFERENCE)
    # Ours: `copies` judges the transforms' copies (each by its own recording) instead of the sources.
    judges: Literal["sources", "copies"] = "sources"


def grader_return(value: Any) -> Judgement:
    """The function's return as plain data; ValueError says what is wrong with it."""
    if isinstance(value, Verdict):
        value = value.model_dump(include={"outcome", "reason", "details"})
    if not isinstance(value, dict):
        raise ValueError(f"returned {type(value).__name__}, not a Verdict or a dict with outcome, reason, details")
    try:
        returned = Judgement.model_validate(value)
    except ValidationError as error:
        problems = [f"{'.'.join(map(str, item['loc']))}: {item['msg']}" for item in error.errors()]
        raise ValueError("; ".join(problems)) from None
    _check_violations(returned.details)
    _check_json(returned.details)
    return returned


def _check_violations(details: Any) -> None:
    if not isinstance(details, dict) or "violations" not in details:
        return
    violations = details["violations"]
    if not isinstance(violations, list):
        raise ValueError("details.violations must be a list")
    for index, item in enumerate(violations):
        try:
            Violation.model_validate(item)
        except ValidationError as error:
            raise ValueError(f"details.violations[{index}]: {error.errors()[0]['msg']}") from None


def _check_json(details: Any) -> None:
    try:
        json.dumps(details, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"details are not JSON: {error}") from None


class PythonGrader(Evaluator):
    type: ClassVar[str] = "python"
    config_model: ClassVar[type[EvaluatorConfig]] = PythonGraderConfig
    # The grader is handed the whole run: it may read any part of it.
    reads_state: ClassVar[bool] = True
    reads_trace: ClassVar[bool] = True
    reads_answer: ClassVar[bool] = True
    config: PythonGraderConfig

    def __init__(self, config: PythonGraderConfig):
        super().__init__(config)
        self._project_root: Path | None = None
        self._where = "oloproof.yaml: evaluators: function"
        self._function: Callable[..., Any] | None = None
        self._imported: list[Path] = []

    def project_code_files(self, project_root: Path) -> list[Path]:
        """The grader's module and every module found imported with it (`function()`), wherever
        they live: an edited helper re-judges as an edited grader does."""
        module_name = self.config.function.partition(":")[0]
        module_file = project_root.joinpath(*module_name.split(".")).with_suffix(".py")
        return [module_file] + [path for path in self._imported if path != module_file.resolve()]

    def default_criterion(self) -> str:
        return self.config.function.rpartition(":")[2]

    def locate(self, project_root: Path, where: str) -> None:
        """Called by the registry: the project the module is found in, and how errors name the entry.
        The function is imported now, so a grader that cannot be is found before any case is recorded."""
        self._project_root, self._where = project_root, where
        module_name = self.config.function.partition(":")[0]
        module_file = project_root.joinpath(*module_name.split(".")).with_suffix(".py")
        if not module_file.is_file():
            raise ProjectError(f"{where}: no module file {module_file}")
        self.function()

    def function(self) -> Callable[..., Any]:
        if self._function is None:
            if self._project_root is None:
                raise ProjectError(f"{self._where}: the grader was built without a project folder")
            with imports_seen() as imported:  # each project module it imports, imported afresh
                loaded = load_callable(self._project_root, self.config.function, where=self._where)
            self._imported = imported
            if not callable(loaded):
                raise ProjectError(f"{self._where}: {self.config.function} is not callable")
            self._function = loaded
        return self._function

    def judge_selected(self, case: CaseRecord, context: JudgingContext) -> Verdict:
        if self.config.judges == "sources":
            return super().judge_selected(case, context)
        if not case.is_derived:
            return self.verdict(case, EXCLUDED, NOT_A_METAMORPHIC_PAIR)
        return self.judge_recorded(case, context)

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        function = self.function()
        try:
            value = function(case.model_copy(deep=True), recording.model_copy(deep=True))
        except Exception as error:  # a grader's bug is no evidence about the agent
            frames = traceback.extract_tb(error.__traceback__)
            where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
            return self.verdict(case, MISSING, "grader_error", {"error": f"{type(error).__name__}: {error}{where}"})
        try:
            returned = grader_return(value)
        except ValueError as problem:
            return self.verdict(case, MISSING, "grader_bad_return", {"error": str(problem)})
        return self.verdict(case, returned.outcome, returned.reason, returned.details)
