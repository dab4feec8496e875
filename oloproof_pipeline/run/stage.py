"""One incremental stage: the skeleton recording, later trials and fault replays share.

A stage plans from what its table and its journal already hold: what it reuses, and what is
left to do. Only when something is left does it need the system: the launch's system (or,
for a run that carries none, the system resolved now, once) must be this partition's
version. Then it takes the project's sandbox, plans again if another run journalled while
it waited, runs what is left in the sandboxes, journalling each row as it comes back (so a
run killed part-way loses nothing), and assembles its table from the reused rows and the
new ones. A stage with nothing left never imports the system: a version whose system is gone
still re-grades from its stored tables.

`run_left` is the one place a stage's work meets the sandboxes (run/sandboxes.py).
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass
from typing import Any, Iterable, Protocol, TypeVar

import pyarrow as pa
from pydantic import BaseModel

from ..model.config import Project
from ..model.errors import SystemVersionMismatch
from ..store.journal import Journal, sandbox_lock
from ..store.layout import budget_ledger_path
from ..store.stored import StoredTable
from .budget import BudgetExhausted, Spend, not_run_error, row_totals, stopped_by_budget, until_reached
from .reuse import KnownWork, journal_state, known_work
from .sandboxes import Sandboxes, SandboxTask, in_sandboxes
from .system import ResolvedSystem, resolve_system, sandbox_settings

Row = dict[str, Any]
Plan = TypeVar("Plan")
Result = TypeVar("Result", covariant=True)


@dataclass(frozen=True)
class StoredWork:
    """A stage's table, as what is known is read from it and from its journal."""

    table: str
    # A row's identity in the table and the journal (a journal line the table holds is skipped).
    key_columns: tuple[str, ...]
    schema: pa.Schema
    nested: tuple[str, ...]
    # What a journal line is (one that is not is skipped with a warning).
    record: type[BaseModel]
    # The columns a stage plans from, when not all: the rest stay in the stored file until
    # the stage's table is written (store/assembly.py).
    plan_columns: tuple[str, ...] | None = None

    @property
    def json_text(self) -> tuple[str, ...]:
        """The columns a finished row holds as JSON text (its nested values, encoded once)."""
        return tuple(name for name in self.nested if name in self.schema.names)

    def journal(self, project: Project, version: str) -> Journal:
        return Journal.for_partition(project.root, self.table, version)

    def known(self, project: Project, version: str, journal: Journal, *, fresh: bool = False) -> KnownWork:
        """The stored rows, then the journal's lines the table does not hold (a run cut short).
        A table that cannot be read is set aside with a warning: its journal holds every row
        it was written from. `fresh` needs nothing stored, so a broken table never stands in
        its way."""
        table = StoredTable() if fresh else StoredTable.at(project.root, self.table, partition=version).readable(
            f"using the journal {journal.path} instead"
        )
        return known_work(table, journal, self.record, self.schema, self.nested, list(self.key_columns), self.plan_columns)


@dataclass(frozen=True)
class Left:
    """What is left to run: the items, and what a sandbox does with each."""

    items: Iterable[Any]
    task: SandboxTask


class Stage(Protocol[Plan, Result]):
    """What a stage provides; `run_stage` does the rest."""

    stored: StoredWork

    def action(self, left: int) -> str:
        """What a system of another version is refused: `refusing to {action} partition ...`."""
        ...

    def plan(self, known: KnownWork) -> Plan:
        """What is reused and what is left, from what is known (and why anything is done again)."""
        ...

    def left(self, plan: Plan) -> int:
        """How many items are left to run."""
        ...

    def work(self, plan: Plan, system: ResolvedSystem) -> Left:
        """The items left, and the task; may refuse the system (a ProjectError) before any runs."""
        ...

    def finished(self, plan: Plan, item: Any, result: Any) -> Row:
        """Note one item's result in the plan; the row to journal, as the table holds it (its
        nested values JSON text: `StoredWork.json_text`). A Dask worker that died running the
        item gives its exception as the result."""
        ...

    def assemble(self, plan: Plan) -> Result:
        """The stage's table (and its counts), from the reused rows and the new ones."""
        ...


def run_stage(
    stage: Stage[Any, Result],
    project: Project,
    *,
    version: str,
    fresh: bool = False,
    system: ResolvedSystem | None = None,
    sandboxes: Sandboxes | None = None,
    spend: Spend | None = None,
) -> Result:
    """Plan, and only when something is left: check the system's version, take the sandbox,
    plan again if the journal moved meanwhile, and run what is left; then assemble. `fresh`
    starts from an empty journal and reuses nothing. `spend` counts the rows against the
    run's budget (run/budget.py): none is started once a ceiling is reached."""
    journal = stage.stored.journal(project, version)
    if fresh:
        journal.clear()
    known = stage.stored.known(project, version, journal, fresh=fresh)
    plan = stage.plan(known)
    if stage.left(plan):
        system = system_of_version(project, version, system, action=stage.action(stage.left(plan)))
        with sandbox_lock(project.root):
            if not fresh and journal_state(journal) != known.journal_state:
                # A run that held the sandbox before us did some of it already.
                plan = stage.plan(stage.stored.known(project, version, journal))
            run_left(
                stage, plan, project=project, version=version, journal=journal, system=system, sandboxes=sandboxes,
                spend=spend,
            )
    return stage.assemble(plan)


def system_of_version(project: Project, version: str, system: ResolvedSystem | None, *, action: str) -> ResolvedSystem:
    """The launch's system (resolved now when the run carries none: a declared version is
    taken as it stands, nothing imported), refused unless it is `version`: running it for
    another partition would mislabel its runs."""
    system = system if system is not None else resolve_system(project)
    if system.version != version:
        raise SystemVersionMismatch(
            f"refusing to {action} partition {version!r}: the loaded system "
            f"{project.config.system.callable} is version {system.version!r}. Record {system.version!r} instead, "
            f"or re-grade {version!r} from its stored recordings."
        )
    return system


def run_left(
    stage: Stage[Any, Any],
    plan: Any,
    *,
    project: Project,
    version: str,
    journal: Journal,
    system: ResolvedSystem,
    sandboxes: Sandboxes | None,
    spend: Spend | None = None,
) -> None:
    """Run what is left of `plan`, on one sandbox or spread over Dask's, each row journalled
    as it comes back. The journal is opened at the first row, so a stage refused before any
    (an unreplayable system, found out in its worker) leaves no journal behind."""
    if not stage.left(plan):
        return
    left = stage.work(plan, system)
    settings = sandbox_settings(project, version)
    ledger = spend.ledger(budget_ledger_path(project.root, stage.stored.table, version)) if spend is not None else None
    # A chat agent's client charges the ledger at each model request; a Python system's
    # calls are counted from its rows as they come back.
    per_request = ledger is not None and settings.spec.chat_agent is not None
    if per_request:
        settings = settings.with_ledger(ledger.as_json())
    not_run: list[Any] = []
    items = until_reached(ledger, left.items, not_run) if ledger is not None else left.items
    stopped = 0
    json_text = stage.stored.json_text
    with ExitStack() as opened:
        journal_line = None
        for item, result in in_sandboxes(settings, items, left.task, sandboxes=sandboxes):
            row = stage.finished(plan, item, result)
            if journal_line is None:
                journal_line = opened.enter_context(journal.appending())
            journal_line(Journal.line_text(row, json_text))
            if ledger is not None and not per_request:
                ledger.add(row_totals(row))
            stopped += stopped_by_budget(row)
        if not_run:
            # Recorded as not run (an error, so never reused and judged MISSING): a rerun
            # with a higher budget records them.
            reason = BudgetExhausted(not_run_error(ledger.reached() or "a ceiling reached"))
            journal_line = journal_line or opened.enter_context(journal.appending())
            for item in not_run:
                journal_line(Journal.line_text(stage.finished(plan, item, reason), json_text))
    if not_run or stopped:
        cases = len(not_run) + stopped
        raise BudgetExhausted(
            f"the run stopped: budget exhausted ({ledger.reached()}); {cases} "
            f"{'case' if cases == 1 else 'cases'} not run or stopped (raise the budget and run again to record them)"
        )
