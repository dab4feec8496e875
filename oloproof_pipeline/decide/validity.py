"""Whether a transform can be trusted: people's labels of its pairs against its
`minimum_validity`, and the `transform_not_checked` reason a rule over it gets until then."""

from __future__ import annotations

import pandas as pd
from pydantic import BaseModel, ConfigDict

from ..model.outcomes import INSUFFICIENT_EVIDENCE
from ..evaluators.metamorphic_relation import MetamorphicRelation
from ..model.config import Project
from ..store.tables import VALIDITY_COLUMNS, null_to_none
from .formatting import format_bar, format_bound_against_bar
from .statistics import BlockingReason, clopper_pearson

# Fixed by the contract, whatever the release policy's confidence level.
VALIDITY_CONFIDENCE = 0.95


# -- validity ------------------------------------------------------------------------------


class TransformValidity(BaseModel):
    """Whether people's labels show a transform keeps meaning often enough to be trusted."""

    model_config = ConfigDict(extra="forbid")

    transform: str
    transform_digest: str
    pairs: int
    kept: int
    rejected: int
    unlabelled: int
    stale_labels: int
    lower_bound: float
    minimum_validity: float
    checked: bool

    def lower_bound_text(self) -> str:
        """The lower bound with the decimals it takes to read on its side of the minimum
        (0.89997 prints as 0.89997 against 0.9, never as 0.900)."""
        return format_bound_against_bar(self.lower_bound, self.minimum_validity, ">=" if self.checked else "<")

    def summary(self) -> str:
        relation = ">=" if self.checked else "<"
        return (
            f"{self.transform}: {self.kept} of {self.pairs} pairs kept ({self.rejected} rejected, "
            f"{self.unlabelled} unlabelled); 95% lower bound {self.lower_bound_text()} {relation} "
            f"minimum_validity {format_bar(self.minimum_validity)}"
        )


def transform_validity(derived_cases: pd.DataFrame | None) -> dict[str, TransformValidity]:
    """Per transform (in the order each first comes), from the `derived_cases` table alone.
    Unlabelled pairs count as not kept. Counted by column: a row made a Python value each was
    56 MiB at 100,000 source cases."""
    if derived_cases is None or derived_cases.empty:
        return {}
    columns = derived_cases[list(VALIDITY_COLUMNS)]
    return {name: _validity_of(name, rows) for name, rows in columns.groupby("transform", sort=False, dropna=False)}


def _validity_of(name: str, rows: pd.DataFrame) -> TransformValidity:
    statuses = rows["label_status"].value_counts()
    kept, pairs = int(statuses.get("kept", 0)), len(rows)
    lower, _ = clopper_pearson(kept, pairs, VALIDITY_CONFIDENCE)
    first = rows.iloc[:1]
    minimum = float(first["minimum_validity"].iloc[0])
    return TransformValidity(
        transform=name,
        transform_digest=null_to_none(first["transform_digest"])[0],
        pairs=pairs,
        kept=kept,
        rejected=int(statuses.get("rejected", 0)),
        unlabelled=int(statuses.get("unlabelled", 0)),
        stale_labels=int(rows["stale_labels"].fillna(0).sum()),
        lower_bound=lower,
        minimum_validity=minimum,
        checked=lower >= minimum,
    )


def validity_markdown(validities: dict[str, TransformValidity]) -> str:
    lines = [
        "| transform | pairs | kept | rejected | unlabelled | stale labels | 95% CP lower bound | minimum_validity | checked |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for validity in validities.values():
        lines.append(
            f"| {validity.transform} | {validity.pairs} | {validity.kept} | {validity.rejected} | {validity.unlabelled} "
            f"| {validity.stale_labels} | {validity.lower_bound_text()} | {format_bar(validity.minimum_validity)} "
            f"| {'yes' if validity.checked else '**no**'} |"
        )
    if not validities:
        lines.append("| - | 0 | 0 | 0 | 0 | 0 | - | - | - |")
    return "\n".join(lines) + "\n"


# -- what the gate needs -------------------------------------------------------------------


def relation_transform(project: Project, metric: str) -> str | None:
    """The transform a metric's metamorphic relation is judged under (None for other metrics)."""
    for _, relation in project.evaluators_of(MetamorphicRelation):
        if relation.criterion == metric:
            return relation.config.transform
    return None


def relation_transforms(project: Project, metric: str) -> list[str]:
    """Every transform a metric's relation judges: its own, or all of them when it names none."""
    for _, relation in project.evaluators_of(MetamorphicRelation):
        if relation.criterion == metric:
            if relation.config.transform is not None:
                return [relation.config.transform]
            return [transform.name for transform in project.config.metamorphic.transforms]
    return []


def transform_blocking_reasons(project: Project, metric: str, derived_cases: pd.DataFrame | None) -> list[BlockingReason]:
    """`transform_not_checked` for a metric over a transform people have not shown to be valid."""
    validities = transform_validity(derived_cases)
    reasons: list[BlockingReason] = []
    for transform in relation_transforms(project, metric):
        validity = validities.get(transform)
        if validity is None:
            reasons.append((INSUFFICIENT_EVIDENCE, f"transform_not_checked: {transform}: no derived pairs"))
        elif not validity.checked:
            reasons.append((INSUFFICIENT_EVIDENCE, f"transform_not_checked: {validity.summary()}"))
    return reasons
