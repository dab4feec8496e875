"""One asset check per gate rule (`rule_<id>`), beside the overall `gate_allows_release`, so
the gate's Checks tab reads as `oloproof run`'s decisions table: each rule's decision, rate,
interval, bar, passed/judged, missing, excluded, method and reasons."""

from __future__ import annotations

from typing import Any, Iterator

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, MetadataValue, PartitionsDefinition

from ..decide.formatting import format_interval, format_rate
from ..model.config import Project, dagster_name
from ..model.outcomes import BLOCKING_ORDER, PASS
from ..read.wording import METHOD_NAMES

RULE_CHECK_PREFIX = "rule_"


def rule_check_name(rule_id: str) -> str:
    """A rule's check; check names take only Dagster's name characters."""
    return f"{RULE_CHECK_PREFIX}{dagster_name(rule_id)}"


def bar_text(kind: str, bar: float) -> str:
    """`min 0.7`, as release.yaml writes the bar."""
    return f"{kind} {bar:g}"


def rule_check_specs(project: Project, gate: AssetKey, versions: PartitionsDefinition) -> list[AssetCheckSpec]:
    return [
        AssetCheckSpec(
            rule_check_name(rule.id), asset=gate, partitions_def=versions,
            description=f"release.yaml's rule {rule.id} on {rule.metric}: passes when the rule PASSes, fails "
            "(ERROR: any other decision blocks the release) otherwise.",
        )
        for rule in project.release.rules
    ]


def rule_check_metadata(rule: dict[str, Any]) -> dict[str, MetadataValue]:
    """A gate row in the CLI's words. Only the rate is a number: the check's Plots view charts
    every number on its own, and a count that rarely moves (missing, excluded) makes a flat,
    auto-scaled chart that reads as a trend."""
    judged = (rule["passed"] or 0) + (rule["failed"] or 0)
    rate = rule["estimate"]
    return {
        "decision": MetadataValue.text(rule["decision"]),
        "rate": MetadataValue.float(round(float(rate), 3)) if rate is not None else MetadataValue.text(format_rate(rate)),
        "interval": MetadataValue.text(format_interval(rule["lower"], rule["upper"])),
        "bar": MetadataValue.text(bar_text(rule["bar_kind"], rule["bar"])),
        "passed/judged": MetadataValue.text(f"{rule['passed'] or 0}/{judged}"),
        "missing": MetadataValue.text(str(int(rule["missing"] or 0))),
        "excluded": MetadataValue.text(str(int(rule["excluded"] or 0))),
        "method": MetadataValue.text(METHOD_NAMES.get(rule["method"], rule["method"] or "")),
        # Text, shown in place (Markdown would hide behind "[Show Markdown]").
        "reasons": MetadataValue.text("; ".join(rule["reasons"] or []) or "none"),
    }


def rule_check_results(specs: list[AssetCheckSpec], rules: list[dict[str, Any]]) -> Iterator[AssetCheckResult]:
    """One result per spec. A rule decided is PASS or a failure: every decision other than PASS
    blocks the release (release.yaml has no warn-only rule), so a failure is ERROR. A spec with
    no decision (release.yaml edited since the code location loaded) fails saying so."""
    by_check = {rule_check_name(rule["rule_id"]): rule for rule in rules}
    for spec in specs:
        rule = by_check.get(spec.name)
        if rule is None:
            yield AssetCheckResult(
                check_name=spec.name, passed=False, severity=AssetCheckSeverity.ERROR,
                metadata={"reasons": "not decided: release.yaml changed since Dagster loaded it; reload the code location"},
            )
            continue
        yield AssetCheckResult(
            check_name=spec.name, passed=rule["decision"] == PASS, severity=AssetCheckSeverity.ERROR,
            metadata=rule_check_metadata(rule),
        )


def gate_check_metadata(decision: str, rules: list[dict[str, Any]]) -> dict[str, MetadataValue]:
    """The decision and which rules block it, worst first, as text shown in place (the check
    page hides Markdown behind a link and lets a table overflow); each rule's own check says why."""
    blocking = sorted((rule for rule in rules if rule["decision"] != PASS), key=lambda rule: BLOCKING_ORDER.index(rule["decision"]))
    passing = [rule["rule_id"] for rule in rules if rule["decision"] == PASS]
    return {
        "decision": MetadataValue.text(decision),
        "blocked by": MetadataValue.text(", ".join(f"{rule['rule_id']} {rule['decision']}" for rule in blocking) or "none"),
        "passing": MetadataValue.text(", ".join(passing) or "none"),
    }
