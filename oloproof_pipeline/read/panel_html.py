"""A case's panel as HTML, written straight to a string: its worst outcome, its input and
answer, how its recording went, its verdicts with the runs that made them (as holes, see
`markup.RUN_LINK_HOLE`), the state compared, the tool calls, the constraints, the scripted
events, then each fault replay beside its control and each metamorphic pair's two sides.

A report writes one per case (7,200 at 2,400 source cases); through Jinja2 each cost the
report more than all else it does, nearly all in the template runtime's lookups and calls.
The markup is the templates' (the page around the panels is still `templates/report.html.j2`).

A panel is written as its markup, with a `TEXT` mark wherever a value goes, and its values
in order (`PanelHtml`); the values are escaped all at once as the panel is finished, as one
string (some sixty a panel: one escape, not sixty calls), each as `markup.escaped` escapes
`{{ value }}`. Nothing the data holds is ever put in the markup itself. The panel comes out
as a %-format of the runs its verdict rows link to (`markup.with_run_links` fills it)."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any

from .markup import RUN_LINK_HOLE
from .report_view import FAILING, CasePanel, FaultReplayView, PairView, verdict_summary
from .wording import json_text

# Where a value goes in a panel's markup. No markup here holds it, and a value that does
# (no JSON text can: it writes the character as \u0000) has the values escaped one at a time.
TEXT = "\x00"
RUN_LINK = "\x01"  # where a run link goes in a panel's markup: `RUN_LINK_HOLE` once the rest is a %-format


def head(*headers: str) -> str:
    """A table's opening up to its body (as `markup.table_head`), its headers fixed words."""
    cells = "".join(f"<th>{html.escape(header)}</th>" for header in headers)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>"


VERDICT_HEAD = head("criterion", "outcome", "reason", "what it found", "recorded by", "replayed by", "judged by")
STATE_HEAD = head("criterion", "path", "expected", "actual", "matched")
CALLS_HEAD = head("#", "tool", "arguments", "result")
CONSTRAINTS_HEAD = head("constraint", "", "detail")
EVENTS_HEAD = head("after call #", "scripted event")
REPLAY_HEAD = head("#", "control: tool", "arguments", "result", "faulted: tool", "arguments", "result")
DIFFERENCES_HEAD = head("state path", "source", "copy")
# A pair's head names both sides: its ids are values.
PAIR_HEAD = (
    f"<table><thead><tr><th>#</th><th>source {TEXT}: tool</th><th>arguments</th><th>result</th><th>copy {TEXT}: tool</th>"
    "<th>arguments</th><th>result</th></tr></thead><tbody>"
)
TABLE_END = "</tbody></table>"
OUTCOME = f'<span class="{TEXT}">{TEXT}</span>'  # `markup.outcome_span`: the outcome is its two values
CASE_LINK = f'<a href="#case-{TEXT}">{TEXT}</a>'  # `markup.case_link`: the id is its two values
CALL_CELLS = f"<td>{TEXT}</td><td>{TEXT}</td><td>{TEXT}</td>"  # a tool call: tool, arguments, result
NO_CALL_CELLS = "<td>-</td><td>-</td><td>-</td>"
# Its runs (`report_view.PANEL_RUN_LINK_FIELDS`) as holes.
VERDICT_ROW = (
    f"<tr><td>{TEXT}</td><td>{OUTCOME}</td><td>{TEXT}</td><td>{TEXT}</td><td>{RUN_LINK}</td><td>{RUN_LINK}</td>"
    f"<td>{RUN_LINK}</td></tr>"
)
STATE_ROW = f"<tr><td>{TEXT}</td><td>{TEXT}</td><td>{TEXT}</td><td>{TEXT}</td><td>{OUTCOME}</td></tr>"


class PanelHtml:
    """A panel's markup (`TEXT` where each value goes) and its values in order."""

    __slots__ = ("markup", "values", "_calls")

    def __init__(self) -> None:
        self.markup: list[str] = []
        self.values: list[Any] = []
        self._calls: dict[int, tuple[str, str, str]] = {}  # id(call) -> its cells' values (a call shown twice is encoded once)

    def call_values(self, call: dict[str, Any]) -> tuple[str, str, str]:
        """A tool call's cells (tool, arguments, result) as values: a call the panel shows
        twice (its own calls, then the pair's copy side) encoded once."""
        found = self._calls.get(id(call))
        if found is None:
            found = self._calls[id(call)] = (call.get("tool"), json_text(call.get("arguments")), json_text(call.get("result")))
        return found

    def call_cells(self, call: dict[str, Any] | None) -> None:
        """A tool call as three cells (tool, arguments, result), or three dashes for none."""
        if call is None:
            self.markup.append(NO_CALL_CELLS)
        else:
            self.markup.append(CALL_CELLS)
            self.values += self.call_values(call)

    def finished(self) -> str:
        """The markup with each value escaped in its place, as a %-format of its run links."""
        pieces = "".join(self.markup).replace("%", "%%").replace(RUN_LINK, RUN_LINK_HOLE).split(TEXT)
        values = [value if type(value) is str else "" if value is None else str(value) for value in self.values]
        shown = html.escape(TEXT.join(values)).replace("%", "%%").split(TEXT)
        if len(shown) != len(values):  # a value holds the mark itself
            shown = [html.escape(value).replace("%", "%%") for value in values]
        if len(pieces) != len(shown) + 1:
            raise AssertionError(f"a case panel has {len(pieces) - 1} places for {len(shown)} values")
        joined: list[str] = [""] * (2 * len(shown) + 1)
        joined[::2], joined[1::2] = pieces, shown
        return "".join(joined)


def case_section(panel: CasePanel) -> str:
    """The case's `<section>`: shown when it fails, hidden (with the passing ones) otherwise; a
    %-format of the runs each verdict row links to (its `PANEL_RUN_LINK_FIELDS` in turn)."""
    out = PanelHtml()
    markup, values = out.markup, out.values
    passing = not panel.failing
    markup.append(
        f'<section class="case{" passing" if passing else ""}" id="case-{TEXT}" data-outcomes="{TEXT}" '
        f'data-failing="{TEXT}"{" hidden" if passing else ""}><h3>{CASE_LINK} {OUTCOME}</h3>'
        f'<p>Input:</p><pre>{TEXT}</pre><p>Answer:</p><pre>{TEXT}</pre><p class="muted">Recording: {TEXT}</p>'
    )
    worst = panel.worst
    values += (
        panel.case_id, " ".join(panel.outcomes), " ".join(panel.failing_criteria), panel.case_id, panel.case_id, worst, worst,
        json_text(panel.input), json_text(panel.answer), panel.status or "none",
    )
    if panel.error:
        markup.append(f"<p>Error: {TEXT}</p>")
        values.append(panel.error)
    markup.append(VERDICT_HEAD)
    for verdict in panel.verdicts:
        outcome = verdict["outcome"]
        markup.append(VERDICT_ROW)
        values += (verdict["criterion"], outcome, outcome, verdict["reason"], verdict_summary(verdict) if outcome in FAILING else "")
    markup.append(TABLE_END)
    if panel.state_rows:
        markup.append(STATE_HEAD)
        for row in panel.state_rows:
            matched = "PASS" if row["matched"] else "FAIL"
            markup.append(STATE_ROW)
            values += (row["criterion"], row["path"], json_text(row["expected"]), json_text(row["actual"]), matched, matched)
        markup.append(TABLE_END)
    if panel.tool_calls:
        markup.append("<p>Tool calls as recorded:</p>")
        markup.append(CALLS_HEAD)
        for number, call in enumerate(panel.tool_calls, 1):
            markup.append(f"<tr><td>{number}</td>")
            out.call_cells(call)
            markup.append("</tr>")
        markup.append(TABLE_END)
    if panel.constraints:
        markup.append("<p>Constraints the system recorded (in the recording, before any fault):</p>")
        markup.append(CONSTRAINTS_HEAD)
        for item in panel.constraints:
            kept = "kept" if item["passed"] else '<span class="broken">broken</span>'
            markup.append(f"<tr><td>{TEXT}</td><td>{kept}</td><td>{TEXT}</td></tr>")
            values += (item["name"], item["detail"])
        markup.append(TABLE_END)
    if panel.events:
        markup.append(EVENTS_HEAD)
        for event in panel.events:
            markup.append(f"<tr><td>{TEXT}</td><td>{TEXT}</td></tr>")
            values += (event["after_step"], json_text(event["event"]))
        markup.append(TABLE_END)
    for replay in panel.fault_replays:
        fault_replay_html(out, replay)
    for pair in panel.pairs:
        pair_html(out, pair)
    markup.append("</section>")
    return out.finished()


def fault_replay_html(out: PanelHtml, view: FaultReplayView) -> None:
    """The control replay beside the faulted one, from the checkpoint on; the injected call marked."""
    markup, values = out.markup, out.values
    number, rows, before = view.faulted_call_number, view.rows(), view.calls_before_checkpoint
    markup.append(f'<div class="fault-replay outcome-{TEXT}"><h4>Fault replay {TEXT}: {OUTCOME} ({TEXT})</h4>')
    values += (view.outcome, view.criterion, view.outcome, view.outcome, view.reason)
    if number is not None:
        markup.append("<p>Replayed")
        if view.checkpoint_label:
            markup.append(f' from checkpoint "{TEXT}"')
            values.append(view.checkpoint_label)
        if before == 1:
            markup.append(" (call 1 as recorded)")
        elif before:
            markup.append(f" (calls 1-{TEXT} as recorded)")
            values.append(before)
        markup.append(
            f". Call {TEXT} (<code>{TEXT}</code>) got the injected result <code>{TEXT}</code> instead of running; "
            "the control replay ran it unchanged.</p>"
        )
        values += (number, view.tool, json_text(view.injected_result))
    if rows:
        markup.append(REPLAY_HEAD)
        for call_number, control, faulted in rows:
            markup.append(f'<tr class="injected"><td>{TEXT}</td>' if call_number == number else f"<tr><td>{TEXT}</td>")
            values.append(call_number)
            out.call_cells(control)
            out.call_cells(faulted)
            markup.append("</tr>")
        markup.append(TABLE_END)
        markup.append(
            f"<p>Control ended <b>{TEXT}</b>; faulted replay ended <b>{TEXT}</b> answering <code>{TEXT}</code>.</p>"
        )
        values += (view.control_status, view.faulted_status, json_text(view.faulted_output))
    else:
        markup.append(f"<pre>{TEXT}</pre>")
        values.append(json_text(view.details))
    for item in view.broken_constraints:
        markup.append(f'<p class="broken">Broken constraint {TEXT}: {TEXT}</p>')
        values += (item.get("name"), item.get("detail"))
    markup.append("</div>")


def pair_html(out: PanelHtml, view: PairView) -> None:
    """A metamorphic copy's tool calls beside its source's, the first difference marked, then any state that differs."""
    markup, values = out.markup, out.values
    rows = view.rows()
    differences = (view.details.get("differences") if isinstance(view.details, Mapping) else None) or []
    markup.append(f'<div class="pair outcome-{TEXT}"><h4>Pair {TEXT}: {OUTCOME} ({TEXT}) against {CASE_LINK}</h4>')
    values += (view.outcome, view.criterion, view.outcome, view.outcome, view.reason, view.source_id, view.source_id)
    if rows:
        markup.append(PAIR_HEAD)
        values += (view.source_id, view.copy_id)
        for number, source, copy in rows:
            first = view.first_difference == number - 1
            markup.append(f'<tr class="first-diff"><td>{TEXT} ← first difference</td>' if first else f"<tr><td>{TEXT}</td>")
            values.append(number)
            out.call_cells(source)
            out.call_cells(copy)
            markup.append("</tr>")
        markup.append(TABLE_END)
    if view.first_difference is None:
        markup.append("<p>Both sides made the same tool calls.</p>")
    if differences:
        markup.append(DIFFERENCES_HEAD)
        for item in differences:
            markup.append(f"<tr><td>{TEXT}</td><td>{TEXT}</td><td>{TEXT}</td></tr>")
            values += (item.get("path"), json_text(item.get("source")), json_text(item.get("copy")))
        markup.append(TABLE_END)
    markup.append("</div>")
