"""Reports from stored results: the case panel and one offline HTML file per version."""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..model.outcomes import FAIL, MISSING, PASS
from .results import VersionResults, compared_paths, scripted_events, tool_calls
from ..store.layout import reports_dir, write_text_file
from ..store.tables import rows_from_frame


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
    constraints: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failing(self) -> bool:
        return any(verdict["outcome"] in (FAIL, MISSING) for verdict in self.verdicts)


def case_panel(results: VersionResults, case_id: str) -> CasePanel | None:
    case = results.case(case_id)
    if case is None:
        return None
    recording = results.recording(case_id) or {}
    verdicts = results.verdicts_of(case_id)
    state_rows = [
        {**row, "criterion": verdict["criterion"]} for verdict in verdicts for row in compared_paths(verdict)
    ]
    trajectory = recording.get("trajectory") or {}
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
    )


# -- HTML ----------------------------------------------------------------------------------

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}
td{max-width:40em;overflow-wrap:break-word}.nowrap{white-space:nowrap}
th{background:#f4f4f4}.PASS,.ALLOW{color:#176f2c;font-weight:600}.FAIL,.BLOCK{color:#b00020;font-weight:600}
.MISSING,.INSUFFICIENT_EVIDENCE{color:#a15c00;font-weight:600}.MANUAL_REVIEW{color:#7b1fa2;font-weight:600}
.EXCLUDED{color:#777}section.case{border-top:2px solid #ddd;padding-top:.5em}pre{background:#f8f8f8;padding:.5em;white-space:pre-wrap}
#search{font-size:16px;padding:4px;width:30em}
"""

SEARCH_SCRIPT = """
document.getElementById('search').addEventListener('input', function (event) {
  var needle = event.target.value.toLowerCase();
  document.querySelectorAll('section.case').forEach(function (section) {
    section.style.display = section.textContent.toLowerCase().indexOf(needle) >= 0 ? '' : 'none';
  });
});
"""


def _text(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _json(value: Any) -> str:
    return html.escape(json.dumps(value, ensure_ascii=False, sort_keys=True))


def _number(value: Any) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"  # None or NaN


def _interval(lower: Any, upper: Any) -> str:
    return f'<span class="nowrap">[{_number(lower)}, {_number(upper)}]</span>'


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_text(header)}</th>" for header in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _outcome(value: str | None) -> str:
    return f'<span class="{_text(value)}">{_text(value)}</span>'


def _gate_section(results: VersionResults) -> str:
    rows = [
        [
            _text(rule["rule_id"]), _text(rule["metric"]), _outcome(rule["decision"]), _number(rule["estimate"]),
            _interval(rule["lower"], rule["upper"]), _text(rule["method"]),
            f"{rule['passed']}/{(rule['passed'] or 0) + (rule['failed'] or 0)}", _text(rule["missing"]),
            _text(rule["excluded"]), _text("; ".join(rule["reasons"] or [])),
        ]
        for rule in results.gate
    ]
    headers = ["rule", "metric", "decision", "rate", "interval", "method", "passed/judged", "missing", "excluded", "reasons"]
    return f"<h2>Gate: {_outcome(results.gate_decision)}</h2>" + _table(headers, rows)


def _slices_section(results: VersionResults) -> str:
    if results.slices is None or results.slices.empty:
        return ""
    rows = [
        [
            _text(row["slice"]), _text(row["bucket"]), _text(row["criterion"]), _number(row["estimate"]),
            "-" if row["lower"] is None else _interval(row["lower"], row["upper"]),
            f"{row['support']} ({row['passed']}/{row['failed']}/{row['missing']})",
            _number(row["whole_estimate"]), "differs" if row["differs"] else "",
        ]
        for row in rows_from_frame(results.slices)
        if row["support"]
    ]
    headers = ["slice", "bucket", "criterion", "rate", "interval", "support (P/F/M)", "whole", "BY mark"]
    note = (
        "<p>Exploratory, never gated. Buckets under min_slice_support have no interval; "
        "'differs' marks a bucket that differs from the rest under Benjamini-Yekutieli (FDR 0.1). "
        "Empty buckets are left out.</p>"
    )
    return "<h2>Slices</h2>" + note + _table(headers, rows)


def _case_section(panel: CasePanel) -> str:
    verdict_rows = [
        [_text(verdict["criterion"]), _outcome(verdict["outcome"]), _text(verdict["reason"]),
         _text(verdict.get("recorded_by_run")), _text(verdict.get("replayed_by_run")), _text(verdict.get("judged_by_run"))]
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
    parts = [
        f'<section class="case" id="case-{_text(panel.case_id)}"><h3><a href="#case-{_text(panel.case_id)}">{_text(panel.case_id)}</a></h3>',
        f"<p>Input:</p><pre>{_json(panel.input)}</pre><p>Answer ({_text(panel.status)}):</p><pre>{_json(panel.answer)}</pre>",
    ]
    if panel.error:
        parts.append(f"<p>Error: {_text(panel.error)}</p>")
    parts.append(_table(["criterion", "outcome", "reason", "recorded by", "replayed by", "judged by"], verdict_rows))
    if state_rows:
        parts.append(_table(["criterion", "path", "expected", "actual", "matched"], state_rows))
    if call_rows:
        parts.append(_table(["#", "tool", "arguments", "result"], call_rows))
    if panel.events:
        event_rows = [[str(event["after_step"]), _json(event["event"])] for event in panel.events]
        parts.append(_table(["after call #", "scripted event"], event_rows))
    parts.append("</section>")
    return "".join(parts)


def html_report(results: VersionResults, project_name: str) -> str:
    panels = [case_panel(results, case["case_id"]) for case in results.cases]
    failing = [panel for panel in panels if panel is not None and panel.failing]
    index = " ".join(f'<a href="#case-{_text(panel.case_id)}">{_text(panel.case_id)}</a>' for panel in failing)
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_text(project_name)} {_text(results.version)}</title>"
        f"<style>{STYLE}</style></head><body>"
        f"<h1>{_text(project_name)}: version {_text(results.version)}</h1>"
        + _gate_section(results)
        + _slices_section(results)
        + f"<h2>Cases</h2><p>With a FAIL or MISSING verdict: {index or 'none'}</p>"
        + '<p><input id="search" type="search" placeholder="Filter cases by any text"></p>'
        + "".join(_case_section(panel) for panel in panels if panel is not None)
        + f"<script>{SEARCH_SCRIPT}</script></body></html>"
    )


def write_html_report(project_root: Path, results: VersionResults, project_name: str, path: Path | None = None) -> Path:
    """One self-contained HTML file: no network is needed to view it."""
    path = path or reports_dir(project_root) / f"report-{results.version}.html"
    write_text_file(path, html_report(results, project_name))
    return path
