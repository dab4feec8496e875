"""The `oloproof` command: the same Dagster assets, headless, against the project's instance."""

from __future__ import annotations

import difflib
import json
import logging
import os
import shlex
import shutil
import sys
import threading
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any, Iterator, Optional

import typer
from rich import box
from rich.console import Console, Group
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.exceptions import TyperException

from .decide.trials import trials_lines
from .model.config import NO_RELEASE_POLICY, VERSION_PATTERN
from .model.errors import ProjectError
from .model.outcomes import (
    ALLOW,
    BLOCK,
    EXIT_ALLOW,
    EXIT_INCOMPLETE,
    EXIT_MEANINGS,
    EXIT_USAGE,
    FAIL,
    INSUFFICIENT_EVIDENCE,
    MANUAL_REVIEW,
    OUTCOMES,
    PASS,
    exit_code_for,
)
from .project import load_project
from .read.reports import (
    METHOD_NAMES,
    call_text,
    case_panel,
    flagged_buckets,
    format_rate,
    report_path,
    short_run_id,
    stored_trial_summaries,
    stored_trials,
    write_html_report,
)
from .store.journal import log as evidence_log
from .store.layout import OUTPUT_DIR, StorageWriteError, StoredTableError, read_table, stored_partitions
from .store.stored import StoredTable
from .store.tables import GATE_NESTED, rows_from_frame

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Evaluate a tool-using agent by the world it leaves behind; gate its release.",
)


def output_width(stream) -> int | None:
    """A terminal's own width; piped output (CI logs, files) gets $COLUMNS, else a wide 200
    instead of rich's 80-column fallback."""
    if stream.isatty():
        return None
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else 200


console = Console(width=output_width(sys.stdout))
error_console = Console(stderr=True, width=output_width(sys.stderr))

PROJECT_OPTION = typer.Option(Path("."), "--project", "-p", help="The evaluation project folder.")


def checked_version(version: Optional[str]) -> Optional[str]:
    """A version names files under .oloproof/: anything but a partition key is a usage error."""
    if version is not None and (not VERSION_PATTERN.match(version) or version in {".", ".."}):
        raise typer.BadParameter(f"{version!r} is not a version: use letters, digits, '.', '_' and '-'")
    return version


VERSION_OPTION = typer.Option(
    None, "--version", "-v", help="System version (default: the current one).", callback=checked_version
)


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
        raise CommandFailed(f"no example named {example!r} (examples: {', '.join(names)})", EXIT_USAGE)
    check_new_project_folder(directory)
    source = resources.files("oloproof_pipeline.example_project").joinpath(example.replace("-", "_"))
    with resources.as_file(source) as source_path:
        shutil.copytree(
            source_path, directory, dirs_exist_ok=True, ignore=shutil.ignore_patterns(OUTPUT_DIR, "__pycache__")
        )
    console.print(f"Created {directory} from the {example} example. Next: cd {directory} && oloproof run")


def check_new_project_folder(directory: Path) -> None:
    """`init` writes only into a new or empty folder: never over a file or through a broken link."""
    if directory.is_symlink() and not directory.exists():
        raise CommandFailed(f"{directory}: a link to {directory.readlink()}, which does not exist; choose a new folder", EXIT_USAGE)
    if directory.exists() and not directory.is_dir():
        raise CommandFailed(f"{directory}: is a file, not a folder; choose a new folder", EXIT_USAGE)
    if directory.is_dir() and any(directory.iterdir()):
        raise CommandFailed(f"{directory}: folder is not empty; choose a new one", EXIT_USAGE)
    check_writable_under(directory, "init")


def check_writable_under(path: Path, command: str) -> None:
    """Nothing can be written under a file: say so before trying (`export -o notes.txt/x.jsonl`)."""
    blocking = next((parent for parent in reversed(path.parents) if parent.exists() and not parent.is_dir()), None)
    if blocking is not None:
        raise CommandFailed(f"{command}: cannot write {path}: {blocking} is a file, not a folder", EXIT_USAGE)


def check_output_file(path: Path | None, command: str) -> None:
    """`-o` names a file to write: not a folder, and not under a file."""
    if path is None:
        return
    if path.is_dir():
        raise CommandFailed(f"{command} -o {path}: is a folder; name a file in it, e.g. {path / 'out'}", EXIT_USAGE)
    check_writable_under(path, command)


# -- run and gate --------------------------------------------------------------------------


JSON_OPTION = typer.Option(
    False, "--json", help="Print one JSON document on stdout (the gate, each rule, the run); nothing else goes there."
)


@app.command()
def run(
    project: Path = PROJECT_OPTION,
    fresh: bool = typer.Option(False, "--fresh", help="Re-record every case, ignoring stored recordings."),
    ungated: bool = typer.Option(
        False, "--ungated", help="Record and judge without a release policy: print the verdict counts, decide nothing, exit 0."
    ),
    verbose: bool = typer.Option(False, "--verbose", help="Show Dagster's log as the run goes."),
    launch: bool = typer.Option(
        False, "--launch", help="Launch a Dagster run even when nothing changed since the last complete one."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Record, judge and gate the system's current version; exit with the gate's code."""
    from .model.config import check_release_policy
    from .model.fingerprints import run_inputs_digest
    from .run.supervisor import start_fork_server
    from .run.system import current_system_version
    from .store.stamps import forget_run_stamp, unchanged_since, write_run_stamp

    # A bad file is found before Dagster is even imported, and before the system is.
    evaluated = load_project(project)
    check_release_policy(evaluated, ungated=ungated)
    root = project.resolve()
    inputs_digest = run_inputs_digest(evaluated)

    def shown_unchanged(version: str | None) -> bool:
        """Nothing changed since the last complete run of `version`: its results are shown."""
        stamp = None if fresh or launch or version is None else unchanged_since(
            root, version=version, ungated=ungated, inputs_digest=inputs_digest
        )
        if stamp is not None:
            show_unchanged_run(root, stamp, as_json=as_json)
        return stamp is not None

    # A version declared in oloproof.yaml, with the system's code as the last complete run of
    # it left it, is the version the code reports: nothing to import to know there is nothing
    # to do. Otherwise the system says its version first.
    declared = evaluated.config.system.version
    if shown_unchanged(declared):
        return
    start_fork_server()  # the system's worker processes get ready while Dagster is imported
    version = current_system_version(evaluated)
    if declared is None and shown_unchanged(version):
        return
    forget_run_stamp(root, version)
    from .defs.launch import run_evaluation

    with stdout_to_stderr(enabled=as_json):
        with journal_progress(root, version, enabled=not (verbose or as_json)), instance_writes(project):
            evaluation = run_evaluation(
                project, fresh=fresh, ungated=ungated, log_level="INFO" if verbose else "CRITICAL"
            )
    summary = run_summary(root, evaluation.version, evaluation.run_id)
    if not evaluation.errors and summary.complete():
        write_run_stamp(root, version=evaluation.version, ungated=ungated, inputs_digest=inputs_digest,
                        run_id=evaluation.run_id, dagster_dev=summary.dagster_dev_command())
    if evaluation.errors:
        if as_json:
            print_json({"version": evaluation.version, "run_id": evaluation.run_id, "gate": None, "rules": [],
                        "errors": evaluation.errors, "exit_code": EXIT_INCOMPLETE, **summary.document()})
        # One line: what failed, then which run (its whole log is in the instance).
        raise CommandFailed(
            f"{'; '.join(evaluation.errors)} (Dagster run {evaluation.run_id} failed: {EXIT_MEANINGS[EXIT_INCOMPLETE]})",
            EXIT_INCOMPLETE,
        )
    if as_json:
        document = gate_document(root, evaluation.version, ungated=ungated)
        print_json({**document, "run_id": evaluation.run_id, **summary.document()})
        raise typer.Exit(document["gate"]["exit_code"])
    console.print(
        f"Dagster run {evaluation.run_id} evaluated version {evaluation.version}: {summary.counts_text()}.",
        highlight=False,
    )
    for line in summary.why() or ["nothing changed: every recording, replay and verdict was reused"]:
        console.print(f"  {line}", highlight=False, soft_wrap=True)
    for line in summary.where_lines():
        console.print(line, highlight=False, soft_wrap=True)
    show_flagged_buckets(project, evaluation.version)
    show_gate(project, evaluation.version, ungated=ungated)


def show_unchanged_run(project_root: Path, stamp: Any, *, as_json: bool) -> None:
    """A rerun with nothing changed launches nothing: the stored results are the ones a run
    would reuse, so they are shown as they stand, with the run that made them."""
    summary = RunSummary(project_root, stamp.version, {}, dagster_dev=stamp.dagster_dev)
    why = (f"nothing changed since Dagster run {stamp.run_id} completed at {stamp.finished_at}: "
           "no run launched, nothing recorded, replayed or judged (--launch runs it anyway)")
    if as_json:
        document = gate_document(project_root, stamp.version, ungated=stamp.ungated)
        print_json({**document, "run_id": stamp.run_id, **summary.document(), "why": [why]})
        raise typer.Exit(document["gate"]["exit_code"])
    verdicts = summary.counts()["verdicts"]
    console.print(
        f"Version {stamp.version} is up to date: " + ", ".join(f"{count} {outcome}" for outcome, count in verdicts.items()) + ".",
        highlight=False,
    )
    console.print(f"  {why}", highlight=False, soft_wrap=True)
    for line in summary.where_lines():
        console.print(line, highlight=False, soft_wrap=True)
    show_flagged_buckets(project_root, stamp.version)
    show_gate(project_root, stamp.version, ungated=stamp.ungated)


@contextmanager
def instance_writes(project_dir: Path) -> Iterator[None]:
    """Dagster's instance is SQLite: a full disk or a read-only folder surfaces as a database
    error with no path, so name the instance's folder."""
    import sqlite3

    from .defs.instance import instance_home

    try:
        yield
    except Exception as error:
        cause = getattr(error, "orig", error)  # SQLAlchemy wraps the sqlite3 error
        if not isinstance(cause, sqlite3.Error):
            raise
        home = instance_home(project_dir.resolve())
        raise CommandFailed(
            f"{home}: Dagster's instance database cannot be written ({cause}); check free space and write permission",
            EXIT_INCOMPLETE,
        ) from None


class RunSummary:
    """What a run did, read from its materializations' metadata: cases recorded and reused,
    replays run and reused, verdicts judged, and where to look next."""

    def __init__(self, project_root: Path, version: str, metadata: dict[str, dict[str, Any]], *,
                 dagster_dev: str | None = None):
        self.project_root = project_root
        self.version = version
        self.metadata = metadata
        self._dagster_dev = dagster_dev

    def _value(self, asset: str, key: str, default: Any = 0) -> Any:
        return self.metadata.get(asset, {}).get(key, default)

    def counts(self) -> dict[str, Any]:
        from .read.results import outcome_counts

        stored = StoredTable.at(self.project_root, "verdicts", partition=self.version)
        verdicts = outcome_counts(stored.columns("criterion", "outcome")) if stored.exists else {}
        return {
            "cases_recorded": self._value("recorded_runs", "cases_new"),
            "cases_reused": self._value("recorded_runs", "cases_reused"),
            "cases_failed": self._value("recorded_runs", "cases_failed"),
            "replays_run": self._value("fault_replays", "replays_new"),
            "replays_reused": self._value("fault_replays", "replays_reused"),
            "replays_failed": self._value("fault_replays", "replays_failed"),
            "verdicts_judged": self._value("verdicts", "verdicts_judged"),
            "verdicts_reused": self._value("verdicts", "verdicts_reused"),
            "verdicts": {outcome: sum(tally.get(outcome, 0) for tally in verdicts.values()) for outcome in OUTCOMES},
        }

    def why(self) -> list[str]:
        """Why anything was recorded, replayed, judged or decided again, in the order the assets ran."""
        return [line for values in self.metadata.values() for line in values.get("why", [])]

    def complete(self) -> bool:
        """Every case and replay recorded: a rerun would have nothing to retry."""
        counts = self.counts()
        return not (counts["cases_failed"] or counts["replays_failed"])

    def counts_text(self) -> str:
        counts = self.counts()
        failed = lambda count: f", {count} failed" if count else ""  # noqa: E731
        verdicts = counts["verdicts"]
        return (
            f"recorded {counts['cases_recorded']} cases and reused {counts['cases_reused']}{failed(counts['cases_failed'])}; "
            f"replayed {counts['replays_run']} and reused {counts['replays_reused']}{failed(counts['replays_failed'])}; "
            f"judged {counts['verdicts_judged']} verdicts and reused {counts['verdicts_reused']} ("
            + ", ".join(f"{count} {outcome}" for outcome, count in verdicts.items()) + ")"
        )

    def report_path(self) -> str | None:
        path = report_path(self.project_root, self.version)
        return str(path) if path.is_file() else None

    def dagster_dev_command(self) -> str:
        """The README's line with this project's own paths: the instance the run is in."""
        if self._dagster_dev is not None:
            return self._dagster_dev
        from .defs.instance import instance_home

        home = f"DAGSTER_HOME={shlex.quote(str(instance_home(self.project_root)))}"
        definitions = self.project_root / "definitions.py"
        if definitions.is_file():
            return f"{home} dagster dev -f {shlex.quote(str(definitions))}"
        return (f"{home} dagster dev -f definitions.py  (a definitions.py in {self.project_root} with "
                "`defs = build_definitions(Path(__file__).parent)`, as the README shows)")

    def where_lines(self) -> list[str]:
        lines = [f"Report: {self.report_path()}"] if self.report_path() else []
        return [*lines, f"Open the run in Dagster: {self.dagster_dev_command()}"]

    def document(self) -> dict[str, Any]:
        return {
            "counts": self.counts(), "why": self.why(), "report": self.report_path(), "dagster_dev": self.dagster_dev_command(),
        }


def run_summary(project_root: Path, version: str, run_id: str) -> RunSummary:
    from dagster import DagsterEventType

    from .defs.instance import project_instance

    metadata: dict[str, dict[str, Any]] = {}
    for entry in project_instance(project_root).all_logs(run_id, of_type=DagsterEventType.ASSET_MATERIALIZATION):
        materialization = entry.asset_materialization
        if materialization is not None:
            metadata[materialization.asset_key.path[-1]] = {key: value.value for key, value in materialization.metadata.items()}
    return RunSummary(project_root, version, metadata)


@contextmanager
def stdout_to_stderr(*, enabled: bool) -> Iterator[None]:
    """Everything written to stdout goes to stderr meanwhile, at the file-descriptor level, so
    a system under test that prints, Dask's workers and Dagster cannot spoil `--json`."""
    if not enabled:
        yield
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def print_json(document: dict[str, Any]) -> None:
    """One JSON document on stdout (NaN refused: it is not JSON)."""
    sys.stdout.write(json.dumps(document, indent=2, ensure_ascii=False, allow_nan=False) + "\n")
    sys.stdout.flush()


def show_flagged_buckets(project_dir: Path, version: str) -> None:
    """Slice buckets that differ from the rest (exploratory: never gated)."""
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
    version: Optional[str] = VERSION_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the stored gate for a version and exit with its code."""
    version = stored_version(project, version, "gate")
    if as_json:
        document = gate_document(project.resolve(), version)
        print_json(document)
        raise typer.Exit(document["gate"]["exit_code"])
    show_gate(project, version)


def default_version(project_dir: Path) -> str:
    from .run.system import current_system_version

    return current_system_version(load_project(project_dir))


def stored_version(project_dir: Path, version: str | None, table: str) -> str:
    """The version to read back: the one asked for, which must be stored (else a usage error
    naming the stored ones), or the current one, which may not have been run yet."""
    root = project_dir.resolve()
    stored = stored_partitions(root, table)
    if version is None:
        version = default_version(root)
        if version not in stored:
            raise CommandFailed(
                f"no {table} stored for version {version!r}, the current one (stored: {', '.join(stored) or 'none'}); "
                "run `oloproof run` first",
                EXIT_INCOMPLETE,
            )
    elif version not in stored:
        raise CommandFailed(f"no {table} stored for version {version!r}{did_you_mean(version, stored, 'stored')}", EXIT_USAGE)
    return version


def did_you_mean(name: str, known: list[str], what: str) -> str:
    """` (did you mean a, b? stored: ...)`: the nearest names first, then a few of all of them."""
    nearest = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
    listed = ", ".join(known[:10]) + (f" and {len(known) - 10} more" if len(known) > 10 else "") if known else "none"
    return f" ({'did you mean ' + ', '.join(nearest) + '? ' if nearest else ''}{what}: {listed})"


def stored_gate(project_dir: Path, version: str) -> tuple[list[dict], str, list[str], int]:
    """A version's stored gate: (rule rows, decision, reasons, exit code)."""
    frame = read_table(project_dir.resolve(), "gate", version)
    if frame is None:
        raise CommandFailed(f"no gate stored for version {version!r}; run `oloproof run` first", EXIT_INCOMPLETE)
    rows = rows_from_frame(frame, GATE_NESTED)
    if not rows:  # judged with no release policy: nothing was decided, so nothing is allowed
        return rows, BLOCK, [NO_RELEASE_POLICY], EXIT_USAGE
    return rows, rows[0]["gate_decision"], rows[0]["gate_reasons"], exit_code_for(row["decision"] for row in rows)


def show_gate(project_dir: Path, version: str, *, ungated: bool = False) -> None:
    rows, decision, reasons, exit_code = stored_gate(project_dir, version)
    if not rows:
        show_ungated(project_dir, version, ungated=ungated)
        return
    console.print(gate_table(rows, version))
    for line in trials_lines(stored_trials(project_dir.resolve(), version) or []):
        console.print(line, highlight=False)
    show_violations(project_dir, version)
    colour = "green" if decision == ALLOW else "red"
    console.print(f"Gate: [bold {colour}]{decision}[/] (exit code {exit_code}: {EXIT_MEANINGS[exit_code]})", highlight=False)
    raise typer.Exit(exit_code)


def gate_document(project_root: Path, version: str, *, ungated: bool = False) -> dict[str, Any]:
    """The stored gate as `gate --json` prints it: the version, the run that decided it, the
    gate, and each rule's decision, rate, interval, method, bar, counts and reasons. A run
    asked to be `--ungated` decided nothing and ends with 0, as it does without --json."""
    rows, decision, reasons, exit_code = stored_gate(project_root, version)
    if not rows and ungated:
        decision, exit_code = None, EXIT_ALLOW
    trials = stored_trials(project_root, version)
    return {
        "version": version,
        "run_id": rows[0]["judged_by_run"] if rows else None,
        "gate": {"decision": decision, "exit_code": exit_code, "meaning": EXIT_MEANINGS[exit_code] if rows else NO_RELEASE_POLICY,
                 "reasons": reasons},
        "rules": [rule_document(row) for row in rows],
        # Only with repeated trials, so a document of one trial is as it always was.
        **({"trials": [summary.model_dump(mode="json") for summary in trials]} if trials else {}),
    }


def rule_document(row: dict) -> dict[str, Any]:
    return {
        "rule_id": row["rule_id"],
        "metric": row["metric"],
        "decision": row["decision"],
        "rate": row["estimate"],
        "interval": {"lower": row["lower"], "upper": row["upper"]},
        "method": row["method"],
        "bar": {"kind": row["bar_kind"], "min": row["bar_min"], "max": row["bar_max"]},
        "counts": {
            "passed": row["passed"],
            "failed": row["failed"],
            "judged": row["observed"],
            "missing": row["missing"],
            "excluded": row["excluded"],
        },
        "reasons": row["reasons"] or [],
        "suite_size_to_decide": None if row["suite_size_to_decide"] is None else int(row["suite_size_to_decide"]),
    }


def show_ungated(project_dir: Path, version: str, *, ungated: bool) -> None:
    """A version judged with no release policy: its verdict counts, and no decision. Only the
    run that was asked to be `--ungated` ends with 0; reading it back later is no ALLOW."""
    show_outcome_counts(project_dir, version)
    show_violations(project_dir, version)
    if ungated:
        console.print(f"Gate: none (--ungated: {NO_RELEASE_POLICY})")
        raise typer.Exit(EXIT_ALLOW)
    raise CommandFailed(f"version {version!r} was judged with {NO_RELEASE_POLICY}; write release.yaml and run `oloproof run`", EXIT_USAGE)


def show_violations(project_dir: Path, version: str) -> None:
    """The flaws the graders caught, by criterion and rule, with a few cases named."""
    from .read.violations import violation_summary
    from .store.tables import VERDICT_NESTED

    # Only a FAIL carries violations: read those rows, not every verdict.
    summary = violation_summary(
        StoredTable.at(project_dir.resolve(), "verdicts", partition=version).rows_where("outcome", FAIL, VERDICT_NESTED)
    )
    if not summary:
        return
    table = Table(title="Violations caught (step = tool call number)", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("criterion", overflow="fold", ratio=2)
    table.add_column("rule", overflow="fold", ratio=2)
    for column in ("cases", "violations"):
        table.add_column(column, no_wrap=True)
    table.add_column("for example", overflow="fold", ratio=5)
    for entry in summary:
        table.add_row(
            entry["criterion"], ", ".join(entry["rules"]), str(entry["cases"]), str(entry["violations"]),
            "\n".join(entry["examples"]),
        )
    console.print(table)


def show_outcome_counts(project_dir: Path, version: str) -> None:
    """With no rules to decide, the verdict counts per criterion are still worth seeing."""
    from .read.results import outcome_counts

    verdicts = read_table(project_dir.resolve(), "verdicts", version)
    if verdicts is None or verdicts.empty:
        return
    table = Table(title=f"Verdicts for version {version}", title_justify="left")
    table.add_column("criterion", overflow="fold")
    for column in OUTCOMES:
        table.add_column(column, no_wrap=True)
    for criterion, counts in outcome_counts(verdicts).items():
        table.add_row(criterion, *(str(counts[outcome]) for outcome in OUTCOMES))
    console.print(table)


DECISION_STYLES = {PASS: "green", FAIL: "red", INSUFFICIENT_EVIDENCE: "yellow", MANUAL_REVIEW: "magenta"}


def gate_table(rows: list[dict], version: str) -> Group:
    """The decisions: a table narrow enough for 80 columns (rule over metric, decision, rate,
    interval over method, counts), then each rule's reasons under it, wrapped to the width."""
    table = Table(title=f"Decisions for version {version}", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("rule / metric", overflow="fold", ratio=1, min_width=12)
    table.add_column("decision", no_wrap=True)
    table.add_column("rate", no_wrap=True, justify="right")
    table.add_column("interval", no_wrap=True)
    table.add_column("passed", no_wrap=True)
    reasons = Table.grid(padding=(0, 2))
    reasons.add_column(overflow="fold", max_width=30)
    reasons.add_column(overflow="fold", ratio=1)
    for row in rows:
        style = DECISION_STYLES.get(row["decision"], "white")
        method = METHOD_NAMES.get(row["method"], row["method"] or "")
        table.add_row(
            f"{row['rule_id']}\n[dim]{row['metric']}[/]",
            f"[{style}]{row['decision']}[/]",
            format_rate(row["estimate"]),
            f"[{format_rate(row['lower'])}, {format_rate(row['upper'])}]\n[dim]{method}[/]",
            "\n".join(counts_lines(row)),
        )
        reasons.add_row(f"[{style}]{row['rule_id']}[/]", "\n".join(row["reasons"] or ["-"]))
    return Group(table, "", "Reasons:", reasons)


def counts_lines(row: dict) -> list[str]:
    """`20/24` (passed of judged), then the missing and excluded cases when there are any."""
    judged = (row["passed"] or 0) + (row["failed"] or 0)
    lines = [f"{row['passed']}/{judged}"]
    if row["missing"]:
        lines.append(f"{row['missing']} missing")
    if row["excluded"]:
        lines.append(f"{row['excluded']} excl.")
    return lines


# -- reading stored results ----------------------------------------------------------------


def stored_results(project_dir: Path, version: str | None):
    from .read.results import load_results

    root = project_dir.resolve()
    return load_project(root), load_results(root, stored_version(root, version, "verdicts"))


def json_text(value) -> str:
    import json

    return json.dumps(value, ensure_ascii=False, sort_keys=True)


@app.command()
def inspect(
    case_id: str = typer.Argument(..., help="The case to show, e.g. ord-013 or ord-013~injected."),
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
) -> None:
    """Print a case's panel: input, answer, compared state paths, tool calls, verdicts and run ids."""
    from .read.results import load_replays

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
    version: Optional[str] = VERSION_OPTION,
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Where to write the HTML file."),
) -> None:
    """Write one offline HTML report: gate, metrics with intervals, slices, a panel per case."""
    check_output_file(output, "report")
    loaded, results = stored_results(project, version)
    trials = stored_trial_summaries(loaded, results.version, results.verdict_table)
    path = write_html_report(loaded.root, results, loaded.name, output, trials=trials)
    console.print(f"Wrote {path}")


@app.command()
def export(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
    format: str = typer.Option(
        "jsonl", "--format", help="jsonl (a line per case), junit (XML for CI test reports) or markdown (a CI job summary)."
    ),
    output: Optional[Path] = typer.Option(
        None, "--output", "-o", help="Where to write (default under .oloproof/exports); '-' for stdout."
    ),
    base: Optional[str] = typer.Option(
        None, "--base", help="markdown: the version to list newly broken cases against (default: the one before).",
        callback=checked_version,
    ),
) -> None:
    """Write a stored version's results: JSON lines per case, JUnit XML, or a Markdown summary."""
    from .read.export import write_jsonl, write_jsonl_to
    from .store.layout import output_dir

    if format not in EXPORT_SUFFIXES:
        raise CommandFailed(f"unknown format {format!r}; use {', '.join(EXPORT_SUFFIXES)}", EXIT_USAGE)
    if base is not None and format != "markdown":
        raise CommandFailed("--base is for --format markdown (the newly broken cases)", EXIT_USAGE)
    check_output_file(output, "export")
    loaded, results = stored_results(project, version)
    if format != "jsonl":
        write_ci_export(loaded, results, format, output, base)
        return
    if output == Path("-"):
        count = write_jsonl_to(results, sys.stdout)
        sys.stdout.flush()
        error_console.print(f"Wrote {count} lines to stdout", highlight=False)
        return
    path = output or output_dir(loaded.root) / "exports" / f"results-{results.version}.jsonl"
    try:
        count = write_jsonl(results, path)
    except OSError as error:
        raise StorageWriteError(path, error) from None
    console.print(f"Wrote {count} lines to {path}")


EXPORT_SUFFIXES = {"jsonl": "jsonl", "junit": "xml", "markdown": "md"}


def write_ci_export(loaded, results, format: str, output: Path | None, base: str | None) -> None:
    """JUnit XML or the Markdown summary, from the stored tables only."""
    from .read.ci_export import junit_text, previous_version, summary_markdown
    from .read.results import load_results
    from .store.layout import output_dir, write_text_file

    if format == "junit":
        text = junit_text(results, loaded.name)
    else:
        judged = stored_partitions(loaded.root, "verdicts")
        if base is not None:
            stored_version(loaded.root, base, "verdicts")
        if base is None and len(judged) > 1:  # the instance knows the order versions were added in
            base = previous_version(results.version, versions_in_added_order(loaded), judged)
        base_results = load_results(loaded.root, base) if base is not None else None
        text = summary_markdown(results, loaded.name, base_results, loaded.release.confidence_level)
    if output == Path("-"):
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    path = output or output_dir(loaded.root) / "exports" / f"results-{results.version}.{EXPORT_SUFFIXES[format]}"
    write_text_file(path, text)
    console.print(f"Wrote {format} results of version {results.version} to {path}", highlight=False, soft_wrap=True)


def versions_in_added_order(loaded) -> list[str]:
    """The versions in the order the project's Dagster instance added them (none before a run)."""
    from .defs.instance import instance_home

    home = instance_home(loaded.root)
    if not (home / "dagster.yaml").is_file():
        return []
    from dagster import DagsterInstance

    from .defs import versions_partitions

    with DagsterInstance.from_config(str(home)) as instance:
        return list(instance.get_dynamic_partitions(versions_partitions(loaded).name))


@app.command()
def compare(
    base: str = typer.Argument(..., help="The base system version.", callback=checked_version),
    candidate: str = typer.Argument(..., help="The candidate system version.", callback=checked_version),
    project: Path = PROJECT_OPTION,
) -> None:
    """Pair the same cases across two versions: per criterion, what got fixed and what broke."""
    from .read.compare import compare_versions
    from .read.results import load_results

    loaded = load_project(project.resolve())
    for version in (base, candidate):
        stored_version(loaded.root, version, "verdicts")
    confidence = loaded.release.confidence_level
    comparisons = compare_versions(load_results(loaded.root, base), load_results(loaded.root, candidate), confidence)
    console.print(comparison_table(comparisons, base, candidate, confidence))
    for item in comparisons:
        for label, cases, style in (("fixed", item.fixed_cases, "green"), ("broke", item.broken_cases, "red")):
            if cases:
                console.print(f"{item.criterion} [{style}]{label}[/] ({len(cases)}): {', '.join(cases)}", highlight=False)
    if comparisons:
        console.print(
            f"[dim]interval: {confidence:.0%} {comparisons[0].method} (Tango 1998) for the change in pass rate; "
            "an unpaired case (missing or excluded on one side) counts as broken for the lower bound and fixed "
            "for the upper[/]",
            highlight=False,
        )


def comparison_table(comparisons, base: str, candidate: str, confidence: float) -> Table:
    """Per criterion the paired counts, then the change in pass rate over its interval: narrow
    enough for 80 columns."""
    from .read.compare import interval_text

    table = Table(title=f"{base} -> {candidate} (paired cases)", title_justify="left", box=box.SIMPLE_HEAD,
                  show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("criterion", overflow="fold", ratio=1, min_width=12)
    for column in ("paired", "both\npass", "fixed", "broken", "both\nfail", "unpaired", f"change\n{confidence:.0%} interval"):
        table.add_column(column, no_wrap=True)
    for item in comparisons:
        change = "-" if item.difference is None else f"{item.difference:+.3f}"
        table.add_row(
            item.criterion, str(item.paired), str(item.both_pass), f"[green]{item.fixed}[/]", f"[red]{item.broken}[/]",
            str(item.both_fail), str(item.unpaired), f"{change}\n{interval_text(item)}",
        )
    return table


# -- labels --------------------------------------------------------------------------------


labels_app = typer.Typer(
    no_args_is_help=True,
    help="People's validity labels for metamorphic pairs: write the pending pairs, import them filled in, see the counts.",
)
app.add_typer(labels_app, name="labels")


@labels_app.command("pending")
def labels_pending(
    transform: str = typer.Argument(..., help="The transform whose unlabelled pairs to write, e.g. paraphrase."),
    project: Path = PROJECT_OPTION,
    output: Optional[Path] = typer.Option(
        None, "--out", "-o", help="Where to write (default labels/TRANSFORM.pending.FORMAT); '-' for stdout."
    ),
    format: str = typer.Option("jsonl", "--format", help="jsonl or csv."),
) -> None:
    """Write the pairs with no current label (source text, copy text, pair digest) for a person to fill in `kept`."""
    from .read.labelling import PENDING_FORMATS, default_pending_path, pairs_of, pending_pairs, pending_text, write_pending

    if format not in PENDING_FORMATS:
        raise CommandFailed(f"unknown format {format!r}; use {' or '.join(PENDING_FORMATS)}", EXIT_USAGE)
    check_output_file(output, "labels pending")
    loaded = load_project(project)
    pending = pending_pairs(pairs_of(loaded, transform))
    if output == Path("-"):
        sys.stdout.write(pending_text(pending, format))
        sys.stdout.flush()
        error_console.print(f"{len(pending)} pending pairs of {transform}", highlight=False)
        return
    if not pending:
        console.print(f"Every pair of {transform} has a current label: nothing to write.", highlight=False)
        return
    path = output or default_pending_path(loaded, transform, format)
    write_pending(path, pending_text(pending, format))
    console.print(f"Wrote {len(pending)} pending pairs of {transform} to {path}", highlight=False, soft_wrap=True)
    console.print(f"Fill in kept (true or false) for each, then: oloproof labels import {shlex.quote(str(path))}",
                  highlight=False, soft_wrap=True)


@labels_app.command("import")
def labels_import(
    file: Path = typer.Argument(..., help="A filled-in pending file (.jsonl or .csv)."),
    project: Path = PROJECT_OPTION,
) -> None:
    """Append the filled-in labels of current pairs to their transforms' labels files; refuse stale or unknown ones."""
    from .read.labelling import import_labels

    outcome = import_labels(load_project(project), file)
    for line in outcome.refused:
        error_console.print(f"[red]refused:[/red] {line}", highlight=False, soft_wrap=True)
    for path, count in outcome.appended.items():
        console.print(f"Appended {count} labels to {path}", highlight=False, soft_wrap=True)
    left = [f"{count} {'line' if count == 1 else 'lines'} {what}" for count, what in (
        (outcome.unfilled, "not filled in (kept blank)"), (outcome.already_labelled, "already labelled the same"),
        (outcome.disagreeing, "disagreeing with an earlier label (those pairs now count as rejected)"),
    ) if count]
    if not outcome.appended:
        console.print("No label appended.", highlight=False)
    if left:
        console.print(f"{'; '.join(left)}.", highlight=False, soft_wrap=True)
    if outcome.refused:
        count = len(outcome.refused)
        raise CommandFailed(f"{count} {'line' if count == 1 else 'lines'} refused (the others were imported)", EXIT_USAGE)


@labels_app.command("status")
def labels_status(project: Path = PROJECT_OPTION) -> None:
    """Per transform: kept, rejected, unlabelled and stale labels, whether it is checked, and how many more kept labels would check it."""
    from .read.labelling import label_status

    statuses = label_status(load_project(project))
    if not statuses:
        console.print("No metamorphic transforms in this project.")
        return
    table = Table(title="Validity labels (from the project's files as they are now)", title_justify="left",
                  box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True)
    table.add_column("transform", overflow="fold", ratio=1, min_width=10)
    for column in ("pairs", "kept", "rejected", "unlabelled", "stale"):
        table.add_column(column, no_wrap=True, justify="right")
    table.add_column("checked", no_wrap=True)
    table.add_column("kept labels\nto check it", no_wrap=True, justify="right")
    for status in statuses:
        to_check = "-" if status.checked else ("none would" if status.kept_to_check is None else str(status.kept_to_check))
        table.add_row(
            status.transform, str(status.pairs), str(status.kept), str(status.rejected), str(status.unlabelled),
            str(status.stale), "[green]yes[/]" if status.checked else "[red]no[/]", to_check,
        )
    console.print(table)
    for status in statuses:
        console.print(status.explanation(), highlight=False, soft_wrap=False)


class WarningLines(logging.Handler):
    """Warnings about stored evidence (a skipped journal line, a table rebuilt from its
    journal) as one `warning:` line each, each said once however often it is found."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.said: set[str] = set()

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message not in self.said:
            self.said.add(message)
            error_console.print(f"[yellow]warning:[/yellow] {message}", highlight=False, soft_wrap=True)


# -- certify -------------------------------------------------------------------------------


@app.command()
def certify(
    project: Path = PROJECT_OPTION,
    verbose: bool = typer.Option(False, "--verbose", help="Show Dagster's log as the run goes."),
) -> None:
    """Certify the cases: a do-nothing run and each case's reference (expected.actions) judged by
    its own criteria; print the flagged cases with why. Exit 0 when none is flagged, 1 when some are."""
    from .model.outcomes import EXIT_CASES_FLAGGED

    load_project(project)  # a bad file is one line, before Dagster is imported
    from .run.supervisor import start_fork_server

    start_fork_server()
    from .defs.launch import run_certification

    with instance_writes(project):
        certification = run_certification(project, log_level="INFO" if verbose else "CRITICAL")
    if certification.errors:
        raise CommandFailed(
            f"{'; '.join(certification.errors)} (Dagster run {certification.run_id} failed: {EXIT_MEANINGS[EXIT_INCOMPLETE]})",
            EXIT_INCOMPLETE,
        )
    from .run.certification import certification_summary_line, flagged_rows

    frame = read_table(project.resolve(), "case_certification")
    flagged = flagged_rows(frame)
    console.print(f"Dagster run {certification.run_id}: {certification_summary_line(frame)}", highlight=False)
    if flagged:
        console.print(certification_table(flagged))
    raise typer.Exit(EXIT_CASES_FLAGGED if flagged else EXIT_ALLOW)


def certification_table(rows: list[dict]) -> Table:
    """One row per flag: case, flag over criterion, and the reason folded to the width."""
    table = Table(title="Flagged cases", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False, collapse_padding=True)
    table.add_column("case", no_wrap=True)
    table.add_column("flag / criterion", overflow="fold", max_width=30)
    table.add_column("reason", overflow="fold", ratio=1)
    for row in rows:
        table.add_row(row["case_id"], f"{row['flag']}\n[dim]{row['criterion'] or 'every criterion'}[/]", row["reason"])
    return table


def fail(message: str, exit_code: int) -> None:
    error_console.print(f"[red]error:[/red] {message}", highlight=False, soft_wrap=True)
    sys.exit(exit_code)


def usage_error_line(error: TyperException) -> str:
    """click's usage error as one line: the problem and where to read the usage."""
    context = getattr(error, "ctx", None)
    command = context.command_path if context is not None else "oloproof"
    return f"{error.format_message()} (see `{command} --help`)"


def main() -> None:
    """Entry point: known failures print one readable line and a distinct exit code."""
    evidence_log.addHandler(WarningLines())
    evidence_log.propagate = False
    try:
        # Outside standalone mode click returns a typer.Exit's code instead of exiting.
        result = app(standalone_mode=False)
        sys.exit(result if isinstance(result, int) else EXIT_ALLOW)
    except ProjectError as error:
        for problem in error.problems:
            error_console.print(f"[red]error:[/red] {problem}", highlight=False, soft_wrap=True)
        sys.exit(EXIT_USAGE)
    except CommandFailed as error:
        fail(str(error), error.exit_code)
    except (StoredTableError, StorageWriteError) as error:
        fail(str(error), EXIT_INCOMPLETE)
    except OSError as error:  # a full disk, a read-only folder, a path that is not a folder
        where = f"{error.filename}: " if error.filename else ""
        fail(f"{where}{error.strerror or error}", EXIT_INCOMPLETE)
    except (typer.Abort, KeyboardInterrupt):
        error_console.print("aborted")
        sys.exit(130)
    except TyperException as error:  # click's own errors; typer bundles its click as typer._click
        if type(error).__name__ == "NoArgsIsHelpError":
            console.print(error.format_message(), highlight=False)  # the help text itself
            sys.exit(EXIT_USAGE)
        fail(usage_error_line(error), EXIT_USAGE if error.exit_code == EXIT_USAGE else EXIT_INCOMPLETE)
    except Exception as error:
        # A bug, not a verdict: show where, and never exit with a code that reads as a gate.
        import traceback

        traceback.print_exc()
        fail(f"internal error: {type(error).__name__}: {error}", EXIT_INCOMPLETE)


if __name__ == "__main__":
    main()
