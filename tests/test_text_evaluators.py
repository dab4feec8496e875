"""`contains`, `regex` and `json_schema`: Oloproof's keys, with Oloproof's meaning (checked
against Oloproof's own evaluators on the same answers), their load-time refusals, and an
answer that is not there never passing."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from oloproof_pipeline.evaluators import JudgingContext, build_evaluators
from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.model.digests import case_digest
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.outcomes import EXCLUDED, FAIL, MISSING, PASS
from oloproof_pipeline.model.records import RecordedRun


def case(expected: Any = None, case_id: str = "c1") -> CaseRecord:
    return CaseRecord(
        case_id=case_id, case_digest=case_digest(input="x", expected=expected, metadata=None, group_id=case_id),
        group_id=case_id, input="x", expected=expected,
    )


def recording(of: CaseRecord, output: Any, status: str = "ok") -> RecordedRun:
    return RecordedRun(case_id=of.case_id, case_digest=of.case_digest, system_version="v1", status=status,
                       error=None if status == "ok" else "boom", output=output)


def built(config: dict, root: Path | None = None):
    file = (root or Path.cwd()) / "oloproof.yaml"
    [evaluator] = build_evaluators([config], file=file)
    return evaluator


def judged(config: dict, expected: Any, output: Any, root: Path | None = None, status: str = "ok"):
    of = case(expected)
    run = recording(of, output, status)
    return built(config, root).judge_case(of, JudgingContext(cases={of.case_id: of}, recordings={run.case_id: run}))


def oloproof_passes(evaluator: Any, expected: Any, output: Any) -> bool:
    """What Oloproof's own evaluator says of the same answer (its evaluators read only these)."""
    context = SimpleNamespace(expected=expected, output=output)
    return asyncio.run(evaluator.evaluate(context)).passed


# -- contains ---------------------------------------------------------------------------------


CONTAINS_CASES = [
    # (config keys, expected, output)
    ({"field": "answer"}, {"answer": "refunded"}, {"answer": "I have refunded ord-1"}),
    ({"field": "answer"}, {"answer": "refunded"}, {"answer": "I have declined ord-1"}),
    ({"field": "answer"}, {"answer": "Refunded"}, {"answer": "refunded"}),  # case kept, as Oloproof keeps it
    ({"field": "answer", "expected_field": "order"}, {"order": "ord-7", "answer": "x"}, {"answer": "done: ord-7"}),
    ({}, "42", "the answer is 42"),
    ({"field": "answer"}, {"answer": 7}, {"answer": "order 17"}),  # numbers compared as text
]


@pytest.mark.parametrize("keys, expected, output", CONTAINS_CASES)
def test_contains_agrees_with_oloproofs(keys: dict, expected: Any, output: Any) -> None:
    from oloproof_core.evaluators.deterministic import Contains

    # Our cases hold `expected` as an object; a bare expected value is `expected.answer`'s.
    ours_expected = expected if isinstance(expected, dict) else {"answer": expected}
    ours_keys = keys if isinstance(expected, dict) else {**keys, "expected_field": "answer"}
    verdict = judged({"type": "contains", "criterion": "c", **ours_keys}, ours_expected, output)
    theirs = oloproof_passes(Contains(criterion="c", **keys), expected, output)
    assert verdict.outcome == (PASS if theirs else FAIL), verdict


def test_contains_without_an_expected_value_is_excluded_and_an_absent_answer_fails() -> None:
    config = {"type": "contains", "criterion": "c", "field": "answer"}
    assert judged(config, None, {"answer": "x"}).outcome == EXCLUDED
    assert judged(config, {"other": "x"}, {"answer": "x"}).reason == "no_expected_value"
    absent = judged(config, {"answer": ""}, {"reply": "anything"})  # "" is in every text, yet no answer is there
    assert (absent.outcome, absent.reason) == (FAIL, "field_absent")


# -- regex ------------------------------------------------------------------------------------


REGEX_CASES = [
    ({"pattern": r"ord-\d+", "field": "answer"}, {"answer": "refunded ord-12"}),
    ({"pattern": r"ord-\d+", "field": "answer"}, {"answer": "refunded"}),
    ({"pattern": r"\b\d{16}\b", "field": "answer", "pass_if": "no_match"}, {"answer": "card 4111111111111111"}),
    ({"pattern": r"\b\d{16}\b", "field": "answer", "pass_if": "no_match"}, {"answer": "no card here"}),
    ({"pattern": "^Refund"}, "Refund issued"),  # the whole output when no field
    ({"pattern": "^refund"}, "Refund issued"),  # case-sensitive, as re.search is
]


@pytest.mark.parametrize("keys, output", REGEX_CASES)
def test_regex_agrees_with_oloproofs(keys: dict, output: Any) -> None:
    from oloproof_core.evaluators.deterministic import Regex

    verdict = judged({"type": "regex", "criterion": "c", **keys}, None, output)
    theirs = oloproof_passes(Regex(criterion="c", **keys), None, output)
    assert verdict.outcome == (PASS if theirs else FAIL), verdict


def test_regex_on_an_absent_field_never_passes_even_with_no_match() -> None:
    verdict = judged({"type": "regex", "criterion": "c", "pattern": "x", "field": "answer", "pass_if": "no_match"}, None, {"reply": "y"})
    assert (verdict.outcome, verdict.reason) == (FAIL, "field_absent")


def test_a_pattern_that_does_not_compile_is_refused_at_load_naming_the_field(tmp_path: Path) -> None:
    with pytest.raises(ProjectError) as raised:
        built({"type": "regex", "criterion": "c", "pattern": "ord-(\\d+"}, tmp_path)
    [problem] = raised.value.problems
    assert "evaluators[0].pattern" in problem and "invalid pattern" in problem


# -- json_schema ------------------------------------------------------------------------------

SCHEMA = {"type": "object", "required": ["status", "order_id"], "properties": {"status": {"enum": ["refunded", "declined"]}}}
SCHEMA_CASES = [
    {"status": "refunded", "order_id": "ord-1"},
    {"status": "maybe", "order_id": "ord-1"},
    {"status": "refunded"},
    "not an object",
]


@pytest.mark.parametrize("output", SCHEMA_CASES)
def test_json_schema_agrees_with_oloproofs_inline_and_from_a_file(output: Any, tmp_path: Path) -> None:
    from oloproof_core.evaluators.deterministic import JsonSchema

    theirs = oloproof_passes(JsonSchema(criterion="c", schema=SCHEMA), None, output)
    inline = judged({"type": "json_schema", "criterion": "c", "schema": SCHEMA}, None, output, tmp_path)
    (tmp_path / "schemas").mkdir()
    (tmp_path / "schemas" / "answer.json").write_text(json.dumps(SCHEMA))
    from_file = judged({"type": "json_schema", "criterion": "c", "schema": "schemas/answer.json"}, None, output, tmp_path)
    assert inline.outcome == from_file.outcome == (PASS if theirs else FAIL)
    if not theirs:
        assert inline.reason == "schema_violated" and inline.details["errors"]


def test_json_schema_reads_a_field_and_an_absent_one_fails() -> None:
    config = {"type": "json_schema", "criterion": "c", "field": "answer", "schema": {"type": "string"}}
    assert judged(config, None, {"answer": "ok"}).outcome == PASS
    assert judged(config, None, {"answer": 3}).outcome == FAIL
    assert judged(config, None, {"reply": "ok"}).reason == "field_absent"


def test_a_bad_schema_or_a_missing_schema_file_is_refused_at_load(tmp_path: Path) -> None:
    with pytest.raises(ProjectError) as raised:
        built({"type": "json_schema", "criterion": "c", "schema": {"type": "no-such-type"}}, tmp_path)
    assert "evaluators[0].schema: invalid JSON Schema" in raised.value.problems[0]
    with pytest.raises(ProjectError) as raised:
        built({"type": "json_schema", "criterion": "c", "schema": "schemas/missing.json"}, tmp_path)
    assert "no schema file" in raised.value.problems[0]


@pytest.mark.parametrize("kind, keys", [
    ("contains", {"field": "answer"}), ("regex", {"pattern": "x"}), ("json_schema", {"schema": {"type": "object"}}),
])
def test_a_failed_run_is_missing_never_a_pass(kind: str, keys: dict) -> None:
    verdict = judged({"type": kind, "criterion": "c", **keys}, {"answer": "x"}, None, status="error")
    assert verdict.outcome == MISSING
    failing = judged({"type": kind, "criterion": "c", "on_execution_error": "fail", **keys}, {"answer": "x"}, None, status="error")
    assert failing.outcome == FAIL
