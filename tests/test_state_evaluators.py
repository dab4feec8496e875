"""state_matches, state_unchanged and exact_match, judged through the registry on real records."""

from __future__ import annotations

import json
from typing import Any

import pytest

from conftest import write_project
from helpers import tiny_stateful_app
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.model.digests import case_digest
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.evaluators import JudgingContext, build_evaluators
from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun
from oloproof_pipeline.model.outcomes import Verdict

NO_STATE = object()  # a recording made without an environment_state record

ORDERS = {
    "orders": {
        "ord-1": {"status": "refunded", "amount": 40.0},
        "ord-2": {"status": "open", "amount": 15},
    },
    "audit": ["refund ord-1"],
}


def make_case(
    case_id: str = "c1",
    *,
    expected: dict[str, Any] | None = None,
    initial_state: dict[str, Any] | None = None,
    source_id: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> CaseRecord:
    group_id = source_id or case_id
    return CaseRecord(
        case_id=case_id,
        case_digest=case_digest(input="refund ord-1", expected=expected, metadata=metadata, group_id=group_id),
        source_id=source_id,
        transform="paraphrase" if source_id else None,
        group_id=group_id,
        input="refund ord-1",
        initial_state=initial_state,
        expected=expected,
        metadata=metadata,
    )


def make_recording(
    case: CaseRecord, *, state: Any = NO_STATE, output: Any = None, status: str = "ok", error: str | None = None
) -> RecordedRun:
    environment = None if state is NO_STATE else EnvironmentState(initial="sha256:" + "0" * 64, state=state)
    return RecordedRun(
        case_id=case.case_id,
        case_digest=case.case_digest,
        system_version="v1",
        status=status,
        error=error,
        output=output,
        environment_state=environment,
    )


def judge(config: dict[str, Any], case: CaseRecord, recording: RecordedRun) -> Verdict:
    [evaluator] = build_evaluators([config], file="oloproof.yaml")
    context = JudgingContext(cases={case.case_id: case}, recordings={recording.case_id: recording})
    verdict = evaluator.judge_case(case, context)
    # Details are stored as JSON: every verdict must survive the round trip unchanged.
    assert json.loads(json.dumps(verdict.details, allow_nan=False)) == verdict.details
    return verdict


def judge_state(config: dict[str, Any], expected_state: Any, state_after: Any) -> Verdict:
    case = make_case(expected={"state": expected_state})
    return judge({"type": "state_matches", **config}, case, make_recording(case, state=state_after))


def row_for(verdict: Verdict, path: str) -> dict[str, Any]:
    [row] = [row for row in verdict.details if row["path"] == path]
    return row


# -- state_matches: modes ------------------------------------------------------------------


def test_subset_passes_when_every_expected_leaf_matches_and_ignores_extra_keys():
    verdict = judge_state({"mode": "subset"}, {"orders": {"ord-1": {"status": "refunded"}}}, ORDERS)

    assert (verdict.outcome, verdict.reason, verdict.criterion) == ("PASS", "state_matches", "state_matches")
    assert verdict.details == [
        {"path": "orders.ord-1.status", "expected": "refunded", "actual": "refunded", "matched": True}
    ]


def test_subset_fails_naming_the_first_differing_path_and_lists_every_compared_leaf():
    expected = {"orders": {"ord-1": {"status": "refunded", "amount": 40.0}, "ord-2": {"status": "closed"}}}

    verdict = judge_state({"mode": "subset"}, expected, ORDERS)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_differs: orders.ord-2.status")
    assert [(row["path"], row["matched"]) for row in verdict.details] == [
        ("orders.ord-1.status", True),
        ("orders.ord-1.amount", True),
        ("orders.ord-2.status", False),
    ]
    assert row_for(verdict, "orders.ord-2.status") == {
        "path": "orders.ord-2.status",
        "expected": "closed",
        "actual": "open",
        "matched": False,
    }


def test_subset_keeps_key_level_rows_when_the_actual_dict_has_many_extra_keys():
    # DeepDiff would otherwise report the whole dict as one changed value.
    state_after = {"orders": {"ord-1": {"status": "refunded", "a": 1, "b": 2, "c": 3, "d": 4, "e": 5}}}

    verdict = judge_state({"mode": "subset"}, {"orders": {"ord-1": {"status": "refunded"}}}, state_after)

    assert verdict.outcome == "PASS"


def test_subset_compares_lists_whole_and_in_order():
    verdict = judge_state({}, {"audit": ["refund ord-1"]}, {"audit": ["refund ord-1", "refund ord-2"]})

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_differs: audit")
    assert row_for(verdict, "audit")["actual"] == ["refund ord-1", "refund ord-2"]


def test_exact_passes_on_an_equal_state_with_a_row_per_leaf():
    verdict = judge_state({"mode": "exact"}, ORDERS, json.loads(json.dumps(ORDERS)))

    assert (verdict.outcome, verdict.reason) == ("PASS", "state_matches")
    assert [row["path"] for row in verdict.details] == [
        "orders.ord-1.status",
        "orders.ord-1.amount",
        "orders.ord-2.status",
        "orders.ord-2.amount",
        "audit",
    ]
    assert all(row["matched"] for row in verdict.details)


def test_exact_fails_on_an_extra_key_that_subset_accepts():
    expected = {"orders": {"ord-1": {"status": "refunded"}}}
    state_after = {"orders": {"ord-1": {"status": "refunded", "refund_id": "rf-9"}}}

    exact = judge_state({"mode": "exact"}, expected, state_after)
    subset = judge_state({"mode": "subset"}, expected, state_after)

    assert (exact.outcome, exact.reason) == ("FAIL", "state_differs: orders.ord-1.refund_id")
    assert exact.details == [
        {"path": "orders.ord-1.status", "expected": "refunded", "actual": "refunded", "matched": True},
        {
            "path": "orders.ord-1.refund_id",
            "expected": None,
            "actual": "rf-9",
            "matched": False,
            "expected_absent": True,
        },
    ]
    assert subset.outcome == "PASS"


def test_exact_fails_on_an_extra_table_when_comparing_the_whole_state():
    verdict = judge_state({"mode": "exact"}, {"orders": ORDERS["orders"]}, ORDERS)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_differs: audit")


# -- state_matches: paths and tolerance ----------------------------------------------------


def test_paths_compare_only_the_selected_subtrees():
    expected = {"orders": {"ord-1": {"status": "refunded"}, "ord-2": {"status": "closed"}}}

    selected = judge_state({"mode": "exact", "paths": ["orders.ord-1.status"]}, expected, ORDERS)
    other = judge_state({"paths": ["orders.ord-2"]}, expected, ORDERS)

    assert (selected.outcome, selected.reason) == ("PASS", "state_matches")
    assert [row["path"] for row in selected.details] == ["orders.ord-1.status"]
    assert (other.outcome, other.reason) == ("FAIL", "state_differs: orders.ord-2.status")


def test_paths_index_into_lists_with_digits():
    verdict = judge_state({"paths": ["audit.0"]}, {"audit": ["refund ord-1", "ignored"]}, ORDERS)

    assert verdict.outcome == "PASS"
    assert verdict.details == [{"path": "audit.0", "expected": "refund ord-1", "actual": "refund ord-1", "matched": True}]


def test_a_selected_path_the_case_does_not_state_excludes_the_case():
    verdict = judge_state({"paths": ["orders.ord-1", "refunds"]}, {"orders": {"ord-1": {}}}, ORDERS)

    assert (verdict.outcome, verdict.reason, verdict.details) == ("EXCLUDED", "path_not_expected", {"paths": ["refunds"]})


@pytest.mark.parametrize(
    ("tolerance", "amount_after", "outcome"),
    [
        (0.01, 40.004, "PASS"),
        (0.01, 39.99, "PASS"),
        (0.01, 40.05, "FAIL"),
        (None, 40.004, "FAIL"),
        (None, 40, "PASS"),  # 40 and 40.0 are one JSON number
    ],
)
def test_tolerance_counts_numbers_within_it_as_equal(tolerance, amount_after, outcome):
    config = {} if tolerance is None else {"tolerance": tolerance}

    verdict = judge_state(config, {"orders": {"ord-1": {"amount": 40.0}}}, {"orders": {"ord-1": {"amount": amount_after}}})

    assert verdict.outcome == outcome
    assert row_for(verdict, "orders.ord-1.amount")["actual"] == amount_after


def test_a_difference_exactly_at_the_tolerance_passes_despite_float_rounding():
    # 1.11 - 1.10 is 0.010000000000000009 in floating point.
    verdict = judge_state({"tolerance": 0.01}, {"price": 1.10}, {"price": 1.11})

    assert verdict.outcome == "PASS"


def test_tolerance_applies_inside_lists_but_never_to_booleans():
    inside_list = judge_state({"tolerance": 0.5}, {"totals": [1.0, 2.0]}, {"totals": [1.2, 2]})
    boolean = judge_state({"tolerance": 0.5}, {"flags": {"paid": True}}, {"flags": {"paid": 1}})

    assert inside_list.outcome == "PASS"
    assert (boolean.outcome, boolean.reason) == ("FAIL", "state_differs: flags.paid")


# -- state_matches: absent, missing, excluded ----------------------------------------------


def test_a_path_absent_from_the_recorded_state_fails():
    expected = {"orders": {"ord-1": {"status": "refunded"}, "ord-3": {"status": "open", "amount": 5}}}

    verdict = judge_state({}, expected, ORDERS)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_differs: orders.ord-3.status")
    assert row_for(verdict, "orders.ord-3.amount") == {
        "path": "orders.ord-3.amount",
        "expected": 5,
        "actual": None,
        "matched": False,
        "absent": True,
    }


def test_a_selected_path_absent_from_the_recorded_state_fails():
    verdict = judge_state({"paths": ["refunds.rf-1"]}, {"refunds": {"rf-1": {"amount": 40.0}}}, ORDERS)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_differs: refunds.rf-1.amount")
    assert verdict.details == [
        {"path": "refunds.rf-1.amount", "expected": 40.0, "actual": None, "matched": False, "absent": True}
    ]


def test_a_stored_null_is_not_an_absent_value():
    verdict = judge_state({}, {"orders": {"ord-1": {"note": None}}}, {"orders": {"ord-1": {"note": None}}})

    assert verdict.outcome == "PASS"
    assert "absent" not in row_for(verdict, "orders.ord-1.note")


def test_no_recorded_state_is_missing():
    case = make_case(expected={"state": {"orders": {}}})

    verdict = judge({"type": "state_matches"}, case, make_recording(case))

    assert (verdict.outcome, verdict.reason) == ("MISSING", "no_recorded_state")


@pytest.mark.parametrize("expected", [None, {"answer": "done"}])
def test_a_case_without_an_expected_state_is_excluded(expected):
    case = make_case(expected=expected)

    verdict = judge({"type": "state_matches"}, case, make_recording(case, state=ORDERS))

    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "no_expected_state")


def test_a_derived_copy_is_excluded():
    copy = make_case("c1~paraphrase", expected={"state": ORDERS}, source_id="c1")

    verdict = judge({"type": "state_matches"}, copy, make_recording(copy, state=ORDERS))

    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "metamorphic_copy")


def test_a_recording_that_errored_is_missing():
    case = make_case(expected={"state": ORDERS})
    recording = make_recording(case, status="error", error="ValueError: boom")

    verdict = judge({"type": "state_matches"}, case, recording)

    assert (verdict.outcome, verdict.reason, verdict.details) == ("MISSING", "run_error", {"error": "ValueError: boom"})


def test_a_custom_criterion_names_the_verdict():
    verdict = judge_state({"criterion": "refund_recorded", "mode": "subset"}, {"orders": {}}, ORDERS)

    assert (verdict.criterion, verdict.outcome) == ("refund_recorded", "PASS")


# -- state_matches: ignored paths and row tables --------------------------------------------

NOTES = {"notes": [{"author": "analyst", "text": "ready"}, {"author": "approver", "text": "cleared"}]}


def test_ignored_paths_leave_free_text_out_of_the_comparison_and_its_rows():
    after = {"notes": [{"author": "analyst", "text": "Looks ready!"}, {"author": "approver", "text": "ok"}]}

    verdict = judge_state({"mode": "exact", "ignore": ["notes.*.text"]}, NOTES, after)

    assert verdict.outcome == "PASS"
    assert [row["path"] for row in verdict.details] == ["notes"]
    assert row_for(verdict, "notes")["actual"] == [{"author": "analyst"}, {"author": "approver"}]


def test_ignored_paths_do_not_hide_a_change_beside_them():
    after = {"notes": [{"author": "analyst", "text": "x"}, {"author": "analyst", "text": "y"}]}

    verdict = judge_state({"ignore": ["notes.*.text"]}, NOTES, after)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_differs: notes")


def test_rows_matched_by_key_compare_independent_of_order_and_name_a_missing_row():
    expected = {"waivers": [{"condition_id": "B", "by": "approver"}, {"condition_id": "A", "by": "approver"}]}
    config = {"mode": "subset", "match_rows_by": {"waivers": "condition_id"}}

    reordered = judge_state(config, expected, {"waivers": [{"condition_id": "A", "by": "approver", "reason": "r"},
                                                           {"condition_id": "B", "by": "approver"}]})
    assert reordered.outcome == "PASS"
    assert row_for(reordered, "waivers.A.by") == {"path": "waivers.A.by", "expected": "approver", "actual": "approver", "matched": True}

    missing = judge_state(config, expected, {"waivers": [{"condition_id": "A", "by": "approver"}]})
    assert (missing.outcome, missing.reason) == ("FAIL", "state_differs: waivers.B.condition_id")
    assert row_for(missing, "waivers.B.by")["absent"] is True


def test_a_repeated_row_key_shows_as_a_row_of_its_own():
    expected = {"waivers": [{"condition_id": "A"}]}
    after = {"waivers": [{"condition_id": "A"}, {"condition_id": "A"}]}

    verdict = judge_state({"match_rows_by": {"waivers": "condition_id"}}, expected, after)

    assert verdict.outcome == "FAIL"
    assert row_for(verdict, "waivers.A#2")["expected_absent"] is True


# -- state_unchanged -----------------------------------------------------------------------


def judge_unchanged(paths: list[str], initial_state: Any, state_after: Any, **options: Any) -> Verdict:
    case = make_case(initial_state=initial_state)
    config = {"type": "state_unchanged", "criterion": "other_orders_untouched", "paths": paths, **options}
    return judge(config, case, make_recording(case, state=state_after))


INITIAL = {"orders": {"ord-1": {"status": "paid"}, "ord-2": {"status": "open", "amount": 15}}}


def test_unchanged_passes_when_the_named_paths_are_as_they_started():
    verdict = judge_unchanged(["orders.ord-2"], INITIAL, ORDERS)  # ord-1 changed; not named

    assert (verdict.outcome, verdict.reason, verdict.criterion) == ("PASS", "state_unchanged", "other_orders_untouched")
    assert verdict.details == [
        {"path": "orders.ord-2.status", "expected": "open", "actual": "open", "matched": True},
        {"path": "orders.ord-2.amount", "expected": 15, "actual": 15, "matched": True},
    ]


def test_unchanged_fails_on_a_changed_value():
    state_after = {"orders": {"ord-1": {"status": "paid"}, "ord-2": {"status": "refunded", "amount": 15}}}

    verdict = judge_unchanged(["orders.ord-1", "orders.ord-2"], INITIAL, state_after)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_changed: orders.ord-2.status")
    assert row_for(verdict, "orders.ord-2.status") == {
        "path": "orders.ord-2.status",
        "expected": "open",
        "actual": "refunded",
        "matched": False,
    }


def test_unchanged_fails_on_an_added_key():
    state_after = {"orders": {"ord-1": {"status": "paid"}, "ord-2": {"status": "open", "amount": 15, "note": "x"}}}

    verdict = judge_unchanged(["orders.ord-2"], INITIAL, state_after)

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_changed: orders.ord-2.note")


def test_unchanged_fails_when_a_path_present_at_the_start_is_gone():
    verdict = judge_unchanged(["orders.ord-2"], INITIAL, {"orders": {"ord-1": {"status": "paid"}}})

    assert (verdict.outcome, verdict.reason) == ("FAIL", "state_changed: orders.ord-2.status")
    assert all(row["absent"] and row["actual"] is None for row in verdict.details)


def test_unchanged_never_passes_a_path_absent_before_and_after_unless_absent_ok():
    stayed_absent = judge_unchanged(["refunds"], INITIAL, INITIAL)
    asked_for_absence = judge_unchanged(["refunds"], INITIAL, INITIAL, absent_ok=True)
    appeared = judge_unchanged(["refunds"], INITIAL, {**INITIAL, "refunds": {"rf-1": {}}}, absent_ok=True)

    assert (stayed_absent.outcome, stayed_absent.reason) == ("MISSING", "path_absent: refunds")
    assert stayed_absent.details == {"paths": ["refunds"]}
    assert (asked_for_absence.outcome, asked_for_absence.reason) == ("PASS", "state_unchanged")
    assert (appeared.outcome, appeared.reason) == ("FAIL", "state_changed: refunds")
    assert appeared.details == [
        {"path": "refunds", "expected": None, "actual": {"rf-1": {}}, "matched": False, "expected_absent": True}
    ]


def test_unchanged_without_a_recorded_state_is_missing():
    case = make_case(initial_state=INITIAL)
    config = {"type": "state_unchanged", "criterion": "untouched", "paths": ["orders"]}

    verdict = judge(config, case, make_recording(case))

    assert (verdict.outcome, verdict.reason) == ("MISSING", "no_recorded_state")


def test_unchanged_without_an_initial_state_is_excluded():
    case = make_case()
    config = {"type": "state_unchanged", "criterion": "untouched", "paths": ["orders"]}

    verdict = judge(config, case, make_recording(case, state=ORDERS))

    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "no_initial_state")


# -- exact_match ---------------------------------------------------------------------------

ANSWER = {"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "expected.answer"}


def judge_answer(config: dict[str, Any], expected: dict[str, Any] | None, output: Any) -> Verdict:
    case = make_case(expected=expected)
    return judge(config, case, make_recording(case, output=output))


def test_exact_match_passes_on_an_equal_field():
    verdict = judge_answer(ANSWER, {"answer": "refunded"}, {"answer": "refunded", "trace_id": 7})

    assert (verdict.outcome, verdict.criterion) == ("PASS", "answer_correct")
    assert verdict.details == {"expected": "refunded", "actual": "refunded"}


def test_exact_match_fails_with_expected_and_actual():
    verdict = judge_answer(ANSWER, {"answer": "refunded"}, {"answer": "Refunded"})

    assert (verdict.outcome, verdict.reason) == ("FAIL", "differs")
    assert verdict.details == {"expected": "refunded", "actual": "Refunded"}


def test_exact_match_compares_nested_fields_and_numbers_by_value():
    config = {**ANSWER, "field": "refund.amount", "expected_field": "expected.refund.amount"}

    equal = judge_answer(config, {"refund": {"amount": 40}}, {"refund": {"amount": 40.0}})
    boolean = judge_answer(config, {"refund": {"amount": 1}}, {"refund": {"amount": True}})

    assert equal.outcome == "PASS"
    assert boolean.outcome == "FAIL"


def test_exact_match_excludes_a_case_without_the_expected_field():
    verdict = judge_answer(ANSWER, {"state": {}}, {"answer": "refunded"})

    assert (verdict.outcome, verdict.reason) == ("EXCLUDED", "no_expected_value")


def test_exact_match_fails_when_the_output_lacks_the_field():
    verdict = judge_answer(ANSWER, {"answer": "refunded"}, {"reply": "refunded"})

    assert (verdict.outcome, verdict.reason) == ("FAIL", "field_absent")
    assert verdict.details == {"expected": "refunded", "actual": None, "absent": True}


def test_exact_match_defaults_to_answer_fields_and_can_read_metadata():
    defaults = judge_answer({"type": "exact_match", "criterion": "c"}, {"answer": 3}, {"answer": 3})
    case = make_case(expected={"answer": 3}, metadata={"channel": "email"})
    config = {"type": "exact_match", "criterion": "c", "field": "channel", "expected_field": "metadata.channel"}
    from_metadata = judge(config, case, make_recording(case, output={"channel": "email"}))

    assert defaults.outcome == "PASS"
    assert from_metadata.outcome == "PASS"


# -- configuration -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        {"type": "state_matches", "colour": "blue"},
        {"type": "state_unchanged", "criterion": "c", "paths": ["orders"], "colour": "blue"},
        {"type": "exact_match", "criterion": "c", "colour": "blue"},
    ],
)
def test_an_unknown_key_is_an_error_naming_it(config):
    with pytest.raises(ProjectError) as raised:
        build_evaluators([config], file="oloproof.yaml")

    assert raised.value.problems == ["oloproof.yaml: evaluators[0].colour: unknown key"]


@pytest.mark.parametrize(
    ("config", "field"),
    [
        ({"type": "state_matches", "mode": "loose"}, "evaluators[0].mode"),
        ({"type": "state_matches", "tolerance": -0.1}, "evaluators[0].tolerance"),
        ({"type": "state_matches", "paths": []}, "evaluators[0].paths"),
        ({"type": "state_matches", "paths": ["orders..ord-1"]}, "evaluators[0].paths[0]"),
        ({"type": "state_unchanged", "criterion": "c", "paths": []}, "evaluators[0].paths"),
        ({"type": "state_unchanged", "paths": ["orders"], "on_execution_error": "skip"}, "evaluators[0].on_execution_error"),
        ({"type": "exact_match"}, "evaluators[0].criterion"),
        ({"type": "exact_match", "criterion": "c", "expected_field": "expected..answer"}, "evaluators[0].expected_field"),
    ],
)
def test_invalid_settings_are_errors_naming_the_field(config, field):
    with pytest.raises(ProjectError) as raised:
        build_evaluators([config], file="oloproof.yaml")

    [problem] = raised.value.problems
    assert problem.startswith(f"oloproof.yaml: {field}: ")


# -- nothing absent passes: a path naming nothing is refused at load ------------------------

WORLD = {"files": {"landlord-notices.txt": {"content": "rent due"}}, "orders": {"ord-999": {"status": "open"}}}


def loaded(tmp_path, evaluators: list[dict[str, Any]], cases: list[dict[str, Any]] | None = None) -> list[CaseRecord]:
    cases = cases or [{"id": "c1", "input": "x", "initial_state": WORLD, "expected": {"state": WORLD}}]
    root = write_project(tmp_path / "p", app=tiny_stateful_app(), cases=cases, evaluators=evaluators, rules=[])
    return load_cases(load_project(root))


def refusal(tmp_path, evaluators: list[dict[str, Any]], cases: list[dict[str, Any]] | None = None) -> str:
    with pytest.raises(ProjectError) as raised:
        loaded(tmp_path, evaluators, cases)
    [problem] = raised.value.problems
    return problem


@pytest.mark.parametrize("kind", ["state_unchanged", "state_matches"])
def test_a_path_naming_nothing_in_the_starting_and_expected_state_is_refused_at_load(tmp_path, kind):
    # The dotted spelling of a key holding a dot names nothing: it used to read absent and pass.
    problem = refusal(tmp_path, [{"type": kind, "criterion": "c", "paths": ["files.landlord-notices.txt"]}])

    assert "\n" not in problem
    assert problem.startswith(f"{tmp_path / 'p' / 'oloproof.yaml'}:")
    assert f"evaluators[0] ({kind} c): path 'files.landlord-notices.txt' names nothing" in problem
    assert "1 case: c1 (data/cases.jsonl:1)" in problem


@pytest.mark.parametrize("kind", ["state_unchanged", "state_matches"])
def test_a_quoted_path_or_absent_ok_loads(tmp_path, kind):
    quoted = [{"type": kind, "criterion": "c", "paths": ['files["landlord-notices.txt"]']}]
    asked = [{"type": kind, "criterion": "c", "paths": ["refunds"], "absent_ok": True}]
    assert [case.case_id for case in loaded(tmp_path / "quoted", quoted)] == ["c1"]
    assert [case.case_id for case in loaded(tmp_path / "asked", asked)] == ["c1"]


def test_a_path_only_the_expected_state_holds_loads_and_a_case_it_does_not_apply_to_is_not_checked(tmp_path):
    cases = [
        {"id": "makes-refund", "input": "x", "initial_state": WORLD, "expected": {"state": {**WORLD, "refunds": {"r1": 5}}}},
        {"id": "other", "input": "x", "initial_state": WORLD, "expected": {"state": WORLD}, "metadata": {"suite": "b"}},
    ]
    evaluators = [{"type": "state_matches", "criterion": "c", "paths": ["refunds"], "applies_to": {"ids": ["makes-*"]}}]
    assert len(loaded(tmp_path, evaluators, cases)) == 2
    unscoped = refusal(tmp_path / "unscoped", [{"type": "state_matches", "criterion": "c", "paths": ["refunds"]}], cases)
    assert "1 case: other (data/cases.jsonl:2)" in unscoped


def test_state_matches_with_absent_ok_expects_an_unstated_path_to_stay_absent():
    config = {"type": "state_matches", "paths": ["refunds"], "absent_ok": True}
    assert judge_state(config, WORLD, WORLD).outcome == "PASS"
    appeared = judge_state(config, WORLD, {**WORLD, "refunds": {"r1": 5}})
    assert (appeared.outcome, appeared.reason) == ("FAIL", "state_differs: refunds")
    assert judge_state({"type": "state_matches", "paths": ["refunds"]}, WORLD, WORLD).reason == "path_not_expected"


# -- evaluators over some cases, and each case's own bystanders --------------------------------


@pytest.mark.parametrize(
    ("applies_to", "selected"),
    [
        ({"ids": ["bank-*"]}, True),
        ({"ids": ["slack-*", "bank-1?"]}, False),
        ({"metadata": {"suite": "banking"}}, True),
        ({"metadata": {"suite": ["slack", "travel"]}}, False),
        ({"metadata": {'limits["daily.max"]': 10}}, True),
        ({"tags": ["password", "injection"]}, True),
        ({"tags": ["travel"]}, False),
        ({"ids": ["bank-*"], "tags": ["travel"]}, False),
    ],
)
def test_an_evaluator_applies_to_the_cases_its_selector_picks_and_excludes_the_rest(applies_to, selected):
    metadata = {"suite": "banking", "tags": ["password"], "limits": {"daily.max": 10}}
    case = make_case("bank-3", expected={"state": ORDERS}, metadata=metadata)
    verdict = judge({"type": "state_matches", "applies_to": applies_to}, case, make_recording(case, state=ORDERS))
    assert (verdict.outcome, verdict.reason) == (("PASS", "state_matches") if selected else ("EXCLUDED", "not_selected"))


def test_a_selector_is_refused_with_an_unknown_key_or_a_malformed_path():
    with pytest.raises(ProjectError) as raised:
        build_evaluators([{"type": "state_matches", "applies_to": {"suites": ["b"]}}], file="oloproof.yaml")
    assert raised.value.problems == ["oloproof.yaml: evaluators[0].applies_to.suites: unknown key"]
    with pytest.raises(ProjectError):
        build_evaluators([{"type": "state_matches", "applies_to": {"metadata": {"a..b": 1}}}], file="oloproof.yaml")


def test_a_case_adds_its_own_bystanders_to_the_evaluators_paths():
    initial = {**INITIAL, "users": {"u1": {"password": "old"}}}
    changed_password = {**initial, "users": {"u1": {"password": "new"}}}
    config = {"type": "state_unchanged", "criterion": "bystanders", "paths": ["orders.ord-2"]}
    guarded = make_case("c1", initial_state=initial, expected={"unchanged": ['users["u1"].password']})
    free = make_case("c2", initial_state=initial)

    failed = judge(config, guarded, make_recording(guarded, state=changed_password))
    passed = judge(config, free, make_recording(free, state=changed_password))
    only_own = judge({"type": "state_unchanged"}, free, make_recording(free, state=changed_password))

    assert (failed.outcome, failed.reason) == ("FAIL", "state_changed: users.u1.password")
    assert [row["path"] for row in failed.details] == ["orders.ord-2.status", "orders.ord-2.amount", "users.u1.password"]
    assert (passed.outcome, passed.reason) == ("PASS", "state_unchanged")
    assert (only_own.outcome, only_own.reason) == ("EXCLUDED", "no_unchanged_paths")


def test_a_case_bystander_naming_nothing_is_refused_at_load_and_a_malformed_one_names_its_line(tmp_path):
    cases = [{"id": "c1", "input": "x", "initial_state": WORLD, "expected": {"unchanged": ["files.landlord-notices.txt"]}}]
    problem = refusal(tmp_path, [{"type": "state_unchanged", "criterion": "c"}], cases)
    assert "path 'files.landlord-notices.txt' names nothing" in problem
    bad = [{"id": "c1", "input": "x", "initial_state": WORLD, "expected": {"unchanged": ["files..txt"]}}]
    problem = refusal(tmp_path / "bad", [{"type": "state_unchanged", "criterion": "c"}], bad)
    assert problem.startswith(f"{tmp_path / 'bad' / 'p' / 'data' / 'cases.jsonl'}:1: expected:")
    assert "expected.unchanged[0]: 'files..txt' is not a path" in problem
