"""`json_schema`: the answer is valid under a JSON Schema (draft 2020-12), as in Oloproof.

```yaml
- {type: json_schema, criterion: answer_well_formed, field: answer, schema: {type: object, required: [status]}}
- {type: json_schema, criterion: answer_well_formed, schema: schemas/answer.json}
```

`schema` is the schema itself, or a JSON file relative to the project folder (read when the
project loads; its content is part of the verdicts' key, so an edit re-judges). A schema that
is not one is a configuration error at load. A FAIL lists the first three violations.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import Field

from ..model.cases import CaseRecord
from ..model.errors import ProjectError
from ..model.outcomes import FAIL, PASS, Verdict
from ..model.paths import ABSENT, read_path
from ..model.records import RecordedRun
from .answer_text import FIELD_ABSENT, AnswerFieldConfig
from .base import Evaluator, EvaluatorConfig, JudgingContext

if TYPE_CHECKING:
    from jsonschema import Draft202012Validator

# Violations a FAIL names (Oloproof's count).
SHOWN_ERRORS = 3


class JsonSchemaConfig(AnswerFieldConfig):
    # Oloproof's key is `schema` (a name pydantic models keep for themselves).
    json_schema: str | dict[str, Any] = Field(alias="schema")


def read_schema_file(path: Path, where: str) -> dict[str, Any]:
    try:
        schema = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ProjectError(f"{where}: no schema file {path}") from None
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ProjectError(f"{where}: {path} is not a JSON file ({error})") from None
    if not isinstance(schema, dict):
        raise ProjectError(f"{where}: {path} holds {type(schema).__name__}, not a JSON Schema object")
    return schema


class JsonSchema(Evaluator):
    type: ClassVar[str] = "json_schema"
    config_model: ClassVar[type[EvaluatorConfig]] = JsonSchemaConfig
    reads_answer: ClassVar[bool] = True
    config: JsonSchemaConfig
    # The registry calls `locate` with this key's line for errors.
    locate_key: ClassVar[str] = "schema"

    def __init__(self, config: JsonSchemaConfig):
        super().__init__(config)
        self._validator: Draft202012Validator | None = None

    def schema_file(self, project_root: Path) -> Path | None:
        return project_root / self.config.json_schema if isinstance(self.config.json_schema, str) else None

    def project_code_files(self, project_root: Path) -> list[Path]:
        schema_file = self.schema_file(project_root)
        return [] if schema_file is None else [schema_file]

    def locate(self, project_root: Path, where: str) -> None:
        """Called by the registry: the schema read (from its file) and checked at load."""
        # Imported here, not with the registry: only a project with a json_schema evaluator
        # pays for jsonschema's import (~0.1 s and 3 MiB on every run otherwise).
        from jsonschema import Draft202012Validator
        from jsonschema.exceptions import SchemaError

        schema_file = self.schema_file(project_root)
        schema = self.config.json_schema if schema_file is None else read_schema_file(schema_file, where)
        try:
            Draft202012Validator.check_schema(schema)
        except SchemaError as error:
            raise ProjectError(f"{where}: invalid JSON Schema: {error.message}") from None
        self._validator = Draft202012Validator(schema)

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        if self._validator is None:
            raise ProjectError(f"{self.criterion}: the json_schema evaluator was built without its project folder")
        actual = read_path(recording.output, self.config.output_path)
        if actual is ABSENT:
            return self.verdict(case, FAIL, FIELD_ABSENT, {"actual": None, "absent": True})
        errors = [error.message for error in self._validator.iter_errors(actual)]
        if not errors:
            return self.verdict(case, PASS, "valid")
        return self.verdict(case, FAIL, "schema_violated", {"errors": errors[:SHOWN_ERRORS], "error_count": len(errors)})
