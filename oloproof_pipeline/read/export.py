"""Results as JSON lines: one line per case and run, readable by any JSON tool."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, TextIO

from ..model.outcomes import EXCLUDED, FAIL, PASS
from .results import VersionResults
from .violations import case_violations

SCORES = {PASS: 1.0, FAIL: 0.0}


def result_lines(results: VersionResults) -> Iterator[dict[str, Any]]:
    """One line per case and run: `task_id`, `run_id`, `system_version`, `status`, a score per
    grader (1 PASS, 0 FAIL, null MISSING; EXCLUDED left out), every grader's `outcomes`, and
    `violated_constraints`: the violations any FAIL verdict's details carry (trace and python
    graders) and the constraints the system recorded as broken, each
    `{source, criterion, rule, step, tool, record, detail}` (see `violations.py`)."""
    for case in results.cases:
        case_id = case["case_id"]
        recording = results.recording(case_id) or {}
        verdicts = results.verdicts_of(case_id)
        yield {
            "task_id": case_id,
            "run_id": recording.get("recorded_by_run"),
            "system_version": results.version,
            "status": recording.get("status"),
            "scores": {
                verdict["criterion"]: SCORES.get(verdict["outcome"])
                for verdict in verdicts
                if verdict["outcome"] != EXCLUDED
            },
            "outcomes": {verdict["criterion"]: verdict["outcome"] for verdict in verdicts},
            "violated_constraints": case_violations(verdicts, recording),
        }


def write_jsonl(results: VersionResults, path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        return write_jsonl_to(results, handle)


def write_jsonl_to(results: VersionResults, handle: TextIO) -> int:
    """The lines into an open text stream (a file, or stdout for `export -o -`); their count."""
    count = 0
    for line in result_lines(results):
        handle.write(json.dumps(line, ensure_ascii=False, sort_keys=True) + "\n")
        count += 1
    return count
