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
from helpers import OLOPROOF, cli_environment, oloproof, oloproof_in_process
from oloproof_pipeline.cli.gate import gate_table
from oloproof_pipeline.decide.formatting import rule_cells
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


# -- a terminal that fits: 60, 80 and 120 columns ------------------------------------------

SEPARATORS = "_./-,:="


def split_words(narrow: str, whole: str) -> list[str]:
    """The words of `narrow` that are a word of `whole` broken anywhere but after a separator:
    a fold may end a piece after `_`, `.`, `/`, `-`, `,`, `:` or `=`, and the next piece then
    starts after one; a word cut anywhere else is a split."""
    words = set(whole.split())
    split = []
    for token in set(narrow.split()) - words - {"─" * len(token) for token in narrow.split()}:  # rules under headers
        places = [(word, at) for word in words for at in range(len(word)) if word.startswith(token, at)]
        if places and not any(
            (at == 0 or word[at - 1] in SEPARATORS) and (at + len(token) == len(word) or token[-1] in SEPARATORS)
            for word, at in places
        ):
            split.append(token)
    return split


def check_fits(narrow: str, whole: str, width: int) -> None:
    """Every line within the width, no line ending in spaces, nothing cropped, and no word
    split but at a separator (checked against the same output unwrapped)."""
    lines = narrow.splitlines()
    assert "…" not in narrow
    assert [line for line in lines if len(line) > width] == []
    assert [line for line in lines if line != line.rstrip()] == []
    assert split_words(narrow, whole) == []


# Read-only commands on the evaluated example, in-process (nothing imports the system or
# starts Dagster). `compare` sets the version beside itself: every criterion, every column.
READING_COMMANDS = (("gate",), ("inspect", "ord-021"), ("inspect", "ord-006"), ("compare", "1.0.0", "1.0.0"))


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("command", READING_COMMANDS, ids=" ".join)
def test_commands_fit_60_80_and_120_columns_without_splitting_a_word(examples, command, width):
    root, _ = examples["stateful-agent"]
    whole = oloproof_in_process(*command, cwd=root)
    shown = oloproof_in_process(*command, cwd=root, columns=width)
    assert shown.returncode == whole.returncode and shown.returncode in (0, 1), shown.stderr
    check_fits(shown.stdout, whole.stdout, width)
    if width < 120:  # the longest identifiers were folded, not left whole past the width
        assert "recovers_from_error_at_issue_refund" in whole.stdout


def test_piped_output_is_neither_padded_nor_wrapped(examples):
    root, _ = examples["stateful-agent"]
    shown = oloproof_in_process("gate", cwd=root)
    lines = shown.stdout.splitlines()
    assert [line for line in lines if line != line.rstrip()] == []
    rows = rows_from_frame(read_table(root, "gate", "1.0.0"), GATE_NESTED)
    for row in rows:  # each reason whole on its rule's line under "Reasons:"
        line = next(line for line in lines[lines.index("Reasons:"):] if line.startswith(row["rule_id"] + " "))
        assert line.split(None, 1)[1] == "; ".join(row["reasons"]) or row["reasons"][0] in line
    assert max(len(line) for line in lines) > 120  # laid out at its natural width, not at 80 or 200


@pytest.mark.parametrize("width", [60, 80, 120])
@pytest.mark.parametrize("name", EXAMPLES)
def test_decisions_table_has_each_rules_words_at_60_80_and_120_columns(examples, name, width):
    root, _ = examples[name]
    rows = rows_from_frame(read_table(root, "gate", "1.0.0"), GATE_NESTED)
    console = Console(width=width, record=True, file=open(os.devnull, "w"))
    console.print(gate_table(rows, "1.0.0"))
    text = console.export_text()
    whole = Console(width=1000, record=True, file=open(os.devnull, "w"))
    whole.print(gate_table(rows, "1.0.0"))
    check_fits("\n".join(line.rstrip() for line in text.splitlines()), whole.export_text(), width)
    table = text[: text.index("Reasons:")]
    unfolded = " ".join(table.split())
    for row in rows:
        cells = rule_cells(row)
        for name in ("rate", "interval", "bar", "passed/judged", "method"):
            assert cells[name] in table, (name, cells[name])
        assert row["decision"] in unfolded or width < 76 and row["decision"].replace("_", "_ ") in unfolded
        assert row["bar_kind"] in ("min", "max") and f"{row['bar_kind']} " in table


def test_a_long_rule_folds_at_its_underscores_and_its_reasons_wrap_between_words():
    reason = "interval_straddles_bar: lower 0.626 < min 0.7; " + "a reason long enough to need wrapping " * 6
    row = {
        "rule_id": "a_rule_with_a_rather_long_identifier", "metric": "a_metric_with_an_even_longer_name_than_the_rule",
        "decision": "INSUFFICIENT_EVIDENCE", "estimate": 0.8333, "lower": 0.6262, "upper": 0.9526,
        "method": "clopper_pearson_effective_clusters", "passed": 20, "failed": 4, "missing": 3, "excluded": 48,
        "bar_kind": "min", "bar": 0.7, "bar_min": 0.7, "bar_max": None, "reasons": [reason],
    }
    whole = Console(width=1000, record=True, file=open(os.devnull, "w"))
    whole.print(gate_table([row], "1.0.0"))
    for width in (60, 80, 120):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))
        console.print(gate_table([row], "1.0.0"))
        text = console.export_text()
        check_fits("\n".join(line.rstrip() for line in text.splitlines()), whole.export_text(), width)
        lines = text.splitlines()
        under = lines[lines.index("Reasons:") + 1:]
        offset = under[0].index("interval_straddles_bar")  # the reasons' column; the rule id folds left of it
        assert " ".join(line[offset:].strip() for line in under) == " ".join(reason.split())
        assert "".join(line[:offset].strip() for line in under) == row["rule_id"]
        assert "eff. clusters" in text and "3 missing" in text and "48 excluded" in text and "min 0.7" in text


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
    # At 60 columns (the run just stamped: nothing is launched in this process) it all fits.
    whole = oloproof_in_process("run", cwd=root)
    narrow = oloproof_in_process("run", cwd=root, columns=60)
    assert narrow.returncode == whole.returncode == 1 and "Version 1.0.0 is up to date" in narrow.stdout
    check_fits(narrow.stdout, whole.stdout, 60)


# -- what `inspect` shows ------------------------------------------------------------------


def test_inspect_shows_verdicts_first_with_expected_beside_actual(examples):
    """ord-021 should have been declined and was refunded: its verdicts come first, the answer
    expected ("declined") beside the answer given, the status expected beside the status left;
    the bystander order's four paths, which all held, are one line."""
    root, _ = examples["stateful-agent"]
    shown = oloproof_in_process("inspect", "ord-021", cwd=root, columns=100)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines.index("Verdicts") < next(index for index, line in enumerate(lines) if line.startswith("input"))
    assert ["answer", '"declined"', '"refunded"'] in [line.split() for line in lines]
    assert ["orders.ord-021.status", '"delivered"', '"refunded"'] in [line.split() for line in lines]
    untouched = lines.index(next(line for line in lines if line.startswith("other_order_untouched")))
    assert lines[untouched + 1].split() == ["all", "4", "paths", "held", "(orders.ord-999.*)"]
    assert not any("orders.ord-999.customer" in line for line in lines)


def test_the_dagster_dev_line_is_the_readmes_when_a_workspace_loads_the_project(tmp_path):
    """A project a workspace.yaml loads is opened the README's way, `dagster dev -w`, on the
    workspace's instance; one no workspace loads, with `-f definitions.py`."""
    from helpers import EXAMPLE, REPO, copy_project
    from oloproof_pipeline.cli.run import dagster_dev_command

    root = copy_project(EXAMPLE, tmp_path / "repo" / "desk")
    alone = copy_project(EXAMPLE, tmp_path / "alone")
    (tmp_path / "repo" / "workspace.yaml").write_text(
        "load_from:\n  - python_file:\n      relative_path: desk/definitions.py\n      location_name: desk\n"
    )
    assert dagster_dev_command(root) == (
        f"DAGSTER_HOME={tmp_path / 'repo' / '.oloproof' / 'dagster_home'} dagster dev -w {tmp_path / 'repo' / 'workspace.yaml'}"
    )
    assert "dagster dev -w workspace.yaml" in (REPO / "README.md").read_text()
    assert dagster_dev_command(alone).endswith(f"dagster dev -f {alone / 'definitions.py'}")
