"""One asset check per gate rule (`rule_<id>`), beside the overall `gate_allows_release`, so
the gate's Checks tab reads as `oloproof run`'s decisions table: each rule's decision, rate,
interval, bar, passed/judged, missing, excluded, method and reasons."""

from __future__ import annotations

from typing import Any, Iterator

from dagster import AssetCheckResult, AssetCheckSeverity, AssetCheckSpec, AssetKey, MetadataValue, PartitionsDefinition

from ..decide.formatting import RULE_COLUMNS, rule_cells
from ..model.config import Project, dagster_name
from ..model.outcomes import BLOCKING_ORDER, PASS

RULE_CHECK_PREFIX = "rule_"


def rule_check_name(rule_id: str) -> str:
    """A rule's check; check names take only Dagster's name characters."""
    return f"{RULE_CHECK_PREFIX}{dagster_name(rule_id)}"


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
    """A gate row in the CLI's words (decide/formatting's `rule_cells`). Only the rate is a
    number: the check's Plots view charts every number on its own, and a count that rarely
    moves (missing, excluded) makes a flat, auto-scaled chart that reads as a trend. Reasons
    are text, shown in place (Markdown would hide behind "[Show Markdown]")."""
    cells = rule_cells(rule)
    rate = rule["estimate"]
    metadata = {name: MetadataValue.text(str(cells[name])) for name in RULE_COLUMNS if name != "rule / metric"}
    if rate is not None:
        metadata["rate"] = MetadataValue.float(round(float(rate), 3))
    metadata["reasons"] = MetadataValue.text(cells["reasons"] or "none")
    return metadata


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
