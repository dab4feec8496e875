"""A case's panel as HTML, written straight to a string: its worst outcome, its input and
answer, how its recording went, its verdicts with the runs that made them (as holes, see
`markup.RunLinkHole`), the state compared, the tool calls, the constraints, the scripted
events, then each fault replay beside its control and each metamorphic pair's two sides.

A report writes one per case (7,200 at 2,400 source cases); through Jinja2 each cost the
report more than all else it does, nearly all in the template runtime's lookups and calls.
Every value goes through `markup.escaped`, as the templates' `{{ value }}` does, and the
markup is the templates' (the page around the panels is still `templates/report.html.j2`)."""

from __future__ import annotations

from collections.abc import Mapping

from .markup import call_cells, case_link, escaped, outcome_span, run_link, table_head
from .report_view import FAILING, CasePanel, FaultReplayView, PairView, verdict_summary
from .wording import json_text

VERDICT_HEAD = table_head(["criterion", "outcome", "reason", "what it found", "recorded by", "replayed by", "judged by"])
STATE_HEAD = table_head(["criterion", "path", "expected", "actual", "matched"])
CALLS_HEAD = table_head(["#", "tool", "arguments", "result"])
CONSTRAINTS_HEAD = table_head(["constraint", "", "detail"])
EVENTS_HEAD = table_head(["after call #", "scripted event"])
REPLAY_HEAD = table_head(["#", "control: tool", "arguments", "result", "faulted: tool", "arguments", "result"])
DIFFERENCES_HEAD = table_head(["state path", "source", "copy"])
TABLE_END = "</tbody></table>"


def shown_json(value: object) -> str:
    """`{{ value | json }}`."""
    return escaped(json_text(value))


def case_section(panel: CasePanel) -> str:
    """The case's `<section>`: shown when it fails, hidden (with the passing ones) otherwise."""
    case_id = escaped(panel.case_id)
    passing = "" if panel.failing else " passing"
    parts = [
        f'<section class="case{passing}" id="case-{case_id}" data-outcomes="{escaped(" ".join(panel.outcomes))}" '
        f'data-failing="{escaped(" ".join(panel.failing_criteria))}"{" hidden" if passing else ""}>'
        f'<h3><a href="#case-{case_id}">{case_id}</a> {outcome_span(panel.worst)}</h3>'
        f"<p>Input:</p><pre>{shown_json(panel.input)}</pre><p>Answer:</p><pre>{shown_json(panel.answer)}</pre>"
        f'<p class="muted">Recording: {escaped(panel.status or "none")}</p>'
    ]
    add = parts.append
    if panel.error:
        add(f"<p>Error: {escaped(panel.error)}</p>")
    add(VERDICT_HEAD)
    for verdict in panel.verdicts:
        outcome = verdict["outcome"]
        found = escaped(verdict_summary(verdict)) if outcome in FAILING else ""
        add(
            f'<tr><td>{escaped(verdict["criterion"])}</td><td>{outcome_span(outcome)}</td><td>{escaped(verdict["reason"])}</td>'
            f'<td>{found}</td><td>{run_link(verdict["recorded_by_run"], None)}</td>'
            f'<td>{run_link(verdict["replayed_by_run"], None)}</td><td>{run_link(verdict["judged_by_run"], None)}</td></tr>'
        )
    add(TABLE_END)
    if panel.state_rows:
        add(STATE_HEAD)
        for row in panel.state_rows:
            add(
                f'<tr><td>{escaped(row["criterion"])}</td><td>{escaped(row["path"])}</td><td>{shown_json(row["expected"])}</td>'
                f'<td>{shown_json(row["actual"])}</td><td>{outcome_span("PASS" if row["matched"] else "FAIL")}</td></tr>'
            )
        add(TABLE_END)
    if panel.tool_calls:
        add("<p>Tool calls as recorded:</p>")
        add(CALLS_HEAD)
        for number, call in enumerate(panel.tool_calls, 1):
            add(
                f'<tr><td>{number}</td><td>{escaped(call["tool"])}</td><td>{shown_json(call["arguments"])}</td>'
                f'<td>{shown_json(call["result"])}</td></tr>'
            )
        add(TABLE_END)
    if panel.constraints:
        add("<p>Constraints the system recorded (in the recording, before any fault):</p>")
        add(CONSTRAINTS_HEAD)
        for item in panel.constraints:
            kept = "kept" if item["passed"] else '<span class="broken">broken</span>'
            add(f'<tr><td>{escaped(item["name"])}</td><td>{kept}</td><td>{escaped(item["detail"])}</td></tr>')
        add(TABLE_END)
    if panel.events:
        add(EVENTS_HEAD)
        for event in panel.events:
            add(f'<tr><td>{escaped(event["after_step"])}</td><td>{shown_json(event["event"])}</td></tr>')
        add(TABLE_END)
    for replay in panel.fault_replays:
        add(fault_replay_html(replay))
    for pair in panel.pairs:
        add(pair_html(pair))
    add("</section>")
    return "".join(parts)


def fault_replay_html(view: FaultReplayView) -> str:
    """The control replay beside the faulted one, from the checkpoint on; the injected call marked."""
    number, rows, before = view.faulted_call_number, view.rows(), view.calls_before_checkpoint
    parts = [
        f'<div class="fault-replay outcome-{escaped(view.outcome)}"><h4>Fault replay {escaped(view.criterion)}: '
        f"{outcome_span(view.outcome)} ({escaped(view.reason)})</h4>"
    ]
    add = parts.append
    if number is not None:
        checkpoint = f' from checkpoint "{escaped(view.checkpoint_label)}"' if view.checkpoint_label else ""
        recorded = " (call 1 as recorded)" if before == 1 else f" (calls 1-{escaped(before)} as recorded)" if before else ""
        add(
            f"<p>Replayed{checkpoint}{recorded}. Call {escaped(number)} (<code>{escaped(view.tool)}</code>) got the injected "
            f"result <code>{shown_json(view.injected_result)}</code> instead of running; the control replay ran it unchanged.</p>"
        )
    if rows:
        add(REPLAY_HEAD)
        for call_number, control, faulted in rows:
            injected = ' class="injected"' if call_number == number else ""
            add(f"<tr{injected}><td>{escaped(call_number)}</td>{call_cells(control)}{call_cells(faulted)}</tr>")
        add(TABLE_END)
        add(
            f"<p>Control ended <b>{escaped(view.control_status)}</b>; faulted replay ended <b>{escaped(view.faulted_status)}</b> "
            f"answering <code>{shown_json(view.faulted_output)}</code>.</p>"
        )
    else:
        add(f"<pre>{shown_json(view.details)}</pre>")
    for item in view.broken_constraints:
        add(f'<p class="broken">Broken constraint {escaped(item.get("name"))}: {escaped(item.get("detail"))}</p>')
    add("</div>")
    return "".join(parts)


def pair_html(view: PairView) -> str:
    """A metamorphic copy's tool calls beside its source's, the first difference marked, then any state that differs."""
    rows = view.rows()
    differences = (view.details.get("differences") if isinstance(view.details, Mapping) else None) or []
    parts = [
        f'<div class="pair outcome-{escaped(view.outcome)}"><h4>Pair {escaped(view.criterion)}: {outcome_span(view.outcome)} '
        f"({escaped(view.reason)}) against {case_link(view.source_id)}</h4>"
    ]
    add = parts.append
    if rows:
        add(table_head(["#", f"source {view.source_id}: tool", "arguments", "result", f"copy {view.copy_id}: tool", "arguments", "result"]))
        for number, source, copy in rows:
            first = view.first_difference == number - 1
            marked = (' class="first-diff"', " ← first difference") if first else ("", "")
            add(f"<tr{marked[0]}><td>{escaped(number)}{marked[1]}</td>{call_cells(source)}{call_cells(copy)}</tr>")
        add(TABLE_END)
    if view.first_difference is None:
        add("<p>Both sides made the same tool calls.</p>")
    if differences:
        add(DIFFERENCES_HEAD)
        for item in differences:
            add(f'<tr><td>{escaped(item.get("path"))}</td><td>{shown_json(item.get("source"))}</td><td>{shown_json(item.get("copy"))}</td></tr>')
        add(TABLE_END)
    add("</div>")
    return "".join(parts)
