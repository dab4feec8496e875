"""Readable errors for bad project files: each names the file, the line where known, and the field."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import yaml
from pydantic import ValidationError

from .oloproof_keys import unsupported_key


class ProjectError(Exception):
    """One or more problems with a project's files; each problem is one line of text."""

    def __init__(self, problems: str | Iterable[str]):
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


class SystemVersionMismatch(ProjectError):
    """A partition key that is not the loaded system's version: recording it would mislabel runs."""


class PipelineError(Exception):
    """The pipeline's own code failed on a case (never the system under test's failure): the
    stage stops, so the run is incomplete (exit 5), never a case's status nor a gate decision."""


def format_location(loc: Iterable[Any]) -> str:
    """('evaluators', 2, 'mode') -> 'evaluators[2].mode'."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


def yaml_line(root_node: yaml.Node | None, loc: Iterable[Any]) -> int | None:
    """The 1-based line of the deepest YAML node along `loc` (keys and list indexes)."""
    node, line = root_node, None
    if node is not None:
        line = node.start_mark.line + 1
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            match = next((pair for pair in node.value if pair[0].value == part), None)
            if match is None:
                break
            line = match[0].start_mark.line + 1
            node = match[1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def describe_validation_error(
    error: ValidationError,
    file: Path | str,
    *,
    line: int | None = None,
    loc_prefix: tuple[Any, ...] = (),
    yaml_root: yaml.Node | None = None,
) -> list[str]:
    """pydantic's errors as `file:line: field: message` lines."""
    problems = []
    for item in error.errors():
        loc = loc_prefix + tuple(item["loc"])
        message = item["msg"]
        if item["type"] == "extra_forbidden":
            message = unsupported_key(loc) or "unknown key"
        elif item["type"] == "missing":
            message = "required key is missing"
        at_line = line if line is not None else yaml_line(yaml_root, loc)
        where = f"{file}:{at_line}" if at_line is not None else f"{file}"
        field = format_location(loc)
        problems.append(f"{where}: {field}: {message}" if field else f"{where}: {message}")
    return problems
