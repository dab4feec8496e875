"""A version's HTML report written from its stored tables, the way the gate stage writes it:
only when what it shows changed, reading only the columns it shows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..decide.trials import CriterionTrials
from ..model.config import Project
from ..store.reuse import previous
from ..store.stored import StoredTable
from .panels import PanelStore
from .reports import (
    PANEL_CASE_FIELDS,
    PANEL_VERDICT_FIELDS,
    REPORT_REPLAY_FIELDS,
    REPORT_RUN_FIELDS,
    REPORT_VALIDITY_FIELDS,
    REPORTED_CASE_COLUMNS,
    REPORTED_REPLAY_COLUMNS,
    REPORTED_RUN_COLUMNS,
    REPORTED_VERDICT_COLUMNS,
    report_inputs_digest,
    report_is_current,
    report_path,
    write_html_report,
)
from .results import results_from_tables


@dataclass(frozen=True)
class VersionReport:
    """Where the report is, whether it was written now, and how many of its case panels were
    rendered (the others were copied as kept: `read/panels.py`)."""

    path: Path
    written: bool
    panels_rendered: int = 0
    panels_reused: int = 0

    def panels_line(self) -> str:
        if not self.written:
            return f"{self.path.name}: kept, nothing it shows changed"
        return f"{self.path.name}: {self.panels_rendered} case panels rendered, {self.panels_reused} kept as rendered before"


def write_version_report(
    project: Project, stored: dict[str, StoredTable], version: str, gate: pd.DataFrame,
    trials: list[CriterionTrials] | None = None,
) -> VersionReport:
    """The version's HTML report, written again only when what it shows changed, and then
    rendering only the case panels whose cases changed. `stored` as
    `store.reuse.stored_tables` gives them; `gate` is the version's gate table."""
    runs, replays, verdicts = stored["recorded_runs"], stored["fault_replays"], stored["verdicts"]
    slices = previous(stored["slices"], "slices read")
    inputs_digest = report_inputs_digest(
        project.name, version, cases=stored["cases"].columns(*REPORTED_CASE_COLUMNS),
        runs=runs.columns(*REPORTED_RUN_COLUMNS) if runs.exists else None,
        replays=replays.columns(*REPORTED_REPLAY_COLUMNS) if replays.exists else None,
        verdicts=verdicts.columns(*REPORTED_VERDICT_COLUMNS), gate=gate, slices=slices, trials=trials,
    )
    path = report_path(project.root, version)
    if report_is_current(path, inputs_digest):
        return VersionReport(path, False)
    results = results_from_tables(  # only the columns a report shows are read
        version, cases=stored["cases"].columns(*PANEL_CASE_FIELDS, *REPORT_VALIDITY_FIELDS), derived_cases=None,
        recorded_runs=runs.columns(*REPORT_RUN_FIELDS) if runs.exists else None,
        verdicts=verdicts.columns(*PANEL_VERDICT_FIELDS), gate=gate, slices=slices,
    )
    panels = PanelStore.of_version(project.root, version)
    report = write_html_report(
        project.root, results, project.name, replays=replays.columns(*REPORT_REPLAY_FIELDS) if replays.exists else None,
        inputs_digest=inputs_digest, trials=trials, panels=panels,
    )
    return VersionReport(report, True, panels.rendered, panels.reused)
