"""Digests must match Oloproof's recipe byte for byte, or existing labels stop counting."""

from __future__ import annotations

import json

import pytest

from oloproof_pipeline.model.digests import canonical_json, case_digest, digest
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project


def test_known_case_digest_is_pinned():
    assert (
        case_digest(
            input={"order_id": "ord-001", "message": "Refund please"},
            expected={"answer": "refunded"},
            metadata=None,
            group_id=None,
            initial_state={"orders": {"ord-001": {"status": "delivered"}}},
            include_initial_state=True,
        )
        == "sha256:64f8069b64e8c7010e4a85b376a8083ad5266b162dc5ede0905a874c97ff800f"
    )


def test_case_without_starting_states_leaves_initial_state_out_and_keeps_unicode():
    assert (
        case_digest(input="héllo", expected=None, metadata=None, group_id=None)
        == "sha256:ffec9250f43a3b5322f645fc6e35c11d0b96f78d57cce374a2364526e486b200"
    )


def test_canonical_json_sorts_keys_and_refuses_nan():
    assert canonical_json({"b": 1, "a": [1, {"d": 2, "c": 3}]}) == '{"a":[1,{"c":3,"d":2}],"b":1}'
    with pytest.raises(ValueError):
        digest("x", float("nan"))


def test_state_after_never_changes_a_case_digest(refund_desk):
    """The digest is over the case as written; running it (and what it leaves) changes nothing."""
    project = load_project(refund_desk)
    before = {case.case_id: case.case_digest for case in load_cases(project)}
    cases_file = refund_desk / "data" / "cases.jsonl"
    lines = [json.loads(line) for line in cases_file.read_text().splitlines()]
    lines[0]["expected"]["state"]["orders"]["ord-001"]["status"] = "escalated"
    cases_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    after = {case.case_id: case.case_digest for case in load_cases(project)}
    assert before["ord-001"] != after["ord-001"]
    assert all(before[case_id] == after[case_id] for case_id in before if case_id != "ord-001")


def test_editing_a_starting_state_makes_a_new_case(refund_desk, tmp_path):
    project = load_project(refund_desk)
    first = load_cases(project)[1].case_digest
    cases_file = refund_desk / "data" / "cases.jsonl"
    lines = [json.loads(line) for line in cases_file.read_text().splitlines()]
    lines[1]["initial_state"]["orders"]["ord-002"]["total_usd"] = 1.0
    cases_file.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert load_cases(project)[1].case_digest != first
