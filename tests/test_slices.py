"""Slices: bucket labels, support, intervals and Benjamini-Yekutieli marks, on real tables."""

from __future__ import annotations

import pytest
from scipy import stats

from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.cases import CaseRecord
from oloproof_pipeline.project import load_project
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.model.slicing import parse_slice_spec
from oloproof_pipeline.decide.slices import (
    NO_VALUE,
    UNRECORDED,
    distinct_tests,
    numeric_bucket,
    slice_rows,
    slice_table,
    slices_markdown,
)
from oloproof_pipeline.decide.statistics import benjamini_yekutieli, clopper_pearson
from oloproof_pipeline.store.tables import SLICES_SCHEMA, VERDICTS_SCHEMA, frame_from_rows
from oloproof_pipeline.model.trajectory import Step, Trajectory

# -- specs and buckets ---------------------------------------------------------------------


def test_numeric_buckets_are_le_each_bound_then_gt_the_last():
    assert [numeric_bucket(value, [1, 2]) for value in range(5)] == ["le_1", "le_1", "le_2", "gt_2", "gt_2"]
    assert parse_slice_spec("trajectory_length:2,4").bucket_labels() == ["le_2", "le_4", "gt_4"]
    assert parse_slice_spec("metadata.category").key == "category"
    assert parse_slice_spec("metadata.customer.tier").key == "customer.tier"


@pytest.mark.parametrize("text", ["tool_calls:2,1", "tool_calls:1,1", "tool_calls:", "calls:1", "metadata.", "category", "tool_calls:a"])
def test_bad_slice_specs_are_refused(text):
    with pytest.raises(ValueError, match="slice"):
        parse_slice_spec(text)


def test_a_bad_slice_names_its_line(refund_desk):
    config = refund_desk / "oloproof.yaml"
    config.write_text(config.read_text().replace('slices: ["tool_calls:1,2", "metadata.category"]', 'slices:\n  - "tool_calls:1,2"\n  - "tool_calls:3,2"'))
    with pytest.raises(ProjectError, match=r"oloproof.yaml:\d+: slices\[1\]: .*bounds must increase"):
        load_project(refund_desk)


# -- rates per bucket ----------------------------------------------------------------------


def case(case_id: str, category: object = None, source_id: str | None = None) -> CaseRecord:
    metadata = None if category is None else {"category": category}
    return CaseRecord(
        case_id=case_id, case_digest="sha256:" + "0" * 64, source_id=source_id, group_id=source_id or case_id,
        input={}, metadata=metadata,
    )


def run(case_id: str, calls: int, *, results: bool = True) -> RecordedRun:
    steps = []
    for _ in range(calls):
        steps.append(Step(kind="tool_call", tool="t", arguments={}))
        if results:
            steps.append(Step(kind="tool_result", tool="t", result={}))
    return RecordedRun(case_id=case_id, case_digest="sha256:" + "0" * 64, system_version="v1", status="ok", trajectory=Trajectory(steps=steps))


def verdicts(rows: list[tuple[str, str, str]]):
    return frame_from_rows(
        [{"case_id": case_id, "group_id": case_id.split("~")[0], "criterion": criterion, "outcome": outcome} for case_id, criterion, outcome in rows],
        VERDICTS_SCHEMA,
    )


def rows_by_bucket(rows, slice_text: str, criterion: str):
    return {row.bucket: row for row in rows if row.slice == slice_text and row.criterion == criterion}


def test_support_interval_and_missing_per_bucket():
    # 12 cases with one call (4 fail), 6 with two calls, 2 with five (one missing).
    calls = [1] * 12 + [2] * 6 + [5] * 2
    outcomes = ["FAIL"] * 4 + ["PASS"] * 8 + ["PASS"] * 6 + ["PASS", "MISSING"]
    cases = {f"c{i}": case(f"c{i}") for i in range(20)}
    runs = {f"c{i}": run(f"c{i}", calls[i]) for i in range(20)}
    rows = slice_rows(
        [parse_slice_spec("tool_calls:1,2"), parse_slice_spec("trajectory_length:2,4")],
        verdicts([(f"c{i}", "ok", outcomes[i]) for i in range(20)] + [("c0", "other", "EXCLUDED")]),
        cases, runs, min_support=5,
    )
    by_calls = rows_by_bucket(rows, "tool_calls:1,2", "ok")
    assert list(by_calls) == ["le_1", "le_2", "gt_2"]
    one, two, many = by_calls["le_1"], by_calls["le_2"], by_calls["gt_2"]
    assert (one.passed, one.failed, one.missing, one.support, one.estimate) == (8, 4, 0, 12, pytest.approx(8 / 12))
    assert (one.lower, one.upper) == pytest.approx(clopper_pearson(8, 12))
    assert one.method == "clopper_pearson" and one.whole_estimate == pytest.approx(15 / 19)
    assert (two.support, two.estimate) == (6, 1.0)
    # Below min_slice_support: the rate and support, but no interval and no test.
    assert (many.support, many.missing, many.estimate) == (2, 1, 1.0)
    assert (many.lower, many.upper, many.p_value, many.differs) == (None, None, None, None)
    # trajectory_length counts steps (a call and its result): 2, 4 and 10 steps.
    by_steps = rows_by_bucket(rows, "trajectory_length:2,4", "ok")
    assert {bucket: row.support for bucket, row in by_steps.items()} == {"le_2": 12, "le_4": 6, "gt_4": 2}
    # A criterion that judged nothing here (all EXCLUDED) has empty buckets only.
    assert {row.support for row in rows if row.criterion == "other"} == {0}


def test_metadata_buckets_take_values_as_they_are_and_copies_count_for_their_criterion():
    cases = {
        "a": case("a", "eligible"), "b": case("b", "expired"), "c": case("c", 3), "d": case("d"),
        "a~p": case("a~p", "eligible", source_id="a"),
    }
    table = verdicts([
        ("a", "state", "PASS"), ("b", "state", "FAIL"), ("c", "state", "PASS"), ("d", "state", "PASS"),
        ("a~p", "state", "EXCLUDED"),
        ("a", "same_under_p", "EXCLUDED"), ("a~p", "same_under_p", "FAIL"),
    ])
    rows = slice_rows([parse_slice_spec("metadata.category")], table, cases, {}, min_support=1)
    assert list(rows_by_bucket(rows, "metadata.category", "state")) == ["3", "eligible", "expired", NO_VALUE]
    assert rows_by_bucket(rows, "metadata.category", "state")["eligible"].support == 1  # the copy is excluded here
    copies = rows_by_bucket(rows, "metadata.category", "same_under_p")
    assert {bucket: (row.failed, row.support) for bucket, row in copies.items()} == {"eligible": (1, 1)}


def test_cases_without_a_recording_fall_in_their_own_bucket():
    cases = {name: case(name) for name in ("a", "b")}
    rows = slice_rows([parse_slice_spec("tool_calls:1")], verdicts([("a", "x", "PASS"), ("b", "x", "MISSING")]), cases, {"a": run("a", 1)}, min_support=1)
    assert {row.bucket: row.support for row in rows} == {"le_1": 1, "gt_1": 0, UNRECORDED: 1}


def test_by_marks_the_bucket_that_differs_across_the_whole_family():
    # 30 cases: "bad" fails 9 of 10, the others pass nearly all; a second criterion is flat.
    categories = ["bad"] * 10 + ["good"] * 10 + ["fine"] * 10
    cases = {f"c{i}": case(f"c{i}", categories[i]) for i in range(30)}
    first = [(f"c{i}", "first", "FAIL" if (i < 9 or i == 25) else "PASS") for i in range(30)]
    flat = [(f"c{i}", "flat", "FAIL" if i % 5 == 0 else "PASS") for i in range(30)]
    runs = {f"c{i}": run(f"c{i}", 1 + i % 2) for i in range(30)}
    specs = [parse_slice_spec("metadata.category"), parse_slice_spec("tool_calls:1")]
    rows = slice_rows(specs, verdicts(first + flat), cases, runs, min_support=5)
    tested = [row for row in rows if row.p_value is not None]
    assert len(tested) == 2 * 3 + 2 * 2  # gt_1 and le_1 hold 15 each; every bucket has a complement
    # tool_calls:1 splits each criterion in two: le_1 against gt_1 and gt_1 against le_1 are
    # one test, so the family holds 2 * 3 + 2 tests, not ten.
    tests = distinct_tests(rows)
    assert len(tests) == 8 and sorted(len(rows_of) for rows_of in tests) == [1] * 6 + [2] * 2
    bad = rows_by_bucket(rows, "metadata.category", "first")["bad"]
    assert bad.p_value == pytest.approx(stats.fisher_exact([[1, 9], [19, 1]]).pvalue)
    assert bad.differs is True
    expected = benjamini_yekutieli([rows_of[0].p_value for rows_of in tests], fdr=0.1)
    assert [[row.differs for row in rows_of] for rows_of in tests] == [[differs] * len(rows_of) for rows_of, differs in zip(tests, expected)]
    marked = {(row.slice, row.bucket, row.criterion) for row in rows if row.differs}
    assert marked == {("metadata.category", "bad", "first")}
    # "good" (10 of 10 against 10 of 20) is nominally significant, but not after BY across eight tests.
    good = rows_by_bucket(rows, "metadata.category", "first")["good"]
    assert good.p_value < 0.05 and good.differs is False


def test_a_two_bucket_split_enters_its_one_test_once():
    # 10 cases with one call all pass, 10 with two pass 6: Fisher p = 0.087 for le_1 against
    # gt_1, the same table as gt_1 against le_1. One test at FDR 0.1 marks both buckets;
    # entered twice (m = 2) it would mark neither (0.087 > 2 * 0.1 / (2 * 1.5)).
    cases = {f"c{i}": case(f"c{i}") for i in range(20)}
    runs = {f"c{i}": run(f"c{i}", 1 if i < 10 else 2) for i in range(20)}
    outcomes = ["PASS"] * 10 + ["PASS"] * 6 + ["FAIL"] * 4
    rows = slice_rows([parse_slice_spec("tool_calls:1")], verdicts([(f"c{i}", "ok", outcomes[i]) for i in range(20)]), cases, runs, min_support=5)
    one, two = rows_by_bucket(rows, "tool_calls:1", "ok")["le_1"], rows_by_bucket(rows, "tool_calls:1", "ok")["gt_1"]
    assert one.p_value == two.p_value == pytest.approx(stats.fisher_exact([[10, 0], [6, 4]]).pvalue)
    assert 0.2 / 3 < one.p_value < 0.1
    assert len(distinct_tests(rows)) == 1
    assert one.differs is True and two.differs is True
    assert "across all 1 tests" in slices_markdown(rows)


def test_slice_table_and_markdown():
    cases = {f"c{i}": case(f"c{i}", "x" if i < 5 else "y") for i in range(10)}
    rows = slice_rows([parse_slice_spec("metadata.category")], verdicts([(f"c{i}", "ok", "PASS") for i in range(10)]), cases, {}, min_support=6)
    frame = slice_table(rows, version="1.0.0", sliced_by_run="run-1")
    assert list(frame.columns) == SLICES_SCHEMA.names
    assert set(frame["system_version"]) == {"1.0.0"} and frame["lower"].isna().all()  # 5 < 6: no intervals
    text = slices_markdown(rows)
    assert "never gated" in text and "| metadata.category | x | ok | 1.000 | - | 5 (5/0/0) | 1.000 | not tested |" in text
