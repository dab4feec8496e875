"""What a run has spent against its `budget:`, shared by every process that makes its calls.

One small JSON file per budgeted stage (made by `run/budget.py`'s `Spend`), locked for each
change, so the cases running side by side in a worker's threads, several Dask workers and the
parent all count into one total. A chat agent's client (`chat.py`) charges it before every
request and settles the tokens and dollars after, so a run passes a `model_calls` ceiling by
at most the requests already on the wire (one per case in flight), as in Oloproof, where the
runner checks its budget before each call (`oloproof_core/execution/runner.py`). A Python
system's calls are not seen one by one: the parent adds what each finished case recorded.
"""

from __future__ import annotations

import fcntl
import json
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from ..model.config import BudgetConfig, ModelRateConfig

BUDGET_STOP = "budget exhausted"


@dataclass
class SpendTotals:
    """Model calls, tokens and dollars so far; `unmeasured`/`unpriced` count calls whose tokens
    or dollars nothing said (a ceiling that cannot see what it bounds stops the run)."""

    model_calls: int = 0
    tokens: int = 0
    usd: float = 0.0
    unmeasured: int = 0
    unpriced: int = 0

    def reached(self, budget: BudgetConfig) -> str | None:
        """The ceiling reached, as `model_calls 40 reached (41 made)` (None: none is)."""
        if budget.model_calls is not None and self.model_calls >= budget.model_calls:
            return f"model_calls {budget.model_calls} reached ({self.model_calls} made)"
        if budget.tokens is not None and self.tokens >= budget.tokens:
            return f"tokens {budget.tokens} reached ({self.tokens} used)"
        if budget.tokens is not None and self.unmeasured:
            return "tokens: a model call reported no tokens"
        if budget.usd is not None and self.usd >= budget.usd:
            return f"usd {budget.usd:g} reached ({self.usd:.6f} spent)"
        if budget.usd is not None and self.unpriced:
            return "usd: a model call has no price (no `pricing:` rate for the model)"
        return None


class BudgetStop(Exception):
    """A model request refused because the run's budget is spent: the case stops there (an
    error, never reused, so a rerun with a higher budget records it)."""


def stopped_message(reason: str) -> str:
    return f"stopped: {BUDGET_STOP} ({reason})"


class Ledger:
    """The run's totals in `path`, changed under an exclusive lock."""

    def __init__(self, path: Path | str, budget: BudgetConfig, rate: ModelRateConfig | None = None):
        self.path = Path(path)
        self.budget = budget
        self.rate = rate

    @classmethod
    def create(cls, path: Path, budget: BudgetConfig, rate: ModelRateConfig | None, spent: SpendTotals) -> "Ledger":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(spent)), encoding="utf-8")
        return cls(path, budget, rate)

    def as_json(self) -> dict[str, Any]:
        """What a worker rebuilds the ledger from."""
        rate = self.rate.model_dump(mode="json") if self.rate is not None else None
        return {"path": str(self.path), "budget": self.budget.model_dump(mode="json"), "rate": rate}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Ledger":
        rate = ModelRateConfig.model_validate(data["rate"]) if data.get("rate") is not None else None
        return cls(data["path"], BudgetConfig.model_validate(data["budget"]), rate)

    def totals(self) -> SpendTotals:
        with self._locked() as totals:
            return totals

    def reached(self) -> str | None:
        return self.totals().reached(self.budget)

    def add(self, spent: SpendTotals) -> None:
        with self._locked() as totals:
            totals.model_calls += spent.model_calls
            totals.tokens += spent.tokens
            totals.usd += spent.usd
            totals.unmeasured += spent.unmeasured
            totals.unpriced += spent.unpriced

    def charge_request(self) -> None:
        """Count one request about to be sent, or refuse it (BudgetStop) when a ceiling is
        already reached: the check and the count are one step, so no two callers both pass
        the last call."""
        with self._locked() as totals:
            reason = totals.reached(self.budget)
            if reason is not None:
                raise BudgetStop(stopped_message(reason))
            totals.model_calls += 1

    def settle_request(self, usage: dict[str, Any] | None) -> None:
        """The tokens and dollars of a request sent (None: it got no answer that says)."""
        prompt = (usage or {}).get("prompt_tokens")
        completion = (usage or {}).get("completion_tokens")
        with self._locked() as totals:
            if prompt is None and completion is None:
                totals.unmeasured += 1
                totals.unpriced += 1
                return
            totals.tokens += (prompt or 0) + (completion or 0)
            if self.rate is None:
                totals.unpriced += 1
            else:
                totals.usd += self.rate.usd(input_tokens=prompt or 0, output_tokens=completion or 0)

    @contextmanager
    def _locked(self) -> Iterator[SpendTotals]:
        with open(self.path, "r+", encoding="utf-8") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            totals = SpendTotals(**json.loads(handle.read() or "{}"))
            before = asdict(totals)
            yield totals
            if asdict(totals) != before:
                handle.seek(0)
                handle.truncate()
                handle.write(json.dumps(asdict(totals)))
                handle.flush()
