"""The `oloproof` command as a user runs it: a new folder, any working directory."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from helpers import oloproof, oloproof_in_process

from oloproof_pipeline.cli.init import write_gitignore
from oloproof_pipeline.store.layout import read_table


def decision_lines(output: str) -> list[str]:
    """The decisions table, its reasons and the gate line, as `run` and `gate` end."""
    lines = output.splitlines()
    return lines[next(index for index, line in enumerate(lines) if line.startswith("Decisions for version")):]


def test_init_run_gate_from_anywhere(tmp_path):
    listed = oloproof("init", "--example", "list", cwd=tmp_path)
    assert listed.returncode == 0 and "stateful-agent" in listed.stdout.split()

    project = tmp_path / "x"
    created = oloproof("init", str(project), "--example", "stateful-agent", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert (project / "oloproof.yaml").is_file() and (project / "data" / "cases.jsonl").is_file()

    ran = oloproof("run", cwd=project)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # BLOCK on a failing rule (injection_resistance)
    assert "Gate: BLOCK" in ran.stdout and "bystanders" in ran.stdout and "injection_resistance" in ran.stdout
    # Nothing was stored for the version: its cases are new because the version is.
    assert "  72 cases recorded: first run of version 1.0.0" in ran.stdout.splitlines()

    elsewhere = oloproof("gate", "--project", str(project), cwd=tmp_path)
    assert elsewhere.returncode == 1
    assert decision_lines(elsewhere.stdout) == decision_lines(ran.stdout)

    verdicts = pd.read_parquet(project / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet")
    assert verdicts["judged_by_run"].notna().all()
    # The run was recorded in the project's persistent instance, which `dagster dev` shares.
    assert (project / ".oloproof" / "dagster_home" / "dagster.yaml").is_file()
    assert any((project / ".oloproof" / "dagster_home").rglob("*.db"))


def test_init_refuses_a_non_empty_folder_and_unknown_examples(tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file.txt").write_text("keep me")
    busy = oloproof_in_process("init", str(tmp_path / "busy"), "--example", "stateful-agent", cwd=tmp_path)
    assert busy.returncode == 2 and "not empty" in busy.stderr
    unknown = oloproof_in_process("init", str(tmp_path / "new"), "--example", "nope", cwd=tmp_path)
    assert unknown.returncode == 2 and "no example named 'nope'" in unknown.stderr


def test_init_writes_a_gitignore_naming_what_the_pipeline_writes(tmp_path):
    created = oloproof_in_process("init", str(tmp_path / "new"), "--example", "stateful-agent", cwd=tmp_path)
    assert created.returncode == 0, created.stderr
    assert (tmp_path / "new" / ".gitignore").read_text() == ".oloproof/\ndagster.log\ndagster.pid\n"

    # One already there is kept, and only the missing lines are added.
    (tmp_path / "kept").mkdir()
    (tmp_path / "kept" / ".gitignore").write_text("*.pyc\n.oloproof")
    write_gitignore(tmp_path / "kept")
    assert (tmp_path / "kept" / ".gitignore").read_text() == "*.pyc\n.oloproof\ndagster.log\ndagster.pid\n"
    write_gitignore(tmp_path / "kept")
    assert (tmp_path / "kept" / ".gitignore").read_text() == "*.pyc\n.oloproof\ndagster.log\ndagster.pid\n"


def test_gate_without_a_stored_run_says_what_to_do(refund_desk, tmp_path):
    missing = oloproof("gate", "--project", str(refund_desk), cwd=tmp_path)
    assert missing.returncode == 5
    assert "no gate stored for version '1.0.0'" in missing.stderr and "Traceback" not in missing.stderr


def test_without_a_release_policy_a_run_must_be_asked_to_be_ungated(tmp_path):
    project = tmp_path / "fn"
    (project / "data").mkdir(parents=True)
    (project / "app.py").write_text("def answer(request):\n    return {'answer': request['q'].upper()}\n")
    (project / "data" / "cases.jsonl").write_text(
        '{"id": "a", "input": {"q": "hi"}, "expected": {"answer": "HI"}}\n'
        '{"id": "b", "input": {"q": "yo"}, "expected": {"answer": "no"}}\n'
    )
    (project / "oloproof.yaml").write_text(
        "version: 1\nproject: fn\ndataset: data/cases.jsonl\n"
        'system: {name: fn, version: "0.1", callable: "app:answer"}\n'
        "evaluators:\n  - {type: exact_match, criterion: answer_correct, field: answer, expected_field: expected.answer}\n"
    )
    # A misnamed policy file is no policy: never an ALLOW.
    (project / "release.yml").write_text("version: 1\nrules:\n  - {id: answers, metric: answer_correct, min: 0.9}\n")
    refused = oloproof_in_process("run", cwd=project)  # refused at load: no system, no Dagster
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.splitlines() == [
        f"error: {project / 'release.yaml'}: file not found, so nothing would be gated; write it "
        "(`oloproof run --ungated` records and judges without a gate)"
    ]
    assert not (project / ".oloproof" / "tables").exists()  # refused before anything ran

    ran = oloproof("run", "--ungated", cwd=project)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Gate: none (--ungated: no release policy (release.yaml): nothing is gated)" in ran.stdout
    counts = next(line for line in ran.stdout.splitlines() if line.startswith("answer_correct "))
    assert counts.split() == ["answer_correct", "1", "1", "0", "0"]

    as_json = oloproof("run", "--ungated", "--json", cwd=project)
    assert as_json.returncode == 0, as_json.stdout + as_json.stderr
    assert json.loads(as_json.stdout)["gate"] == {
        "decision": None, "exit_code": 0, "meaning": "no release policy (release.yaml): nothing is gated",
        "reasons": ["no release policy (release.yaml): nothing is gated"],
    }

    # Reading the ungated version back is no decision either.
    gate = oloproof("gate", cwd=project)
    assert gate.returncode == 2 and "was judged with no release policy" in gate.stderr
    assert len(gate.stderr.splitlines()) == 1

    # A policy with no rules gates nothing: refused with its line.
    (project / "release.yml").rename(project / "release.yaml")
    (project / "release.yaml").write_text("version: 1\nrules: []\n")
    empty = oloproof_in_process("run", cwd=project)
    assert empty.returncode == 2
    assert empty.stderr.splitlines() == [
        f"error: {project / 'release.yaml'}:2: rules: Value error, a release policy needs at least one rule "
        "(without release.yaml, `oloproof run --ungated` records and judges without a gate)"
    ]


def test_run_json_and_the_run_summary_say_what_the_model_calls_cost(tmp_path):
    """A chat agent priced by `pricing:`: `run --json` gives the version's model calls, tokens
    and cost_usd (the sums over its recordings), and the summary of a rerun with nothing
    changed says them in one line, with no new call to the stand-in."""
    from test_budget import RATE, configure
    from test_concurrency import EXAMPLE, SOURCES, CountingStandIn

    root = tmp_path / "chat_desk"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    data = root / "data" / "cases.jsonl"
    data.write_text("\n".join(line for line in data.read_text().splitlines() if json.loads(line)["id"] in SOURCES) + "\n")
    with CountingStandIn() as standin:
        configure(root, standin.url, pricing=[RATE])
        ran = oloproof("run", "--json", cwd=root)
        document = json.loads(ran.stdout)
        calls = len(standin.log)
        again = oloproof("run", cwd=root, columns=200)
        assert len(standin.log) == calls  # nothing changed: no model call
    assert ran.returncode == document["gate"]["exit_code"], ran.stderr
    runs = read_table(root, "recorded_runs", document["version"])
    spend = document["spend"]
    # The recordings' calls (the fault replays' calls come on top of them at the stand-in).
    assert spend["model_calls"] == runs["model_calls"].sum() and 0 < spend["model_calls"] <= calls
    assert spend["unpriced"] == 0
    assert spend["prompt_tokens"] == runs["prompt_tokens"].sum() > 0 and spend["completion_tokens"] == runs["completion_tokens"].sum() > 0
    assert spend["cost_usd"] == pytest.approx(runs["cost_usd"].sum()) and spend["cost_usd"] > 0
    assert "is up to date" in again.stdout
    [line] = [line for line in again.stdout.splitlines() if line.startswith("Model use:")]
    assert line == (f"Model use: {spend['model_calls']} model calls, {spend['prompt_tokens']} prompt + {spend['completion_tokens']} "
                    f"completion tokens, ${spend['cost_usd']:.4f}")


def test_a_scripted_system_spends_nothing_in_run_json(evaluated_example):
    _, ran = evaluated_example
    assert json.loads(ran.stdout)["spend"] == {"model_calls": 0, "prompt_tokens": 0, "completion_tokens": 0,
                                               "cost_usd": None, "unpriced": 0}


def test_help_names_each_flag_without_a_type(tmp_path):
    """`--help` lists `--fresh` and `--help` as flags (typer's panels said `--help <bool>`),
    with no line padded to the terminal's width."""
    shown = oloproof_in_process("run", "--help", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "<bool>" not in shown.stdout
    flags = {line.split()[0] for line in shown.stdout.splitlines() if line.strip().startswith("--")}
    assert {"--fresh", "--launch", "--json", "--help"} <= flags
    assert [line for line in shown.stdout.splitlines() if line != line.rstrip()] == []
