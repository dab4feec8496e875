"""What a run has spent so far against its `budget:` (Oloproof's execution/budget.py), and
what a recording cost by `pricing:`.

Counted from the rows a stage journals as they come back: a recording's live model calls and
tokens (Trajectory.model_usage; a reused recording is never run, so it costs nothing) and its
`cost_usd`. Once a ceiling is reached no new item is handed to the sandboxes: the run may end
above it by the items already in flight, at most the concurrency. Under a token or dollar
ceiling an item whose tokens or cost nothing can say stops the run too, as in Oloproof: a
ceiling that cannot see what it bounds would overspend silently.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

from ..model.config import BudgetConfig, ProjectConfig


class BudgetExhausted(Exception):
    """The run reached a ceiling of its `budget:` and started nothing more: the run is
    incomplete (exit 5, as Oloproof's RunStopped), never a gate decision."""


def cost_usd(config: ProjectConfig, usage: dict[str, Any]) -> float | None:
    """A recording's dollars, from `pricing` by the system's model name (None: no model turn,
    or no rate declared for the model)."""
    model = config.system.model.name if config.system.model is not None else None
    rates = {rate.model: rate for rate in config.pricing}
    rate = rates.get(model) if model is not None else None
    if rate is None or usage.get("model_calls") is None:
        return None
    return rate.usd(input_tokens=usage.get("prompt_tokens") or 0, output_tokens=usage.get("completion_tokens") or 0)


class Spend:
    """A run's running total of model calls, tokens and dollars, against `budget`."""

    def __init__(self, budget: BudgetConfig) -> None:
        self.budget = budget
        self.model_calls = 0
        self.tokens = 0
        self.usd = 0.0
        self.unmeasured = 0  # items with model calls whose tokens nothing said
        self.unpriced = 0  # items with model calls whose dollars nothing said

    @classmethod
    def of(cls, config: ProjectConfig, spent: Iterable[dict[str, Any]] = ()) -> "Spend | None":
        """The run's running total under `budget:` (None without one), from the rows it
        recorded already (`spent`: trial 1's, when later trials are recorded)."""
        if config.budget is None:
            return None
        spend = cls(config.budget)
        for row in spent:
            spend.add(row)
        return spend

    def add(self, row: dict[str, Any]) -> None:
        """One journalled row's spend (a row with no model calls spent nothing)."""
        calls = row.get("model_calls") or 0
        if not calls:
            return
        self.model_calls += calls
        if row.get("prompt_tokens") is None and row.get("completion_tokens") is None:
            self.unmeasured += 1
        self.tokens += (row.get("prompt_tokens") or 0) + (row.get("completion_tokens") or 0)
        if row.get("cost_usd") is None:
            self.unpriced += 1
        else:
            self.usd += row["cost_usd"]

    def reached(self) -> str | None:
        """The ceiling reached, as `model_calls 40 reached` (None: none is)."""
        budget = self.budget
        if budget.model_calls is not None and self.model_calls >= budget.model_calls:
            return f"model_calls {budget.model_calls} reached ({self.model_calls} made)"
        if budget.tokens is not None and self.tokens >= budget.tokens:
            return f"tokens {budget.tokens} reached ({self.tokens} used)"
        if budget.tokens is not None and self.unmeasured:
            return "tokens: a case's model calls reported no tokens"
        if budget.usd is not None and self.usd >= budget.usd:
            return f"usd {budget.usd:g} reached ({self.usd:.6f} spent)"
        if budget.usd is not None and self.unpriced:
            return "usd: a case's model calls have no price (no `pricing:` rate for the model)"
        return None

    def until_reached(self, items: Iterable[Any], not_run: list[Any]) -> Iterator[Any]:
        """`items` while no ceiling is reached; the rest are put in `not_run`."""
        waiting = iter(items)
        for item in waiting:
            if self.reached() is not None:
                not_run.append(item)
                not_run.extend(waiting)
                return
            yield item


def not_run_error(reason: str) -> str:
    return f"not run: budget exhausted ({reason})"
