"""The words the CLI, the HTML report and the Dagster metadata share, so that a gate row, a
tool call or a run id reads the same wherever it is shown. Rates print through
`decide.formatting` (one formatter, one marker for no rate)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from ..decide.formatting import format_interval, format_rate
from ..store.tables import rows_from_frame

# The gate's columns, as `oloproof run` prints them (and the gate asset's rules table).
GATE_COLUMNS = ("rule / metric", "decision", "rate", "interval", "passed/judged", "missing", "excluded", "reasons")
# Short names for the interval methods stored in the gate table.
METHOD_NAMES = {"clopper_pearson": "exact", "clopper_pearson_effective_clusters": "eff. clusters"}
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"


def json_text(value: Any) -> str:
    """A value as one line of JSON, keys sorted, non-ASCII kept."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def short_run_id(run_id: str | None) -> str:
    """The first block of a run id, as Dagster's UI shows it."""
    return run_id.split("-")[0] if run_id else "-"


def rule_cells(rule: dict[str, Any]) -> dict[str, Any]:
    """A gate row in the words `oloproof run` uses, keyed by `GATE_COLUMNS`."""
    judged = (rule["passed"] or 0) + (rule["failed"] or 0)
    method = METHOD_NAMES.get(rule["method"], rule["method"] or "")
    return {
        "rule / metric": f"{rule['rule_id']} / {rule['metric']}",
        "decision": rule["decision"],
        "rate": format_rate(rule["estimate"]),
        "interval": f"{format_interval(rule['lower'], rule['upper'])} {method}".strip(),
        "passed/judged": f"{rule['passed']}/{judged}",
        "missing": int(rule["missing"] or 0),
        "excluded": int(rule["excluded"] or 0),
        "reasons": "; ".join(rule["reasons"] or []),
    }


def call_text(call: dict[str, Any] | None, *, with_result: bool = True) -> str:
    """`issue_refund {"order_id": "ord-006"} -> {"error": "internal error"}`."""
    if call is None:
        return "(no call)"
    text = f"{call.get('tool')} {json_text(call.get('arguments'))}"
    return f"{text} -> {json_text(call.get('result'))}" if with_result else text


def flagged_buckets(slices: pd.DataFrame | None) -> list[str]:
    """The slice buckets Benjamini-Yekutieli marks as different, one line each."""
    if slices is None or slices.empty:
        return []
    lines = []
    for row in rows_from_frame(slices):
        if row["differs"]:
            direction = "higher" if (row["estimate"] or 0.0) > (row["whole_estimate"] or 0.0) else "lower"
            lines.append(
                f"{row['slice']} = {row['bucket']} on {row['criterion']}: {format_rate(row['estimate'])} "
                f"{format_interval(row['lower'], row['upper'])} vs {format_rate(row['whole_estimate'])} "
                f"overall ({direction}, {row['support']} cases)"
            )
    return lines
