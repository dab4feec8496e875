"""What a run has spent so far against its `budget:` (Oloproof's execution/budget.py), and
what a recording cost by `pricing:`.

A budgeted stage counts into one ledger (`endpoints/ledger.py`) that every process making
its calls shares. A chat agent's client charges it before each model request and refuses the
request once a ceiling is reached (that case stops: an error, never reused), so a run passes a
`model_calls` ceiling by at most the requests on the wire, one per case in flight. A Python
system's calls are not seen one by one: the parent adds each finished row's live model calls,
tokens and `cost_usd` (a reused recording is never run, so it costs nothing). Once a ceiling
is reached no new item is handed to the sandboxes. Under a token or dollar ceiling a call whose
tokens or cost nothing can say stops the run too, as in Oloproof: a ceiling that cannot see
what it bounds would overspend silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator

from ..endpoints.ledger import BUDGET_STOP, Ledger, SpendTotals
from ..model.config import BudgetConfig, ModelRateConfig, ProjectConfig


class BudgetExhausted(Exception):
    """The run reached a ceiling of its `budget:` and started nothing more: the run is
    incomplete (exit 5, as Oloproof's RunStopped), never a gate decision."""


def cost_usd(config: ProjectConfig, usage: dict[str, Any]) -> float | None:
    """A recording's dollars, from `pricing` by the system's model name (None: no model turn,
    or no rate declared for the model)."""
    rate = system_rate(config)
    if rate is None or usage.get("model_calls") is None:
        return None
    return rate.usd(input_tokens=usage.get("prompt_tokens") or 0, output_tokens=usage.get("completion_tokens") or 0)


class Spend:
    """What a budgeted stage starts from (what this run spent already: trial 1's rows when
    later trials are recorded), and the ledger it counts into once its work starts."""

    def __init__(self, budget: BudgetConfig, rate: ModelRateConfig | None) -> None:
        self.budget = budget
        self.rate = rate
        self.spent = SpendTotals()

    @classmethod
    def of(cls, config: ProjectConfig, spent: Iterable[dict[str, Any]] = ()) -> "Spend | None":
        """The run's spend under `budget:` (None without one), from the rows it recorded
        already."""
        if config.budget is None:
            return None
        spend = cls(config.budget, system_rate(config))
        for row in spent:
            add_row(spend.spent, row)
        return spend

    def ledger(self, path: Path) -> Ledger:
        """A new ledger at `path` holding what was spent already (the stage holds the
        sandbox lock, so no other run's stage counts into it)."""
        return Ledger.create(path, self.budget, self.rate, self.spent)


def system_rate(config: ProjectConfig) -> ModelRateConfig | None:
    """The `pricing:` rate of the system's model (None: no model, or no rate for it)."""
    model = config.system.model.name if config.system.model is not None else None
    return {rate.model: rate for rate in config.pricing}.get(model) if model is not None else None


def row_totals(row: dict[str, Any]) -> SpendTotals:
    """What one journalled row spent (a row with no model calls spent nothing)."""
    totals = SpendTotals()
    add_row(totals, row)
    return totals


def add_row(totals: SpendTotals, row: dict[str, Any]) -> None:
    calls = row.get("model_calls") or 0
    if not calls:
        return
    totals.model_calls += calls
    if row.get("prompt_tokens") is None and row.get("completion_tokens") is None:
        totals.unmeasured += 1
    totals.tokens += (row.get("prompt_tokens") or 0) + (row.get("completion_tokens") or 0)
    if row.get("cost_usd") is None:
        totals.unpriced += 1
    else:
        totals.usd += row["cost_usd"]


def until_reached(ledger: Ledger, items: Iterable[Any], not_run: list[Any]) -> Iterator[Any]:
    """`items` while no ceiling is reached; the rest are put in `not_run`."""
    waiting = iter(items)
    for item in waiting:
        if ledger.reached() is not None:
            not_run.append(item)
            not_run.extend(waiting)
            return
        yield item


def not_run_error(reason: str) -> str:
    return f"not run: {BUDGET_STOP} ({reason})"


def stopped_by_budget(row: dict[str, Any]) -> bool:
    """A row the budget stopped: not run, or stopped at a model request."""
    return row.get("status") == "error" and f"{BUDGET_STOP} (" in str(row.get("error") or "")
