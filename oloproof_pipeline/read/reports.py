"""Reports from stored results: the public entry for the offline HTML file written per version
(by the gate asset and `oloproof report`), the digest that lets a rerun keep it, and the names
the CLI and the Dagster layer have always imported from here.

The HTML is rendered from the Jinja2 templates in `templates/` (package data) out of the plain
data `report_view` builds, with the charts geometry from `charts` and the words from `wording`.
Everything is inline (SVG, CSS, one small script): one offline file.
"""

from __future__ import annotations

import os
import shutil
from contextlib import suppress
from datetime import datetime, timezone
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

import pandas as pd
import jinja2
from jinja2 import Environment, FileSystemBytecodeCache, PackageLoader
from jinja2 import nodes
from jinja2.bccache import Bucket
from jinja2.compiler import CodeGenerator, Frame
from jinja2.ext import Extension
from markupsafe import Markup

from ..decide.formatting import format_interval, format_rate
from ..decide.trials import CriterionTrials, project_trial_summaries
from ..decide.validity import transform_validity
from ..model.collector import collection_paused
from ..model.config import Project
from ..model.fingerprints import frame_digest, producer_code_version
from ..project import load_project
from ..store.layout import compiled_templates_dir, read_table, reports_dir, table_path, write_text_file
from ..store.tables import GATE_NESTED, rows_from_frame
from . import charts
from .markup import (
    case_link,
    case_links,
    escaped,
    outcome_span,
    run_link,
    table_head,
    with_run_links,
)
from .panel_html import case_section
from .panels import PANELS_AT_ONCE, PanelStore
from .report_view import (
    FAILING,
    PANEL_CASE_FIELDS,
    PANEL_VERDICT_FIELDS,
    REPORT_REPLAY_FIELDS,
    REPORT_RUN_FIELDS,
    REPORT_VALIDITY_FIELDS,
    ReportView,
    case_panel,
    failure_groups,
    provenance,
    slices_view,
    verdict_summary,
)
from .report_scan import HeldCases, ReportScan, ReportTables
from .results import VersionResults
from .wording import GATE_COLUMNS, METHOD_NAMES, TIME_FORMAT, call_text, flagged_buckets, rule_cells, short_run_id

if TYPE_CHECKING:  # the comparison needs scipy (Tango's interval): only `report --compare` imports it
    from .comparison_view import ComparisonView

# This module's own public names, and the ones the CLI, the gate asset and the Dagster metadata
# have always imported from here (they now live in report_view, wording and decide.formatting).
__all__ = [
    "DAGSTER_URL_ENV", "INPUTS_META", "REPORTED_CASE_COLUMNS", "REPORTED_REPLAY_COLUMNS", "REPORTED_RUN_COLUMNS",
    "REPORTED_VERDICT_COLUMNS", "report_inputs_digest", "report_is_current", "report_path", "stored_trial_summaries",
    "stored_trials", "write_html_report",
    # re-exported for their callers
    "GATE_COLUMNS", "METHOD_NAMES", "PANEL_CASE_FIELDS", "PANEL_VERDICT_FIELDS", "REPORT_REPLAY_FIELDS", "REPORT_RUN_FIELDS",
    "REPORT_VALIDITY_FIELDS", "call_text", "case_panel", "flagged_buckets", "format_rate", "rule_cells", "short_run_id",
    "verdict_summary",
]

# The webserver whose run pages the report links to, e.g. http://127.0.0.1:3000.
DAGSTER_URL_ENV = "OLOPROOF_DAGSTER_URL"
# The report's inputs digest sits in its <head>: a rerun whose inputs are the same keeps the file.
INPUTS_META = "oloproof-inputs"


# -- rendering -------------------------------------------------------------------------------


class Spaceless(Extension):
    """Drops each line break of a `.j2` template and the indentation after it, so a template
    reads as nested markup while the report comes out as it always has, with no whitespace
    between tags. The inlined CSS and script (not `.j2`) keep theirs."""

    def preprocess(self, source: str, name: str | None, filename: str | None = None) -> str:
        if not (name or "").endswith(".j2"):
            return source
        return "".join(line.lstrip() for line in source.splitlines())


class FinalizeEscapes(CodeGenerator):
    """Compiles `{{ value }}` to `finalize(value)` alone where autoescape is on: the finalize
    (`escaped`) already returns Markup escaped as autoescape requires, so Jinja's own
    `escape(...)` around it would only copy the string again, a third of the time a case
    panel takes. Anywhere else (no autoescape, or a `{% autoescape %}` block) as Jinja does."""

    def _escapes_in_finalize(self, frame: Frame, finalize: Any) -> bool:
        return frame.eval_ctx.autoescape and not frame.eval_ctx.volatile and finalize.src == "environment.finalize("

    def _output_child_pre(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if self._escapes_in_finalize(frame, finalize):
            self.write(finalize.src)
        else:
            super()._output_child_pre(node, frame, finalize)

    def _output_child_post(self, node: nodes.Expr, frame: Frame, finalize: Any) -> None:
        if self._escapes_in_finalize(frame, finalize):
            self.write(")")
        else:
            super()._output_child_post(node, frame, finalize)


class CompiledTemplates(FileSystemBytecodeCache):
    """The templates as compiled, kept in the project between runs (compiling them costs a
    run a tenth of a second or more). Jinja2 checks each template's source; the folder is
    named for the report's code and the Jinja2 release, which decide how a source compiles
    (the `Spaceless` extension, the options), so a compiled template is always one the current
    code would compile. Folders of other code are removed when this one is written; a file
    that cannot be read or written costs the compiling, never the report."""

    def __init__(self, project_root: Path):
        folders = compiled_templates_dir(project_root)
        self.folder = folders / f"{producer_code_version('report')}-jinja{jinja2.__version__}"
        super().__init__(str(self.folder))

    def load_bytecode(self, bucket: Bucket) -> None:
        try:
            super().load_bytecode(bucket)
        except (OSError, EOFError, ValueError, TypeError):  # cut short or not bytecode: compiled again
            bucket.reset()

    def dump_bytecode(self, bucket: Bucket) -> None:
        with suppress(OSError):
            if not self.folder.is_dir():
                for other in self.folder.parent.glob("*"):
                    shutil.rmtree(other, ignore_errors=True)
                self.folder.mkdir(parents=True, exist_ok=True)
            super().dump_bytecode(bucket)


@lru_cache(maxsize=None)
def environment(project_root: Path | None = None) -> Environment:
    """The report's templates and their filters; with `project_root`, compiled once per code
    version and kept in the project (`CompiledTemplates`)."""
    env = Environment(
        loader=PackageLoader("oloproof_pipeline.read", "templates"),
        autoescape=True,
        finalize=escaped,
        keep_trailing_newline=True,  # report.css and report.js end with a line break
        extensions=[Spaceless],
        bytecode_cache=CompiledTemplates(project_root) if project_root is not None else None,
    )
    env.code_generator_class = FinalizeEscapes
    env.filters.update(
        rate=format_rate,
        interval=format_interval,
        px=lambda value: f"{value:.1f}",
        g=lambda value: f"{value:g}",
        joined=lambda items, separator: separator.join(items or []),
        rule_cells=rule_cells,
        outcome=outcome_span,
        case_link=case_link,
        case_links=case_links,
        run_link=run_link,
        table_head=table_head,
    )
    env.globals.update(
        DAGSTER_URL_ENV=DAGSTER_URL_ENV, FAILING=FAILING, GATE_COLUMNS=GATE_COLUMNS, INPUTS_META=INPUTS_META,
        layout=charts,
    )
    return env


def report_parts(
    tables: ReportTables,
    project_name: str,
    *,
    project_root: Path | None = None,
    dagster_url: str | None = None,
    inputs_digest: str | None = None,
    trials: list[CriterionTrials] | None = None,
    comparison: ComparisonView | None = None,
    panels: PanelStore | None = None,
) -> Iterator[str]:
    """The report, a piece at a time: the tables are read once a row group at a time for what
    the page needs of every case (`ReportScan`), and a case's rows are read again and its panel
    built only while its section is written, so a large suite is never held as rows, panels or
    one string. The failing cases come first; `comparison` adds the page against another
    version. With `panels`, a panel kept under its key is copied, not rendered, and the
    report's panels are kept once it is all written."""
    scan = ReportScan.of(tables)
    ordered, failing = scan.failing_first()
    dagster_url = dagster_url.rstrip("/") if dagster_url else None
    env = environment(project_root)
    yield from env.get_template("report.html.j2").generate(
        view=report_view(tables, scan, project_name, project_root, trials),
        panel_sections=panel_sections(tables, scan, ordered, dagster_url, panels),
        case_count=len(ordered),
        failing_count=failing,
        comparison=comparison,
        dagster_url=dagster_url,
        inputs_digest=inputs_digest,
    )
    if panels is not None:
        panels.finish()


def panel_sections(
    tables: ReportTables, scan: ReportScan, case_ids: list[str], dagster_url: str | None, panels: PanelStore | None,
) -> Iterator[Markup]:
    """The cases' sections, in order, a batch of cases at a time as one piece: each the one
    kept under its key, else rendered (and kept), its run links filled in. Only the rows of
    the batch's panels rendered now are read (`HeldCases`), so only a batch of panels is ever
    held, and the page's template handles a batch, not a case, at a time. A batch is made
    with the garbage collector held off: its rows decoded and its panels built are thousands
    of dicts and lists, no cycle among them, freed with the batch."""
    for start in range(0, len(case_ids), PANELS_AT_ONCE):
        with collection_paused():
            sections = batch_sections(tables, scan, case_ids[start : start + PANELS_AT_ONCE], dagster_url, panels)
        yield Markup("".join(sections))


def batch_sections(
    tables: ReportTables, scan: ReportScan, batch: list[str], dagster_url: str | None, panels: PanelStore | None,
) -> list[Markup]:
    keys = scan.panel_keys(batch) if panels is not None else [None] * len(batch)
    kept = panels.kept(keys) if panels is not None else {}
    left = [case_id for case_id, key in zip(batch, keys) if key not in kept]
    held = HeldCases(tables, scan, left) if left else None
    sections = []
    for case_id, key, run_ids in zip(batch, keys, scan.run_ids(batch)):
        if key in kept:
            section = kept[key]
        else:
            panel = case_panel(held, case_id, held.replays)
            if panel is None:
                continue
            section = case_section(panel)  # its run links are holes, filled below
            if panels is not None:
                panels.put(key, case_id, section)
        sections.append(with_run_links(section, run_ids, dagster_url))
    return sections


def report_path(project_root: Path, version: str, base: str | None = None) -> Path:
    """Where a version's report is written by default (by the gate asset and `oloproof
    report`); against `base`, its comparison page."""
    name = f"report-{version}" if base is None else f"report-{version}-vs-{base}"
    return reports_dir(project_root) / f"{name}.html"


def report_view(
    tables: ReportTables,
    scan: ReportScan,
    project_name: str,
    project_root: Path | None,
    trials: list[CriterionTrials] | None,
) -> ReportView:
    """The page's head from the report's tables and its one pass over them (`report_scan`):
    here, beside both, as the scan reads the fields `report_view` names."""
    gate = [] if tables.gate is None else rows_from_frame(tables.gate, GATE_NESTED)  # decoded once: every part reads it
    counted = [scan.recorded_by, scan.replayed_by, scan.judged_by]
    return ReportView(
        project_name=project_name,
        version=tables.version,
        decision=None if tables.gate is None or tables.gate.empty else tables.gate["gate_decision"].iloc[0],
        gate_reasons=gate[0]["gate_reasons"] if gate else ["release.yaml has no rules, so nothing is gated"],
        sources=provenance(project_root, tables.version, counted, gate) if project_root is not None else [],
        written_at=datetime.now(timezone.utc).strftime(TIME_FORMAT),
        failure_groups=failure_groups(scan.failing, gate),
        gate=gate,
        gate_chart=charts.gate_chart(gate),
        trials=trials,
        validity=transform_validity(tables.validity),
        slices=slices_view(tables.slices),
        spend=tables.spend,
        criteria=sorted(scan.criteria),
        rule_criteria=[(rule["rule_id"], rule["metric"]) for rule in gate],
    )


def write_html_report(
    project_root: Path,
    results: VersionResults | ReportTables,
    project_name: str,
    path: Path | None = None,
    *,
    replays: pd.DataFrame | None = None,
    inputs_digest: str | None = None,
    trials: list[CriterionTrials] | None = None,
    comparison: ComparisonView | None = None,
    panels: PanelStore | None = None,
) -> Path:
    """One self-contained HTML file: no network is needed to view it. `results`: the version's
    results as read whole (`replays` default to its stored fault replays), or its tables
    streamed (`ReportTables.stored`, the gate stage's). Written a piece at a time, each case's panel copied
    from the version's kept panels while what it shows is unchanged (`panels`: by default the
    version's own, `read/panels.py`). With `comparison`, the version's report with its cases
    against another version's (by default beside the version's own report, named for both)."""
    if path is None:
        path = report_path(project_root, results.version, comparison.base.version if comparison else None)
    if panels is None:
        panels = PanelStore.of_version(project_root, results.version)
    if isinstance(results, VersionResults):
        results = ReportTables.of_results(
            results, read_table(project_root, "fault_replays", results.version) if replays is None else replays
        )
    parts = report_parts(
        results, project_name, project_root=project_root,
        dagster_url=os.environ.get(DAGSTER_URL_ENV), inputs_digest=inputs_digest, trials=trials, comparison=comparison,
        panels=panels,
    )
    try:
        write_text_file(path, parts)
    finally:
        panels.close()
    return path


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


# -- reuse ---------------------------------------------------------------------------------

# What a report shows of each table, by the columns that decide it: a verdict's key (and the
# run that judged it) stands for its details, a recording's key for its output and trajectory.
REPORTED_VERDICT_COLUMNS = [
    "case_id", "criterion", "outcome", "reason", "inputs_key", "recorded_by_run", "replayed_by_run", "judged_by_run",
]
REPORTED_CASE_COLUMNS = ["case_id", "case_digest", *REPORT_VALIDITY_FIELDS]
REPORTED_RUN_COLUMNS = ["case_id", "recording_key", "recorded_by_run", "status"]
REPORTED_REPLAY_COLUMNS = ["case_id", "criterion", "plan_digest", "recorded_by_run", "replayed_by_run", "judging_digest"]
REPORT_FORMAT = 3  # bump when the HTML changes, so stored reports are written again


def report_inputs_digest(project_name: str, tables: ReportTables, trials: list[CriterionTrials] | None = None) -> str:
    """What the report is made from; while it holds, the report already written is kept. Each
    table's columns are digested a row group at a time."""
    parts = {
        "project": project_name,
        "version": tables.version,
        "format": REPORT_FORMAT,
        "dagster_url": os.environ.get(DAGSTER_URL_ENV),
        "cases": tables.cases.digest("report.cases", REPORTED_CASE_COLUMNS),
        "runs": tables.runs.digest("report.runs", REPORTED_RUN_COLUMNS),
        "replays": tables.replays.digest("report.replays", REPORTED_REPLAY_COLUMNS),
        "verdicts": tables.verdicts.digest("report.verdicts", REPORTED_VERDICT_COLUMNS),
        "gate": frame_digest("report.gate", tables.gate, producer="report"),
        "slices": frame_digest("report.slices", tables.slices, producer="report"),
    }
    if trials is not None:  # repeated trials only
        parts["trials"] = [summary.model_dump(mode="json") for summary in trials]
    return frame_digest("report/v3", None, parts, producer="report")  # v3: tables digested from their Arrow buffers


def report_is_current(path: Path, inputs_digest: str) -> bool:
    """Whether the report at `path` was written from these inputs (its head says so)."""
    if not path.is_file():
        return False
    with path.open(encoding="utf-8", errors="replace") as handle:
        head = handle.read(4096)
    return f'<meta name="{INPUTS_META}" content="{escaped(inputs_digest)}">' in head
