"""What a version's recordings cost: its model calls, tokens and dollars, summed from the
`recorded_runs` table (a scripted agent's rows have none; a reused recording counts as it was
recorded). Shown in the report, its comparison page, `run --json` and the Dagster metadata."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import pandas as pd


# The recorded_runs columns the sums are read from.
SPEND_COLUMNS = ("model_calls", "prompt_tokens", "completion_tokens", "cost_usd")


@dataclass(frozen=True)
class VersionSpend:
    """The version's model use; `cost_usd` is None when no recording has a price, and
    `unpriced` counts the recordings with model calls but no price (`pricing:` has no rate)."""

    model_calls: int
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float | None
    unpriced: int

    @property
    def used_a_model(self) -> bool:
        return self.model_calls > 0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def cost_text(self) -> str:
        """`$0.0123`, with the unpriced recordings named; `not priced` with no price at all."""
        if self.cost_usd is None:
            return "not priced (no `pricing:` rate for the model)"
        text = f"${self.cost_usd:.4f}"
        return text + (f" ({self.unpriced} recordings not priced)" if self.unpriced else "")


    def line(self) -> str:
        """`24 model calls, 1200 prompt + 340 completion tokens, $0.0123`: the report's words."""
        return (f"{self.model_calls} model calls, {self.prompt_tokens} prompt + {self.completion_tokens} completion "
                f"tokens, {self.cost_text()}")


def version_spend(runs: pd.DataFrame | None) -> VersionSpend:
    """The sums over a version's recordings (zero for a table without the usage columns)."""
    if runs is None or runs.empty or "model_calls" not in runs:
        return VersionSpend(0, 0, 0, None, 0)
    calls = pd.to_numeric(runs["model_calls"], errors="coerce").fillna(0)
    cost = pd.to_numeric(runs["cost_usd"], errors="coerce") if "cost_usd" in runs else pd.Series(float("nan"), index=runs.index)
    priced = cost.notna()
    return VersionSpend(
        model_calls=int(calls.sum()),
        prompt_tokens=int(pd.to_numeric(runs["prompt_tokens"], errors="coerce").fillna(0).sum()),
        completion_tokens=int(pd.to_numeric(runs["completion_tokens"], errors="coerce").fillna(0).sum()),
        cost_usd=float(cost[priced].sum()) if priced.any() else None,
        unpriced=int(((calls > 0) & ~priced).sum()),
    )


def spend_difference_line(base: str, candidate: str, base_spend: VersionSpend, candidate_spend: VersionSpend) -> str:
    """`model use: 1.0.0 24 calls $0.0120, 1.1.0 30 calls $0.0150 (+$0.0030)`, as `compare` prints it."""
    sides = ", ".join(
        f"{version} {spent.model_calls} calls {spent.cost_text()}"
        for version, spent in ((base, base_spend), (candidate, candidate_spend))
    )
    if base_spend.cost_usd is None or candidate_spend.cost_usd is None:
        return f"model use: {sides}"
    return f"model use: {sides} ({candidate_spend.cost_usd - base_spend.cost_usd:+.4f} USD)"
