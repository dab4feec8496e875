"""`oloproof gate`, and the gate as `run` prints it too: the decisions table, the reasons,
the violations caught, the flagged slices, and the exit code."""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn, Optional

import typer
from rich.console import Group
from rich.table import Table

from ..decide.trials import trials_lines
from ..model.config import NO_RELEASE_POLICY
from ..model.outcomes import ALLOW, EXIT_ALLOW, EXIT_INCOMPLETE, EXIT_MEANINGS, EXIT_USAGE, FAIL, OUTCOMES
from ..read.document import StoredGate, gate_document, stored_gate
from ..read.reports import METHOD_NAMES, flagged_buckets, format_rate, stored_trials
from ..read.results import outcome_counts
from ..read.violations import violation_summary
from ..store.layout import read_table
from ..store.stored import StoredTable
from ..store.tables import VERDICT_NESTED
from .options import JSON_OPTION, PROJECT_OPTION, VERSION_OPTION, CommandFailed, stored_version
from .render import DECISION_STYLES, compact_table, console, print_json


def gate(
    project: Path = PROJECT_OPTION,
    version: Optional[str] = VERSION_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Print the stored gate for a version and exit with its code."""
    version = stored_version(project, version, "gate")
    if as_json:
        exit_with_document(gate_json(project.resolve(), version))
    show_gate(project, version)


def gate_of(project_dir: Path, version: str) -> StoredGate:
    gate = stored_gate(project_dir.resolve(), version)
    if gate is None:
        raise CommandFailed(f"no gate stored for version {version!r}; run `oloproof run` first", EXIT_INCOMPLETE)
    return gate


def gate_json(project_root: Path, version: str, *, ungated: bool = False) -> dict:
    return gate_document(project_root, version, gate_of(project_root, version), ungated=ungated)


def exit_with_document(document: dict) -> NoReturn:
    """Print a document that holds the gate (`gate --json`, `run --json`); exit with its code."""
    print_json(document)
    raise typer.Exit(document["gate"]["exit_code"])


def show_gate(project_dir: Path, version: str, *, ungated: bool = False) -> None:
    gate = gate_of(project_dir, version)
    if not gate.rows:
        show_ungated(project_dir, version, ungated=ungated)
        return
    console.print(gate_table(gate.rows, version))
    for line in trials_lines(stored_trials(project_dir.resolve(), version) or []):
        console.print(line, highlight=False)
    show_violations(project_dir, version)
    colour = "green" if gate.decision == ALLOW else "red"
    console.print(
        f"Gate: [bold {colour}]{gate.decision}[/] (exit code {gate.exit_code}: {EXIT_MEANINGS[gate.exit_code]})",
        highlight=False,
    )
    raise typer.Exit(gate.exit_code)


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
    # Only a FAIL carries violations: read those rows, not every verdict.
    summary = violation_summary(
        StoredTable.at(project_dir.resolve(), "verdicts", partition=version).rows_where("outcome", FAIL, VERDICT_NESTED)
    )
    if not summary:
        return
    table = compact_table("Violations caught (step = tool call number)")
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


def show_flagged_buckets(project_dir: Path, version: str) -> None:
    """Slice buckets that differ from the rest (exploratory: never gated)."""
    for line in flagged_buckets(read_table(project_dir.resolve(), "slices", version)):
        console.print(f"[yellow]slice flagged[/] {line}", highlight=False, soft_wrap=True)


def gate_table(rows: list[dict], version: str) -> Group:
    """The decisions: a table narrow enough for 80 columns (rule over metric, decision, rate,
    interval over method, counts), then each rule's reasons under it, wrapped to the width."""
    table = compact_table(f"Decisions for version {version}")
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
