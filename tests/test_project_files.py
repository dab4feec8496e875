"""Bad project files fail with one line naming the file and the line or field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project

from conftest import EXAMPLE


def line_of(file_name: str, text: str) -> int:
    """The example's line holding `text`, so these tests survive edits elsewhere in the file."""
    lines = (EXAMPLE / file_name).read_text().splitlines()
    return next(number for number, line in enumerate(lines, start=1) if text in line)


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def load_everything(root: Path) -> None:
    load_cases(load_project(root))


def break_json_line(root: Path) -> None:
    lines = (root / "data" / "cases.jsonl").read_text().splitlines(keepends=True)
    lines[2] = lines[2][:40] + "\n"
    (root / "data" / "cases.jsonl").write_text("".join(lines))


def duplicate_id(root: Path) -> None:
    lines = (root / "data" / "cases.jsonl").read_text().splitlines(keepends=True)
    lines[4] = lines[4].replace('"id": "ord-005"', '"id": "ord-002"')
    (root / "data" / "cases.jsonl").write_text("".join(lines))


def unknown_evaluator_type(root: Path) -> None:
    edit(root / "oloproof.yaml", "type: state_matches", "type: state_matchez")


def unknown_yaml_key(root: Path) -> None:
    edit(root / "oloproof.yaml", "  timeout_s: 30", "  timeout_s: 30\n  timeout_seconds: 30")


def missing_dataset(root: Path) -> None:
    (root / "data" / "cases.jsonl").unlink()


def unknown_case_key(root: Path) -> None:
    lines = (root / "data" / "cases.jsonl").read_text().splitlines(keepends=True)
    lines[6] = lines[6].replace('"metadata"', '"metadatta"')
    (root / "data" / "cases.jsonl").write_text("".join(lines))


def rule_over_unknown_metric(root: Path) -> None:
    edit(root / "release.yaml", "metric: state_correct", "metric: state_corect")


BROKEN = {
    "bad JSON line": (break_json_line, "data/cases.jsonl:3: invalid JSON"),
    "duplicate id": (duplicate_id, "data/cases.jsonl:5: id: 'ord-002' repeats the case at"),
    "unknown evaluator type": (
        unknown_evaluator_type,
        f"oloproof.yaml:{line_of('oloproof.yaml', 'type: state_matches')}: evaluators[1].type: unknown evaluator type 'state_matchez'",
    ),
    "unknown YAML key": (
        unknown_yaml_key,
        f"oloproof.yaml:{line_of('oloproof.yaml', '  timeout_s: 30') + 1}: execution.timeout_seconds: unknown key",
    ),
    "missing dataset file": (missing_dataset, "oloproof.yaml: dataset: no file matches 'data/cases.jsonl'"),
    "unknown case key": (unknown_case_key, "data/cases.jsonl:7: metadatta: unknown key"),
    "rule over an unknown metric": (
        rule_over_unknown_metric,
        f"release.yaml:{line_of('release.yaml', 'metric: state_correct')}: rules[1].metric: 'state_corect' is not a criterion",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_bad_project_file_names_file_and_line(refund_desk, name):
    breakage, expected = BROKEN[name]
    breakage(refund_desk)
    with pytest.raises(ProjectError) as raised:
        load_everything(refund_desk)
    assert len(raised.value.problems) == 1
    assert expected in raised.value.problems[0], raised.value.problems


@pytest.mark.parametrize("name", ["bad JSON line", "unknown YAML key", "duplicate id"])
def test_cli_prints_one_line_and_no_traceback(refund_desk, name):
    breakage, expected = BROKEN[name]
    breakage(refund_desk)
    finished = subprocess.run(
        [sys.executable, "-m", "oloproof_pipeline.cli", "run", "--project", str(refund_desk)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert finished.returncode == 2, finished.stderr
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], finished.stderr
    assert "Traceback" not in finished.stderr + finished.stdout


def test_a_valid_project_loads(refund_desk):
    project = load_project(refund_desk)
    cases = load_cases(project)
    assert len(cases) >= 24
    assert project.criteria()[:3] == ["answer_correct", "state_correct", "other_order_untouched"]
    assert {"same_actions_under_paraphrase", "same_state_under_injected"} <= set(project.criteria())
