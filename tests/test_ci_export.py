"""CI-native results of a stored version: JUnit XML that CI test reports read (one suite per
criterion, a failure per FAIL verdict with its reason) and a Markdown job summary (the
decisions table, the cases newly broken since the version before), both read back from the
stored tables without running anything."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from conftest import write_project
from helpers import oloproof
from oloproof_pipeline.cli.gate import gate_table
from oloproof_pipeline.decide.formatting import RULE_COLUMNS, rule_cells
from oloproof_pipeline.read.ci_export import junit_text, junit_tree, previous_version, summary_markdown
from oloproof_pipeline.read.results import load_results
from oloproof_pipeline.store.tables import GATE_NESTED, rows_from_frame


# Answers the question asked, except: c4 raises (MISSING), c5 answers wrongly (FAIL), and from
# version 1.1.0 on c0 answers wrongly too (newly broken).
APP = """
    BROKEN = {BROKEN!r}

    class System:
        def __call__(self, request):
            if request["q"] == "c4":
                raise RuntimeError("the desk fell over")
            answer = "wrong" if request["q"] in BROKEN else request["q"]
            return {{"answer": answer, "tag": "t"}}
"""
# c0..c2 also expect a tag; the other cases are not judged on it (EXCLUDED, no_expected_value).
CASES = [
    {"id": f"c{index}", "input": {"q": f"c{index}"},
     "expected": {"answer": f"c{index}", **({"tag": "t"} if index < 3 else {})}}
    for index in range(6)
]
EVALUATORS = [
    {"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "expected.answer"},
    {"type": "exact_match", "criterion": "tag_correct", "field": "tag", "expected_field": "expected.tag"},
]


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory) -> Path:
    """A project run at 1.0.0, then at 1.1.0 with c0 broken, in its own Dagster instance."""
    from oloproof_pipeline.defs.launch import run_evaluation

    root = tmp_path_factory.mktemp("ci") / "desk"
    rules = [{"id": "answers", "metric": "answer_correct", "min": 0.5}]
    for version, broken in (("1.0.0", ["c5"]), ("1.1.0", ["c0", "c5"])):
        write_project(root, app=APP.format(BROKEN=broken), cases=CASES, evaluators=EVALUATORS, rules=rules,
                      system_version=version)
        evaluation = run_evaluation(root)
        assert not evaluation.errors, evaluation.errors
    return root


def counts_of(element: ET.Element) -> dict[str, int]:
    return {name: int(element.get(name)) for name in ("tests", "failures", "errors", "skipped")}


def test_junit_has_a_suite_per_criterion_with_failures_and_consistent_counts(two_versions):
    path = two_versions / "junit.xml"
    path.write_text(junit_text(load_results(two_versions, "1.0.0"), "tiny"), encoding="utf-8")
    root = ET.parse(path).getroot()
    assert root.tag == "testsuites"
    suites = {suite.get("name"): suite for suite in root.findall("testsuite")}
    assert list(suites) == ["answer_correct", "tag_correct"]

    answers = suites["answer_correct"]
    cases = {case.get("name"): case for case in answers.findall("testcase")}
    assert list(cases) == [f"c{index}" for index in range(6)]
    assert all(case.get("classname") == "tiny.answer_correct" for case in cases.values())
    (failure,) = cases["c5"].findall("failure")
    assert failure.get("message") == "differs" and failure.get("type") == "FAIL" and '"actual": "wrong"' in failure.text
    (error,) = cases["c4"].findall("error")  # no evidence is never a pass, nor a harmless skip
    assert error.get("type") == "MISSING" and error.get("message")
    assert all(not list(cases[name]) for name in ("c0", "c1", "c2", "c3"))
    assert counts_of(answers) == {"tests": 6, "failures": 1, "errors": 1, "skipped": 0}
    properties = {item.get("name"): item.get("value") for item in answers.find("properties")}
    assert properties["system_version"] == "1.0.0" and properties["gate.answers"].split(":")[0] in {"PASS", "FAIL", "INSUFFICIENT_EVIDENCE"}

    tags = suites["tag_correct"]
    skipped = [case for case in tags.findall("testcase") if case.find("skipped") is not None]
    assert {case.get("name") for case in skipped} == {"c3", "c5"}
    assert all(case.find("skipped").get("message") == "no_expected_value" for case in skipped)
    assert counts_of(tags) == {"tests": 6, "failures": 0, "errors": 1, "skipped": 2}

    # Each suite's counts are its cases', and the root's the suites' sums.
    for suite in suites.values():
        elements = [child.tag for case in suite.findall("testcase") for child in case]
        assert counts_of(suite) == {"tests": len(suite.findall("testcase")), "failures": elements.count("failure"),
                                    "errors": elements.count("error"), "skipped": elements.count("skipped")}
    assert counts_of(root) == {name: sum(counts_of(suite)[name] for suite in suites.values()) for name in counts_of(root)}


def test_markdown_has_the_decisions_and_what_broke_since_the_version_before(two_versions):
    """Through the CLI, on the current version, with the version before found in the instance."""
    shown = oloproof("export", "--format", "markdown", cwd=two_versions)
    assert shown.returncode == 0, shown.stderr
    path = two_versions / ".oloproof" / "exports" / "results-1.1.0.md"
    assert f"Wrote markdown results of version 1.1.0 to {path}" in shown.stdout
    text = path.read_text()
    assert text.startswith("## oloproof: tiny, version 1.1.0")
    assert "| rule | metric | decision | rate | interval | bar | passed/judged | missing | excluded | method | reasons |" in text
    assert "| answers | answer_correct | **" in text
    # The version before is the one the Dagster instance added before 1.1.0.
    assert "### Newly broken since 1.0.0" in text and "| answer_correct | 1 | c0 |" in text
    assert "| tag_correct | 3 | 0 | 1 | 2 |" in text  # the verdict counts: PASS FAIL MISSING EXCLUDED

    first = summary_markdown(load_results(two_versions, "1.0.0"), "tiny", None, 0.95)
    assert "No earlier judged version is stored to compare 1.0.0 with." in first


def test_every_output_names_a_rules_fields_with_the_same_words(two_versions):
    """The Markdown export, JUnit's properties, the HTML report and the CLI's decisions table
    say rate, interval, bar, passed/judged, missing, excluded and method, with the same values."""
    results = load_results(two_versions, "1.1.0")
    [rule] = rows_from_frame(results.gate_table, GATE_NESTED)
    cells = rule_cells(rule)
    assert cells["bar"] == "min 0.5" and cells["method"] == "exact" and cells["passed/judged"] == f"{rule['passed']}/{rule['observed']}"

    markdown = summary_markdown(results, "tiny", None, 0.95)
    [row] = [line for line in markdown.splitlines() if line.startswith("| answers |")]
    assert row.split(" | ")[3:10] == [cells[name] for name in ("rate", "interval", "bar", "passed/judged")] + [
        str(cells["missing"]), str(cells["excluded"]), cells["method"]]

    junit = ET.fromstring(junit_text(results, "tiny"))
    value = next(item.get("value") for item in junit.iter("property") if item.get("name") == "gate.answers")
    assert value == (f"{rule['decision']}: rate {cells['rate']}, interval {cells['interval']}, bar min 0.5, "
                     f"passed/judged {cells['passed/judged']}, missing {cells['missing']}, excluded {cells['excluded']}, "
                     "method exact")

    report = (two_versions / ".oloproof" / "reports" / "report-1.1.0.html").read_text()
    assert "".join(f"<th>{name}</th>" for name in RULE_COLUMNS) in report
    for name in ("bar", "passed/judged", "method"):
        assert f">{cells[name]}<" in report

    console = Console(width=120, record=True, file=open(os.devnull, "w"))
    console.print(gate_table([rule], "1.1.0"))
    shown = console.export_text()
    for name in ("rate", "interval", "bar", "passed/judged", "method"):
        assert cells[name] in shown
        assert all(word in shown for word in name.split("/"))


def test_the_core_reads_only_stored_tables(two_versions):
    """Exports of a version whose system is gone: nothing calls it (the app is deleted)."""
    (two_versions / "app.py").rename(two_versions / "app.py.gone")
    try:
        results = load_results(two_versions, "1.1.0")
        tree = junit_tree(results, "tiny")
        markdown = summary_markdown(results, "tiny", load_results(two_versions, "1.0.0"), 0.95)
    finally:
        (two_versions / "app.py.gone").rename(two_versions / "app.py")
    assert len(tree.getroot().findall("testsuite")) == 2
    assert "| answer_correct | 1 | c0 |" in markdown


def test_previous_version_is_the_judged_one_added_before():
    order = ["1.0.0", "1.10.0", "1.2.0", "2.0.0"]
    assert previous_version("1.2.0", order, ["1.0.0", "1.10.0", "1.2.0"]) == "1.10.0"
    assert previous_version("2.0.0", order, ["1.0.0", "2.0.0"]) == "1.0.0"
    assert previous_version("1.0.0", order, order) is None
    assert previous_version("3.0.0", order, order) is None
