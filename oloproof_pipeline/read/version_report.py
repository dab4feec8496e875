"""A version's HTML report written from its stored tables, the way the gate stage writes it:
only when what it shows changed, reading only the columns it shows, a row group at a time."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..decide.trials import CriterionTrials
from ..model.config import Project
from ..store.reuse import previous
from ..store.stored import StoredTable
from .panels import PanelStore
from .report_scan import ReportTables
from .reports import report_inputs_digest, report_is_current, report_path, write_html_report


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
    tables = ReportTables.stored(project.root, stored, version, gate, previous(stored["slices"], "slices read"))
    inputs_digest = report_inputs_digest(project.name, tables, trials)
    path = report_path(project.root, version)
    if report_is_current(path, inputs_digest):
        return VersionReport(path, False)
    panels = PanelStore.of_version(project.root, version)
    report = write_html_report(project.root, tables, project.name, inputs_digest=inputs_digest, trials=trials, panels=panels)
    return VersionReport(report, True, panels.rendered, panels.reused)
