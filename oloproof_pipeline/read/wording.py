"""The words the CLI, the HTML report and the Dagster metadata share, so that a gate row, a
tool call or a run id reads the same wherever it is shown. Rates print through
`decide.formatting` (one formatter, one marker for no rate)."""

from __future__ import annotations

import json
import json.encoder
from typing import Any

import pandas as pd

from ..decide.formatting import METHOD_NAMES, RULE_COLUMNS, format_interval, format_rate, rule_cells
from ..store.tables import rows_from_frame

__all__ = ["GATE_COLUMNS", "METHOD_NAMES", "TIME_FORMAT", "call_text", "flagged_buckets", "json_text", "rule_cells",
           "short_run_id"]

# The gate's columns, as `oloproof run` prints them (and the gate asset's rules table): the one
# vocabulary of decide.formatting.
GATE_COLUMNS = RULE_COLUMNS
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"


# Kept: `json.dumps` with options builds an encoder per call (a report shows tens of thousands of values).
_ONE_LINE = json.JSONEncoder(ensure_ascii=False, sort_keys=True)
# The C encoder `_ONE_LINE.encode` makes afresh for each value, made once: half the cost of a
# small value. No circular check (JSON decoded from a table cannot hold a circle), so nothing
# is left over from a value that fails to encode.
_ONE_LINE_CHUNKS = (
    json.encoder.c_make_encoder(
        None, _ONE_LINE.default, json.encoder.encode_basestring, None, _ONE_LINE.key_separator,
        _ONE_LINE.item_separator, True, False, True,
    )
    if json.encoder.c_make_encoder is not None
    else None
)


def json_text(value: Any) -> str:
    """A value as one line of JSON, keys sorted, non-ASCII kept (as `_ONE_LINE.encode` writes it)."""
    if _ONE_LINE_CHUNKS is None or type(value) is str:
        return _ONE_LINE.encode(value)
    return "".join(_ONE_LINE_CHUNKS(value, 0))


def short_run_id(run_id: str | None) -> str:
    """The first block of a run id, as Dagster's UI shows it."""
    return run_id.split("-")[0] if run_id else "-"


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
