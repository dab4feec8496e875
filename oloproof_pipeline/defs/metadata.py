"""Materialization metadata: what a person looks for on an asset's page.

Tables (`MetadataValue.table`) render inline on the asset page, where Markdown and JSON longer
than a few lines hide behind a "[Show ...]" link; each number is charted on its own, auto-scaled,
by the Plots view of the asset's Events tab across versions (so constants are left out). A
materialization already links the run that made it, and the IO manager adds the table's
`path`, so neither is repeated here.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
from dagster import MetadataValue, TableColumn, TableRecord, TableSchema

from ..decide.gate import GateDecision
from ..model.outcomes import ALLOW, BLOCKING_ORDER, OUTCOMES, PASS
from ..decide.formatting import rule_cells

# The gate's decision on the run that made it, so the runs list tells ALLOW from BLOCK.
GATE_TAG = "oloproof/gate"
# Per rule, the numbers the asset's Plots view charts across versions: the rate and the bound
# compared with the bar (the lower bound under a `min`, the upper under a `max`). The bar
# itself is a constant: a chart of it, auto-scaled, would only show noise.
RULE_BOUND = {"min": "lower", "max": "upper"}
INLINE_MARKDOWN = 1000  # Dagster's UI shows shorter Markdown inline, longer behind a link


def table(columns: list[tuple[str, str]], rows: list[dict[str, Any]]) -> MetadataValue:
    schema = TableSchema(columns=[TableColumn(name=name, type=kind) for name, kind in columns])
    return MetadataValue.table(records=[TableRecord(data=row) for row in rows], schema=schema)


def rules_summary(rules: list[dict[str, Any]]) -> MetadataValue:
    """The rules as a short Markdown list, blocking rules first, in the CLI's words. Dagster
    shows Markdown under 1000 characters inline, where a table hides behind a sideways scroll
    in the narrow value column; so each fact gets a short line of its own, and a long list
    drops detail until it fits."""
    blocking = [rule for rule in rules if rule["decision"] != PASS]
    blocking.sort(key=lambda rule: BLOCKING_ORDER.index(rule["decision"]))
    passing = [rule["rule_id"] for rule in rules if rule["decision"] == PASS]
    for detail in (2, 1, 0):
        items = [_summary_item(rule_cells(rule), detail) for rule in blocking]
        if passing:
            items.append(f"- **{PASS}** {', '.join(passing)}")
        text = "\n".join(items) or "No rules: release.yaml gates nothing."
        if len(text) < INLINE_MARKDOWN:
            break
    return MetadataValue.md(text)


def _summary_item(cells: dict[str, Any], detail: int) -> str:
    """`- **FAIL** rule`, then its rate and interval, passed/judged and each reason, one per
    line (a Markdown hard break is two spaces before the newline). The metric is left out: a
    long one is a word too wide for the column, and release.yaml names it."""
    rule = cells["rule / metric"].split(" / ", 1)[0]
    lines = [f"**{cells['decision']}** {rule}"]
    if detail >= 1:
        lines.append(f"rate {cells['rate']}, interval {cells['interval']} {cells['method']}")
    if detail >= 2:
        lines.append(f"passed/judged {cells['passed/judged']}")
        lines += [reason for reason in cells["reasons"].split("; ") if reason]
    return "- " + "  \n  ".join(lines)


def rule_numbers(rules: list[dict[str, Any]]) -> dict[str, MetadataValue]:
    """`<rule>.rate` and `<rule>.lower` (or `.upper`), for the rules with a rate."""
    numbers = {}
    for rule in rules:
        bound = RULE_BOUND[rule["bar_kind"]]
        for name, value in (("rate", rule["estimate"]), (bound, rule[bound])):
            if value is not None and value == value:
                numbers[f"{rule['rule_id']}.{name}"] = MetadataValue.float(round(float(value), 4))
    return numbers


def outcomes_table(counts: dict[str, dict[str, int]]) -> MetadataValue:
    """criterion -> counts of each outcome."""
    columns = [("criterion", "string"), *((outcome, "int") for outcome in OUTCOMES)]
    return table(columns, [{"criterion": criterion, **tally} for criterion, tally in counts.items()])


def gate_log_line(version: str, decision: GateDecision) -> str:
    if decision.decision == ALLOW:
        return f"gate {version}: {ALLOW}: {len(decision.rules)} rules pass"
    return f"gate {version}: {decision.decision} (exit code {decision.exit_code}): {' | '.join(decision.reasons)}"


def value_counts(frame: pd.DataFrame, column: str) -> dict[str, int]:
    return {str(key): int(value) for key, value in frame[column].value_counts().sort_index().items()}


class ProgressLog:
    """Log lines with counts as cases finish, so a long run shows it is moving."""

    def __init__(self, log, what: str, total: int, every: int = 10):
        self.log, self.what, self.total, self.every = log, what, total, every
        self.done = 0

    def step(self, _item=None) -> None:
        self.done += 1
        if self.done % self.every == 0 or self.done == self.total:
            self.log.info(f"{self.what} {self.done} of at most {self.total} cases")
