"""`oloproof inspect`: one case's panel from the stored tables (input, answer, state compared,
tool calls, fault replays and metamorphic pairs beside their controls, verdicts, run ids)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..model.outcomes import EXIT_USAGE
from ..read.reports import case_panel
from ..read.results import load_replays
from ..read.wording import call_text, json_text, short_run_id
from .options import PROJECT_OPTION, VERSION_OPTION, CommandFailed, did_you_mean, stored_results
from .render import DECISION_STYLES, console


def inspect(
    case_id: str = typer.Argument(..., help="The case to show, e.g. ord-013 or ord-013~injected."),
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
) -> None:
    """Print a case's panel: input, answer, compared state paths, tool calls, verdicts and run ids."""
    loaded, results = stored_results(project, version)
    panel = case_panel(results, case_id, load_replays(loaded.root, results.version))
    if panel is None:
        known = [case["case_id"] for case in results.cases]
        raise CommandFailed(f"no case {case_id!r} in the stored cases of {project}{did_you_mean(case_id, known, 'cases')}", EXIT_USAGE)
    console.rule(f"[bold]{panel.case_id}[/]  version {panel.version}  recording: {panel.status}")
    console.print(f"[bold]input[/]  {json_text(panel.input)}", highlight=False, soft_wrap=True)
    console.print(f"[bold]answer[/] {json_text(panel.answer)}", highlight=False, soft_wrap=True)
    if panel.error:
        console.print(f"[bold red]error[/]  {panel.error}", highlight=False)
    if panel.state_rows:
        console.print(state_table(panel.state_rows))
    console.print(calls_table(panel.tool_calls))
    for event in panel.events:
        console.print(f"scripted event after call {event['after_step']}: {json_text(event['event'])}", highlight=False)
    for constraint in panel.constraints:
        mark = "[green]kept[/]" if constraint.get("passed") else "[red]broken[/]"
        console.print(f"constraint {constraint['name']} (as recorded): {mark} {constraint.get('detail') or ''}", highlight=False)
    for view in panel.fault_replays:
        show_fault_replay(view)
    for pair in panel.pairs:
        show_pair(pair)
    console.print(verdicts_table(panel.verdicts))


def state_table(rows: list[dict]) -> Table:
    state = Table(title="state compared", title_justify="left")
    for column in ("criterion", "path", "expected", "actual", "matched"):
        state.add_column(column, overflow="fold")
    for row in rows:
        matched = "[green]yes[/]" if row.get("matched") else "[red]no[/]"
        state.add_row(row["criterion"], row["path"], json_text(row.get("expected")), json_text(row.get("actual")), matched)
    return state


def calls_table(tool_calls: list[dict]) -> Table:
    """The recorded tool calls in order; a role column only when some call has one."""
    calls = Table(title="tool calls", title_justify="left")
    with_roles = any(call.get("role") for call in tool_calls)
    for column in ("#", "tool", *(("role",) if with_roles else ()), "arguments", "result"):
        calls.add_column(column, overflow="fold")
    for index, call in enumerate(tool_calls, start=1):
        role = (call.get("role") or "-",) if with_roles else ()
        calls.add_row(str(index), call["tool"], *role, json_text(call["arguments"]), json_text(call["result"]))
    return calls


def verdicts_table(verdicts: list[dict]) -> Table:
    table = Table(title="verdicts (run ids shortened; full ids in the verdicts table)", title_justify="left")
    for column in ("criterion", "outcome", "reason"):
        table.add_column(column, overflow="fold")
    for column in ("recorded by", "replayed by", "judged by"):
        table.add_column(column, no_wrap=True)
    for verdict in verdicts:
        style = DECISION_STYLES.get(verdict["outcome"], "dim")
        table.add_row(
            verdict["criterion"], f"[{style}]{verdict['outcome']}[/]", verdict["reason"],
            *(short_run_id(verdict.get(column)) for column in ("recorded_by_run", "replayed_by_run", "judged_by_run")),
        )
    return table


def side_by_side(title: str, left: str, right: str, rows, marked) -> Table:
    """Two runs' tool calls, row by row; `marked` is the call number to highlight."""
    table = Table(title=title, title_justify="left")
    table.add_column("#", no_wrap=True)
    table.add_column(left, overflow="fold", ratio=1)
    table.add_column(right, overflow="fold", ratio=1)
    for number, first, second in rows:
        style = "bold yellow" if number == marked else None
        table.add_row(str(number), call_text(first), call_text(second), style=style)
    return table


def show_fault_replay(view) -> None:
    style = DECISION_STYLES.get(view.outcome, "dim")
    console.rule(f"fault replay {view.criterion}: [{style}]{view.outcome}[/] ({view.reason})")
    if view.faulted_call_number is not None:
        console.print(
            f"call {view.faulted_call_number} ({view.tool}) got {json_text(view.injected_result)} instead of running; "
            f"replayed from {view.checkpoint_label or 'the start'}", highlight=False,
        )
    if view.control_calls or view.faulted_calls:
        console.print(side_by_side("control replay beside the faulted replay (from the checkpoint)", "control (no change)",
                                   "faulted", view.rows(), view.faulted_call_number))
        console.print(f"control ended {view.control_status}; faulted ended {view.faulted_status} answering "
                      f"{json_text(view.faulted_output)}", highlight=False)
    else:
        console.print(json_text(view.details), highlight=False, soft_wrap=True)
    for item in view.broken_constraints:
        console.print(f"[red]broken in the faulted replay[/] {item.get('name')}: {item.get('detail') or ''}", highlight=False)


def show_pair(view) -> None:
    style = DECISION_STYLES.get(view.outcome, "dim")
    console.rule(f"pair {view.criterion}: [{style}]{view.outcome}[/] ({view.reason})")
    marked = None if view.first_difference is None else view.first_difference + 1
    console.print(side_by_side(f"tool calls, first difference at call {marked or '-'}", f"source {view.source_id}",
                               f"copy {view.copy_id}", view.rows(), marked))
    for item in (view.details or {}).get("differences") or []:
        console.print(f"state {item['path']}: source {json_text(item.get('source'))}, copy {json_text(item.get('copy'))}",
                      highlight=False)
