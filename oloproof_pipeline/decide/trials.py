"""Rates over repeated trials: per criterion, pass^k (a case passes when every trial of it
passes) and pass@1 (the mean pass rate over its trials), each with an interval, and the flaky
cases (whose verdict differs across trials) with how often it flipped.

Both intervals are the gate's own (`rate_from_outcomes`), with the case's cluster as the unit:
- pass^k turns each case's trials into one outcome, PASS only when all k trials were judged
  and passed (`case_outcome`), so cases are independent and the interval is exact
  Clopper-Pearson, as for one trial. Oloproof has no pass^k (its source names none), so the
  definition is tau-bench's (Yao et al. 2024, "tau-bench"): pass^k = E over cases of
  C(c, k) / C(n, k) for c successes in n trials, which over exactly n = k trials is the share
  of cases whose k trials all succeeded. A case judged on fewer than k trials (a trial MISSING,
  EXCLUDED, or with no verdict) is MISSING for pass^k, not PASS: counting [PASS, EXCLUDED,
  PASS] as passing would mix pass^2 into a pass^3 rate. tau-bench scores an errored trial 0;
  MISSING does the same for the lower bound (the side a PASS is decided on) and, as every
  missing case here, the opposite for the upper, so the case can only make the rate less
  certain. A case with any FAIL is FAIL whatever its other trials did; one with every trial
  EXCLUDED is EXCLUDED, as with one trial.
- pass@1 counts every trial; the k trials of a case are one cluster of k verdicts that may
  agree as strongly as they like, so the interval is Clopper-Pearson at the effective number
  of clusters (decide/clustered.py), valid at any correlation within a case, and like every
  clustered rate an approximate method the policy must permit.
The case's cluster is its `group_id`: the case itself, or a copy's source (a copy is judged
only on its relation, so each cluster still holds one case per criterion).
tests/test_trials.py checks both intervals' coverage over a grid of designs by simulation.
"""

from __future__ import annotations

from typing import Iterable

import pandas as pd
from pydantic import BaseModel, ConfigDict

from ..model.config import Project
from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS, STRUCTURAL_EXCLUSIONS
from ..model.trials import FIRST_TRIAL, PASS_ALL_TRIALS, PASS_AT_ONE, TRIAL_AGGREGATES, TrialAggregate
from ..store.tables import null_to_none
from .formatting import format_interval, format_rate
from .statistics import RateEvidence, RateEstimate, rate_from_outcomes

# The columns of `verdicts` and `trial_verdicts` the trial rates read.
TRIAL_VERDICT_COLUMNS = ["case_id", "group_id", "criterion", "outcome", "reason"]
# Flaky cases listed per criterion in the gate's metadata and the report: the most flips first.
FLAKY_SHOWN = 10


def all_trials(verdicts: pd.DataFrame, trial_verdicts: pd.DataFrame | None) -> pd.DataFrame:
    """Trial 1's verdicts (the `verdicts` table) and trials 2..k, with a `trial` column."""
    first = verdicts[TRIAL_VERDICT_COLUMNS].assign(trial=FIRST_TRIAL)
    if trial_verdicts is None or trial_verdicts.empty:
        return first
    later = trial_verdicts[TRIAL_VERDICT_COLUMNS + ["trial"]]
    return pd.concat([first, later], ignore_index=True)


def case_outcome(outcomes: Iterable[str], trials: int | None = None) -> str:
    """One outcome for a case from its trials' outcomes, for pass^k over `trials` trials (by
    default as many as are listed): FAIL if any trial failed; PASS only if `trials` of them
    passed; EXCLUDED if every listed trial is; else MISSING (fewer than k judged trials)."""
    outcomes = list(outcomes)
    required = len(outcomes) if trials is None else trials
    if FAIL in outcomes:
        return FAIL
    if all(outcome == EXCLUDED for outcome in outcomes):
        return EXCLUDED
    return PASS if outcomes.count(PASS) >= required else MISSING


def flips(outcomes: list[str]) -> int:
    """How often the verdict changed between consecutive judged trials (PASS <-> FAIL)."""
    judged = [outcome for outcome in outcomes if outcome in (PASS, FAIL)]
    return sum(1 for before, after in zip(judged, judged[1:]) if before != after)


def _by_case(trials: pd.DataFrame, criterion: str) -> pd.DataFrame:
    """One row per case of the criterion: its cluster and its outcomes in trial order."""
    rows = trials[(trials["criterion"] == criterion) & ~trials["reason"].isin(STRUCTURAL_EXCLUSIONS)]
    rows = rows.sort_values("trial", kind="stable")
    return rows.groupby("case_id", sort=False).agg(group_id=("group_id", "first"), outcomes=("outcome", list))


def trial_rate(
    aggregate: TrialAggregate,
    trials: pd.DataFrame,
    criterion: str,
    *,
    confidence: float = 0.95,
    allow_approximate: bool = False,
    min_clusters: int = 20,
) -> RateEvidence:
    """pass^k or pass@1 of one criterion from `all_trials` rows, as the gate decides a rule by."""
    cases = _by_case(trials, criterion)
    groups = null_to_none(cases["group_id"])
    if aggregate == PASS_ALL_TRIALS:
        # k is the run's number of trials, so a case with no verdict in some trial is not
        # taken for one that passed them all.
        of_criterion = trials.loc[trials["criterion"] == criterion, "trial"]
        k = int(of_criterion.max()) if len(of_criterion) else 0
        rows = [(group, case_outcome(outcomes, k)) for group, outcomes in zip(groups, cases["outcomes"])]
    else:
        rows = [(group, outcome) for group, outcomes in zip(groups, cases["outcomes"]) for outcome in outcomes]
    return rate_from_outcomes(rows, confidence=confidence, allow_approximate=allow_approximate, min_clusters=min_clusters)


class FlakyCase(BaseModel):
    model_config = ConfigDict(extra="forbid")

    case_id: str
    flips: int
    passed: int
    judged: int


class CriterionTrials(BaseModel):
    """One criterion over its trials: both rates with intervals, and its flaky cases."""

    model_config = ConfigDict(extra="forbid")

    criterion: str
    trials: int
    pass_all: RateEstimate
    pass_at_one: RateEstimate
    flaky_cases: int
    flaky: list[FlakyCase]  # the FLAKY_SHOWN with the most flips


def trial_summaries(trials: pd.DataFrame, criteria: list[str], confidence: float = 0.95) -> list[CriterionTrials]:
    """Per criterion (in `criteria` order), pass^k, pass@1 and the flaky cases."""
    summaries = []
    for criterion in criteria:
        cases = _by_case(trials, criterion)
        counted = trials.loc[trials["criterion"] == criterion, "trial"]
        flaky = [
            FlakyCase(case_id=case_id, flips=flips(outcomes), passed=outcomes.count(PASS), judged=outcomes.count(PASS) + outcomes.count(FAIL))
            for case_id, outcomes in zip(cases.index, cases["outcomes"])
            if flips(outcomes)
        ]
        flaky.sort(key=lambda case: (-case.flips, case.case_id))
        rates = {
            aggregate: trial_rate(aggregate, trials, criterion, confidence=confidence, allow_approximate=True, min_clusters=0).estimate
            for aggregate in TRIAL_AGGREGATES
        }
        summaries.append(
            CriterionTrials(
                criterion=criterion, trials=int(counted.max()) if len(counted) else 0,
                pass_all=rates[PASS_ALL_TRIALS], pass_at_one=rates[PASS_AT_ONE], flaky_cases=len(flaky), flaky=flaky[:FLAKY_SHOWN],
            )
        )
    return summaries


def project_trial_summaries(project: Project, verdicts: pd.DataFrame, later: pd.DataFrame | None) -> list[CriterionTrials] | None:
    """A project's trial summaries from trial 1's verdicts and the later trials' (None with
    one trial, or when no later trial is stored)."""
    if project.config.execution.trials == 1 or later is None:
        return None
    return trial_summaries(all_trials(verdicts, later), project.criteria(), project.release.confidence_level)


def trials_lines(summaries: list[CriterionTrials]) -> list[str]:
    """One line per criterion, as the CLI prints it under the gate."""
    lines = []
    for summary in summaries:
        flaky = ", ".join(f"{case.case_id} ({case.flips})" for case in summary.flaky[:5])
        more = f" and {summary.flaky_cases - 5} more" if summary.flaky_cases > 5 else ""
        lines.append(
            f"{summary.criterion} over {summary.trials} trials: pass^k {_interval(summary.pass_all)}, "
            f"pass@1 {_interval(summary.pass_at_one)}, {summary.flaky_cases} flaky"
            + (f" (flips: {flaky}{more})" if summary.flaky_cases else "")
        )
    return lines


def _interval(estimate: RateEstimate) -> str:
    return f"{format_rate(estimate.estimate, missing='n/a')} {format_interval(estimate.lower, estimate.upper)}"


def trials_markdown(summaries: list[CriterionTrials]) -> str:
    """A small table: per criterion, trials, pass^k and pass@1 with intervals, flaky cases."""
    lines = [
        "| criterion | trials | pass^k | pass@1 | flaky cases (flips) |",
        "| --- | --- | --- | --- | --- |",
    ]
    for summary in summaries:
        shown = ", ".join(f"{case.case_id} ({case.flips})" for case in summary.flaky[:3])
        more = f" and {summary.flaky_cases - 3} more" if summary.flaky_cases > 3 else ""
        flaky = f"{summary.flaky_cases}: {shown}{more}" if summary.flaky_cases else "0"
        lines.append(
            f"| {summary.criterion} | {summary.trials} | {_interval(summary.pass_all)} | {_interval(summary.pass_at_one)} | {flaky} |"
        )
    return "\n".join(lines) + "\n"
