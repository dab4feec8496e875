"""Reports from stored results: the case panel (`oloproof inspect`) and one offline HTML file
per version, each failure shown with what explains it.

The HTML report reads, top to bottom: the decision and where it came from (the Dagster runs,
linked when `OLOPROOF_DAGSTER_URL` names the webserver), what failed (by rule and criterion,
with reasons), each rule's interval against its bar as a chart, transform validity, slices
(chart and table), what the results cannot tell you, then a panel per case. A failed fault
replay shows the injected result, the faulted continuation and the broken constraint beside
the control replay; a failed metamorphic pair shows both sides' tool calls with the first
difference marked. Everything is inline (SVG, CSS, one small script): one offline file.
"""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Iterator

import pandas as pd

from ..decide.trials import CriterionTrials, project_trial_summaries
from ..decide.validity import TransformValidity, transform_validity
from ..model.outcomes import BLOCKING_ORDER, EXCLUDED, FAIL, MISSING, PASS
from ..model.config import Project
from ..model.fingerprints import frame_digest
from ..model.trajectory import first_difference
from ..store.layout import read_table, reports_dir, table_path, write_text_file
from ..store.tables import rows_from_frame
from ..project import load_project
from .results import VersionResults, compared_paths, load_replays, scripted_events, tool_calls
from .violations import describe_violation, verdict_violations

# The webserver whose run pages the report links to, e.g. http://127.0.0.1:3000.
DAGSTER_URL_ENV = "OLOPROOF_DAGSTER_URL"
# The gate's columns, as `oloproof run` prints them (and the gate asset's rules table).
GATE_COLUMNS = ("rule / metric", "decision", "rate", "interval", "passed/judged", "missing", "excluded", "reasons")
# Short names for the interval methods stored in the gate table.
METHOD_NAMES = {"clopper_pearson": "exact", "clopper_pearson_effective_clusters": "eff. clusters"}
FAILING = (FAIL, MISSING)
TIME_FORMAT = "%Y-%m-%d %H:%M:%S UTC"


def format_rate(value: Any) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"  # None or NaN


def short_run_id(run_id: str | None) -> str:
    """The first block of a run id, as Dagster's UI shows it."""
    return run_id.split("-")[0] if run_id else "-"


def rule_cells(rule: dict[str, Any]) -> dict[str, Any]:
    """A gate row in the words `oloproof run` uses, keyed by `GATE_COLUMNS`."""
    judged = (rule["passed"] or 0) + (rule["failed"] or 0)
    method = METHOD_NAMES.get(rule["method"], rule["method"] or "")
    return {
        "rule / metric": f"{rule['rule_id']} / {rule['metric']}",
        "decision": rule["decision"],
        "rate": format_rate(rule["estimate"]),
        "interval": f"[{format_rate(rule['lower'])}, {format_rate(rule['upper'])}] {method}".strip(),
        "passed/judged": f"{rule['passed']}/{judged}",
        "missing": int(rule["missing"] or 0),
        "excluded": int(rule["excluded"] or 0),
        "reasons": "; ".join(rule["reasons"] or []),
    }


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


def same_call(first: dict[str, Any], second: dict[str, Any]) -> bool:
    return first.get("tool") == second.get("tool") and first.get("arguments") == second.get("arguments")


def call_text(call: dict[str, Any] | None, *, with_result: bool = True) -> str:
    """`issue_refund {"order_id": "ord-006"} -> {"error": "internal error"}`."""
    if call is None:
        return "(no call)"
    text = f"{call.get('tool')} {json_text(call.get('arguments'))}"
    return f"{text} -> {json_text(call.get('result'))}" if with_result else text


def json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


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


def pair_view(results: VersionResults, case: dict[str, Any], verdict: dict[str, Any]) -> PairView:
    source_id = case.get("source_id") or ""
    source_calls = tool_calls(results.recording(source_id, PANEL_RUN_FIELDS))
    copy_calls = tool_calls(results.recording(case["case_id"], PANEL_RUN_FIELDS))
    details = verdict.get("details")
    at = details.get("first_difference") if isinstance(details, dict) else None
    if at is None:
        at = first_difference(source_calls, copy_calls, same=same_call)
    return PairView(
        criterion=verdict["criterion"], outcome=verdict["outcome"], reason=verdict["reason"], source_id=source_id,
        copy_id=case["case_id"], source_calls=source_calls, copy_calls=copy_calls, first_difference=at, details=details,
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
        return any(verdict["outcome"] in FAILING for verdict in self.verdicts)


def replays_by_case(replays: Iterable[dict[str, Any]] | None) -> dict[tuple[str, str], dict[str, Any]]:
    return {(row["case_id"], row["criterion"]): row for row in replays or ()}


def case_panel(
    results: VersionResults,
    case_id: str,
    replays: Iterable[dict[str, Any]] | dict[tuple[str, str], dict[str, Any]] | None = None,
) -> CasePanel | None:
    """`replays`: the version's fault replay rows (see `results.load_replays`), so a fault
    verdict is shown beside its control replay."""
    case = results.case(case_id, PANEL_CASE_FIELDS)
    if case is None:
        return None
    by_case = replays if isinstance(replays, dict) else replays_by_case(replays)
    recording = results.recording(case_id, PANEL_RUN_FIELDS) or {}
    verdicts = results.verdicts_of(case_id, PANEL_VERDICT_FIELDS)
    state_rows = [
        {**row, "criterion": verdict["criterion"]} for verdict in verdicts for row in compared_paths(verdict)
    ]
    trajectory = recording.get("trajectory") or {}
    faults = [
        fault_replay_view(verdict, by_case.get((case_id, verdict["criterion"])))
        for verdict in verdicts
        if verdict["outcome"] != EXCLUDED and is_fault_verdict(verdict, by_case.get((case_id, verdict["criterion"])))
    ]
    pairs = [
        pair_view(results, case, verdict)
        for verdict in verdicts
        if case.get("source_id") and verdict["outcome"] != EXCLUDED
    ]
    return CasePanel(
        case_id=case_id,
        version=results.version,
        input=case.get("input"),
        answer=recording.get("output"),
        status=recording.get("status"),
        error=recording.get("error"),
        state_rows=state_rows,
        tool_calls=tool_calls(recording),
        verdicts=verdicts,
        constraints=trajectory.get("constraints") or [],
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


def failure_groups(results: VersionResults) -> list[FailureGroup]:
    """Rules in the gate's blocking order (FAIL first), then criteria no rule gates."""
    failing: dict[str, list[dict[str, Any]]] = {}
    for verdict in results.verdicts_with(FAILING, PANEL_VERDICT_FIELDS):
        failing.setdefault(verdict["criterion"], []).append(verdict)
    order = {decision: index for index, decision in enumerate((*BLOCKING_ORDER, PASS))}
    rules = sorted(results.gate, key=lambda rule: order.get(rule["decision"], len(order)))
    groups = [FailureGroup(rule["metric"], rule, failing.get(rule["metric"], [])) for rule in rules]
    gated = {rule["metric"] for rule in results.gate}
    groups += [FailureGroup(criterion, None, found) for criterion, found in failing.items() if criterion not in gated]
    return [group for group in groups if group.verdicts or (group.rule and group.rule["decision"] != PASS)]


@dataclass
class Provenance:
    """Which Dagster run produced a step's rows, and when its table was written."""

    step: str
    run_id: str | None
    rows: int
    written: str


def provenance(project_root: Path, results: VersionResults, replays: list[dict[str, Any]]) -> list[Provenance]:
    steps = [
        ("recorded", "recorded_runs", results.run_column("recorded_by_run")),
        ("replayed", "fault_replays", [row.get("replayed_by_run") for row in replays]),
        ("judged", "verdicts", results.verdict_column("judged_by_run")),
        ("gate decided", "gate", [row.get("judged_by_run") for row in results.gate][:1]),
    ]
    found = []
    for step, table, run_ids in steps:
        counts: dict[str | None, int] = {}
        for run_id in filter(None, run_ids):  # a replay never made (the tool was not called) has no run
            counts[run_id] = counts.get(run_id, 0) + 1
        written = _written(project_root, table, results.version, set(counts))
        found += [Provenance(step, run_id, count, written) for run_id, count in counts.items()]
    return found


def _written(project_root: Path, table: str, version: str, run_ids: set[str]) -> str:
    """When the stored table was written; the gate being decided right now (by the run that
    writes this report) is not stored yet, so an older file must not lend it its time."""
    path = table_path(project_root, table, version)
    if table == "gate":
        stored = read_table(project_root, table, version)
        if stored is None or set(stored["judged_by_run"]) != run_ids:
            return "now (this run)"
    if not path.exists():
        return "-"
    return datetime.fromtimestamp(path.stat().st_mtime, timezone.utc).strftime(TIME_FORMAT)


def flagged_buckets(slices: pd.DataFrame | None) -> list[str]:
    """The slice buckets Benjamini-Yekutieli marks as different, one line each."""
    if slices is None or slices.empty:
        return []
    lines = []
    for row in rows_from_frame(slices):
        if row["differs"]:
            direction = "higher" if (row["estimate"] or 0.0) > (row["whole_estimate"] or 0.0) else "lower"
            lines.append(
                f"{row['slice']} = {row['bucket']} on {row['criterion']}: {format_rate(row['estimate'])} "
                f"[{format_rate(row['lower'])}, {format_rate(row['upper'])}] vs {format_rate(row['whole_estimate'])} "
                f"overall ({direction}, {row['support']} cases)"
            )
    return lines


def derived_validity(results: VersionResults) -> dict[str, TransformValidity]:
    cases = results.case_table
    if "source_id" not in cases.columns or not set(REPORT_VALIDITY_FIELDS) <= set(cases.columns):
        return {}
    copies = cases.loc[cases["source_id"].notna().to_numpy(dtype=bool), list(REPORT_VALIDITY_FIELDS)]
    return transform_validity(copies if len(copies) else None)


# What the report reads of the copies for their transforms' validity.
REPORT_VALIDITY_FIELDS = ("transform", "transform_digest", "label_status", "stale_labels", "minimum_validity")


# -- HTML: pieces ----------------------------------------------------------------------------

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1250px;color:#222;padding:0 1em}
h1{margin-bottom:.2em}h2{margin-top:1.8em;border-bottom:1px solid #ddd;padding-bottom:.2em}
table{border-collapse:collapse;margin:.5em 0 1.2em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
td{max-width:40em;overflow-wrap:break-word}.nowrap{white-space:nowrap}
th{background:#f4f4f4}.PASS,.ALLOW{color:#176f2c;font-weight:600}.FAIL,.BLOCK{color:#b00020;font-weight:600}
.MISSING,.INSUFFICIENT_EVIDENCE{color:#a15c00;font-weight:600}.MANUAL_REVIEW{color:#7b1fa2;font-weight:600}
.EXCLUDED{color:#777}section.case{border-top:2px solid #ddd;padding-top:.5em}pre{background:#f8f8f8;padding:.5em;white-space:pre-wrap;margin:.3em 0}
#search{font-size:16px;padding:4px;width:30em}.decision{font-size:28px}.muted{color:#666}
.side-by-side{display:grid;grid-template-columns:1fr 1fr;gap:1em}.side-by-side table{width:100%}
.fault-replay,.pair{border:1px solid #e3c4c4;background:#fffafa;padding:.3em 1em;margin:.8em 0;border-radius:4px}
.fault-replay.outcome-PASS,.pair.outcome-PASS{border-color:#cde3cd;background:#fbfffb}
tr.injected td{background:#fff0c2}tr.first-diff td{background:#ffe0e0}.broken{color:#b00020;font-weight:600}
code{background:#f2f2f2;padding:0 3px}svg text{font:12px system-ui,sans-serif}
details.group{margin:.4em 0}details.group summary{cursor:pointer;font-weight:600}
"""

SEARCH_SCRIPT = """
document.getElementById('search').addEventListener('input', function (event) {
  var needle = event.target.value.toLowerCase();
  document.querySelectorAll('section.case').forEach(function (section) {
    section.style.display = section.textContent.toLowerCase().indexOf(needle) >= 0 ? '' : 'none';
  });
});
"""

LIMITS = (
    ("Why the agent failed", "it sees what the agent did and the state it left, not the reasoning behind it."),
    ("A live system or production", "every case ran against a sandbox the pipeline resets; a tool that behaves "
     "here may not behave there, and real traffic is not these cases."),
    ("Faults and request changes nobody declared", "only the fault plans in oloproof.yaml were injected and "
     "only its transforms applied; everything else is untested."),
    ("Rates beyond these cases", "each interval speaks for cases drawn like these; slices are exploratory and "
     "never gated."),
)

COLOURS = {PASS: "#176f2c", FAIL: "#b00020", MISSING: "#a15c00", "INSUFFICIENT_EVIDENCE": "#a15c00",
           "MANUAL_REVIEW": "#7b1fa2", None: "#555"}


def _text(value: Any) -> str:
    return _escaped("" if value is None else str(value))


@lru_cache(maxsize=65536)
def _escaped(text: str) -> str:
    """Run ids, criteria and outcomes repeat on every row of a large report: escaped once each."""
    return html.escape(text)


def _json(value: Any) -> str:
    return html.escape(json_text(value))


def _interval(lower: Any, upper: Any) -> str:
    return f'<span class="nowrap">[{format_rate(lower)}, {format_rate(upper)}]</span>'


def _table(headers: Iterable[str], rows: list[list[str]], row_classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{_text(header)}</th>" for header in headers)
    classes = row_classes or [""] * len(rows)
    body = "".join(
        (f'<tr class="{css}">' if css else "<tr>") + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>"
        for row, css in zip(rows, classes)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _outcome(value: str | None) -> str:
    return f'<span class="{_text(value)}">{_text(value)}</span>'


def _case_link(case_id: str) -> str:
    return f'<a href="#case-{_text(case_id)}">{_text(case_id)}</a>'


class RunLinks:
    """Short run ids, linked to the run's page when a Dagster webserver URL is configured."""

    def __init__(self, base_url: str | None):
        self.base_url = base_url.rstrip("/") if base_url else None

    def __call__(self, run_id: str | None) -> str:
        if not run_id:
            return "-"
        short = f'<code title="{_text(run_id)}">{_text(short_run_id(run_id))}</code>'
        if self.base_url is None:
            return short
        return f'<a href="{_text(self.base_url)}/runs/{_text(run_id)}">{short}</a>'


# -- HTML: charts (inline SVG) ---------------------------------------------------------------


@dataclass
class ChartRow:
    label: str
    estimate: float | None
    lower: float | None
    upper: float | None
    bars: list[tuple[float, str]]  # (value, "min" | "max")
    tone: str | None
    note: str = ""
    reference: float | None = None  # e.g. the rate over all cases, for a slice bucket


LABEL_WIDTH, PLOT_WIDTH, NOTE_WIDTH, ROW_HEIGHT, TOP = 340, 420, 330, 24, 26


def _x(value: float) -> float:
    return LABEL_WIDTH + max(0.0, min(1.0, value)) * PLOT_WIDTH


def interval_chart(rows: list[ChartRow], chart_id: str, title: str) -> str:
    """Each row's interval on a 0-1 axis, its estimate as a dot, its bars as ticks with the
    side that clears them shaded, and a note on the right."""
    height = TOP + ROW_HEIGHT * len(rows) + 8
    width = LABEL_WIDTH + PLOT_WIDTH + NOTE_WIDTH
    parts = [
        f'<svg id="{_text(chart_id)}" class="interval-chart" role="img" aria-label="{_text(title)}" '
        f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} {height}">',
        f"<title>{_text(title)}</title>",
    ]
    for tick in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = _x(tick)
        parts.append(f'<line x1="{x:.1f}" y1="{TOP - 6}" x2="{x:.1f}" y2="{height - 4}" stroke="#e4e4e4"/>')
        parts.append(f'<text x="{x:.1f}" y="{TOP - 10}" text-anchor="middle" fill="#777">{tick:g}</text>')
    for index, row in enumerate(rows):
        parts.append(_chart_row(row, TOP + index * ROW_HEIGHT))
    parts.append("</svg>")
    return "".join(parts)


def _chart_row(row: ChartRow, top: float) -> str:
    middle = top + ROW_HEIGHT / 2
    colour = COLOURS.get(row.tone, COLOURS[None])
    parts = [f'<g class="chart-row" data-label="{_text(row.label)}" data-tone="{_text(row.tone)}">']
    for value, kind in row.bars:  # the side of the bar that clears it, lightly shaded
        start, end = (_x(value), _x(1.0)) if kind == "min" else (_x(0.0), _x(value))
        parts.append(
            f'<rect x="{start:.1f}" y="{top + 3:.1f}" width="{end - start:.1f}" height="{ROW_HEIGHT - 6}" fill="#eaf5ea"/>'
        )
    parts.append(f'<text x="{LABEL_WIDTH - 8}" y="{middle + 4:.1f}" text-anchor="end">{_text(row.label)}</text>')
    if row.lower is not None and row.upper is not None:
        parts.append(
            f'<line class="interval" x1="{_x(row.lower):.1f}" y1="{middle:.1f}" x2="{_x(row.upper):.1f}" y2="{middle:.1f}" '
            f'stroke="{colour}" stroke-width="5" stroke-linecap="round"><title>[{format_rate(row.lower)}, '
            f"{format_rate(row.upper)}]</title></line>"
        )
    if row.reference is not None:
        x = _x(row.reference)
        parts.append(
            f'<path d="M{x:.1f},{middle - 6:.1f} l4,6 l-4,6 l-4,-6 z" fill="#999"><title>all cases '
            f"{format_rate(row.reference)}</title></path>"
        )
    if row.estimate is not None:
        parts.append(
            f'<circle cx="{_x(row.estimate):.1f}" cy="{middle:.1f}" r="4.5" fill="#fff" stroke="{colour}" stroke-width="2">'
            f"<title>rate {format_rate(row.estimate)}</title></circle>"
        )
    for value, kind in row.bars:
        x = _x(value)
        parts.append(
            f'<line class="bar" x1="{x:.1f}" y1="{top + 1:.1f}" x2="{x:.1f}" y2="{top + ROW_HEIGHT - 1:.1f}" '
            f'stroke="#222" stroke-width="2"><title>{kind} {value:g}</title></line>'
        )
    parts.append(
        f'<text x="{LABEL_WIDTH + PLOT_WIDTH + 10}" y="{middle + 4:.1f}" fill="{colour}">{_text(row.note)}</text></g>'
    )
    return "".join(parts)


def bar_margin(rule: dict[str, Any]) -> str:
    """By how much the interval clears (or misses) each bar: `lower clears min 0.85 by 0.008`."""
    notes = []
    lower, upper = rule["lower"], rule["upper"]
    for value, kind in rule_bars(rule):
        if lower is None or upper is None:
            continue
        inside, outside = (lower - value, upper - value) if kind == "min" else (value - upper, value - lower)
        if inside >= 0:
            notes.append(f"clears {kind} {value:g} by {inside:.3f}")
        elif outside < 0:
            notes.append(f"misses {kind} {value:g} by {-outside:.3f}")
        else:
            notes.append(f"straddles {kind} {value:g} ({-inside:.3f} short)")
    return "; ".join(notes)


def rule_bars(rule: dict[str, Any]) -> list[tuple[float, str]]:
    bars = []
    if rule.get("bar_min") is not None:
        bars.append((float(rule["bar_min"]), "min"))
    if rule.get("bar_max") is not None:
        bars.append((float(rule["bar_max"]), "max"))
    return bars


def gate_chart(results: VersionResults) -> str:
    rows = [
        ChartRow(
            label=f"{rule['rule_id']} ({rule['decision']})", estimate=rule["estimate"], lower=rule["lower"],
            upper=rule["upper"], bars=rule_bars(rule), tone=rule["decision"],
            note=bar_margin(rule) if rule["decision"] in (PASS, FAIL, "INSUFFICIENT_EVIDENCE") else rule["decision"],
        )
        for rule in results.gate
    ]
    return interval_chart(rows, "gate-chart", "Each rule's interval against its bar") if rows else ""


def slices_chart(slice_rows: list[dict[str, Any]], chart_id: str, title: str) -> str:
    rows = [
        ChartRow(
            label=f"{row['criterion']} · {row['bucket']}", estimate=row["estimate"], lower=row["lower"],
            upper=row["upper"], bars=[], tone=FAIL if row["differs"] else None, reference=row["whole_estimate"],
            note=(
                f"{row['support']} cases" + (", under min_slice_support" if row["lower"] is None else "")
                + (", differs" if row["differs"] else "")
            ),
        )
        for row in slice_rows
    ]
    return interval_chart(rows, chart_id, title)


# -- HTML: sections ------------------------------------------------------------------------------


def _header(results: VersionResults, project_name: str, links: RunLinks, sources: list[Provenance]) -> str:
    decision = results.gate_decision
    reasons = results.gate[0]["gate_reasons"] if results.gate else ["release.yaml has no rules, so nothing is gated"]
    rows = [
        [_text(item.step), links(item.run_id), _text(item.rows), _text(item.written)] for item in sources
    ]
    hint = "" if links.base_url else (
        f'<p class="muted">Set {DAGSTER_URL_ENV} (e.g. http://127.0.0.1:3000) to link run ids to their pages.</p>'
    )
    return (
        f"<h1>{_text(project_name)}: version {_text(results.version)}</h1>"
        f'<p class="decision">Gate: {_outcome(decision or "no rules")}</p>'
        + ("<ul>" + "".join(f"<li>{_text(reason)}</li>" for reason in reasons) + "</ul>" if reasons else "")
        + '<h2 id="provenance">Where these results come from</h2>'
        + _table(["step", "Dagster run", "rows", "table written"], rows)
        + f'<p class="muted">This report was written {datetime.now(timezone.utc).strftime(TIME_FORMAT)}.</p>'
        + hint
    )


def _failing_section(results: VersionResults) -> str:
    groups = failure_groups(results)
    if not groups:
        return '<h2 id="failing">What failed</h2><p>No case failed or went missing on any criterion.</p>'
    parts = ['<h2 id="failing">What failed, by rule and criterion</h2>']
    for group in groups:
        if group.rule is not None:
            rule = group.rule
            title = (
                f"{_text(rule['rule_id'])} ({_text(group.criterion)}): {_outcome(rule['decision'])}"
                f' <span class="muted">{_text("; ".join(rule["reasons"] or []))}</span>'
            )
        else:
            title = f"{_text(group.criterion)} <span class=\"muted\">(no rule gates this criterion)</span>"
        alike: dict[tuple[str, str, str], list[str]] = {}
        for verdict in group.verdicts:  # cases that failed the same way share a row
            key = (verdict["outcome"], verdict["reason"], verdict_summary(verdict))
            alike.setdefault(key, []).append(verdict["case_id"])
        rows = [
            [" ".join(_case_link(case_id) for case_id in case_ids), _outcome(outcome), _text(reason), _text(summary)]
            for (outcome, reason, summary), case_ids in alike.items()
        ]
        count = f" · {len(group.verdicts)} cases" if group.verdicts else ""
        body = _table(["cases", "outcome", "reason", "what it found"], rows) if rows else "<p>No failing case: the "\
            "interval alone decides (see the chart below).</p>"
        parts.append(f'<details class="group" open><summary>{title}{count}</summary>{body}</details>')
    return "".join(parts)


def _gate_section(results: VersionResults) -> str:
    if not results.gate:
        return "<h2 id=\"gate\">Rules</h2><p>release.yaml has no rules, so nothing is gated.</p>"
    rows = []
    for rule in results.gate:
        cells = rule_cells(rule)
        shown = {column: _text(cell) for column, cell in cells.items()}
        shown["rule / metric"] = f'{_text(rule["rule_id"])}<br><span class="muted">{_text(rule["metric"])}</span>'
        shown["decision"] = _outcome(rule["decision"])
        shown["rate"], shown["interval"] = (f'<span class="nowrap">{_text(cells[name])}</span>' for name in ("rate", "interval"))
        rows.append(list(shown.values()))
    legend = (
        '<p class="muted">Line: the interval; dot: the rate; black tick: the bar, with the side that clears it '
        "shaded green. A rule passes when its whole interval clears the bar.</p>"
    )
    return '<h2 id="gate">Rules</h2>' + gate_chart(results) + legend + _table(GATE_COLUMNS, rows)


def _validity_section(validity: dict[str, TransformValidity]) -> str:
    if not validity:
        return ""
    rows = [
        [_text(item.transform), _text(item.pairs), _text(item.kept), _text(item.rejected), _text(item.unlabelled),
         _text(item.stale_labels), format_rate(item.lower_bound), f"{item.minimum_validity:g}",
         '<span class="PASS">yes</span>' if item.checked else '<span class="FAIL">no</span>']
        for item in validity.values()
    ]
    headers = ["transform", "pairs", "kept", "rejected", "unlabelled", "stale labels", "95% lower bound",
               "minimum_validity", "checked"]
    note = (
        "<p>People's labels say whether each copy keeps the request's meaning. Until a transform is checked "
        "(the lower bound reaches minimum_validity), every rule over it is INSUFFICIENT_EVIDENCE.</p>"
    )
    return '<h2 id="validity">Transform validity</h2>' + note + _table(headers, rows)


def _slices_section(results: VersionResults) -> str:
    if results.slices is None or results.slices.empty:
        return ""
    shown = [row for row in rows_from_frame(results.slices) if row["support"]]
    charts = "".join(
        f"<h3>{_text(name)}</h3>"
        + slices_chart([row for row in shown if row["slice"] == name], f"slice-chart-{index}", f"Slice {name}")
        for index, name in enumerate(dict.fromkeys(row["slice"] for row in shown))
    )
    rows = [
        [
            _text(row["slice"]), _text(row["bucket"]), _text(row["criterion"]), format_rate(row["estimate"]),
            "-" if row["lower"] is None else _interval(row["lower"], row["upper"]),
            f"{row['support']} ({row['passed']}/{row['failed']}/{row['missing']})",
            format_rate(row["whole_estimate"]), "differs" if row["differs"] else "",
        ]
        for row in shown
    ]
    headers = ["slice", "bucket", "criterion", "rate", "interval", "support (P/F/M)", "whole", "BY mark"]
    note = (
        "<p>Exploratory, never gated. Grey diamond: the rate over all cases; red: a bucket Benjamini-Yekutieli "
        "(FDR 0.1) marks as different from the rest. Buckets under min_slice_support have no interval; empty "
        "buckets are left out.</p>"
    )
    table = f"<details><summary>The same as a table</summary>{_table(headers, rows)}</details>"
    return '<h2 id="slices">Slices</h2>' + note + charts + table


def _trials_section(trials: list[CriterionTrials] | None) -> str:
    """Per criterion over repeated trials: pass^k and pass@1 with intervals, the flaky cases."""
    if not trials:
        return ""
    rows = []
    for summary in trials:
        flaky = ", ".join(f"{_case_link(case.case_id)} ({case.flips} flips, {case.passed}/{case.judged})" for case in summary.flaky)
        more = summary.flaky_cases - len(summary.flaky)
        rows.append([
            _text(summary.criterion), _text(summary.trials),
            *(f"{format_rate(rate.estimate)} {_interval(rate.lower, rate.upper)}" for rate in (summary.pass_all, summary.pass_at_one)),
            _text(summary.flaky_cases), flaky + (f" and {more} more" if more > 0 else ""),
        ])
    note = (
        "<p>Each case was recorded several times. pass^k: a case passes when every trial passes (exact interval); "
        "pass@1: the mean over trials (interval with each case's trials as one cluster). A flaky case's verdict "
        "differs across trials; flips count the changes between consecutive trials.</p>"
    )
    headers = ["criterion", "trials", "pass^k", "pass@1", "flaky cases", "flaky (flips, passed/judged)"]
    return '<h2 id="trials">Repeated trials</h2>' + note + _table(headers, rows)


def stored_trial_summaries(project: Project, version: str, verdicts: pd.DataFrame) -> list[CriterionTrials] | None:
    """The trial summaries of a stored version, as the gate shows them (None with one trial)."""
    if project.config.execution.trials == 1:
        return None
    later = read_table(project.root, "trial_verdicts", version)
    return project_trial_summaries(project, verdicts, later)


def stored_trials(project_root: Path, version: str) -> list[CriterionTrials] | None:
    """`stored_trial_summaries` for the CLI's gate: nothing is loaded without a stored trial."""
    if not table_path(project_root, "trial_verdicts", version).is_file():
        return None
    verdicts = read_table(project_root, "verdicts", version)
    return None if verdicts is None else stored_trial_summaries(load_project(project_root), version, verdicts)


def _limits_section() -> str:
    items = "".join(f"<li><b>{_text(what)}</b>: {_text(why)}</li>" for what, why in LIMITS)
    return f'<h2 id="limits">What these results cannot tell you</h2><ul>{items}</ul>'


def _call_cells(call: dict[str, Any] | None) -> list[str]:
    if call is None:
        return ["-", "-", "-"]
    return [_text(call.get("tool")), _json(call.get("arguments")), _json(call.get("result"))]


def _fault_section(view: FaultReplayView) -> str:
    number = view.faulted_call_number
    rows, classes = [], []
    for call_number, control, faulted in view.rows():
        rows.append([_text(call_number), *_call_cells(control), *_call_cells(faulted)])
        classes.append("injected" if call_number == number else "")
    headers = ["#", "control: tool", "arguments", "result", "faulted: tool", "arguments", "result"]
    broken = "".join(
        f'<p class="broken">Broken constraint {_text(item.get("name"))}: {_text(item.get("detail"))}</p>'
        for item in view.broken_constraints
    )
    where = f' from checkpoint "{_text(view.checkpoint_label)}"' if view.checkpoint_label else ""
    before = {0: "", 1: " (call 1 as recorded)"}.get(
        view.calls_before_checkpoint, f" (calls 1-{view.calls_before_checkpoint} as recorded)"
    )
    injected = (
        f"<p>Replayed{where}{before}. Call {_text(number)} "
        f"(<code>{_text(view.tool)}</code>) got the injected result <code>{_json(view.injected_result)}</code> "
        "instead of running; the control replay ran it unchanged.</p>"
        if number is not None else ""
    )
    table = _table(headers, rows, classes) if rows else ""
    ending = (
        f"<p>Control ended <b>{_text(view.control_status)}</b>; faulted replay ended "
        f"<b>{_text(view.faulted_status)}</b> answering <code>{_json(view.faulted_output)}</code>.</p>"
        if rows else f"<pre>{_json(view.details)}</pre>"
    )
    return (
        f'<div class="fault-replay outcome-{_text(view.outcome)}"><h4>Fault replay {_text(view.criterion)}: '
        f"{_outcome(view.outcome)} ({_text(view.reason)})</h4>{injected}{table}{ending}{broken}</div>"
    )


def _pair_section(view: PairView) -> str:
    rows, classes = [], []
    for number, source, copy in view.rows():
        marker = " ← first difference" if view.first_difference == number - 1 else ""
        rows.append([_text(number) + _text(marker), *_call_cells(source), *_call_cells(copy)])
        classes.append("first-diff" if marker else "")
    headers = ["#", f"source {view.source_id}: tool", "arguments", "result", f"copy {view.copy_id}: tool",
               "arguments", "result"]
    details = view.details if isinstance(view.details, dict) else {}
    differences = details.get("differences") or []
    state = _table(
        ["state path", "source", "copy"],
        [[_text(item["path"]), _json(item.get("source")), _json(item.get("copy"))] for item in differences],
    ) if differences else ""
    same = "" if view.first_difference is not None else "<p>Both sides made the same tool calls.</p>"
    return (
        f'<div class="pair outcome-{_text(view.outcome)}"><h4>Pair {_text(view.criterion)}: {_outcome(view.outcome)} '
        f"({_text(view.reason)}) against {_case_link(view.source_id)}</h4>"
        + (_table(headers, rows, classes) if rows else "") + same + state + "</div>"
    )


def _case_section(panel: CasePanel, links: RunLinks) -> str:
    verdict_rows = [
        [_text(verdict["criterion"]), _outcome(verdict["outcome"]), _text(verdict["reason"]),
         _text(verdict_summary(verdict)) if verdict["outcome"] in FAILING else "",
         links(verdict.get("recorded_by_run")), links(verdict.get("replayed_by_run")), links(verdict.get("judged_by_run"))]
        for verdict in panel.verdicts
    ]
    state_rows = [
        [_text(row["criterion"]), _text(row["path"]), _json(row.get("expected")), _json(row.get("actual")),
         _outcome(PASS if row.get("matched") else FAIL)]
        for row in panel.state_rows
    ]
    call_rows = [
        [str(index + 1), _text(call["tool"]), _json(call["arguments"]), _json(call["result"])]
        for index, call in enumerate(panel.tool_calls)
    ]
    anchor = _text(panel.case_id)
    parts = [
        f'<section class="case" id="case-{anchor}"><h3><a href="#case-{anchor}">{anchor}</a></h3>',
        f"<p>Input:</p><pre>{_json(panel.input)}</pre><p>Answer ({_text(panel.status)}):</p><pre>{_json(panel.answer)}</pre>",
    ]
    if panel.error:
        parts.append(f"<p>Error: {_text(panel.error)}</p>")
    parts.append(_table(["criterion", "outcome", "reason", "what it found", "recorded by", "replayed by", "judged by"],
                        verdict_rows))
    if state_rows:
        parts.append(_table(["criterion", "path", "expected", "actual", "matched"], state_rows))
    if call_rows:
        parts.append("<p>Tool calls as recorded:</p>" + _table(["#", "tool", "arguments", "result"], call_rows))
    if panel.constraints:
        kept = [[_text(item.get("name")), "kept" if item.get("passed") else '<span class="broken">broken</span>',
                 _text(item.get("detail"))] for item in panel.constraints]
        parts.append("<p>Constraints the system recorded (in the recording, before any fault):</p>"
                     + _table(["constraint", "", "detail"], kept))
    if panel.events:
        event_rows = [[str(event["after_step"]), _json(event["event"])] for event in panel.events]
        parts.append(_table(["after call #", "scripted event"], event_rows))
    parts += [_fault_section(view) for view in panel.fault_replays]
    parts += [_pair_section(view) for view in panel.pairs]
    parts.append("</section>")
    return "".join(parts)


# The report's inputs digest sits in its <head>: a rerun whose inputs are the same keeps the file.
INPUTS_META = "oloproof-inputs"


def report_parts(
    results: VersionResults,
    project_name: str,
    *,
    replays: list[dict[str, Any]] | None = None,
    project_root: Path | None = None,
    dagster_url: str | None = None,
    inputs_digest: str | None = None,
    trials: list[CriterionTrials] | None = None,
) -> Iterator[str]:
    """The report, a piece at a time: one case's panel is built (and its rows decoded) only
    while its section is written, so a large suite is never held as panels or as one string."""
    replays = replays or []
    by_case = replays_by_case(replays)
    links = RunLinks(dagster_url)
    sources = provenance(project_root, results, replays) if project_root is not None else []
    meta = f'<meta name="{INPUTS_META}" content="{_text(inputs_digest)}">' if inputs_digest else ""
    yield (
        f"<!doctype html><html><head><meta charset='utf-8'>{meta}<title>{_text(project_name)} {_text(results.version)}</title>"
        f"<style>{STYLE}</style></head><body>"
    )
    yield _header(results, project_name, links, sources)
    yield _failing_section(results)
    yield _gate_section(results)
    yield _trials_section(trials)
    yield _validity_section(derived_validity(results))
    yield _slices_section(results)
    yield _limits_section()
    yield "<h2 id=\"cases\">Cases</h2>"
    yield '<p><input id="search" type="search" placeholder="Filter cases by any text"></p>'
    for case_id in results.case_ids:
        panel = case_panel(results, case_id, by_case)
        if panel is not None:
            yield _case_section(panel, links)
    yield f"<script>{SEARCH_SCRIPT}</script></body></html>"


def html_report(
    results: VersionResults,
    project_name: str,
    *,
    replays: list[dict[str, Any]] | None = None,
    project_root: Path | None = None,
    dagster_url: str | None = None,
) -> str:
    return "".join(report_parts(results, project_name, replays=replays, project_root=project_root, dagster_url=dagster_url))


def report_path(project_root: Path, version: str) -> Path:
    """Where a version's report is written by default (by the gate asset and `oloproof report`)."""
    return reports_dir(project_root) / f"report-{version}.html"


def write_html_report(
    project_root: Path,
    results: VersionResults,
    project_name: str,
    path: Path | None = None,
    *,
    replays: list[dict[str, Any]] | None = None,
    inputs_digest: str | None = None,
    trials: list[CriterionTrials] | None = None,
) -> Path:
    """One self-contained HTML file: no network is needed to view it. `replays` default to
    the version's stored fault replays. Written a piece at a time."""
    path = path or report_path(project_root, results.version)
    if replays is None:
        replays = load_replays(project_root, results.version)
    parts = report_parts(
        results, project_name, replays=replays, project_root=project_root,
        dagster_url=os.environ.get(DAGSTER_URL_ENV), inputs_digest=inputs_digest, trials=trials,
    )
    write_text_file(path, parts)
    return path


# -- reuse ---------------------------------------------------------------------------------

# What a report shows of each table, by the columns that decide it: a verdict's key (and the
# run that judged it) stands for its details, a recording's key for its output and trajectory.
REPORTED_VERDICT_COLUMNS = [
    "case_id", "criterion", "outcome", "reason", "inputs_key", "recorded_by_run", "replayed_by_run", "judged_by_run",
]
REPORTED_CASE_COLUMNS = ["case_id", "case_digest", *REPORT_VALIDITY_FIELDS]
REPORTED_RUN_COLUMNS = ["case_id", "recording_key", "recorded_by_run", "status"]
REPORTED_REPLAY_COLUMNS = ["case_id", "criterion", "plan_digest", "recorded_by_run", "replayed_by_run", "judging_digest"]
REPORT_FORMAT = 2  # bump when the HTML changes, so stored reports are written again


def report_inputs_digest(
    project_name: str,
    version: str,
    *,
    cases: pd.DataFrame,
    runs: pd.DataFrame | None,
    replays: pd.DataFrame | None,
    verdicts: pd.DataFrame,
    gate: pd.DataFrame | None,
    slices: pd.DataFrame | None,
    trials: list[CriterionTrials] | None = None,
) -> str:
    """What the report is made from; while it holds, the report already written is kept."""
    parts = {
        "project": project_name,
        "version": version,
        "format": REPORT_FORMAT,
        "dagster_url": os.environ.get(DAGSTER_URL_ENV),
        "cases": frame_digest("report.cases", cases[REPORTED_CASE_COLUMNS]),
        "runs": frame_digest("report.runs", None if runs is None else runs[REPORTED_RUN_COLUMNS]),
        "replays": frame_digest("report.replays", None if replays is None else replays[REPORTED_REPLAY_COLUMNS]),
        "gate": frame_digest("report.gate", gate),
        "slices": frame_digest("report.slices", slices),
    }
    if trials is not None:  # repeated trials only: with one, the digest is as it always was
        parts["trials"] = [summary.model_dump(mode="json") for summary in trials]
    return frame_digest("report/v1", verdicts[REPORTED_VERDICT_COLUMNS], parts)


def report_is_current(path: Path, inputs_digest: str) -> bool:
    """Whether the report at `path` was written from these inputs (its head says so)."""
    if not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as handle:
        head = handle.read(4096)
    return f'<meta name="{INPUTS_META}" content="{_text(inputs_digest)}">' in head
