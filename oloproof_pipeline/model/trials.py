"""Repeated trials: how release rules name the two rates over a case's k trials.

A rule's `metric` is a criterion (its verdicts on the first trial, as with one trial), or
`pass^k:<criterion>` (a case passes when all its trials pass) or `pass@1:<criterion>` (the
mean pass rate over its trials).
"""

from __future__ import annotations

from typing import Literal

PASS_ALL_TRIALS = "pass^k"
PASS_AT_ONE = "pass@1"
TrialAggregate = Literal["pass^k", "pass@1"]
TRIAL_AGGREGATES: tuple[TrialAggregate, ...] = (PASS_ALL_TRIALS, PASS_AT_ONE)
FIRST_TRIAL = 1


def split_trial_metric(metric: str) -> tuple[TrialAggregate | None, str]:
    """(aggregate, criterion): `pass^k:state_correct` -> ("pass^k", "state_correct"); a plain
    criterion -> (None, criterion)."""
    for aggregate in TRIAL_AGGREGATES:
        prefix = aggregate + ":"
        if metric.startswith(prefix):
            return aggregate, metric[len(prefix):]
    return None, metric
