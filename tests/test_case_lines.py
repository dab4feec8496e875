"""A launch checks again only the dataset lines it has not checked before, and the cases'
table comes out as a check of every line makes it; a bad line is still one line naming file,
line and field. Work is counted (lines made into cases), never timed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from oloproof_pipeline.model.cases import CaseSetCheck, load_cases, non_blank_lines, source_lines
from oloproof_pipeline.model.digests import case_digest
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.fingerprints import case_lines_context
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store import case_lines
from oloproof_pipeline.store.case_lines import LinesCheckedBefore, checked_case_table
from oloproof_pipeline.store.tables import case_table

from conftest import write_project
from helpers import oloproof_in_process, tiny_stateful_app
from test_bad_inputs import evidence, one_error_line


def case(index: int, **fields) -> dict:
    return {"id": f"c{index}", "input": {"n": index}, "expected": {"state": {"n": index}}, **fields}


def write_cases(root: Path, cases: list[dict]) -> None:
    (root / "data" / "cases.jsonl").write_text("".join(json.dumps(each) + "\n" for each in cases), encoding="utf-8")


def checked_now(root: Path) -> list[str]:
    """The ids of the lines a launch would check now (those not checked before)."""
    project = load_project(root)
    before = LinesCheckedBefore.read(root, case_lines_context(project))
    check = CaseSetCheck(project, before.facts_of if before is not None else None)
    checked = check.checked(source_lines(project))
    check.finish()
    return [each.facts.case_id for each in checked if each.case is not None]


def assert_table_as_a_whole_check_makes_it(root: Path) -> pd.DataFrame:
    project = load_project(root)
    table = checked_case_table(project)
    pd.testing.assert_frame_equal(table, case_table(load_cases(project)))
    return table


def test_a_launch_checks_again_only_the_lines_it_has_not_checked(tmp_path):
    cases = [case(index, initial_state={"n": 0}) for index in range(4)]
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=cases)
    assert checked_now(root) == ["c0", "c1", "c2", "c3"]
    assert_table_as_a_whole_check_makes_it(root)
    assert checked_now(root) == []

    # One case added at the top, one edited, one removed: the others keep their rows, with
    # their lines' new numbers.
    edited = {**cases[2], "metadata": {"tier": "gold"}}
    write_cases(root, [case(9, initial_state={"n": 0}), cases[0], cases[1], edited])
    assert checked_now(root) == ["c9", "c2"]
    table = assert_table_as_a_whole_check_makes_it(root)
    assert list(zip(table["case_id"], table["line"])) == [("c9", 1), ("c0", 2), ("c1", 3), ("c2", 4)]
    assert checked_now(root) == []


def test_what_a_line_means_beyond_its_text_has_every_line_checked_again(tmp_path):
    cases = [case(0, snapshot="start"), case(1, snapshot="start")]
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=cases)
    (root / "snapshots").mkdir()
    (root / "snapshots" / "start.json").write_text('{"n": 0}', encoding="utf-8")
    assert_table_as_a_whole_check_makes_it(root)
    (root / "snapshots" / "start.json").write_text('{"n": 1}', encoding="utf-8")  # the state they start from
    assert checked_now(root) == ["c0", "c1"]
    table = assert_table_as_a_whole_check_makes_it(root)
    assert list(table["initial_state"]) == ['{"n":1}', '{"n":1}']

    config = json.loads((root / "oloproof.yaml").read_text())
    config["evaluators"].append({"type": "state_unchanged", "criterion": "kept", "paths": ["n"]})
    (root / "oloproof.yaml").write_text(json.dumps(config), encoding="utf-8")  # its paths are checked against each case
    assert checked_now(root) == ["c0", "c1"]


def test_a_set_that_comes_to_declare_starting_states_digests_every_case_again(tmp_path):
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=[case(0), case(1)])
    digests = assert_table_as_a_whole_check_makes_it(root)["case_digest"].tolist()
    write_cases(root, [case(0), case(1), case(2, initial_state={"n": 0})])
    table = assert_table_as_a_whole_check_makes_it(root)
    assert table["case_digest"].tolist()[:2] != digests  # every digest now covers the starting state


def test_a_bad_line_among_lines_checked_before_is_one_error_line(evaluated_desk):
    desk = evaluated_desk
    assert checked_now(desk) == []  # its run checked every line
    data = desk / "data" / "cases.jsonl"
    lines = data.read_text(encoding="utf-8").splitlines()
    before = evidence(desk)
    data.write_text("\n".join([*lines, json.dumps({**json.loads(lines[0]), "id": 7})]) + "\n", encoding="utf-8")
    one_error_line(oloproof_in_process("run", cwd=desk), 2, f"{data}:{len(lines) + 1}: id")
    first = json.loads(lines[0])["id"]
    data.write_text("\n".join([*lines, json.dumps({**json.loads(lines[1]), "id": first})]) + "\n", encoding="utf-8")
    one_error_line(oloproof_in_process("run", cwd=desk), 2, f"{data}:{len(lines) + 1}: id: {first!r} repeats the case at {data}:1")
    assert evidence(desk) == before


def test_a_set_larger_than_a_batch_gives_the_table_a_whole_check_makes(tmp_path, monkeypatch):
    # Lines are checked three at a time; only the eighth declares a starting state, so the
    # digests of the batches before it are decided by a line they never saw.
    monkeypatch.setattr(case_lines, "LINES_AT_ONCE", 3)
    cases = [case(index, metadata={"tier": index % 2}) for index in range(10)]
    cases[7] = {**cases[7], "initial_state": {"n": 0}}
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=cases)
    table = assert_table_as_a_whole_check_makes_it(root)
    assert table["case_id"].tolist() == [f"c{index}" for index in range(10)]
    assert table["case_digest"].tolist() == [
        case_digest(input=each["input"], expected=each["expected"], metadata=each["metadata"], group_id=None,
                    initial_state=each.get("initial_state"), include_initial_state=True)
        for each in cases
    ]

    # Lines checked before and new ones in every batch: the kept rows and the new ones in line order.
    edited = [case(20), *cases[:4], {**cases[4], "metadata": {"tier": 9}}, *cases[5:], case(21)]
    write_cases(root, edited)
    assert checked_now(root) == ["c20", "c4", "c21"]
    table = assert_table_as_a_whole_check_makes_it(root)
    assert list(zip(table["case_id"], table["line"])) == [(each["id"], line) for line, each in enumerate(edited, start=1)]
    assert checked_now(root) == []


def test_problems_found_in_different_batches_are_reported_together(tmp_path, monkeypatch):
    monkeypatch.setattr(case_lines, "LINES_AT_ONCE", 2)
    cases = [case(index, initial_state={"n": index}) for index in range(9)]
    cases[1] = {**cases[1], "expected": "refunded"}  # batch 1
    cases[4] = {**cases[4], "id": "c0"}  # batch 3: the id of line 1
    cases[8] = {**cases[8], "events": [{"at_step": 0, "event": "x"}]}  # batch 5
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=cases)
    data = root / "data" / "cases.jsonl"
    with pytest.raises(ProjectError) as raised:
        checked_case_table(load_project(root))
    problems = raised.value.problems
    assert [problem.split(": ")[0] for problem in problems] == [f"{data}:2", f"{data}:5", f"{data}:9"]
    assert f"{data}:5: id: 'c0' repeats the case at {data}:1" in problems


def test_a_path_naming_nothing_counts_the_cases_of_every_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(case_lines, "LINES_AT_ONCE", 2)
    cases = [case(index, initial_state={"n": index}) for index in range(5)]
    evaluators = [{"type": "state_unchanged", "criterion": "kept", "paths": ["orders.gone"]}]
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=cases, evaluators=evaluators)
    with pytest.raises(ProjectError) as raised:
        checked_case_table(load_project(root))
    [problem] = raised.value.problems
    assert "path 'orders.gone' names nothing in the starting or expected state of 5 cases: c0 (data/cases.jsonl:1), " \
           "c1 (data/cases.jsonl:2), c2 (data/cases.jsonl:3) and 2 more" in problem


def test_lines_are_read_one_at_a_time_numbered_and_cut_as_the_text_splits_on_newlines(tmp_path):
    path = tmp_path / "cases.jsonl"
    # CRLF endings keep their CR, a JSON string may hold U+2028, blank lines count, no final newline.
    path.write_bytes('{"a": 1}\r\n\n  \n{"b": "x\u2028y"}\n{"c": 3}'.encode())
    assert list(non_blank_lines(path)) == [(1, '{"a": 1}\r'), (4, '{"b": "x\u2028y"}'), (5, '{"c": 3}')]


def test_a_dataset_file_not_utf8_fails_before_any_line_is_checked(tmp_path):
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=[case(1), case(1)])  # an id twice: a line error
    with (root / "data" / "cases.jsonl").open("ab") as cases:
        cases.write(b'{"id": "latin1", "input": {"message": "caf\xe9"}}\n')
    with pytest.raises(ProjectError, match=r"cases\.jsonl:3: not UTF-8 text \(byte 0xe9\)"):
        checked_case_table(load_project(root))
