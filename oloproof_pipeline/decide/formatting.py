"""Printing a bound next to the bar it is compared with, so that the printed numbers say what
the exact ones do: a lower bound of 0.89997 against a bar of 0.9 prints as 0.89997, never as
0.900, which would read as "0.900 < 0.9".

Values get 3 decimals, and more only where 3 would put the printed value on the wrong side of
(or, for a strict relation, on) the printed bar. The bar prints as the shortest text that reads
back as the same float (format_bar), which is how a user wrote it in the project file.
"""

from __future__ import annotations

import math
from decimal import Decimal

_RELATIONS = {
    "<": lambda value, bar: value < bar,
    "<=": lambda value, bar: value <= bar,
    ">": lambda value, bar: value > bar,
    ">=": lambda value, bar: value >= bar,
}

DEFAULT_DECIMALS = 3
# Enough for any double above about 1e-23: neighbouring doubles differ within 40 decimals.
_MAX_DECIMALS = 40


def format_bar(bar: float) -> str:
    """The bar as the shortest decimal that reads back as the same float: 0.9 -> "0.9"."""
    _check_finite("bar", bar)
    return repr(float(bar))


def format_bound_against_bar(value: float, bar: float, relation: str) -> str:
    """`value` printed with 3 decimals, or as many more as it takes for the printed value to
    stand in `relation` ("<", "<=", ">", ">=") to the printed bar (format_bar(bar)).

    format_bound_against_bar(0.89997, 0.9, "<") == "0.89997"; (0.7, 0.9, "<") == "0.700".
    Raises ValueError when `value relation bar` is false: printing it would state a falsehood.
    """
    if relation not in _RELATIONS:
        raise ValueError(f"relation must be one of {', '.join(_RELATIONS)}, got {relation!r}")
    _check_finite("value", value)
    holds = _RELATIONS[relation]
    if not holds(float(value), float(bar)):
        raise ValueError(f"{value!r} {relation} {bar!r} is false")
    printed_bar = Decimal(format_bar(bar))
    for decimals in range(DEFAULT_DECIMALS, _MAX_DECIMALS + 1):
        text = f"{value:.{decimals}f}"
        if holds(Decimal(text), printed_bar):
            return text
    # Only for values so close to 0 that 40 decimals do not reach their first digit: the exact
    # expansion of the float holds, as the float comparison did.
    return format(Decimal(float(value)), "f")


def _check_finite(name: str, number: float) -> None:
    if not math.isfinite(number):
        raise ValueError(f"{name} must be a finite number, got {number!r}")


# What a rate prints as when there is none (no case judged; NaN from an empty frame).
NO_RATE = "-"


def format_rate(value: float | None, missing: str = NO_RATE) -> str:
    """A rate or a bound as the CLI, the report and the Dagster metadata print it: 3 decimals,
    `missing` for None or NaN."""
    return missing if value is None or value != value else f"{value:.{DEFAULT_DECIMALS}f}"


def format_interval(lower: float | None, upper: float | None, missing: str = NO_RATE) -> str:
    """`[0.447, 0.844]`."""
    return f"[{format_rate(lower, missing)}, {format_rate(upper, missing)}]"


# -- one vocabulary for a gate rule --------------------------------------------------------
#
# Every output names a rule's fields with these words, in this order: the CLI's decisions
# table, the Markdown export, JUnit's properties, the HTML report and the Dagster metadata
# (`--json` keys them the same: rate, interval, bar, counts.passed/judged/missing/excluded,
# method). Each is defined once here.

RULE_COLUMNS = (
    "rule / metric", "decision", "rate", "interval", "bar", "passed/judged", "missing", "excluded", "method", "reasons",
)
# The interval methods stored in the gate table, as people read them.
METHOD_NAMES = {"clopper_pearson": "exact", "clopper_pearson_effective_clusters": "eff. clusters"}


def method_text(method: str | None) -> str:
    """`exact` for clopper_pearson; a method with no short name as stored."""
    return METHOD_NAMES.get(method or "", method or "")


def bar_text(kind: str, bar: float) -> str:
    """`min 0.7`: the bar as release.yaml writes it."""
    return f"{kind} {format_bar(bar)}"


def passed_judged_text(passed: int | None, failed: int | None) -> str:
    """`20/24`: cases passed of cases judged (missing and excluded ones are neither)."""
    return f"{passed or 0}/{(passed or 0) + (failed or 0)}"


def rule_bar(rule: dict) -> tuple[str, float]:
    """A rule's bar kind and value, from a stored gate row or a RuleDecision dumped."""
    kind = rule["bar_kind"]
    bar = rule.get("bar")
    if bar is None or bar != bar:
        bar = rule["bar_min"] if kind == "min" else rule["bar_max"]
    return kind, float(bar)


def rule_cells(rule: dict) -> dict:
    """A gate row (stored, or a RuleDecision dumped) in the shared words, keyed by RULE_COLUMNS."""
    return {
        "rule / metric": f"{rule['rule_id']} / {rule['metric']}",
        "decision": rule["decision"],
        "rate": format_rate(rule["estimate"]),
        "interval": format_interval(rule["lower"], rule["upper"]),
        "bar": bar_text(*rule_bar(rule)),
        "passed/judged": passed_judged_text(rule["passed"], rule["failed"]),
        "missing": int(rule["missing"] or 0),
        "excluded": int(rule["excluded"] or 0),
        "method": method_text(rule["method"]),
        "reasons": "; ".join(rule["reasons"] or []),
    }


def rule_sentence(rule: dict) -> str:
    """`FAIL: rate 0.000, interval [0.000, 0.265], bar min 0.8, passed/judged 0/12, missing 0,
    excluded 12, method exact`: a rule on one line, in the shared words and order."""
    cells = rule_cells(rule)
    facts = ", ".join(f"{name} {cells[name]}" for name in RULE_COLUMNS[2:-1])
    return f"{cells['decision']}: {facts}"
