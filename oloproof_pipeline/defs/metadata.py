"""Materialization metadata: what a person looks for on an asset's page."""

from __future__ import annotations

from typing import Any

import pandas as pd
from dagster import MetadataValue


def run_link(run_id: str) -> dict[str, Any]:
    return {"dagster_run": MetadataValue.dagster_run(run_id)}


def counts_markdown(counts: dict[str, dict[str, int]]) -> str:
    lines = ["| criterion | PASS | FAIL | MISSING | EXCLUDED |", "|---|---|---|---|---|"]
    for criterion, tally in counts.items():
        lines.append(f"| {criterion} | {tally['PASS']} | {tally['FAIL']} | {tally['MISSING']} | {tally['EXCLUDED']} |")
    return "\n".join(lines)


def value_counts(frame: pd.DataFrame, column: str) -> dict[str, int]:
    return {str(key): int(value) for key, value in frame[column].value_counts().sort_index().items()}


class ProgressLog:
    """Log lines with counts as cases finish, so a long run shows it is moving."""

    def __init__(self, log, what: str, total: int, every: int = 10):
        self.log, self.what, self.total, self.every = log, what, total, every
        self.done = 0

    def step(self, _item=None) -> None:
        self.done += 1
        if self.done % self.every == 0 or self.done == self.total:
            self.log.info(f"{self.what} {self.done} of at most {self.total} cases")
