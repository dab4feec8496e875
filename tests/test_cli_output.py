"""What `oloproof` prints, as scripts and people read it: one JSON document from `--json`
with the exit code unchanged, `export -o -` on stdout, the decisions table at 80 and 120
columns, and what `run` says it did."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from conftest import write_project
from helpers import OLOPROOF, cli_environment, oloproof
from oloproof_pipeline.cli.gate import gate_table
from oloproof_pipeline.store.layout import read_table
from oloproof_pipeline.store.tables import GATE_NESTED, rows_from_frame

EXAMPLES = ("stateful-agent", "conditional-approval")


@pytest.fixture(scope="module")
def examples(evaluated_example, evaluated_approvals) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Both examples, each evaluated once with `run --json` (shared by the test worker, see conftest)."""
    return {"stateful-agent": evaluated_example, "conditional-approval": evaluated_approvals}


# -- JSON ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", EXAMPLES)
def test_run_json_is_one_document_with_the_gates_exit_code(examples, name):
    root, ran = examples[name]
    document = json.loads(ran.stdout)  # the whole of stdout: one document, nothing else
    assert ran.returncode == document["gate"]["exit_code"] == 1, ran.stderr  # both examples have a FAIL
    assert document["version"] == "1.0.0" and document["gate"]["decision"] == "BLOCK"
    assert re.fullmatch(r"[0-9a-f-]{36}", document["run_id"])
    assert document["report"].endswith(".html") and Path(document["report"]).is_file()
    assert f"DAGSTER_HOME={root / '.oloproof' / 'dagster_home'} dagster dev -f {root / 'definitions.py'}" == document["dagster_dev"]
    counts = document["counts"]
    assert counts["cases_recorded"] > 0 and counts["cases_reused"] == 0
    assert sum(counts["verdicts"].values()) == len(read_table(root, "verdicts", "1.0.0"))
    stored = {row["rule_id"]: row for row in rows_from_frame(read_table(root, "gate", "1.0.0"), GATE_NESTED)}
    assert [rule["rule_id"] for rule in document["rules"]] == list(stored)
    for rule in document["rules"]:
        row = stored[rule["rule_id"]]
        assert set(rule) == {"rule_id", "metric", "decision", "rate", "interval", "method", "bar", "counts", "reasons", "suite_size_to_decide"}
        assert (rule["decision"], rule["rate"], rule["method"], rule["reasons"]) == (row["decision"], row["estimate"], row["method"], row["reasons"])
        assert rule["interval"] == {"lower": row["lower"], "upper": row["upper"]}
        assert rule["bar"] == {"kind": row["bar_kind"], "min": row["bar_min"], "max": row["bar_max"]}
        assert rule["counts"]["judged"] == rule["counts"]["passed"] + rule["counts"]["failed"]
        assert rule["suite_size_to_decide"] is None or isinstance(rule["suite_size_to_decide"], int)


@pytest.mark.parametrize("name", EXAMPLES)
def test_gate_json_pipes_into_json_tool_with_the_exit_code_unchanged(examples, name):
    root, ran = examples[name]
    gate = subprocess.Popen([OLOPROOF, "gate", "--json"], cwd=root, stdout=subprocess.PIPE, env=cli_environment())
    tool = subprocess.run([sys.executable, "-m", "json.tool"], stdin=gate.stdout, capture_output=True, text=True, timeout=120)
    gate.stdout.close()
    assert gate.wait(timeout=120) == 1 == ran.returncode
    assert tool.returncode == 0, tool.stderr
    document = json.loads(tool.stdout)
    assert document["rules"] == json.loads(ran.stdout)["rules"] and document["run_id"] == json.loads(ran.stdout)["run_id"]


def test_run_json_keeps_stdout_clean_when_the_system_prints(tmp_path):
    app = """
        import sys

        class System:
            def __call__(self, request):
                print("the system under test talks on stdout")
                sys.stdout.flush()
                return {"answer": request["q"]}
    """
    cases = [{"id": f"c{index}", "input": {"q": "x"}, "expected": {"answer": "x"}} for index in range(3)]
    evaluators = [{"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "expected.answer"}]
    project = write_project(tmp_path / "chatty", app=app, cases=cases, evaluators=evaluators)
    ran = oloproof("run", "--json", cwd=project)
    document = json.loads(ran.stdout)
    assert ran.returncode == document["gate"]["exit_code"] == 3  # 3 of 3 pass: not enough cases to clear 0.5
    assert "talks on stdout" in ran.stderr


# -- export to stdout ----------------------------------------------------------------------


def test_export_writes_to_stdout_with_dash(examples):
    root, _ = examples["stateful-agent"]
    exported = oloproof("export", "--format", "jsonl", "-o", "-", cwd=root)
    assert exported.returncode == 0, exported.stderr
    lines = [json.loads(line) for line in exported.stdout.splitlines()]
    assert len(lines) == 72 and {line["system_version"] for line in lines} == {"1.0.0"}
    assert "Wrote 72 lines to stdout" in exported.stderr
    assert not (root / "-").exists()


# -- the decisions table at 80 and 120 columns ---------------------------------------------


def _reasons_text(lines: list[str], rows: list[dict]) -> str:
    """The reasons column of the section under the table, with the wrapping undone. The rule
    ids stand in a first column as wide as the longest (folded beyond 30), then 2 spaces."""
    start = lines.index("Reasons:")
    offset = min(max(len(row["rule_id"]) for row in rows), 30) + 2
    return " ".join(" ".join(line[offset:].split()) for line in lines[start + 1:])


def _check_readable(text: str, rows: list[dict], width: int) -> None:
    lines = text.splitlines()
    table = lines[: lines.index("Reasons:")]
    assert "…" not in text
    for line in table:
        assert len(line) <= width, line
    for row in rows:
        # The rule id whole, with its decision, its rate to three places and its interval on its line.
        line = next(line for line in table if line.split() and line.split()[0] == row["rule_id"])
        assert row["decision"] in line.split()
        assert f"{row['estimate']:.3f}" in line.split()
        assert f"[{row['lower']:.3f}, {row['upper']:.3f}]" in line
        for reason in row["reasons"]:
            assert " ".join(reason.split()) in _reasons_text(lines, rows)


@pytest.mark.parametrize("width", [80, 120])
@pytest.mark.parametrize("name", EXAMPLES)
def test_decisions_table_is_readable_at_80_and_120_columns(examples, name, width):
    root, _ = examples[name]
    rows = rows_from_frame(read_table(root, "gate", "1.0.0"), GATE_NESTED)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(gate_table(rows, "1.0.0"))
    _check_readable(console.export_text(), rows, width)
    # The real command, piped, honours $COLUMNS the same way.
    shown = oloproof("gate", cwd=root, columns=width)
    assert shown.returncode == 1
    decisions = shown.stdout[shown.stdout.index("Decisions for version"):]
    _check_readable(decisions[: decisions.index("Gate: ")], rows, width)
    assert shown.stdout.splitlines()[-1] == "Gate: BLOCK (exit code 1: a rule FAILed)"


def test_long_reasons_wrap_under_the_table_instead_of_being_cropped():
    reason = "interval_straddles_bar: lower 0.626 < min 0.7; " + "a reason long enough to need wrapping " * 6
    row = {
        "rule_id": "a_rule_with_a_rather_long_identifier", "metric": "a_metric_with_an_even_longer_name_than_the_rule",
        "decision": "INSUFFICIENT_EVIDENCE", "estimate": 0.8333, "lower": 0.6262, "upper": 0.9526,
        "method": "clopper_pearson_effective_clusters", "passed": 20, "failed": 4, "missing": 3, "excluded": 48,
        "reasons": [reason],
    }
    for width in (80, 120):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))
        console.print(gate_table([row], "1.0.0"))
        text = console.export_text()
        assert "…" not in text and all(len(line) <= width for line in text.splitlines())
        assert " ".join(reason.split()) in _reasons_text(text.splitlines(), [row])
        lines = text.splitlines()
        folded_id = "".join(line[:30].strip() for line in lines[lines.index("Reasons:") + 1:])
        assert folded_id == row["rule_id"]
        assert "eff. clusters" in text and "3 missing" in text and "48 excl." in text


# -- what `run` says -----------------------------------------------------------------------


def test_run_says_what_it_did_and_a_verbose_block_has_no_stack_trace(evaluated_desk):
    root = evaluated_desk  # a copy: this run adds to its history
    ran = oloproof("run", "--verbose", "--launch", cwd=root)
    assert ran.returncode == 1
    out = ran.stdout
    # Everything was recorded by the first run: this one, launched anyway, reuses it all.
    assert re.search(r"evaluated version 1\.0\.0: recorded 0 cases and reused 72; replayed 0 and reused 12; "
                     r"judged 0 verdicts and reused 432 \(\d+ PASS, \d+ FAIL, 0 MISSING, \d+ EXCLUDED\)", " ".join(out.split()))
    assert "nothing changed: every recording, replay and verdict was reused" in out
    assert f"Report: {root / '.oloproof' / 'reports' / 'report-1.0.0.html'}" in out
    assert f"Open the run in Dagster: DAGSTER_HOME={root / '.oloproof' / 'dagster_home'} dagster dev -f {root / 'definitions.py'}" in out
    assert out.splitlines()[-1] == "Gate: BLOCK (exit code 1: a rule FAILed)"
    # --verbose shows Dagster's log, but a blocked gate is a decision, not a crash.
    assert "recorded 0 cases, reused 72" in ran.stderr
    assert "Stack Trace" not in ran.stderr and "Traceback" not in ran.stderr
    # The gate step says the decision in one line; the run itself succeeded.
    assert "gate 1.0.0: BLOCK (exit code 1): refund_failures: FAIL" in ran.stderr
