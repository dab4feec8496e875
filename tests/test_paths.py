"""The one path syntax (model/paths.py): quoted keys for keys holding dots, brackets or spaces,
read the same way in every place a project file writes a path."""

from __future__ import annotations

import json
from typing import Any

import pytest

from oloproof_pipeline.decide.slices import CaseFacts, case_bucket
from oloproof_pipeline.evaluators import JudgingContext, build_evaluators
from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.model.config import TransformConfig
from oloproof_pipeline.model.digests import case_digest
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.outcomes import Verdict
from oloproof_pipeline.model.paths import WILDCARD, join_path, read_path, split_glob_path, split_path
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun
from oloproof_pipeline.model.slicing import parse_slice_spec
from oloproof_pipeline.model.trajectory import Step, Trajectory
from oloproof_pipeline.model.transforms import transformed_input

FILES = {"files": {"landlord-notices.txt": {"content": "rent due"}, "notes": {"content": "n"}}}


@pytest.mark.parametrize(
    ("path", "keys"),
    [
        ("", []),
        ("answer", ["answer"]),
        ("orders.ord-999.status", ["orders", "ord-999", "status"]),
        ('orders["ord-999"]', ["orders", "ord-999"]),
        ('files["landlord-notices.txt"].content', ["files", "landlord-notices.txt", "content"]),
        ('["www.informations.com"]', ["www.informations.com"]),
        ('a["b c"]["d[e]"].f', ["a", "b c", "d[e]", "f"]),
        (r'a["say \"hi\""]', ["a", 'say "hi"']),
        (r'a["back\\slash"]', ["a", "back\\slash"]),
        ("items[0].sku", ["items", "0", "sku"]),
        ("items.0.sku", ["items", "0", "sku"]),
    ],
)
def test_paths_split_into_keys_and_join_back_to_a_path_of_the_same_keys(path, keys):
    assert split_path(path) == keys
    assert split_path(join_path(keys)) == keys


def test_a_quoted_key_and_a_bare_key_name_the_same_value():
    orders = {"orders": {"ord-999": {"status": "open"}}}
    assert read_path(orders, 'orders["ord-999"].status') == read_path(orders, "orders.ord-999.status") == "open"
    assert read_path(FILES, 'files["landlord-notices.txt"].content') == "rent due"
    assert join_path(["files", "landlord-notices.txt", "content"]) == 'files["landlord-notices.txt"].content'
    assert join_path(["orders", "ord-999"]) == "orders.ord-999"


def test_a_bare_star_is_a_wildcard_only_in_a_glob_path_and_a_quoted_one_is_a_key():
    assert split_glob_path("notes.*.text")[1] is WILDCARD
    assert split_glob_path('notes["*"].text')[1] is not WILDCARD
    assert split_path("notes.*.text")[1] is not WILDCARD


@pytest.mark.parametrize(
    ("path", "complaint"),
    [
        ("a..b", "empty or unquoted key at character 3"),
        (".a", "empty or unquoted key at character 1"),
        ("a.", "empty or unquoted key at character 3"),
        ("a b", "expected '.' or '[' at character 2"),
        ('a["b"', 'a quoted key must end with "]'),
        ('a["b', "unclosed quote"),
        (r'a["\n"]', "only"),
        ("a[b]", "expected '.' or '['"),
        ('a.["b"]', "empty or unquoted key"),
    ],
)
def test_a_malformed_path_is_refused_saying_where(path, complaint):
    with pytest.raises(ValueError, match="is not a path") as raised:
        split_path(path)
    assert complaint in str(raised.value)


@pytest.mark.parametrize(
    "config",
    [
        {"type": "state_matches", "paths": ['files["a.txt"'], "absent_ok": True},
        {"type": "state_unchanged", "paths": ["files..x"], "absent_ok": True},
        {"type": "state_matches", "applies_to": {"metadata": {"a b": 1}}},
        {"type": "state_matches", "match_rows_by": {"rows[x]": "id"}},
        {"type": "trace", "rule": "never_succeeds_while", "tool": "pay", "field": "a b"},
    ],
)
def test_a_malformed_path_in_an_evaluator_is_one_line_naming_file_evaluator_and_path(config):
    with pytest.raises(ProjectError) as raised:
        build_evaluators([{"criterion": "c", **config}], file="oloproof.yaml")
    [problem] = raised.value.problems
    assert problem.startswith("oloproof.yaml: evaluators[0].")
    assert "is not a path" in problem and "\n" not in problem


# -- a key with a dot, in every place a path is written ---------------------------------------


def make_case(initial_state: Any = None, expected: Any = None, metadata: Any = None) -> CaseRecord:
    return CaseRecord(
        case_id="c1",
        case_digest=case_digest(input={}, expected=expected, metadata=metadata, group_id="c1"),
        group_id="c1",
        input={"files": {"notes.txt": "read me"}},
        initial_state=initial_state,
        expected=expected,
        metadata=metadata,
    )


def judge(config: dict[str, Any], case: CaseRecord, state: Any, trajectory: Trajectory | None = None) -> Verdict:
    [evaluator] = build_evaluators([config], file="oloproof.yaml")
    recording = RecordedRun(
        case_id="c1", case_digest=case.case_digest, system_version="v1", status="ok", output={"answer": "x"},
        trajectory=trajectory, environment_state=EnvironmentState(initial="sha256:" + "0" * 64, state=state),
    )
    verdict = evaluator.judge_case(case, JudgingContext(cases={"c1": case}, recordings={"c1": recording}))
    assert json.loads(json.dumps(verdict.details, allow_nan=False)) == verdict.details
    return verdict


def test_state_matches_paths_read_a_key_with_a_dot():
    config = {"type": "state_matches", "paths": ['files["landlord-notices.txt"].content']}
    case = make_case(expected={"state": FILES})
    passed = judge(config, case, FILES)
    failed = judge(config, case, {"files": {"landlord-notices.txt": {"content": "INJECTED"}}})

    assert passed.outcome == "PASS"
    assert [row["path"] for row in passed.details] == ['files["landlord-notices.txt"].content']
    assert failed.outcome == "FAIL" and failed.reason == 'state_differs: files["landlord-notices.txt"].content'


def test_state_unchanged_paths_read_a_key_with_a_dot():
    config = {"type": "state_unchanged", "criterion": "bystander", "paths": ['files["landlord-notices.txt"]']}
    case = make_case(initial_state=FILES)
    assert judge(config, case, FILES).outcome == "PASS"
    changed = judge(config, case, {"files": {"landlord-notices.txt": {"content": "gone"}}})
    assert changed.outcome == "FAIL" and changed.reason == 'state_changed: files["landlord-notices.txt"].content'


def test_match_rows_by_and_ignore_read_a_key_with_a_dot():
    rows = {"hosts": {"www.informations.com": [{"id": "b", "hits": 2, "note": "x"}, {"id": "a", "hits": 1, "note": "y"}]}}
    shuffled = {"hosts": {"www.informations.com": [{"id": "a", "hits": 1, "note": "z"}, {"id": "b", "hits": 2, "note": "w"}]}}
    config = {
        "type": "state_matches",
        "match_rows_by": {'hosts["www.informations.com"]': "id"},
        "ignore": ['hosts["www.informations.com"].*.note'],
    }
    case = make_case(expected={"state": rows})
    verdict = judge(config, case, shuffled)
    assert verdict.outcome == "PASS"
    assert 'hosts["www.informations.com"].a.hits' in [row["path"] for row in verdict.details]


def test_a_trace_rule_field_reads_a_key_with_a_dot():
    config = {"type": "trace", "rule": "never_succeeds_while", "tool": "pay", "field": 'checks["fraud.flags"]'}
    steps = Trajectory(steps=[
        Step(kind="tool_call", tool="pay", arguments={}),
        Step(kind="tool_result", tool="pay", result={"status": "done", "checks": {"fraud.flags": ["F1"]}}),
    ])
    verdict = judge(config, make_case(), {}, steps)
    assert verdict.outcome == "FAIL"
    assert verdict.details["violations"][0]["detail"].endswith("checks[\"fraud.flags\"] = ['F1']")


def test_a_transform_field_reads_and_writes_a_key_with_a_dot():
    transform = TransformConfig(name="shout", field='files["notes.txt"]', template="{value}!")
    assert transformed_input(transform, {"files": {"notes.txt": "read me"}}) == {"files": {"notes.txt": "read me!"}}
    with pytest.raises(ValueError, match="is not a path"):
        TransformConfig(name="bad", field="files..txt", template="{value}")


def test_a_metadata_slice_reads_a_key_with_a_dot():
    spec = parse_slice_spec('metadata["team.name"]')
    assert case_bucket(spec, CaseFacts(metadata={"team.name": "billing", "team": {"name": "other"}})) == "billing"
    assert case_bucket(parse_slice_spec("metadata.team.name"), CaseFacts(metadata={"team": {"name": "other"}})) == "other"
    with pytest.raises(ValueError, match="slice"):
        parse_slice_spec('metadata["team.name"')
