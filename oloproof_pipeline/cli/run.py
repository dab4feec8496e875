"""`oloproof run`: check the project's files, answer an unchanged rerun from its stamp, else
resolve the system once and launch the Dagster run; then print what the run did and the gate.

Dagster is imported only once a launch is certain, so a bad file or an up-to-date version
is answered in a fraction of the time."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import typer

from ..model.config import check_release_policy
from ..model.fingerprints import run_inputs_digest
from ..model.outcomes import EXIT_MEANINGS
from ..project import load_project
from ..read.document import RunSummary, failed_run_document, run_document
from ..store.layout import stored_partitions
from ..store.stamps import RunStamp, unchanged_since, write_run_stamp
from .gate import exit_with_document, gate_json, show_flagged_buckets, show_gate
from .launching import failed_launch_exit_code, instance_writes, journal_progress, stdout_to_stderr
from .options import JSON_OPTION, PROJECT_OPTION, RUN_VERSION_OPTION, SET_OPTION, CommandFailed, run_settings
from .render import print_json, say, say_lines
from ..model.collector import imported_aside

if TYPE_CHECKING:  # Dagster is imported only once a launch is certain
    from ..defs.launch import EvaluationRun


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
    settings: list[str] = SET_OPTION,
    version: Optional[str] = RUN_VERSION_OPTION,
) -> None:
    """Record, judge and gate the system's current version; exit with the gate's code."""
    settings = run_settings(settings, version)
    # A bad file is found before Dagster is even imported, and before the system is.
    evaluated = load_project(project, settings)
    check_release_policy(evaluated, ungated=ungated)
    root = project.resolve()
    inputs_digest = run_inputs_digest(evaluated)

    def unchanged(version: str | None) -> RunStamp | None:
        """The last complete run of `version` when nothing changed since (`--fresh`: never)."""
        return None if fresh or version is None else unchanged_since(
            root, version=version, ungated=ungated, inputs_digest=inputs_digest
        )

    def shown_unchanged(stamp: RunStamp | None) -> bool:
        """Nothing changed since the stamp's run: its results are shown (`--launch`: run anyway)."""
        if stamp is None or launch:
            return False
        show_unchanged_run(root, stamp, as_json=as_json)
        return True

    # A version declared in oloproof.yaml, with the system's code as the last complete run of
    # it left it, is the version the code reports: nothing to import to know there is nothing
    # to do. Otherwise the system says its version first, once, for the whole launch.
    declared = evaluated.config.system.version
    declared_unchanged = unchanged(declared)
    if shown_unchanged(declared_unchanged):
        return
    with imported_aside():
        from ..run.worker_processes import start_fork_server  # the system layer (httpx): only a launch needs it
        from ..run.system import resolve_system  # the system layer, as above

    if declared_unchanged is None:
        # The system's worker processes get ready while Dagster is imported. Not for a run
        # launched with nothing changed (`--launch`): it reuses every recording, and a stage
        # that does need a worker starts the fork server then.
        start_fork_server()
    system = resolve_system(evaluated)  # imports the system only when no version is declared
    if declared is None and shown_unchanged(unchanged(system.version)):
        return
    first_of_version = system.version not in stored_partitions(root, "recorded_runs")
    with imported_aside():
        from ..defs.launch import run_evaluation  # Dagster: only now that a run is launched

    with stdout_to_stderr(enabled=as_json):
        with journal_progress(root, system.version, enabled=not (verbose or as_json)), instance_writes(project):
            evaluation = run_evaluation(
                evaluated, fresh=fresh, ungated=ungated, log_level="INFO" if verbose else "CRITICAL", system=system,
                settings=settings,
            )
    summary = run_summary(root, evaluation, first_of_version=first_of_version)
    if not evaluation.errors and summary.complete():
        write_run_stamp(root, version=evaluation.version, ungated=ungated, inputs_digest=inputs_digest,
                        run_id=evaluation.run_id, dagster_dev=summary.dagster_dev)
    if evaluation.errors:
        exit_code = failed_launch_exit_code(evaluation)
        if as_json:
            print_json(failed_run_document(evaluation.version, evaluation.run_id, evaluation.errors, summary, exit_code))
        # One line: what failed, then which run (its whole log is in the instance).
        raise CommandFailed(
            f"{'; '.join(evaluation.errors)} (Dagster run {evaluation.run_id} failed: {EXIT_MEANINGS[exit_code]})",
            exit_code,
        )
    if as_json:
        exit_with_document(run_document(gate_json(root, evaluation.version, ungated=ungated), evaluation.run_id, summary))
    say(f"Dagster run {evaluation.run_id} evaluated version {evaluation.version}: {counts_text(summary)}.")
    say_lines(f"  {line}" for line in summary.why() or ["nothing changed: every recording, replay and verdict was reused"])
    say_lines(summary_lines(summary))
    show_flagged_buckets(project, evaluation.version)
    show_gate(project, evaluation.version, ungated=ungated)


def show_unchanged_run(project_root: Path, stamp: RunStamp, *, as_json: bool) -> None:
    """A rerun with nothing changed launches nothing: the stored results are the ones a run
    would reuse, so they are shown as they stand, with the run that made them."""
    summary = RunSummary(project_root, stamp.version, {}, dagster_dev=stamp.dagster_dev)
    why = (f"nothing changed since Dagster run {stamp.run_id} completed at {stamp.finished_at}: "
           "no run launched, nothing recorded, replayed or judged (--launch runs it anyway)")
    if as_json:
        gate = gate_json(project_root, stamp.version, ungated=stamp.ungated)
        exit_with_document(run_document(gate, stamp.run_id, summary, why=[why]))
    verdicts = summary.counts()["verdicts"]
    say(f"Version {stamp.version} is up to date: " + ", ".join(f"{count} {outcome}" for outcome, count in verdicts.items()) + ".")
    say(f"  {why}")
    say_lines(summary_lines(summary))
    show_flagged_buckets(project_root, stamp.version)
    show_gate(project_root, stamp.version, ungated=stamp.ungated)


def run_summary(project_root: Path, evaluation: EvaluationRun, *, first_of_version: bool = False) -> RunSummary:
    """What the run did, from the metadata of its materializations."""
    return RunSummary(project_root, evaluation.version, evaluation.materialized,
                      dagster_dev=dagster_dev_command(project_root), first_of_version=first_of_version)


def dagster_dev_command(project_root: Path) -> str:
    """The README's line with this project's own paths: the instance the run is in, and the
    workspace.yaml that loads the project (else its definitions.py)."""
    from ..defs.instance import instance_home, project_location  # Dagster: only a launch needs it (imported by then)

    home = f"DAGSTER_HOME={shlex.quote(str(instance_home(project_root)))}"
    location = project_location(project_root)
    if location is not None and location.workspace is not None:
        return f"{home} dagster dev -w {shlex.quote(str(location.workspace))}"
    definitions = project_root / "definitions.py"
    if definitions.is_file():
        return f"{home} dagster dev -f {shlex.quote(str(definitions))}"
    return (f"{home} dagster dev -f definitions.py  (a definitions.py in {project_root} with "
            "`defs = build_definitions(Path(__file__).parent)`, as the README shows)")


def counts_text(summary: RunSummary) -> str:
    counts = summary.counts()
    failed = lambda count: f", {count} failed" if count else ""  # noqa: E731
    verdicts = counts["verdicts"]
    return (
        f"recorded {counts['cases_recorded']} cases and reused {counts['cases_reused']}{failed(counts['cases_failed'])}; "
        f"replayed {counts['replays_run']} and reused {counts['replays_reused']}{failed(counts['replays_failed'])}; "
        f"judged {counts['verdicts_judged']} verdicts and reused {counts['verdicts_reused']} ("
        + ", ".join(f"{count} {outcome}" for outcome, count in verdicts.items()) + ")"
    )


def summary_lines(summary: RunSummary) -> list[str]:
    """What the run cost when the system called a model, where the report is, and how to open
    the run in Dagster."""
    spent = summary.spend()
    lines = [f"Model use: {spent.line()}"] if spent.used_a_model else []
    report = summary.report_path()
    lines += [f"Report: {report}"] if report else []
    return [*lines, f"Open the run in Dagster: {summary.dagster_dev}"]
