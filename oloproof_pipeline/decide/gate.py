"""The release gate: each rule's interval against its bar, then one ALLOW or BLOCK.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Literal

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pydantic import BaseModel, ConfigDict, computed_field

from ..model.config import NO_RELEASE_POLICY, Project, RuleConfig
from ..model.outcomes import (
    ALLOW,
    BLOCK,
    BLOCKING_ORDER,
    EXIT_USAGE,
    FAIL,
    INSUFFICIENT_EVIDENCE,
    MANUAL_REVIEW,
    PASS,
    STRUCTURAL_EXCLUSIONS,
    GateOutcome,
    RuleOutcome,
    exit_code_for,
)
from ..model.fingerprints import frame_digest
from ..model.trials import split_trial_metric
from ..store.stored import StoredTable
from ..store.tables import GATE_NESTED, GATE_SCHEMA, VALIDITY_COLUMNS, models_to_frame, null_to_none, rows_from_frame
from .formatting import RULE_COLUMNS, format_bar, format_bound_against_bar, rule_cells
from .statistics import BlockingReason, RateEstimate, rate_from_outcomes
from .trials import TRIAL_VERDICT_COLUMNS, all_trials, trial_rate
from .suite_size import SUITE_SIZE_CAP, BarKind, suite_size_to_decide
from .validity import relation_transform, transform_blocking_reasons


class RuleDecision(BaseModel):
    """One rule decided: a row of the `gate` table."""

    model_config = ConfigDict(extra="forbid")

    rule_id: str
    metric: str
    decision: RuleOutcome
    estimate: float | None
    lower: float
    upper: float
    method: str
    observed: int
    passed: int
    failed: int
    missing: int
    excluded: int
    reasons: list[str]
    suite_size_to_decide: int | None = None
    bar_kind: Literal["min", "max"]
    bar: float  # the rule's one bar (release.yaml refuses a rule with both)
    # The bar again under its kind, the other None: the stored gate's columns.
    bar_min: float | None = None
    bar_max: float | None = None


# -- one rule ------------------------------------------------------------------------------


# The suite size reported for an undecided rule is the one that decides it this often.
DECISION_PROBABILITY = 0.8
# The suite size for one undecided bar: (cases, the decision they would reach), or (None, None).
SuiteSize = tuple[int | None, RuleOutcome | None]


def _compare(name: str, value: float, relation: str, bar_name: str, bar: float) -> str:
    """`lower 0.89997 < min 0.9`: the bound with as many decimals as it takes to stay on its
    side of the bar as printed."""
    return f"{name} {format_bound_against_bar(value, bar, relation)} {relation} {bar_name} {format_bar(bar)}"


def _judge_bar(estimate: RateEstimate, bar: float, kind: BarKind, confidence: float) -> tuple[RuleOutcome, str, SuiteSize]:
    """The interval against one bar: (decision, reason, suite size when it straddles)."""
    if kind == "min":
        if estimate.lower >= bar:
            return PASS, _compare("lower", estimate.lower, ">=", "min", bar), (None, None)
        if estimate.upper < bar:
            return FAIL, _compare("upper", estimate.upper, "<", "min", bar), (None, None)
        straddle = _compare("lower", estimate.lower, "<", "min", bar)
    else:
        if estimate.upper <= bar:
            return PASS, _compare("upper", estimate.upper, "<=", "max", bar), (None, None)
        if estimate.lower > bar:
            return FAIL, _compare("lower", estimate.lower, ">", "max", bar), (None, None)
        straddle = _compare("upper", estimate.upper, ">", "max", bar)
    size, direction = suite_size_to_decide(
        estimate.estimate, bar, kind, confidence, design_effect=estimate.design_effect, power=DECISION_PROBABILITY
    )
    return INSUFFICIENT_EVIDENCE, f"interval_straddles_bar: {straddle}; {_suite_size_text(estimate, bar, size, direction)}", (size, direction)


def _suite_size_text(estimate: RateEstimate, bar: float, size: int | None, direction: str | None) -> str:
    """What the suite size means: how many cases, which decision, how sure, and the design
    effect when clustering scaled it."""
    if size is None:
        if estimate.estimate is None:
            why = "no case was judged"
        elif estimate.estimate == bar:
            why = "the estimate is on the bar"
        else:
            why = f"not within {SUITE_SIZE_CAP:,} cases, the estimate is that close to the bar"
        return f"no suite size would decide it ({why})"
    clustering = f"; design effect {estimate.design_effect:.2f} for clustered cases" if estimate.design_effect > 1.0 else ""
    return (
        f"about {size} cases would decide it ({direction}, with {DECISION_PROBABILITY:.0%} probability "
        f"if the rate holds{clustering})"
    )


def _bar(rule: RuleConfig) -> tuple[float, BarKind]:
    """The rule's one bar: release.yaml takes 'min' or 'max', never both."""
    return (rule.min, "min") if rule.min is not None else (rule.max, "max")


def _judge_interval(rule: RuleConfig, estimate: RateEstimate, confidence: float) -> tuple[RuleOutcome, list[str], int | None]:
    """The interval against the rule's bar: the suite size only when it straddles the bar."""
    bar, kind = _bar(rule)
    decision, reason, (size, _) = _judge_bar(estimate, bar, kind, confidence)
    return decision, [reason], size


def _blocking_decision(estimate: RateEstimate, blocking_reasons: list[BlockingReason]) -> tuple[RuleOutcome | None, list[str]]:
    """MANUAL_REVIEW reasons outrank INSUFFICIENT_EVIDENCE ones; both outrank the interval."""
    manual = [reason for kind, reason in blocking_reasons if kind == MANUAL_REVIEW]
    insufficient = [reason for kind, reason in blocking_reasons if kind == INSUFFICIENT_EVIDENCE]
    unknown = {kind for kind, _ in blocking_reasons} - {MANUAL_REVIEW, INSUFFICIENT_EVIDENCE}
    if unknown:
        raise ValueError(f"unknown blocking reason kind(s) {sorted(unknown)}")
    if estimate.observed == 0 and estimate.missing == 0:
        insufficient.append("no_cases: no case was judged on this metric")
    if manual:
        return MANUAL_REVIEW, manual + insufficient
    if insufficient:
        return INSUFFICIENT_EVIDENCE, insufficient
    return None, []


def _bar_fields(rule: RuleConfig) -> dict:
    bar, kind = _bar(rule)
    return {"bar_kind": kind, "bar": bar, "bar_min": bar if kind == "min" else None, "bar_max": bar if kind == "max" else None}


def decide_rule(
    rule: RuleConfig,
    estimate: RateEstimate,
    blocking_reasons: Iterable[BlockingReason] = (),
    confidence: float = 0.95,
) -> RuleDecision:
    """Decide one rule. `blocking_reasons` are (kind, reason) pairs from the rate (e.g.
    insufficient_clusters) or from callers (e.g. transform_not_checked); they win over the
    interval, MANUAL_REVIEW first. The estimate and interval are shown whatever the decision."""
    decision, reasons = _blocking_decision(estimate, list(blocking_reasons))
    suite_size = None
    if decision is None:
        decision, reasons, suite_size = _judge_interval(rule, estimate, confidence)
    return RuleDecision(
        rule_id=rule.id,
        metric=rule.metric,
        decision=decision,
        estimate=estimate.estimate,
        lower=estimate.lower,
        upper=estimate.upper,
        method=estimate.method,
        observed=estimate.observed,
        passed=estimate.passed,
        failed=estimate.failed,
        missing=estimate.missing,
        excluded=estimate.excluded,
        reasons=reasons,
        suite_size_to_decide=suite_size,
        **_bar_fields(rule),
    )


# -- the gate ------------------------------------------------------------------------------


class GateDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    decision: GateOutcome
    reasons: list[str]
    rules: list[RuleDecision]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def exit_code(self) -> int:
        """A distinct code per cause of a BLOCK (see `model/outcomes.py`); no policy is a configuration error."""
        return exit_code_for(rule.decision for rule in self.rules) if self.rules else EXIT_USAGE


def decide_gate(decisions: Iterable[RuleDecision]) -> GateDecision:
    """BLOCK when any rule is not PASS; reasons list FAIL rules, then MANUAL_REVIEW, then
    INSUFFICIENT_EVIDENCE, each as `rule_id: DECISION: reason; reason`."""
    rules = list(decisions)
    if not rules:
        # No release policy (an ungated run): nothing was decided, so nothing is allowed.
        return GateDecision(decision=BLOCK, reasons=[NO_RELEASE_POLICY], rules=[])
    reasons = [
        f"{rule.rule_id}: {rule.decision}: {'; '.join(rule.reasons)}"
        for outcome in BLOCKING_ORDER
        for rule in rules
        if rule.decision == outcome
    ]
    return GateDecision(decision=BLOCK if reasons else ALLOW, reasons=reasons, rules=rules)


# Verdicts as the gate reads them: a frame, or the stored table read a row group at a time.
Verdicts = pd.DataFrame | StoredTable


def verdict_parts(verdicts: Verdicts, names: Iterable[str]) -> Iterator[pd.DataFrame]:
    """The verdicts' named columns a part at a time: a frame is one part, a stored table each
    of its row groups (so a large table's columns are never all Python objects at once)."""
    names = list(names)
    if isinstance(verdicts, pd.DataFrame):
        yield verdicts[names]
        return
    for part in verdicts.row_groups().each(names):
        yield part.to_pandas()


def metric_outcomes(verdicts: Verdicts, metric: str) -> Iterator[tuple[str | None, str | None]]:
    """(group_id, outcome) of each verdict on `metric` that counts (not structurally excluded);
    a stored table's groups filtered in Arrow, only the matching rows made Python values."""
    names = ["criterion", "group_id", "outcome", "reason"]
    if isinstance(verdicts, pd.DataFrame):
        of_metric = verdicts[(verdicts["criterion"] == metric) & ~verdicts["reason"].isin(STRUCTURAL_EXCLUSIONS)]
        yield from zip(null_to_none(of_metric["group_id"]), null_to_none(of_metric["outcome"]))
        return
    excluded = pa.array(sorted(STRUCTURAL_EXCLUSIONS), type=pa.string())
    for part in verdicts.row_groups().each(names):
        # A null criterion matches nothing; a null reason is not an exclusion (as pandas' `==` and `isin`).
        counts = pc.and_(pc.equal(part["criterion"], metric), pc.invert(pc.is_in(part["reason"], value_set=excluded)))
        of_metric = part.filter(counts)
        yield from zip(of_metric["group_id"].to_pylist(), of_metric["outcome"].to_pylist())


def decide_release_gate(
    project: Project, verdicts: Verdicts, derived_cases: pd.DataFrame | None = None,
    trial_verdicts: pd.DataFrame | None = None,
) -> GateDecision:
    """Each rule over its metric's verdicts, then ALLOW or BLOCK. A metamorphic relation over
    a transform whose labels do not yet check it is also blocked by `transform_not_checked`
    (validity is read from the `derived_cases` table). A `pass^k:` or `pass@1:` metric is
    decided over every trial (`trial_verdicts` holds trials 2..k; a plain criterion, trial 1).
    `verdicts` stored are read a row group at a time, one pass per rule."""
    policy = project.release
    decisions = []
    for rule in policy.rules:
        aggregate, criterion = split_trial_metric(rule.metric)
        if aggregate is not None:
            whole = verdicts if isinstance(verdicts, pd.DataFrame) else verdicts.columns(*TRIAL_VERDICT_COLUMNS)
            evidence = trial_rate(
                aggregate, all_trials(whole, trial_verdicts), criterion, confidence=policy.confidence_level,
                allow_approximate=policy.allow_approximate_methods, min_clusters=policy.min_clusters,
            )
        else:
            evidence = rate_from_outcomes(
                metric_outcomes(verdicts, rule.metric),
                confidence=policy.confidence_level,
                allow_approximate=policy.allow_approximate_methods,
                min_clusters=policy.min_clusters,
            )
        blocking = evidence.blocking_reasons + transform_blocking_reasons(project, criterion, derived_cases)
        decisions.append(decide_rule(rule, evidence.estimate, blocking, policy.confidence_level))
    return decide_gate(decisions)


def gate_table(gate: GateDecision, *, version: str, judged_by_run: str, inputs_digest: str | None = None) -> pd.DataFrame:
    """One row per rule; every row also carries the overall decision and its reasons."""
    extra = {
        "system_version": version,
        "gate_decision": gate.decision,
        "gate_reasons": gate.reasons,
        "judged_by_run": judged_by_run,
        "inputs_digest": inputs_digest,
    }
    return models_to_frame(gate.rules, GATE_SCHEMA, GATE_NESTED, **extra)


# -- reuse ---------------------------------------------------------------------------------

# What the gate reads of each verdict (and of each metamorphic copy, `VALIDITY_COLUMNS`).
GATED_VERDICT_COLUMNS = ["criterion", "group_id", "outcome", "reason"]
GATED_TRIAL_COLUMNS = ["case_id", "trial", *GATED_VERDICT_COLUMNS]


def gate_inputs_digest(
    project: Project, verdicts: Verdicts, derived_cases: pd.DataFrame | None, trial_verdicts: pd.DataFrame | None = None
) -> str:
    """What the gate is decided from: the verdicts' outcomes by criterion and cluster, the
    copies' label status, the release policy and the relations' transforms (and the later
    trials' verdicts, when there are any). Stored verdicts are digested a row group at a time."""
    relations = {rule.metric: relation_transform(project, split_trial_metric(rule.metric)[1]) for rule in project.release.rules}
    validity = frame_digest("validity/v1", None if derived_cases is None else derived_cases[list(VALIDITY_COLUMNS)], producer="decisions")
    settings = {"release": project.release.model_dump(mode="json"), "relations": relations, "validity": validity}
    if trial_verdicts is not None:
        settings["trials"] = frame_digest("trials/v1", trial_verdicts[GATED_TRIAL_COLUMNS], producer="decisions")
    if isinstance(verdicts, pd.DataFrame):
        return frame_digest("gate/v1", verdicts[GATED_VERDICT_COLUMNS], settings, producer="decisions")
    parts = [frame_digest("gate.verdicts", part, producer="decisions") for part in verdict_parts(verdicts, GATED_VERDICT_COLUMNS)]
    return frame_digest("gate/v2", None, {**settings, "verdicts": parts}, producer="decisions")


def gate_from_table(frame: pd.DataFrame) -> GateDecision:
    """A stored gate back as its decision (for the metadata of a gate reused as it is)."""
    rows = rows_from_frame(frame, GATE_NESTED)
    fields = set(RuleDecision.model_fields)
    rules = [RuleDecision.model_validate({name: value for name, value in row.items() if name in fields}) for row in rows]
    return GateDecision(decision=rows[0]["gate_decision"], reasons=rows[0]["gate_reasons"] or [], rules=rules)


# -- Markdown ------------------------------------------------------------------------------


def _cell(text: str) -> str:
    """Table-safe text: a `|` or a newline would break the row."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _rule_row(rule: RuleDecision) -> str:
    cells = rule_cells(rule.model_dump())
    rule_id, metric = rule.rule_id, rule.metric
    shown = {**cells, "decision": f"**{rule.decision}**", "reasons": cells["reasons"] or "-"}
    return "| " + " | ".join(_cell(text) for text in (rule_id, metric, *(shown[name] for name in RULE_COLUMNS[1:]))) + " |"


def gate_markdown(gate: GateDecision) -> str:
    """The overall decision, then one table row per rule, in the shared words (RULE_COLUMNS,
    the rule and its metric in columns of their own)."""
    header = ["rule", "metric", *RULE_COLUMNS[1:]]
    lines = [
        f"**Gate: {gate.decision}** (exit code {gate.exit_code})",
        "",
        "| " + " | ".join(header) + " |",
        "|" + " --- |" * len(header),
    ]
    lines.extend(_rule_row(rule) for rule in gate.rules)
    if not gate.rules:
        lines.append("| " + " | ".join(["-"] * (len(header) - 1)) + " | " + _cell("; ".join(gate.reasons)) + " |")
    return "\n".join(lines) + "\n"
