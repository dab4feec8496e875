"""`oloproof inspect`: one case's panel from the stored tables: its verdicts first, each with
what was expected beside what happened (the state paths that held folded into one line), then
the input, answer, tool calls, fault replays and metamorphic pairs beside their controls."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ..model.outcomes import EXIT_USAGE, FAIL
from ..read.reports import case_panel, verdict_summary
from ..read.results import compared_paths, load_replays
from ..read.wording import call_text, json_text, short_run_id
from .options import PROJECT_OPTION, VERSION_OPTION, CommandFailed, did_you_mean, stored_results
from .render import DECISION_STYLES, Folded, compact_table, console, heading, say

# The run-id columns of a verdict, as `inspect` names them.
RUN_COLUMNS = {"recorded_by_run": "recorded by", "replayed_by_run": "replayed by", "judged_by_run": "judged by"}


def inspect(
    case_id: str = typer.Argument(..., help="The case to show, e.g. ord-013 or ord-013~injected."),
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
) -> None:
    """Print a case's panel: verdicts with expected beside actual, input, answer, tool calls, replays and run ids."""
    loaded, results = stored_results(project, version)
    panel = case_panel(results, case_id, load_replays(loaded.root, results.version))
    if panel is None:
        known = [case["case_id"] for case in results.cases]
        raise CommandFailed(f"no case {case_id!r} in the stored cases of {project}{did_you_mean(case_id, known, 'cases')}", EXIT_USAGE)
    heading(f"{panel.case_id}  version {panel.version}  recording: {panel.status}")
    console.print(verdicts_table(panel.verdicts))
    say(run_ids_line(panel.verdicts))
    say(f"[bold]input[/]  {escaped(json_text(panel.input))}")
    say(f"[bold]answer[/] {escaped(json_text(panel.answer))}")
    if panel.error:
        say(f"[bold red]error[/]  {escaped(panel.error)}")
    console.print(calls_table(panel.tool_calls))
    for event in panel.events:
        say(f"scripted event after call {event['after_step']}: {escaped(json_text(event['event']))}")
    for constraint in panel.constraints:
        mark = "[green]kept[/]" if constraint.get("passed") else "[red]broken[/]"
        say(f"constraint {constraint['name']} (as recorded): {mark} {escaped(constraint.get('detail') or '')}")
    for view in panel.fault_replays:
        show_fault_replay(view)
    for pair in panel.pairs:
        show_pair(pair)


def escaped(text: str) -> str:
    """Recorded text inside a markup line: a `[` in it is shown, never read as a style."""
    return text.replace("[", "\\[")


def data(value: Any) -> Folded:
    """A recorded value as one line of JSON, never read as markup."""
    return Folded(Text(json_text(value)))


def held_text(held: list[str], every: bool) -> str:
    """`all 4 paths held (orders.ord-999.*)`: the paths that held, by their common prefix."""
    prefix = os.path.commonprefix(held) if len(held) > 1 else ""
    prefix = prefix[: max(prefix.rfind("."), prefix.rfind("]")) + 1]
    shown = f"{prefix}*" if prefix else ", ".join(held[:2]) + (f" and {len(held) - 2} more" if len(held) > 2 else "")
    return f"{'all ' if every else ''}{len(held)} {'path' if len(held) == 1 else 'paths'} held ({shown})"


def verdict_rows(verdict: dict[str, Any]) -> list[tuple[Folded, Folded, Folded]]:
    """(what, expected, actual) per line under a verdict: each state path that differs, then
    the paths that held folded into one line; or the answer expected beside the answer given;
    or, for a FAIL with neither, what it found."""
    paths = compared_paths(verdict)
    if paths:
        differing = [row for row in paths if not row.get("matched")]
        rows = [(Folded(Text(f"  {row['path']}"), hang=2), data(row.get("expected")), data(row.get("actual")))
                for row in differing]
        held = [row["path"] for row in paths if row.get("matched")]
        if held:
            rows.append((Folded(""), Folded(Text(held_text(held, not differing), style="dim")), Folded("")))
        return rows
    details = verdict.get("details")
    if isinstance(details, dict) and {"expected", "actual"} <= set(details):
        return [(Folded("  answer"), data(details["expected"]), data(details["actual"]))]
    summary = verdict_summary(verdict) if verdict["outcome"] == FAIL else ""
    return [(Folded(""), Folded(Text(summary)), Folded(""))] if summary else []


def verdicts_table(verdicts: list[dict]) -> Table:
    """Per verdict: criterion, outcome and reason, then under it what was expected beside what
    happened."""
    table = compact_table("Verdicts")
    table.add_column("criterion")
    table.add_column("outcome", no_wrap=True)
    table.add_column("reason / expected")
    table.add_column("actual")
    for verdict in verdicts:
        style = DECISION_STYLES.get(verdict["outcome"], "dim")
        table.add_row(Folded(Text(verdict["criterion"], style="bold")), f"[{style}]{verdict['outcome']}[/]",
                      Folded(Text(verdict["reason"] or "")), Folded(""))
        for what, expected, actual in verdict_rows(verdict):
            table.add_row(what, "", expected, actual)
    return table


def run_ids_line(verdicts: list[dict]) -> str:
    """`recorded by b0ac95f9, judged by b0ac95f9` (shortened; the full ids are in the verdicts
    table), a run that made only some verdicts named with their criteria."""
    parts = []
    for column, label in RUN_COLUMNS.items():
        by_run: dict[str, list[str]] = {}
        for verdict in verdicts:
            if verdict.get(column):
                by_run.setdefault(short_run_id(verdict[column]), []).append(verdict["criterion"])
        for run_id, criteria in by_run.items():
            every = len(criteria) == len(verdicts) or len(by_run) == 1 and column != "replayed_by_run"
            parts.append(f"{label} {run_id}" + ("" if every else f" ({', '.join(criteria)})"))
    return "[dim]Dagster runs: " + ("; ".join(parts) or "none") + "[/]"


def calls_table(tool_calls: list[dict]) -> Table:
    """The recorded tool calls in order; a role column only when some call has one."""
    calls = compact_table("Tool calls")
    with_roles = any(call.get("role") for call in tool_calls)
    calls.add_column("#", no_wrap=True)
    for column in ("tool", *(("role",) if with_roles else ()), "arguments", "result"):
        calls.add_column(column)
    for index, call in enumerate(tool_calls, start=1):
        role = (Folded(Text(call.get("role") or "-")),) if with_roles else ()
        calls.add_row(str(index), Folded(Text(call["tool"])), *role, data(call["arguments"]), data(call["result"]))
    return calls


def side_by_side(title: str, left: str, right: str, rows, marked) -> Table:
    """Two runs' tool calls, row by row; `marked` is the call number to highlight."""
    table = compact_table(title)
    table.add_column("#", no_wrap=True)
    table.add_column(left)
    table.add_column(right)
    for number, first, second in rows:
        style = "bold yellow" if number == marked else None
        table.add_row(str(number), Folded(Text(call_text(first))), Folded(Text(call_text(second))), style=style)
    return table


def show_fault_replay(view) -> None:
    style = DECISION_STYLES.get(view.outcome, "dim")
    heading(f"fault replay {view.criterion}: [{style}]{view.outcome}[/] ({view.reason})")
    if view.faulted_call_number is not None:
        say(
            f"call {view.faulted_call_number} ({view.tool}) got {escaped(json_text(view.injected_result))} instead of running; "
            f"replayed from {view.checkpoint_label or 'the start'}"
        )
    if view.control_calls or view.faulted_calls:
        console.print(side_by_side("control replay beside the faulted replay (from the checkpoint)", "control (no change)",
                                   "faulted", view.rows(), view.faulted_call_number))
        say(f"control ended {view.control_status}; faulted ended {view.faulted_status} answering "
            f"{escaped(json_text(view.faulted_output))}")
    else:
        say(escaped(json_text(view.details)))
    for item in view.broken_constraints:
        say(f"[red]broken in the faulted replay[/] {item.get('name')}: {escaped(item.get('detail') or '')}")


def show_pair(view) -> None:
    style = DECISION_STYLES.get(view.outcome, "dim")
    heading(f"pair {view.criterion}: [{style}]{view.outcome}[/] ({view.reason})")
    marked = None if view.first_difference is None else view.first_difference + 1
    console.print(side_by_side(f"tool calls, first difference at call {marked or '-'}", f"source {view.source_id}",
                               f"copy {view.copy_id}", view.rows(), marked))
    for item in (view.details or {}).get("differences") or []:
        say(f"state {item['path']}: source {escaped(json_text(item.get('source')))}, "
            f"copy {escaped(json_text(item.get('copy')))}")
