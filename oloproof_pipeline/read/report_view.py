"""What the HTML report (and `oloproof inspect`) shows, as plain data read from the stored
results: a panel per case, what explains each failure (a fault replay beside its control, a
metamorphic pair's two sides), the failures grouped by rule, and which Dagster run made what.
Nothing here writes HTML; the templates in `templates/` do."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from ..decide.trials import CriterionTrials
from ..decide.validity import VALIDITY_COLUMNS, TransformValidity
from ..evaluators.metamorphic_relation import same_call
from ..model.outcomes import BLOCKING_ORDER, EXCLUDED, FAIL, MISSING, PASS
from ..model.trajectory import first_difference
from ..store.layout import StoredTableError, read_table, table_path
from ..store.tables import rows_from_frame
from .charts import Chart, slices_chart
from .results import VersionResults, compared_paths, scripted_events, tool_calls
from .spend import VersionSpend
from .violations import describe_violation, verdict_violations
from .wording import TIME_FORMAT, call_text, json_text


FAILING = (FAIL, MISSING)
WORST_FIRST = (FAIL, MISSING, PASS, EXCLUDED)

# -- what explains a failure -----------------------------------------------------------------


@dataclass
class FaultReplayView:
    """One fault plan replayed on one case: the control replay (no change) beside the faulted
    one, from the checkpoint on, and what the verdict made of it."""

    criterion: str
    outcome: str
    reason: str
    tool: str | None
    injected_result: Any
    faulted_call_number: int | None  # counted from 1, as `inspect` numbers calls
    checkpoint_label: str | None
    calls_before_checkpoint: int
    control_calls: list[dict[str, Any]]
    faulted_calls: list[dict[str, Any]]
    control_status: str | None
    faulted_status: str | None
    faulted_output: Any
    broken_constraints: list[dict[str, Any]]
    details: Any = None  # the verdict's own details, for reasons with no replay to show

    def rows(self) -> list[tuple[int, dict | None, dict | None]]:
        """(call number, control call, faulted call), aligned by call number."""
        return aligned_calls(self.control_calls, self.faulted_calls, start=self.calls_before_checkpoint + 1)


@dataclass
class PairView:
    """A metamorphic copy judged against its source: both sides' tool calls."""

    criterion: str
    outcome: str
    reason: str
    source_id: str
    copy_id: str
    source_calls: list[dict[str, Any]]
    copy_calls: list[dict[str, Any]]
    first_difference: int | None  # 0-based index into the calls; None when they agree
    details: Any = None

    def rows(self) -> list[tuple[int, dict | None, dict | None]]:
        return aligned_calls(self.source_calls, self.copy_calls)


def aligned_calls(left: list[dict], right: list[dict], start: int = 1) -> list[tuple[int, dict | None, dict | None]]:
    size = max(len(left), len(right))
    return [
        (start + index, left[index] if index < len(left) else None, right[index] if index < len(right) else None)
        for index in range(size)
    ]


def _trajectory_calls(trajectory: dict[str, Any] | None) -> list[dict[str, Any]]:
    return tool_calls({"trajectory": trajectory}) if trajectory else []


def fault_replay_view(verdict: dict[str, Any], replay: dict[str, Any] | None) -> FaultReplayView:
    details = verdict.get("details") if isinstance(verdict.get("details"), dict) else {}
    replay = replay or {}
    checkpoint = replay.get("checkpoint") or details.get("checkpoint") or {}
    before = int(checkpoint.get("calls_before") or 0)
    faulted_call = details.get("faulted_call") or {}
    index = replay.get("faulted_call_index")
    index = faulted_call.get("index") if index is None else int(index)
    faulted_trajectory = replay.get("faulted_trajectory")
    control_trajectory = replay.get("control_trajectory")
    faulted_calls = _trajectory_calls(faulted_trajectory)[before:]
    if not faulted_calls and faulted_call:  # no stored replay: the verdict's own account
        faulted_calls = [{**faulted_call, "result": details.get("injected_result")}, *details.get("calls_after_fault", [])]
    broken = details.get("failed_constraints")
    if broken is None:
        broken = [c for c in (faulted_trajectory or {}).get("constraints") or [] if not c.get("passed")]
    return FaultReplayView(
        criterion=verdict["criterion"],
        outcome=verdict["outcome"],
        reason=verdict["reason"],
        tool=replay.get("tool") or faulted_call.get("tool"),
        injected_result=details.get("injected_result"),
        faulted_call_number=None if index is None else index + 1,
        checkpoint_label=checkpoint.get("label"),
        calls_before_checkpoint=before,
        control_calls=_trajectory_calls(control_trajectory)[before:],
        faulted_calls=faulted_calls,
        control_status=(control_trajectory or {}).get("terminal_status"),
        faulted_status=details.get("terminal_status") or (faulted_trajectory or {}).get("terminal_status"),
        faulted_output=details.get("output", replay.get("faulted_output")),
        broken_constraints=broken,
        details=details,
    )


def pair_view(
    verdict: dict[str, Any], source_id: str, copy_id: str, source_calls: list[dict[str, Any]], copy_calls: list[dict[str, Any]],
) -> PairView:
    """A copy's verdict beside its source's calls and its own (each recording decoded once per
    panel, however many verdicts the copy has)."""
    details = verdict.get("details")
    at = details.get("first_difference") if isinstance(details, dict) else None
    if at is None:
        at = first_difference(source_calls, copy_calls, same=same_call)
    return PairView(
        criterion=verdict["criterion"], outcome=verdict["outcome"], reason=verdict["reason"], source_id=source_id,
        copy_id=copy_id, source_calls=source_calls, copy_calls=copy_calls, first_difference=at, details=details,
    )


def verdict_summary(verdict: dict[str, Any]) -> str:
    """One line saying what a failing verdict found (beyond its reason)."""
    details = verdict.get("details")
    rows = [row for row in compared_paths(verdict) if not row.get("matched")]
    if rows:
        row = rows[0]
        more = f" (+{len(rows) - 1} more)" if len(rows) > 1 else ""
        return f"{row['path']}: expected {json_text(row.get('expected'))}, got {json_text(row.get('actual'))}{more}"
    if not isinstance(details, dict):
        return ""
    if details.get("failed_constraints"):
        return "; ".join(
            f"broken {item.get('name')}: {item.get('detail') or ''}".strip() for item in details["failed_constraints"]
        )
    if "injected_result" in details:
        call = details.get("faulted_call") or {}
        return f"{call.get('tool')} got {json_text(details['injected_result'])}; ended {details.get('terminal_status')}"
    if verdict_violations(verdict):
        return "; ".join(describe_violation(item) for item in verdict_violations(verdict))
    if details.get("differences"):
        item = details["differences"][0]
        return f"{item['path']}: source {json_text(item.get('source'))}, copy {json_text(item.get('copy'))}"
    if "first_difference" in details:
        return (
            f"call {details['first_difference'] + 1}: source {call_text(details.get('source_call'), with_result=False)}, "
            f"copy {call_text(details.get('copy_call'), with_result=False)}"
        )
    if "expected" in details and "actual" in details:
        return f"expected {json_text(details['expected'])}, got {json_text(details['actual'])}"
    if details.get("error"):
        return str(details["error"])
    return ""


# -- the case panel --------------------------------------------------------------------------

# What a panel shows of the case, its recording and its verdicts (nothing else is decoded).
PANEL_CASE_FIELDS = ("case_id", "source_id", "input")
PANEL_RUN_FIELDS = ("output", "status", "error", "trajectory")
PANEL_VERDICT_FIELDS = ("case_id", "criterion", "outcome", "reason", "details", "recorded_by_run", "replayed_by_run", "judged_by_run")
# The runs each verdict row links to: the only thing a panel shows that names the run rather
# than the case, so a panel is kept without them and they are filled in as it is written.
PANEL_RUN_LINK_FIELDS = ("recorded_by_run", "replayed_by_run", "judged_by_run")
# What a kept panel shows of its verdicts: all but the runs.
PANEL_VERDICT_SHOWN = tuple(name for name in PANEL_VERDICT_FIELDS if name not in PANEL_RUN_LINK_FIELDS)
# What the whole report reads of the recordings: the panels' fields, and which run made each.
REPORT_RUN_FIELDS = ("case_id", *PANEL_RUN_FIELDS, "recorded_by_run")


@dataclass
class CasePanel:
    """What a person needs to see to agree or disagree with a case's verdicts."""

    case_id: str
    version: str
    input: Any
    answer: Any
    status: str | None
    error: str | None
    state_rows: list[dict[str, Any]] = field(default_factory=list)
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    verdicts: list[dict[str, Any]] = field(default_factory=list)
    constraints: list[dict[str, Any]] = field(default_factory=list)  # as recorded, before any fault
    events: list[dict[str, Any]] = field(default_factory=list)
    fault_replays: list[FaultReplayView] = field(default_factory=list)
    pairs: list[PairView] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        return any(verdict["outcome"] in FAILING for verdict in self.verdicts) or self.status not in (None, "ok")

    @property
    def worst(self) -> str:
        """The case's worst outcome on any criterion (FAIL, MISSING, PASS, EXCLUDED in that order)."""
        outcomes = {verdict["outcome"] for verdict in self.verdicts}
        return next((outcome for outcome in WORST_FIRST if outcome in outcomes), EXCLUDED)

    @property
    def outcomes(self) -> list[str]:
        return sorted({verdict["outcome"] for verdict in self.verdicts})

    @property
    def failing_criteria(self) -> list[str]:
        return sorted({verdict["criterion"] for verdict in self.verdicts if verdict["outcome"] in FAILING})


def replays_by_case(replays: Iterable[dict[str, Any]] | None) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["case_id"], row["criterion"]): row for row in replays or ()}


# What the report reads of the fault replays: what a panel shows of them, and which run made each.
REPORT_REPLAY_FIELDS = (
    "case_id", "criterion", "tool", "faulted_call_index", "checkpoint", "control_trajectory", "faulted_trajectory",
    "faulted_output", "replayed_by_run",
)


NO_STATE_ROW = {"path": None, "expected": None, "actual": None, "matched": None}
NO_CONSTRAINT = {"name": None, "passed": None, "detail": None}


def case_panel(
    results: VersionResults,
    case_id: str,
    replays: Iterable[dict[str, Any]] | Mapping[tuple[str, str], dict[str, Any]] | None = None,
) -> CasePanel | None:
    """`results`: a version's results (`VersionResults`, or the rows of a batch of panels:
    `report_scan.HeldCases`); `replays`: the version's fault replay rows (see
    `results.load_replays`), or them by (case, criterion), so a fault verdict is shown beside
    its control replay."""
    case = results.case(case_id, PANEL_CASE_FIELDS)
    if case is None:
        return None
    by_case = replays if isinstance(replays, Mapping) else replays_by_case(replays)
    recording = results.recording(case_id, PANEL_RUN_FIELDS) or {}
    verdicts = results.verdicts_of(case_id, PANEL_VERDICT_FIELDS)
    # Each key a row shows is present (None when not recorded): the template reads them by
    # subscript, as a `.get` costs Jinja a context call per row.
    state_rows = [
        {**NO_STATE_ROW, **row, "criterion": verdict["criterion"]} for verdict in verdicts for row in compared_paths(verdict)
    ]
    trajectory = recording.get("trajectory") or {}
    calls = tool_calls(recording)
    faults = [
        fault_replay_view(verdict, by_case.get((case_id, verdict["criterion"])))
        for verdict in verdicts
        if verdict["outcome"] != EXCLUDED and is_fault_verdict(verdict, by_case.get((case_id, verdict["criterion"])))
    ]
    judged = [verdict for verdict in verdicts if verdict["outcome"] != EXCLUDED]
    source_id = case.get("source_id")
    source_calls = tool_calls(results.recording(source_id, PANEL_RUN_FIELDS)) if source_id and judged else []
    pairs = [pair_view(verdict, source_id, case_id, source_calls, calls) for verdict in judged] if source_id else []
    return CasePanel(
        case_id=case_id,
        version=results.version,
        input=case.get("input"),
        answer=recording.get("output"),
        status=recording.get("status"),
        error=recording.get("error"),
        state_rows=state_rows,
        tool_calls=calls,
        verdicts=verdicts,
        constraints=[{**NO_CONSTRAINT, **item} for item in trajectory.get("constraints") or ()],
        events=scripted_events(recording),
        fault_replays=faults,
        pairs=pairs,
    )


def is_fault_verdict(verdict: dict[str, Any], replay: dict[str, Any] | None) -> bool:
    details = verdict.get("details")
    return replay is not None or (isinstance(details, dict) and "injected_result" in details)


# -- what failed, and where the results came from ---------------------------------------------


@dataclass
class FailureGroup:
    """The failing cases of one criterion, under the rule that gates it (None: not gated)."""

    criterion: str
    rule: dict[str, Any] | None
    verdicts: list[dict[str, Any]]

    def alike(self) -> list[tuple[list[str], str, str, str]]:
        """(case ids, outcome, reason, what it found): cases that failed the same way share a row."""
        alike: dict[tuple[str, str, str], list[str]] = {}
        for verdict in self.verdicts:
            summary = verdict["summary"] if "summary" in verdict else verdict_summary(verdict)
            key = (verdict["outcome"], verdict["reason"], summary)
            alike.setdefault(key, []).append(verdict["case_id"])
        return [(case_ids, outcome, reason, summary) for (outcome, reason, summary), case_ids in alike.items()]


def failure_groups(failing_verdicts: Iterable[dict[str, Any]], gate: list[dict[str, Any]]) -> list[FailureGroup]:
    """Rules in the gate's blocking order (FAIL first), then criteria no rule gates.
    `failing_verdicts`: the FAIL and MISSING verdicts in table order (each with its `summary`,
    or its details); `gate`: the gate's rows, decoded once for the whole page."""
    failing: dict[str, list[dict[str, Any]]] = {}
    for verdict in failing_verdicts:
        failing.setdefault(verdict["criterion"], []).append(verdict)
    order = {decision: index for index, decision in enumerate((*BLOCKING_ORDER, PASS))}
    rules = sorted(gate, key=lambda rule: order.get(rule["decision"], len(order)))
    groups = [FailureGroup(rule["metric"], rule, failing.get(rule["metric"], [])) for rule in rules]
    gated = {rule["metric"] for rule in gate}
    groups += [FailureGroup(criterion, None, found) for criterion, found in failing.items() if criterion not in gated]
    return [group for group in groups if group.verdicts or (group.rule and group.rule["decision"] != PASS)]


@dataclass
class Provenance:
    """Which Dagster run produced a step's rows, and when its table was written."""

    step: str
    run_id: str | None
    rows: int
    written: str


def provenance(
    project_root: Path, version: str, counted: list[dict[str, int]], gate: list[dict[str, Any]]
) -> list[Provenance]:
    """`counted`: the rows each run made of the recordings, the fault replays and the verdicts
    (run -> rows, in order of appearance; a replay never made has no run and is not counted)."""
    gate_runs = [row.get("judged_by_run") for row in gate][:1]
    steps = [
        ("recorded", "recorded_runs", counted[0]),
        ("replayed", "fault_replays", counted[1]),
        ("judged", "verdicts", counted[2]),
        ("gate decided", "gate", {run_id: 1 for run_id in filter(None, gate_runs)}),
    ]
    found = []
    for step, table, counts in steps:
        written = _written(project_root, table, version, set(counts))
        found += [Provenance(step, run_id, count, written) for run_id, count in counts.items()]
    return found


def _written(project_root: Path, table: str, version: str, run_ids: set[str]) -> str:
    """When the stored table was written; the gate being decided right now (by the run that
    writes this report) is not stored yet, so an older file must not lend it its time."""
    path = table_path(project_root, table, version)
    if table == "gate":
        try:
            stored = read_table(project_root, table, version)
        except StoredTableError:  # broken (the gate said so and decided again): this run's gate replaces it
            stored = None
        if stored is None or set(stored["judged_by_run"]) != run_ids:
            return "now (this run)"
    if not path.exists():
        return "-"
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime(TIME_FORMAT)


# What the report reads of the copies for their transforms' validity.
REPORT_VALIDITY_FIELDS = VALIDITY_COLUMNS


# -- the page --------------------------------------------------------------------------------


@dataclass
class SlicesView:
    """The slice buckets with any case, as one chart per slice and one table."""

    charts: list[tuple[str, Chart]]  # (slice name, its chart)
    rows: list[dict[str, Any]]


def slices_view(slices: pd.DataFrame | None) -> SlicesView | None:
    if slices is None or slices.empty:
        return None
    shown = [row for row in rows_from_frame(slices) if row["support"]]
    charts = [
        (name, slices_chart([row for row in shown if row["slice"] == name], f"slice-chart-{index}", f"Slice {name}"))
        for index, name in enumerate(dict.fromkeys(row["slice"] for row in shown))
    ]
    return SlicesView(charts, shown)


@dataclass
class ReportView:
    """Everything the report shows above the cases (the cases follow, one panel at a time)."""

    project_name: str
    version: str
    decision: str | None
    gate_reasons: list[str]
    sources: list[Provenance]
    written_at: str
    failure_groups: list[FailureGroup]
    gate: list[dict[str, Any]]
    gate_chart: Chart | None
    trials: list[CriterionTrials] | None
    validity: dict[str, TransformValidity]
    slices: SlicesView | None
    spend: VersionSpend
    criteria: list[str]
    # Each gate rule's id and the criterion it reads, for the cases' rule filter.
    rule_criteria: list[tuple[str, str]]
