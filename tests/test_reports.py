"""Reading results the way a person does: a case panel, an HTML report, JSON lines, and two
versions compared."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

OLOPROOF = str(Path(sys.executable).parent / "oloproof")
# A fix for the desk's first flaw: with it, version 1.1.0 declines the pasted overrides.
FIXED_OVERRIDE = ('if "system override" in message.lower():', 'if False:')


def oloproof(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"}
    return subprocess.run([OLOPROOF, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=environment)


@pytest.fixture(scope="module")
def two_versions(tmp_path_factory) -> Path:
    """The refund desk run at 1.0.0, then fixed and run at 1.1.0."""
    root = tmp_path_factory.mktemp("reports") / "desk"
    assert oloproof("init", str(root), "--example", "stateful-agent", cwd=root.parent).returncode == 0
    assert oloproof("run", cwd=root).returncode == 1
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
    assert "orders.ord-021.status" in text and '"declined"' not in text.split("state compared")[0]
    assert "issue_refund" in text and "lookup_order" not in text  # the override skips the lookup
    assert "state_correct" in text and "FAIL" in text and "state_differs" in text
    missing = oloproof("inspect", "ord-404", cwd=two_versions)
    assert missing.returncode == 2 and "no case 'ord-404'" in missing.stderr


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
    assert Path(gate.metadata["report_path"].value).is_file()


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


def test_compare_pairs_the_same_cases_across_versions(two_versions):
    compared = oloproof("compare", "1.0.0", "1.1.0", cwd=two_versions)
    assert compared.returncode == 0, compared.stderr
    rows = {line.split("│")[1].strip(): line for line in compared.stdout.splitlines() if line.startswith("│")}
    # The fix turns the four override cases from FAIL to PASS on the answer.
    answer = [cell.strip() for cell in rows["answer_correct"].split("│")[1:-1]]
    assert answer[:7] == ["answer_correct", "24", "20", "4", "0", "0", "0"]
    assert answer[7] == "+0.167"
