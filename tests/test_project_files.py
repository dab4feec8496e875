"""Bad project files fail with one line naming the file and the line or field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import oloproof_in_process
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.config import read_yaml
from oloproof_pipeline.model.modules import load_callable
from oloproof_pipeline.model.transforms import derive_cases
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
    project = load_project(root)
    derive_cases(project, load_cases(project))


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


def append_line(path: Path, data: bytes) -> int:
    """Append one line; its line number."""
    with path.open("ab") as handle:
        handle.write(data + b"\n")
    return len(path.read_bytes().splitlines())


def rules_twice(root: Path) -> None:
    append_line(root / "release.yaml", b"rules:\n  - {id: lenient, metric: state_correct, min: 0.1}")


def infinite_timeout(root: Path) -> None:
    edit(root / "oloproof.yaml", "timeout_s: 30", "timeout_s: .inf")


def min_above_max(root: Path) -> None:
    edit(root / "release.yaml", "    min: 0.85\n", "    min: 0.85\n    max: 0.5\n")


def no_rules(root: Path) -> None:
    (root / "release.yaml").write_text("version: 1\nrules: []\n")


def latin1_case(root: Path) -> None:
    append_line(root / "data" / "cases.jsonl", b'{"id": "ord-x", "input": {"order_id": "x", "message": "caf\xe9"}}')


def latin1_label(root: Path) -> None:
    append_line(root / "labels" / "injected.jsonl", b'{"case": "ord-001~injected", "note": "\xff"}')


def overflowing_number(root: Path) -> None:
    append_line(root / "data" / "cases.jsonl", b'{"id": "ord-x", "input": {"order_id": "x", "message": "hi"}, "metadata": {"n": -1e999}}')


def deep_case(root: Path) -> None:
    append_line(root / "data" / "cases.jsonl", b'{"id": "ord-x", "input": ' + b"[" * 101 + b"]" * 101 + b"}")


def grader_failing_on_import(root: Path) -> None:
    (root / "graders.py").write_text("raise RuntimeError('half-written grader')\n")
    edit(root / "oloproof.yaml", "evaluators:\n", 'evaluators:\n  - {type: python, criterion: checked, function: "graders:check"}\n')


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
    "rules twice": (rules_twice, f"release.yaml:{len((EXAMPLE / 'release.yaml').read_text().splitlines()) + 1}: invalid YAML: key 'rules' repeats the one on line {line_of('release.yaml', 'rules:')}"),
    "an infinite timeout": (infinite_timeout, f"oloproof.yaml:{line_of('oloproof.yaml', 'timeout_s: 30')}: execution.timeout_s: Input should be a finite number"),
    "min above max": (min_above_max, "rules[2]: Value error, rule 'bystanders': min 0.85 is not below max 0.5, so it can never pass"),
    "a policy with no rules": (no_rules, "release.yaml:2: rules: Value error, a release policy needs at least one rule"),
    "bytes that are not UTF-8 in a case": (latin1_case, f"data/cases.jsonl:{len((EXAMPLE / 'data' / 'cases.jsonl').read_text().splitlines()) + 1}: not UTF-8 text (byte 0xe9)"),
    "bytes that are not UTF-8 in a label": (latin1_label, f"labels/injected.jsonl:{len((EXAMPLE / 'labels' / 'injected.jsonl').read_text().splitlines()) + 1}: not UTF-8 text (byte 0xff)"),
    "a number too large for a float": (overflowing_number, "invalid JSON: the number -1e999 is too large to represent"),
    "a case nested 101 levels deep": (deep_case, "invalid JSON: nested more than 100 levels deep"),
    "a grader that fails on import": (grader_failing_on_import, "evaluators[0].function: importing"),
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
    if name == "bad JSON line":  # once as `python -m`, the others in-process: refused at load
        finished = subprocess.run(
            [sys.executable, "-m", "oloproof_pipeline.cli", "run", "--project", str(refund_desk)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    else:
        finished = oloproof_in_process("run", "--project", str(refund_desk), cwd=refund_desk.parent)
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


def test_a_yaml_merge_key_may_still_be_overridden(tmp_path):
    """Only a key written twice is refused: overriding a merged (`<<`) key is what YAML intends."""
    path = tmp_path / "anchors.yaml"
    path.write_text("base: &base {mode: subset, criterion: a}\nderived:\n  <<: *base\n  criterion: b\n")
    data, _ = read_yaml(path)
    assert data["derived"] == {"mode": "subset", "criterion": "b"}
    path.write_text("derived:\n  criterion: a\n  nested: {x: 1, x: 2}\n")
    with pytest.raises(ProjectError, match=r"anchors.yaml:3: invalid YAML: key 'x' repeats the one on line 3"):
        read_yaml(path)


def test_a_callable_that_is_not_callable_is_refused_where_it_is_named(tmp_path):
    (tmp_path / "app.py").write_text("SETTINGS = {'mode': 'fast'}\n")
    with pytest.raises(ProjectError, match=r"system.callable: app:SETTINGS is dict .* not a class or a function"):
        load_callable(tmp_path, "app:SETTINGS")
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    with pytest.raises(ProjectError, match=r"importing .*exits.py failed: SystemExit: 3"):
        load_callable(tmp_path, "exits:anything")
