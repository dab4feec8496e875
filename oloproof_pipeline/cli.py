"""The `oloproof` command: the same Dagster assets, headless, against the project's instance."""

from __future__ import annotations

import shutil
import sys
import threading
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from .model.errors import ProjectError
from .model.outcomes import (
    ALLOW,
    EXIT_ALLOW,
    EXIT_INCOMPLETE,
    EXIT_USAGE,
    FAIL,
    INSUFFICIENT_EVIDENCE,
    MANUAL_REVIEW,
    OUTCOMES,
    PASS,
    exit_code_for,
)
from .project import load_project
from .store.layout import OUTPUT_DIR, read_table, stored_partitions
from .store.tables import GATE_NESTED, rows_from_frame

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate a tool-using agent by the world it leaves behind; gate its release.",
)
# Piped output (CI logs, files) gets a wide table instead of rich's 80-column fallback.
console = Console(width=None if sys.stdout.isatty() else 200)
error_console = Console(stderr=True, width=None if sys.stderr.isatty() else 200)

PROJECT_OPTION = typer.Option(Path("."), "--project", "-p", help="The evaluation project folder.")


class CommandFailed(Exception):
    """A failure already explained to the user; carries the exit code."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


# -- init ----------------------------------------------------------------------------------


def example_names() -> list[str]:
    root = resources.files("oloproof_pipeline.example_project")
    return sorted(
        entry.name.replace("_", "-")
        for entry in root.iterdir()
        if entry.is_dir() and entry.joinpath("oloproof.yaml").is_file()
    )


@app.command()
def init(
    directory: Path = typer.Argument(Path("."), help="Where to put the new project."),
    example: str = typer.Option(..., "--example", help="An example's name, or 'list' to name them."),
) -> None:
    """Start a project from one of the bundled examples."""
    names = example_names()
    if example == "list":
        for name in names:
            console.print(name)
        return
    if example not in names:
        raise CommandFailed(f"no example named {example!r} (examples: {', '.join(names)})", 2)
    if directory.exists() and any(directory.iterdir()):
        raise CommandFailed(f"{directory}: folder is not empty; choose a new one", 2)
    source = resources.files("oloproof_pipeline.example_project").joinpath(example.replace("-", "_"))
    with resources.as_file(source) as source_path:
        shutil.copytree(
            source_path, directory, dirs_exist_ok=True, ignore=shutil.ignore_patterns(OUTPUT_DIR, "__pycache__")
        )
    console.print(f"Created {directory} from the {example} example. Next: cd {directory} && oloproof run")


# -- run and gate --------------------------------------------------------------------------


@app.command()
def run(
    project: Path = PROJECT_OPTION,
    fresh: bool = typer.Option(False, "--fresh", help="Re-record every case, ignoring stored recordings."),
    verbose: bool = typer.Option(False, "--verbose", help="Show Dagster's log as the run goes."),
) -> None:
    """Record, judge and gate the system's current version; exit with the gate's code."""
    from .defs.launch import run_evaluation

    with journal_progress(project.resolve(), default_version(project), enabled=not verbose):
        evaluation = run_evaluation(project, fresh=fresh, log_level="INFO" if verbose else "CRITICAL")
    if evaluation.errors:
        for error in evaluation.errors:
            error_console.print(f"[red]error:[/red] {error}", highlight=False)
        raise CommandFailed(f"run {evaluation.run_id} failed", EXIT_INCOMPLETE)
    console.print(f"Dagster run {evaluation.run_id} evaluated version {evaluation.version}.")
    show_flagged_buckets(project, evaluation.version)
    show_gate(project, evaluation.version)


def show_flagged_buckets(project_dir: Path, version: str) -> None:
    """Slice buckets that differ from the rest (exploratory: never gated)."""
    from .read.reports import flagged_buckets

    for line in flagged_buckets(read_table(project_dir.resolve(), "slices", version)):
        console.print(f"[yellow]slice flagged[/] {line}", highlight=False, soft_wrap=True)


def journal_line_count(project_root: Path, table: str, version: str) -> int:
    from .store.journal import Journal

    return sum(1 for _ in Journal.for_partition(project_root, table, version).rows())


@contextmanager
def journal_progress(project_root: Path, version: str, *, enabled: bool = True) -> Iterator[None]:
    """A live count of cases recorded and replayed, read from the journals the run appends
    to as each case finishes (only on a terminal: logs and pipes get the final table)."""
    if not (enabled and console.is_terminal):
        yield
        return
    tables = ("recorded_runs", "fault_replays")
    start = {table: journal_line_count(project_root, table, version) for table in tables}
    finished = threading.Event()
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console, transient=True) as bar:
        task = bar.add_task(f"evaluating {version}")

        def poll() -> None:
            while not finished.wait(0.25):
                counts = {}
                for table in tables:
                    lines = journal_line_count(project_root, table, version)
                    start[table] = min(start[table], lines)  # `--fresh` empties the journal first
                    counts[table] = lines - start[table]
                bar.update(task, description=f"evaluating {version}: recorded {counts['recorded_runs']} cases, "
                           f"replayed {counts['fault_replays']}")

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()
        try:
            yield
        finally:
            finished.set()
            poller.join()


@app.command()
def gate(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="System version (default: the current one)."),
) -> None:
    """Print the stored gate for a version and exit with its code."""
    show_gate(project, version or default_version(project))


def default_version(project_dir: Path) -> str:
    from .run.system import current_system_version

    return current_system_version(load_project(project_dir))


def show_gate(project_dir: Path, version: str) -> None:
    frame = read_table(project_dir.resolve(), "gate", version)
    if frame is None:
        stored = ", ".join(stored_partitions(project_dir.resolve(), "gate")) or "none"
        raise CommandFailed(
            f"no gate stored for version {version!r} (stored: {stored}); run `oloproof run` first",
            EXIT_INCOMPLETE,
        )
    rows = rows_from_frame(frame, GATE_NESTED)
    if rows:
        console.print(gate_table(rows, version))
    else:
        show_outcome_counts(project_dir, version)
    show_violations(project_dir, version)
    decision = rows[0]["gate_decision"] if rows else ALLOW
    reasons = rows[0]["gate_reasons"] if rows else ["release.yaml has no rules, so nothing is gated"]
    colour = "green" if decision == ALLOW else "red"
    console.print(f"Gate: [bold {colour}]{decision}[/]" + (f"  ({'; '.join(reasons)})" if reasons else ""))
    raise typer.Exit(exit_code_for(row["decision"] for row in rows))


def show_violations(project_dir: Path, version: str) -> None:
    """The flaws the graders caught, by criterion and rule, with a few cases named."""
    from .read.violations import violation_summary
    from .store.tables import VERDICT_NESTED

    frame = read_table(project_dir.resolve(), "verdicts", version)
    summary = violation_summary(rows_from_frame(frame, VERDICT_NESTED)) if frame is not None else []
    if not summary:
        return
    table = Table(title="Violations caught (step = tool call number)", title_justify="left")
    for column in ("criterion", "rule", "cases", "violations"):
        table.add_column(column, no_wrap=True)
    table.add_column("for example", overflow="fold", min_width=30)
    for entry in summary:
        table.add_row(
            entry["criterion"], ", ".join(entry["rules"]), str(entry["cases"]), str(entry["violations"]),
            "; ".join(entry["examples"]),
        )
    console.print(table)


def show_outcome_counts(project_dir: Path, version: str) -> None:
    """With no rules to decide, the verdict counts per criterion are still worth seeing."""
    from .read.results import outcome_counts

    verdicts = read_table(project_dir.resolve(), "verdicts", version)
    if verdicts is None or verdicts.empty:
        return
    table = Table(title=f"Verdicts for version {version}", title_justify="left")
    for column in ("criterion", *OUTCOMES):
        table.add_column(column)
    for criterion, counts in outcome_counts(verdicts).items():
        table.add_row(criterion, *(str(counts[outcome]) for outcome in OUTCOMES))
    console.print(table)


def format_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


METHOD_NAMES = {"clopper_pearson": "exact", "cluster_bootstrap": "bootstrap"}
DECISION_STYLES = {PASS: "green", FAIL: "red", INSUFFICIENT_EVIDENCE: "yellow", MANUAL_REVIEW: "magenta"}


def gate_table(rows: list[dict], version: str) -> Table:
    table = Table(title=f"Decisions for version {version}", title_justify="left")
    table.add_column("rule / metric", overflow="fold")
    for column in ("decision", "rate", "interval", "passed/judged", "missing", "excluded"):
        table.add_column(column, no_wrap=True)
    table.add_column("reasons", overflow="fold", min_width=30, ratio=1)
    for row in rows:
        judged = (row["passed"] or 0) + (row["failed"] or 0)
        method = METHOD_NAMES.get(row["method"], row["method"] or "")
        table.add_row(
            f"{row['rule_id']}\n[dim]{row['metric']}[/]",
            f"[{DECISION_STYLES.get(row['decision'], 'white')}]{row['decision']}[/]",
            format_rate(row["estimate"]),
            f"[{format_rate(row['lower'])}, {format_rate(row['upper'])}] [dim]{method}[/]",
            f"{row['passed']}/{judged}",
            str(row["missing"]),
            str(row["excluded"]),
            "; ".join(row["reasons"] or []),
        )
    return table


# -- reading stored results ----------------------------------------------------------------


def stored_results(project_dir: Path, version: str | None):
    from .read.results import load_results

    root = project_dir.resolve()
    return load_project(root), load_results(root, version or default_version(root))


def json_text(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def short_run_id(run_id: str | None) -> str:
    """The first block of a run id, as Dagster's UI shows it."""
    return run_id.split("-")[0] if run_id else "-"


@app.command()
def inspect(
    case_id: str = typer.Argument(..., help="The case to show, e.g. ord-013 or ord-013~injected."),
    project: Path = PROJECT_OPTION,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="System version (default: the current one)."),
) -> None:
    """Print a case's panel: input, answer, compared state paths, tool calls, verdicts and run ids."""
    from .read.reports import case_panel
    from .read.results import load_replays

    loaded, results = stored_results(project, version)
    panel = case_panel(results, case_id, load_replays(loaded.root, results.version))
    if panel is None:
        raise CommandFailed(f"no case {case_id!r} in the stored cases of {project}", EXIT_USAGE)
    console.rule(f"[bold]{panel.case_id}[/]  version {panel.version}  recording: {panel.status}")
    console.print(f"[bold]input[/]  {json_text(panel.input)}", highlight=False, soft_wrap=True)
    console.print(f"[bold]answer[/] {json_text(panel.answer)}", highlight=False, soft_wrap=True)
    if panel.error:
        console.print(f"[bold red]error[/]  {panel.error}", highlight=False)
    if panel.state_rows:
        state = Table(title="state compared", title_justify="left")
        for column in ("criterion", "path", "expected", "actual", "matched"):
            state.add_column(column, overflow="fold")
        for row in panel.state_rows:
            matched = "[green]yes[/]" if row.get("matched") else "[red]no[/]"
            state.add_row(row["criterion"], row["path"], json_text(row.get("expected")), json_text(row.get("actual")), matched)
        console.print(state)
    calls = Table(title="tool calls", title_justify="left")
    with_roles = any(call.get("role") for call in panel.tool_calls)
    for column in ("#", "tool", *(("role",) if with_roles else ()), "arguments", "result"):
        calls.add_column(column, overflow="fold")
    for index, call in enumerate(panel.tool_calls, start=1):
        role = (call.get("role") or "-",) if with_roles else ()
        calls.add_row(str(index), call["tool"], *role, json_text(call["arguments"]), json_text(call["result"]))
    console.print(calls)
    for event in panel.events:
        console.print(f"scripted event after call {event['after_step']}: {json_text(event['event'])}", highlight=False)
    for constraint in panel.constraints:
        mark = "[green]kept[/]" if constraint.get("passed") else "[red]broken[/]"
        console.print(f"constraint {constraint['name']} (as recorded): {mark} {constraint.get('detail') or ''}", highlight=False)
    for view in panel.fault_replays:
        show_fault_replay(view)
    for pair in panel.pairs:
        show_pair(pair)
    verdicts = Table(title="verdicts (run ids shortened; full ids in the verdicts table)", title_justify="left")
    for column in ("criterion", "outcome", "reason"):
        verdicts.add_column(column, overflow="fold")
    for column in ("recorded by", "replayed by", "judged by"):
        verdicts.add_column(column, no_wrap=True)
    for verdict in panel.verdicts:
        style = DECISION_STYLES.get(verdict["outcome"], "dim")
        verdicts.add_row(
            verdict["criterion"], f"[{style}]{verdict['outcome']}[/]", verdict["reason"],
            *(short_run_id(verdict.get(column)) for column in ("recorded_by_run", "replayed_by_run", "judged_by_run")),
        )
    console.print(verdicts)


def side_by_side(title: str, left: str, right: str, rows, marked) -> Table:
    """Two runs' tool calls, row by row; `marked` is the call number to highlight."""
    from .read.reports import call_text

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


@app.command()
def report(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="System version (default: the current one)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the HTML file."),
) -> None:
    """Write one offline HTML report: gate, metrics with intervals, slices, a panel per case."""
    from .read.reports import write_html_report

    loaded, results = stored_results(project, version)
    path = write_html_report(loaded.root, results, loaded.name, output)
    console.print(f"Wrote {path}")


@app.command()
def export(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = typer.Option(None, "--version", "-v", help="System version (default: the current one)."),
    format: str = typer.Option("jsonl", "--format", help="Only jsonl for now."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write (default under .oloproof/exports)."),
) -> None:
    """Write one JSON line per case and run: task_id, run_id, scores per grader, violated constraints."""
    from .read.export import write_jsonl
    from .store.layout import output_dir

    if format != "jsonl":
        raise CommandFailed(f"unknown format {format!r}; use jsonl", 2)
    loaded, results = stored_results(project, version)
    path = output or output_dir(loaded.root) / "exports" / f"results-{results.version}.jsonl"
    count = write_jsonl(results, path)
    console.print(f"Wrote {count} lines to {path}")


@app.command()
def compare(
    base: str = typer.Argument(..., help="The base system version."),
    candidate: str = typer.Argument(..., help="The candidate system version."),
    project: Path = PROJECT_OPTION,
) -> None:
    """Pair the same cases across two versions: per criterion, what got fixed and what broke."""
    from .read.compare import compare_versions
    from .read.results import load_results

    loaded = load_project(project.resolve())
    comparisons = compare_versions(
        load_results(loaded.root, base), load_results(loaded.root, candidate), loaded.release.confidence_level
    )
    table = Table(title=f"{base} -> {candidate} (paired cases)", title_justify="left")
    for column in ("criterion", "paired", "both pass", "fixed", "broken", "both fail", "unpaired", "rate change", "interval"):
        table.add_column(column, no_wrap=True)
    table.add_column("broke", overflow="fold")
    for item in comparisons:
        change = "-" if item.difference is None else f"{item.difference:+.3f}"
        interval = "-" if item.lower is None else f"[{item.lower:+.3f}, {item.upper:+.3f}]"
        table.add_row(
            item.criterion, str(item.paired), str(item.both_pass), f"[green]{item.fixed}[/]", f"[red]{item.broken}[/]",
            str(item.both_fail), str(item.unpaired), change, interval, ", ".join(item.broken_cases),
        )
    console.print(table)


def main() -> None:
    """Entry point: known failures print one readable line and a distinct exit code."""
    try:
        # Outside standalone mode click returns a typer.Exit's code instead of exiting.
        result = app(standalone_mode=False)
        sys.exit(result if isinstance(result, int) else EXIT_ALLOW)
    except ProjectError as error:
        for problem in error.problems:
            error_console.print(f"[red]error:[/red] {problem}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except CommandFailed as error:
        error_console.print(f"[red]error:[/red] {error}", highlight=False, soft_wrap=True)
        sys.exit(error.exit_code)
    except (typer.Abort, KeyboardInterrupt):
        error_console.print("aborted")
        sys.exit(130)
    except Exception as error:  # click usage errors carry their own exit code
        import click

        if isinstance(error, click.ClickException):
            error.show()
            sys.exit(error.exit_code)
        # A bug, not a verdict: show where, and never exit with a code that reads as a gate.
        import traceback

        traceback.print_exc()
        error_console.print(f"[red]internal error:[/red] {type(error).__name__}: {error}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_INCOMPLETE)


if __name__ == "__main__":
    main()
