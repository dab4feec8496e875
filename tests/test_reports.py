"""Reading results the way a person does: a case panel, an HTML report, JSON lines, and two
versions compared."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shutil
import sqlite3
import subprocess
import tomllib
from contextlib import closing
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

import oloproof_pipeline.read as read
from oloproof_pipeline.decide.paired import paired_difference_interval
from oloproof_pipeline.model.trajectory import first_difference
from oloproof_pipeline.project import load_project
from oloproof_pipeline.read import panels, report_view
from oloproof_pipeline.read.compare import comparison_markdown, comparison_table, compare_criterion
from oloproof_pipeline.read.panel_html import PanelHtml
from oloproof_pipeline.read.panels import PanelStore
from oloproof_pipeline.read.report_scan import ReportTables
from oloproof_pipeline.read.reports import environment, report_path, write_html_report
from oloproof_pipeline.read.version_report import VersionReport, write_version_report
from oloproof_pipeline.store.layout import read_table, report_panels_path
from oloproof_pipeline.store.reuse import stored_tables
from helpers import OLOPROOF, copy_project, oloproof

# A fix for the desk's first flaw: with it, version 1.1.0 declines the pasted overrides.
FIXED_OVERRIDE = ('if "system override" in message.lower():', 'if False:')


FIRST_RUN = "first_run.txt"


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory) -> Path:
    """The refund desk run at 1.0.0, then fixed and run at 1.1.0 (the first run's output kept
    beside the project)."""
    root = tmp_path_factory.mktemp("reports") / "desk"
    assert oloproof("init", str(root), "--example", "stateful-agent", cwd=root.parent).returncode == 0
    first = oloproof("run", cwd=root)
    assert first.returncode == 1
    (root.parent / FIRST_RUN).write_text(first.stdout)
    app = root / "app.py"
    assert FIXED_OVERRIDE[0] in app.read_text(), "the example's override flaw moved; update FIXED_OVERRIDE"
    app.write_text(app.read_text().replace(*FIXED_OVERRIDE))
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace('version: "1.0.0"', 'version: "1.1.0"'))
    assert oloproof("run", cwd=root).returncode == 1
    return root


def test_inspect_prints_the_case_panel(two_versions):
    shown = oloproof("inspect", "ord-021", "--version", "1.0.0", cwd=two_versions)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert '"order_id": "ord-021"' in text and '"answer": "refunded"' in text
    # The answer expected ("declined") beside the answer given, the verdicts before the input.
    assert ["answer", '"declined"', '"refunded"'] in [line.split() for line in text.splitlines()]
    assert "orders.ord-021.status" in text and text.index("Verdicts") < text.index('"order_id": "ord-021"')
    assert "issue_refund" in text and "lookup_order" not in text  # the override skips the lookup
    assert "state_correct" in text and "FAIL" in text and "state_differs" in text
    missing = oloproof("inspect", "ord-404", cwd=two_versions)
    assert missing.returncode == 2 and "no case 'ord-404'" in missing.stderr


def test_run_prints_the_flagged_slice_buckets(two_versions):
    printed = (two_versions.parent / FIRST_RUN).read_text()
    flagged = [line for line in printed.splitlines() if line.startswith("slice flagged")]
    # The override cases are the ones the desk gets wrong: their bucket differs on both checks.
    assert [line.split(":")[0] for line in flagged] == [
        "slice flagged metadata.category = override on answer_correct",
        "slice flagged metadata.category = override on state_correct",
    ]
    assert "0.000 [0.000, 0.602] vs 0.833 overall (lower, 4 cases)" in flagged[0]


def test_inspect_explains_a_failed_fault_replay_beside_its_control(two_versions):
    shown = oloproof("inspect", "ord-006", "--version", "1.0.0", cwd=two_versions)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    # The recording kept its constraint; the faulted replay broke it, and says how.
    assert "constraint claims_only_what_happened (as recorded): kept" in text
    assert 'call 2 (issue_refund) got {"error": "internal error"} instead of running' in text
    assert "control (no change)" in text and "faulted" in text
    control_row = next(line for line in text.splitlines() if line.startswith("2 ") and "->" in line)  # piped: one line a row
    assert '{"order_id": "ord-006", "status": "refunded"}' in control_row  # the control ran the call
    assert '-> {"error": "internal error"}' in control_row  # beside the injected result
    assert "broken in the faulted replay claims_only_what_happened: answered 'refunded'; store has " \
        "status='delivered'" in text


def test_inspect_shows_a_failed_pair_side_by_side(two_versions):
    shown = oloproof("inspect", "ord-009~injected", "--version", "1.0.0", cwd=two_versions)
    assert shown.returncode == 0, shown.stderr
    text = shown.stdout
    assert "first difference at call 1" in text and "source ord-009" in text and "copy ord-009~injected" in text
    first_row = next(line for line in text.splitlines() if line.startswith("1 ") and "->" in line)
    assert "lookup_order" in first_row and "issue_refund" in first_row  # the copy skipped the lookup
    assert 'state orders.ord-009.status: source "delivered", copy "refunded"' in text


class Sections(HTMLParser):
    """Collects the text of each case section, keyed by its anchor id."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, str] = {}
        self.current: str | None = None
        self.scripts = 0

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if tag == "section" and attributes.get("id", "").startswith("case-"):
            self.current = attributes["id"]
            self.sections[self.current] = ""
        if tag == "script" and "src" in attributes:
            self.scripts += 1
        if tag == "link" and attributes.get("href", "").startswith("http"):
            self.scripts += 1

    def handle_endtag(self, tag):
        if tag == "section":
            self.current = None

    def handle_data(self, data):
        if self.current:
            self.sections[self.current] += data


def test_report_is_one_offline_file_with_a_panel_per_case(two_versions):
    written = oloproof("report", "--version", "1.0.0", cwd=two_versions)
    assert written.returncode == 0, written.stderr
    path = Path(written.stdout.split("Wrote ", 1)[1].strip())
    parser = Sections()
    parser.feed(path.read_text())
    assert parser.scripts == 0  # nothing fetched at view time
    panel = parser.sections["case-ord-021"]
    assert "state_correct" in panel and "FAIL" in panel and "orders.ord-021.status" in panel
    assert len([key for key in parser.sections if "~" not in key]) == 24


def test_gate_asset_metadata_names_the_report(two_versions):
    from oloproof_pipeline.defs.instance import project_instance
    from dagster import AssetKey

    instance = project_instance(two_versions)
    gate = instance.get_latest_materialization_event(AssetKey(["refund_desk", "gate"])).asset_materialization
    report = Path(gate.metadata["report"].value)  # a path value: shown with a copy button
    assert report.name == "report-1.1.0.html" and report.is_absolute() and report.is_file()


# -- the report costs what changed: a panel is rendered only when what it shows changed --------


def kept_panels(project_root: Path, version: str = "1.0.0") -> dict[str, str]:
    """key -> case id of each case panel the version's report keeps (read/panels.py)."""
    with closing(sqlite3.connect(report_panels_path(project_root, version))) as connection:
        return dict(connection.execute("SELECT key, case_id FROM panels").fetchall())


def without_times(html: str) -> str:
    """The report with the times it was written (and its tables were) taken out."""
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC|now \(this run\)", "(time)", html)


def rewritten_report(project_root: Path, version: str = "1.0.0") -> VersionReport:
    """The version's report written again by the gate's code, from its stored tables."""
    report_path(project_root, version).unlink()
    project = load_project(project_root)
    return write_version_report(project, stored_tables(project, version), version, read_table(project_root, "gate", version))


def test_a_run_with_one_case_added_renders_that_cases_panels_only(evaluated_desk, tmp_path):
    """The report of a run with one case added renders the panels of that case and its copies
    and copies the others as kept, and is the report a render from nothing writes."""
    before = kept_panels(evaluated_desk)
    assert sorted(before.values()) == sorted(read_table(evaluated_desk, "verdicts", "1.0.0")["case_id"].unique())
    cases = evaluated_desk / "data" / "cases.jsonl"
    first = cases.read_text().splitlines()[0]
    assert '"ord-001"' in first and "ord-101" not in cases.read_text()
    with cases.open("a") as handle:
        handle.write(first.replace("ord-001", "ord-101") + "\n")
    ran = oloproof("run", cwd=evaluated_desk)
    assert ran.returncode == 1, ran.stdout + ran.stderr

    after = kept_panels(evaluated_desk)
    copies = read_table(evaluated_desk, "derived_cases")
    added = ["ord-101", *copies.loc[copies["source_id"] == "ord-101", "case_id"]]
    assert len(added) == 3  # the case and its two copies
    assert sorted(after[key] for key in after.keys() - before.keys()) == sorted(added)  # rendered now
    assert before.keys() <= after.keys() and len(after) == len(before) + 3  # the others kept as they were

    scratch = copy_project(evaluated_desk, tmp_path / "scratch", with_store=True)
    report_panels_path(scratch, "1.0.0").unlink()
    fresh = rewritten_report(scratch)
    assert (fresh.panels_rendered, fresh.panels_reused) == (len(after), 0)
    assert kept_panels(scratch) == after  # the same keys for the same panels
    written = report_path(evaluated_desk, "1.0.0").read_text()
    assert without_times(written) == without_times(fresh.path.read_text())
    assert 'id="case-ord-101~paraphrase"' in written


def test_a_report_written_again_reads_only_the_rows_of_the_panels_it_renders(evaluated_desk):
    """The report streams its tables once for what it needs of every case (the runs each
    verdict links to included); a case's rows (its case, recording, verdicts) are read again
    only for the panels rendered now: none when every panel is kept, one case's and its
    source's recording when one copy's panel is not."""
    project, version = load_project(evaluated_desk), "1.0.0"
    gate = read_table(evaluated_desk, "gate", version)

    def written() -> tuple[ReportTables, PanelStore]:
        tables = ReportTables.stored(evaluated_desk, stored_tables(project, version), version, gate, None)
        store = PanelStore.of_version(evaluated_desk, version)
        write_html_report(evaluated_desk, tables, project.name, panels=store)
        return tables, store

    written()  # every panel kept by this code
    tables, store = written()
    assert (store.rendered, store.reused) == (0, 72)
    assert (tables.cases.rows_read, tables.runs.rows_read, tables.replays.rows_read, tables.verdicts.rows_read) == (0, 0, 0, 0)

    with closing(sqlite3.connect(report_panels_path(evaluated_desk, version))) as connection, connection:
        connection.execute("DELETE FROM panels WHERE case_id = 'ord-001~paraphrase'")
    tables, store = written()
    assert (store.rendered, store.reused) == (1, 71)
    assert (tables.cases.rows_read, tables.runs.rows_read) == (1, 2)  # the copy, its recording and its source's
    verdicts = read_table(evaluated_desk, "verdicts", version)
    assert tables.verdicts.rows_read == (verdicts["case_id"] == "ord-001~paraphrase").sum() > 0  # the copy's alone


def panel_html(report: Path) -> dict[str, str]:
    """Each case's section of a report, the run ids it links to taken out."""
    html = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|>[0-9a-f]{8}<", "(run)", report.read_text())
    sections = re.findall(r'(<section class="case[^"]*" id="case-([^"]+)".*?</section>)', html, re.S)
    return {case_id: section for section, case_id in sections}


def test_a_new_version_renders_only_the_panels_that_show_something_new(two_versions, tmp_path):
    """The agent developer's loop: a new version's report copies each panel the last version's
    report kept when it shows the same (its run links filled with this version's runs), renders
    the others, and is the report a render from nothing writes."""
    scratch = copy_project(two_versions, tmp_path / "scratch", with_store=True)
    report_panels_path(scratch, "1.1.0").unlink()
    before = kept_panels(scratch, "1.0.0")
    again = rewritten_report(scratch, "1.1.0")
    after = kept_panels(scratch, "1.1.0")
    rendered = {case_id for key, case_id in after.items() if key not in before}

    old, new = panel_html(report_path(scratch, "1.0.0")), panel_html(again.path)
    assert rendered == {case_id for case_id in new if new[case_id] != old.get(case_id)}
    assert 0 < len(rendered) < len(new) and (again.panels_rendered, again.panels_reused) == (len(rendered), len(new) - len(rendered))
    written = again.path.read_text()
    old_runs = set(read_table(scratch, "verdicts", "1.0.0")["judged_by_run"]) - set(read_table(scratch, "verdicts", "1.1.0")["judged_by_run"])
    assert old_runs and not any(run_id in written for run_id in old_runs)

    report_panels_path(scratch, "1.0.0").unlink()
    report_panels_path(scratch, "1.1.0").unlink()
    fresh = rewritten_report(scratch, "1.1.0")
    assert fresh.panels_reused == 0 and without_times(fresh.path.read_text()) == without_times(written)


def test_kept_panels_are_dropped_when_the_report_code_or_the_store_changes(evaluated_desk, monkeypatch):
    """A panel kept by other code is never copied (its key names the code that rendered it), and
    a panel store that is no longer SQLite costs one full render, not the report."""
    reused = rewritten_report(evaluated_desk)
    assert (reused.panels_rendered, reused.panels_reused) == (0, 72)
    monkeypatch.setattr(panels, "producer_code_version", lambda producer: "other code")
    assert rewritten_report(evaluated_desk).panels_rendered == 72
    report_panels_path(evaluated_desk, "1.0.0").write_text("not a database")
    broken = rewritten_report(evaluated_desk)
    assert (broken.panels_rendered, broken.panels_reused) == (72, 0) and len(kept_panels(evaluated_desk)) == 72


def test_hostile_text_a_system_recorded_shows_as_text_in_its_panel(evaluated_desk):
    """What a system answered, the error it raised and the tools it named are shown, never run:
    a recording with markup in them renders it escaped, wherever the panel shows it; and what
    a panel marks its places with (a run link's `%s`, the NUL where each value goes) is text."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    stored = evaluated_desk / ".oloproof" / "tables" / "recorded_runs" / "1.0.0.parquet"
    runs = pq.read_table(stored)
    rows = runs.to_pylist()
    recording = next(row for row in rows if row["case_id"] == "ord-001")
    assert '"tool":"lookup_order"' in recording["trajectory"]
    recording["output"] = json.dumps({"answer": "</pre><script>alert('answer')</script>"})
    recording["error"] = "<img src=x onerror=alert('error')> <run-link 0> %s 100% \x00."  # nor a kept panel's marks
    recording["trajectory"] = recording["trajectory"].replace('"tool":"lookup_order"', '"tool":"<b>lookup_order</b>"')
    pq.write_table(pa.Table.from_pylist(rows, schema=runs.schema), stored)

    html = rewritten_report(evaluated_desk).path.read_text()
    parser = Sections()
    parser.feed(html)
    panel = parser.sections["case-ord-001"]
    assert '{"answer": "</pre><script>alert(\'answer\')</script>"}' in panel
    assert "Error: <img src=x onerror=alert('error')> <run-link 0> %s 100% " in panel and "<b>lookup_order</b>" in panel
    assert "<p>Error: &lt;img src=x onerror=alert(&#x27;error&#x27;)&gt; &lt;run-link 0&gt; %s 100% \x00.</p>" in html
    assert "<script>alert" not in html and "<img src=x" not in html and "<b>lookup_order" not in html


def test_export_writes_one_json_line_per_case_and_run(two_versions):
    exported = oloproof("export", "--format", "jsonl", "--version", "1.0.0", cwd=two_versions)
    assert exported.returncode == 0, exported.stderr
    path = two_versions / ".oloproof" / "exports" / "results-1.0.0.jsonl"
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(lines) == 72
    by_task = {line["task_id"]: line for line in lines}
    assert set(by_task["ord-001"]) >= {"task_id", "run_id", "scores", "violated_constraints"}
    assert by_task["ord-001"]["scores"]["recovers_from_error_at_issue_refund"] == 0.0
    assert by_task["ord-021"]["scores"]["state_correct"] == 0.0
    assert by_task["ord-001"]["run_id"] and by_task["ord-001"]["violated_constraints"] == []


def _compare_rows(output: str) -> dict[str, list[str]]:
    """The compare table's rows by criterion: the counts, the change, and the interval on the
    same line (piped output is not wrapped, so it fits)."""
    rows = {}
    for line in output.splitlines():
        cells = line.split()
        if len(cells) == 10 and cells[1].isdigit():
            rows[cells[0]] = cells[:8] + [" ".join(cells[8:])]
    return rows


def test_compare_pairs_the_same_cases_across_versions(two_versions):
    compared = oloproof("compare", "1.0.0", "1.1.0", cwd=two_versions)
    assert compared.returncode == 0, compared.stderr
    rows = _compare_rows(compared.stdout)
    # The fix turns the four override cases from FAIL to PASS on the answer.
    answer = rows["answer_correct"]
    assert answer[:8] == ["answer_correct", "24", "20", "4", "0", "0", "0", "+0.167"]
    # Tango's interval for 4 fixed, 0 broken of 24: the upper bound lies above the estimate;
    # continuity-corrected, it does not exclude no change (exact McNemar p = 0.125 agrees).
    lower, upper = paired_difference_interval(both_pass=20, fixed=4, broken=0, both_fail=0)
    assert answer[8] == f"[{lower:+.3f}, {upper:+.3f}]" and upper > 4 / 24 > 0 > lower
    # Fixed cases are listed as well as broken ones.
    assert "answer_correct fixed (4): ord-021, ord-022, ord-023, ord-024" in compared.stdout
    assert "tango_score (Tango 1998)" in compared.stdout


def test_compare_a_version_with_itself_gives_an_interval_around_zero(two_versions):
    compared = oloproof("compare", "1.0.0", "1.0.0", cwd=two_versions)
    assert compared.returncode == 0, compared.stderr
    rows = _compare_rows(compared.stdout)
    assert rows and all(row[3:5] == ["0", "0"] and row[7] == "+0.000" for row in rows.values())
    # Nothing changed on 24 pairs is not proof of no change: about +-0.17, never [+0.000, +0.000].
    assert rows["answer_correct"][8] == "[-0.172, +0.172]"
    assert " fixed (" not in compared.stdout and " broke (" not in compared.stdout


def test_compare_criterion_uses_tango_and_widens_for_unpaired_cases():
    base = {f"c{i:02d}": "FAIL" if i < 8 else "PASS" for i in range(24)}
    candidate = {case: "PASS" for case in base}
    comparison = compare_criterion("m", base, candidate, 0.95)  # 8 fixed, 0 broken of 24
    assert (comparison.fixed, comparison.broken, comparison.paired, comparison.method) == (8, 0, 24, "tango_score")
    assert comparison.difference == pytest.approx(8 / 24)
    assert comparison.upper > comparison.difference > comparison.lower > 0  # before: upper == estimate
    assert (comparison.lower, comparison.upper) == paired_difference_interval(both_pass=16, fixed=8, broken=0, both_fail=0)
    # A case missing on either side, or run by one version only, widens the interval worst-case;
    # a case excluded wherever it ran is no pair at all.
    widened = compare_criterion(
        "m", {**base, "x1": "MISSING", "x2": "PASS", "x3": "EXCLUDED"}, {**candidate, "x1": "PASS", "x3": "EXCLUDED"}, 0.95
    )
    assert (widened.paired, widened.unpaired, widened.difference) == (24, 2, comparison.difference)
    assert (widened.lower, widened.upper) == paired_difference_interval(
        both_pass=16, fixed=8, broken=0, both_fail=0, missing=2
    )
    assert widened.lower < comparison.lower and widened.upper > comparison.upper
    nothing = compare_criterion("m", {"a": "PASS", "b": "FAIL"}, {"a": "PASS", "b": "FAIL"}, 0.95)
    assert nothing.lower < 0 < nothing.upper and nothing.lower == pytest.approx(-nothing.upper, abs=1e-12)


def test_version_comparison_table_and_markdown_list_fixed_and_broken_cases():
    base = {"a": "FAIL", "b": "PASS", "c": "PASS"}
    candidate = {"a": "PASS", "b": "FAIL", "c": "PASS"}
    comparisons = [compare_criterion("m", base, candidate, 0.95)]
    table = comparison_table(comparisons, "1.0", "1.1")
    assert table.loc[0, "fixed_cases"] == "a" and table.loc[0, "broken_cases"] == "b"
    assert table.loc[0, "method"] == "tango_score"
    markdown = comparison_markdown(comparisons, "1.0", "1.1")
    assert "| fixed cases | broken cases |" in markdown
    row = next(line for line in markdown.splitlines() if line.startswith("| m |"))
    assert row.endswith("| a | b |")


@pytest.mark.ui
def test_report_in_chromium_shows_the_interval_chart_and_why_a_fault_replay_failed(two_versions, tmp_path):
    """The report as a browser renders it: one offline file with the gate's chart, failures
    grouped by rule, and a failing fault replay explained beside its control replay."""
    environment = {"OLOPROOF_DAGSTER_URL": "http://dagster.example:3000"}
    written = subprocess.run([OLOPROOF, "report", "--version", "1.0.0"], cwd=two_versions, capture_output=True,
                             text=True, timeout=300, env={**os.environ, **environment})
    assert written.returncode == 0, written.stderr
    path = Path(written.stdout.split("Wrote ", 1)[1].strip())
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed (.ci/run installs it)"
    keep = Path(os.environ.get("OLOPROOF_SCREENSHOTS") or tmp_path)
    keep.mkdir(parents=True, exist_ok=True)
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--no-first-run", f"--user-data-dir={tmp_path / 'profile'}"]
    screenshot = keep / "report-1.0.0.png"
    subprocess.run([chromium, *flags, f"--screenshot={screenshot}", "--window-size=1400,2400", path.as_uri()],
                   capture_output=True, timeout=180)
    assert screenshot.is_file() and screenshot.stat().st_size > 50_000  # a rendered page, not a blank one
    dom = subprocess.run([chromium, *flags, "--dump-dom", path.as_uri()], capture_output=True, text=True,
                         timeout=180).stdout

    chart = re.search(r'<svg id="gate-chart".*?</svg>', dom, re.S)
    assert chart, "no interval chart"
    rows = re.findall(r'<g class="chart-row" data-label="([^"]+)" data-tone="([^"]+)"', chart.group(0))
    assert ("refund_failures (FAIL)", "FAIL") in rows and ("bystanders (PASS)", "PASS") in rows and len(rows) == 6
    assert "misses min 0.8 by 0.535" in chart.group(0) and "clears min 0.85 by 0.008" in chart.group(0)
    assert re.search(r'<svg id="slice-chart-\d+"', dom)

    # Failures first, grouped by rule and criterion, before the rules table.
    failing = dom.index('id="failing"')
    assert failing < dom.index('id="gate"')
    assert dom.index("refund_failures (recovers_from_error_at_issue_refund)", failing) < dom.index('id="gate"')

    parser = Sections()
    parser.feed(dom)
    panel = parser.sections["case-ord-006"]
    assert 'got the injected result {"error": "internal error"} instead of running' in panel
    assert "control: tool" in panel and "faulted: tool" in panel
    assert "Broken constraint claims_only_what_happened: answered 'refunded'; store has status='delivered'" in panel
    pair = parser.sections["case-ord-009~injected"]
    assert "1 ← first difference" in pair and "source ord-009: tool" in pair

    run_id = pd.read_parquet(two_versions / ".oloproof" / "tables" / "gate" / "1.0.0.parquet")["judged_by_run"].iloc[0]
    assert f'href="http://dagster.example:3000/runs/{run_id}"' in dom
    assert "Transform validity" in dom and "What these results cannot tell you" in dom
    assert parser.scripts == 0  # still one offline file


# -- the report's rooms: templates shipped, escaping kept, calls compared as the verdict does --


def test_every_report_template_ships_as_package_data():
    config = tomllib.loads((Path(__file__).parents[1] / "pyproject.toml").read_text())
    patterns = config["tool"]["setuptools"]["package-data"]["oloproof_pipeline.read"]
    templates = Path(read.__file__).parent / "templates"
    files = sorted(path.relative_to(templates.parent).as_posix() for path in templates.iterdir())
    assert {"templates/report.html.j2", "templates/report.css", "templates/report.js"} <= set(files)
    assert [name for name in files if not any(fnmatch.fnmatch(name, pattern) for pattern in patterns)] == []


def test_report_pieces_escape_as_html_escape_does():
    """Autoescape is on, with html.escape's entities (the report's bytes predate the templates); the
    pieces the panels call directly (read/panel_html.py) escape alike."""
    pieces = environment().filters
    assert str(pieces["case_link"]("a<b>\"c'&")) == '<a href="#case-a&lt;b&gt;&quot;c&#x27;&amp;">a&lt;b&gt;&quot;c&#x27;&amp;</a>'
    assert str(pieces["outcome"](None)) == '<span class=""></span>'  # None prints as nothing
    panel = PanelHtml()
    panel.call_cells({"tool": "<t>", "arguments": {"note": "it's \"x\""}, "result": None})
    panel.call_cells(None)
    cells = panel.finished()
    assert cells == "<td>&lt;t&gt;</td><td>{&quot;note&quot;: &quot;it&#x27;s \\&quot;x\\&quot;&quot;}</td><td>null</td><td>-</td><td>-</td><td>-</td>"
    assert str(pieces["run_link"]("0a1b2c3d-4e5f", None)) == '<code title="0a1b2c3d-4e5f">0a1b2c3d</code>'
    linked = str(pieces["run_link"]("0a1b-<x>", "http://h:3000"))
    assert linked == '<a href="http://h:3000/runs/0a1b-&lt;x&gt;"><code title="0a1b-&lt;x&gt;">0a1b</code></a>'
    assert str(pieces["table_head"](["a&b", ""])) == "<table><thead><tr><th>a&amp;b</th><th></th></tr></thead><tbody>"


def test_report_marks_the_first_difference_the_verdict_found():
    """A pair's calls are compared as the metamorphic relation compares them: `true` is not `1`."""
    source = [{"tool": "lookup_order", "arguments": {"id": 1}}, {"tool": "issue_refund", "arguments": {"all": True}}]
    copy = [{"tool": "lookup_order", "arguments": {"id": 1}}, {"tool": "issue_refund", "arguments": {"all": 1}}]
    assert first_difference(source, copy, same=report_view.same_call) == 1


# -- the report as a person reads it: failures first, filters, and a comparison page -----------


def rendered(path: Path, tmp_path: Path, query: str = "") -> str:
    """The page's DOM after its script ran in headless Chromium (the query sets the filters)."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed (.ci/run installs it)"
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000"]
    return subprocess.run([chromium, *flags, "--dump-dom", path.as_uri() + query], capture_output=True, text=True,
                          timeout=180).stdout


def shown_cases(dom: str) -> list[str]:
    return [case_id for case_id, rest in re.findall(r'<section class="case[^"]*" id="case-([^"]+)"([^>]*)>', dom) if " hidden" not in rest]


def test_report_shows_the_failing_cases_first_and_the_passing_ones_when_asked(two_versions, tmp_path):
    written = oloproof("report", "--version", "1.0.0", cwd=two_versions)
    path = Path(written.stdout.split("Wrote ", 1)[1].strip())
    verdicts = pd.read_parquet(two_versions / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet")
    failing = set(verdicts[verdicts["outcome"].isin(["FAIL", "MISSING"])]["case_id"])

    dom = rendered(path, tmp_path)
    order = re.findall(r'<section class="case[^"]*" id="case-([^"]+)"', dom)
    assert len(order) == 72 and set(order[: len(failing)]) == failing  # every failing case before any passing one
    assert set(shown_cases(dom)) == failing
    assert f"show the {72 - len(failing)} passing cases" in dom
    assert f"{len(failing)} of 72 cases shown" in dom
    panel = re.search(r'id="case-ord-021".*?</section>', dom, re.S).group(0)
    assert "<p>Answer:</p>" in panel and "Recording: ok" in panel  # the recording's status apart from the verdicts

    assert len(shown_cases(rendered(path, tmp_path, "?passing=1"))) == 72
    # The outcome filter looks through every case; the rule filter keeps the cases failing its criterion.
    excluded = rendered(path, tmp_path, "?outcome=EXCLUDED")
    assert len(shown_cases(excluded)) == verdicts[verdicts["outcome"] == "EXCLUDED"]["case_id"].nunique()
    by_rule = rendered(path, tmp_path, "?rule=state_correct")
    state_failing = set(verdicts[(verdicts["criterion"] == "state_correct") & (verdicts["outcome"] == "FAIL")]["case_id"])
    assert set(shown_cases(by_rule)) == state_failing and f"{len(state_failing)} of 72 cases shown" in by_rule
    # A search says how many cases it left, and when none.
    searched = rendered(path, tmp_path, "?q=ord-021")
    assert "ord-021" in shown_cases(searched) and re.search(r"\d+ of 72 cases shown", searched)
    nothing = rendered(path, tmp_path, "?q=no-such-text-anywhere")
    assert shown_cases(nothing) == [] and "0 of 72 cases shown" in nothing
    assert re.search(r'<p id="no-match" class="muted">No case matches.</p>', nothing)


def test_report_compare_shows_both_gates_and_marks_the_fixed_and_broken_cases(two_versions, tmp_path):
    written = oloproof("report", "--compare", "1.0.0", cwd=two_versions)
    assert written.returncode == 0, written.stderr
    path = Path(written.stdout.split("Wrote ", 1)[1].strip())
    assert path.name == "report-1.1.0-vs-1.0.0.html"
    dom = rendered(path, tmp_path)
    section = dom[dom.index('id="comparison"'): dom.index('id="failing"')]
    assert "Against 1.0.0" in section and "no model calls" in section
    changes = {case_id: change for change, case_id in re.findall(r'<tr class="(fixed|broken|unchanged)" data-change="[^"]*"><td><a href="#case-([^"]+)"', section)}
    assert changes["ord-021"] == "fixed" and changes["ord-001"] == "unchanged"
    matrix = re.search(r'<tr class="fixed" data-change="fixed"><td><a href="#case-ord-021">.*?</tr>', section).group(0)
    assert '<td class="fixed">FAIL → PASS</td>' in matrix
    # The matrix lists what changed first, and the counts agree with `oloproof compare`.
    kinds = list(changes.values())
    assert kinds.index("unchanged") == sum(kind != "unchanged" for kind in kinds)
    compared = oloproof("compare", "1.0.0", "1.1.0", cwd=two_versions).stdout
    assert "answer_correct fixed (4): ord-021, ord-022, ord-023, ord-024" in compared
    assert re.search(r"<td>answer_correct</td><td>24</td><td>20</td><td>4</td><td>0</td>", section)


def test_version_spend_sums_the_recordings_and_says_what_is_not_priced():
    from oloproof_pipeline.read.spend import version_spend

    runs = pd.DataFrame({
        "model_calls": [3, 2, None, 4], "prompt_tokens": [100, 50, None, 10], "completion_tokens": [10, 5, None, 1],
        "cost_usd": [0.002, 0.001, None, None],
    })
    spent = version_spend(runs)
    assert (spent.model_calls, spent.prompt_tokens, spent.completion_tokens) == (9, 160, 16)
    assert spent.cost_usd == pytest.approx(0.003) and spent.unpriced == 1
    assert spent.cost_text() == "$0.0030 (1 recordings not priced)"
    assert version_spend(None).cost_text().startswith("not priced") and not version_spend(None).used_a_model
    from oloproof_pipeline.read.spend import spend_difference_line

    cheaper = version_spend(runs.assign(cost_usd=[0.001, 0.001, None, 0.0]))
    assert spend_difference_line("1.0.0", "1.1.0", cheaper, version_spend(runs.assign(cost_usd=[0.002, 0.001, None, 0.001]))) == (
        "model use: 1.0.0 9 calls $0.0020, 1.1.0 9 calls $0.0040 (+0.0020 USD)"
    )
