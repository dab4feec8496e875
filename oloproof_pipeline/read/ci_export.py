"""A stored version's results in the forms CI systems show natively: JUnit XML (one test
suite per criterion, one test case per case judged on it) and a Markdown summary (the gate's
decisions and the cases newly broken since the previous version) for a job summary or a
pull-request comment. Both are read from the stored tables; nothing is run or judged again.

In JUnit terms a FAIL verdict is a `failure` (the criterion caught the system out), a MISSING
one an `error` (no evidence: the system raised, timed out or left no state; never shown as a
pass or as harmlessly skipped), an EXCLUDED one `skipped` with its reason. A verdict excluded
because the criterion does not judge that kind of case at all (a metamorphic copy under a
state check, a source under a relation) is no test case of that criterion and is left out,
as the gate's counts leave it out.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..decide.formatting import rule_sentence
from ..decide.gate import gate_from_table, gate_markdown
from ..model.outcomes import EXCLUDED, FAIL, MISSING, OUTCOMES, STRUCTURAL_EXCLUSIONS
from ..store.tables import GATE_NESTED, rows_from_frame
from .compare import CriterionComparison, compare_versions
from .results import VersionResults, outcome_counts

# The child element of a <testcase> per outcome (a PASS has none).
JUNIT_ELEMENTS = {FAIL: "failure", MISSING: "error", EXCLUDED: "skipped"}
# Counted in the <testsuite> attribute of the same meaning.
JUNIT_COUNTS = {"failure": "failures", "error": "errors", "skipped": "skipped"}


# -- JUnit XML -----------------------------------------------------------------------------


def is_test_case(verdict: dict[str, Any]) -> bool:
    """A verdict is a test of its criterion unless the criterion never judges such a case."""
    return not (verdict["outcome"] == EXCLUDED and verdict["reason"] in STRUCTURAL_EXCLUSIONS)


def _seconds(value: Any) -> str:
    return f"{float(value or 0.0):.3f}"


def _details_text(details: Any) -> str | None:
    return None if details in (None, "", [], {}) else json.dumps(details, ensure_ascii=False, indent=2, sort_keys=True)


def _testcase(verdict: dict[str, Any], classname: str, seconds: float) -> ET.Element:
    case = ET.Element("testcase", name=verdict["case_id"], classname=classname, time=_seconds(seconds))
    element = JUNIT_ELEMENTS.get(verdict["outcome"])
    if element is not None:
        child = ET.SubElement(case, element, message=verdict["reason"] or verdict["outcome"])
        if element != "skipped":
            child.set("type", verdict["outcome"])
            child.text = _details_text(verdict.get("details"))
    return case


def _rule_properties(suite: ET.Element, rules: list[dict[str, Any]], version: str) -> None:
    """The version, and each gate rule over this criterion in the shared words (decision, rate,
    interval, bar, passed/judged, missing, excluded, method)."""
    properties = ET.SubElement(suite, "properties")
    ET.SubElement(properties, "property", name="system_version", value=version)
    for rule in rules:
        ET.SubElement(properties, "property", name=f"gate.{rule['rule_id']}", value=rule_sentence(rule))


def junit_tree(results: VersionResults, project_name: str) -> ET.ElementTree:
    """`<testsuites>` with one `<testsuite>` per criterion (in the order the verdicts hold
    them), its counts the sums of its test cases'; each case's time is its recording's."""
    durations = dict(zip(results.run_column("case_id"), results.run_column("duration_s")))
    rules = rows_from_frame(results.gate_table, GATE_NESTED) if results.gate_table is not None else []
    by_criterion: dict[str, list[dict[str, Any]]] = {}
    for verdict in results.verdicts:
        if is_test_case(verdict):
            by_criterion.setdefault(verdict["criterion"], []).append(verdict)
    root = ET.Element("testsuites", name=f"oloproof {project_name} {results.version}")
    totals: Counter[str] = Counter()
    total_seconds = 0.0
    for criterion, verdicts in by_criterion.items():
        suite = ET.SubElement(root, "testsuite", name=criterion)
        _rule_properties(suite, [rule for rule in rules if rule["metric"] == criterion], results.version)
        classname = f"{project_name}.{criterion}"
        counts: Counter[str] = Counter({"tests": len(verdicts)})
        seconds = 0.0
        for verdict in verdicts:
            case = _testcase(verdict, classname, durations.get(verdict["case_id"]) or 0.0)
            suite.append(case)
            seconds += float(case.get("time"))
            counts.update(JUNIT_COUNTS[child.tag] for child in case)
        _set_counts(suite, counts, seconds)
        totals.update(counts)
        total_seconds += seconds
    _set_counts(root, totals, total_seconds)
    ET.indent(root)
    return ET.ElementTree(root)


def _set_counts(element: ET.Element, counts: Counter[str], seconds: float) -> None:
    for name in ("tests", "failures", "errors", "skipped"):
        element.set(name, str(counts.get(name, 0)))
    element.set("time", _seconds(seconds))


def junit_text(results: VersionResults, project_name: str) -> str:
    tree = junit_tree(results, project_name)
    return ET.tostring(tree.getroot(), encoding="unicode", xml_declaration=True) + "\n"


# -- Markdown ------------------------------------------------------------------------------


def _cell(text: Any) -> str:
    """Table-safe text: a `|` or a newline would break the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def decisions_markdown(results: VersionResults) -> str:
    """The gate's decisions table as stored, or why there is none."""
    gate = results.gate_table
    if gate is None or gate.empty:
        return "**Gate: none** (judged without a release policy: nothing was decided)\n"
    return gate_markdown(gate_from_table(gate))


def verdicts_markdown(results: VersionResults) -> str:
    counts = outcome_counts(results.verdict_table)
    names = OUTCOMES
    lines = ["| criterion | " + " | ".join(names) + " |", "| --- |" + " --- |" * len(names)]
    lines += [f"| {_cell(criterion)} | " + " | ".join(str(tally[name]) for name in names) + " |"
              for criterion, tally in counts.items()]
    return "\n".join(lines) + "\n"


@dataclass
class NewlyBroken:
    """What broke since the base version (PASS there, FAIL now), per criterion."""

    base: str | None
    comparisons: list[CriterionComparison]

    def markdown(self, candidate: str) -> str:
        if self.base is None:
            return f"No earlier judged version is stored to compare {candidate} with.\n"
        broken = [item for item in self.comparisons if item.broken_cases]
        if not broken:
            return f"No case broke since {self.base} (PASS there, FAIL in {candidate}).\n"
        lines = [f"PASS in {self.base}, FAIL in {candidate}:", "", "| criterion | broken | cases |", "| --- | --- | --- |"]
        lines += [f"| {_cell(item.criterion)} | {item.broken} | {_cell(', '.join(item.broken_cases))} |" for item in broken]
        return "\n".join(lines) + "\n"


def newly_broken(base: VersionResults | None, candidate: VersionResults, confidence: float) -> NewlyBroken:
    if base is None:
        return NewlyBroken(None, [])
    return NewlyBroken(base.version, compare_versions(base, candidate, confidence))


def previous_version(candidate: str, added_order: list[str], judged: list[str]) -> str | None:
    """The judged version added just before `candidate` (versions in the order they were
    added, as the Dagster instance keeps them); None when there is none."""
    judged_set = set(judged)
    earlier = added_order[: added_order.index(candidate)] if candidate in added_order else []
    found = [version for version in earlier if version in judged_set]
    return found[-1] if found else None


def summary_markdown(results: VersionResults, project_name: str, base: VersionResults | None, confidence: float) -> str:
    """A CI job summary: the decisions, the verdict counts, and what newly broke."""
    sections = [
        f"## oloproof: {project_name}, version {results.version}\n",
        decisions_markdown(results),
        "### Verdicts per criterion\n",
        verdicts_markdown(results),
        f"### Newly broken{f' since {base.version}' if base is not None else ''}\n",
        newly_broken(base, results, confidence).markdown(results.version),
    ]
    return "\n".join(sections)
