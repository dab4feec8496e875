"""What a cached result is made from (issue 24): the environment variables `system.env` names
re-record when their values change; a file `oloproof.yaml` names outside the project folder (a
dataset at `../cases.jsonl`) invalidates the up-to-date stamp; a module the system or a python
grader imports, found rather than declared, re-records or re-judges when edited, wherever it
lives; and a launch refused for its `DAGSTER_HOME` leaves the stamp standing."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd

from oloproof_pipeline.evaluators.verdict_keys import evaluator_digests
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.project import load_project

from conftest import write_project
from helpers import OLOPROOF, cli_environment, oloproof, oloproof_in_process

# Marks the world done only while TINY_MODE is "good": what the environment says is behaviour.
ENV_APP = """
import copy
import os


class System:
    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        self.state["done"] = os.environ.get("TINY_MODE") == "good"
        return {"answer": "ok"}
"""
CASES = [
    {"id": f"c{n:02d}", "input": {}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
    for n in range(12)
]


def outcomes(root) -> dict[str, str]:
    verdicts = pd.read_parquet(root / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet")
    return dict(zip(verdicts["case_id"], verdicts["outcome"]))


def test_a_changed_declared_environment_variable_re_records_and_changes_the_gate(tmp_path, monkeypatch):
    root = write_project(tmp_path / "tiny", app=ENV_APP, cases=CASES, extra_config="")
    config = json.loads((root / "oloproof.yaml").read_text())
    config["system"]["env"] = ["TINY_MODE"]
    (root / "oloproof.yaml").write_text(json.dumps(config, indent=2))
    monkeypatch.setenv("TINY_MODE", "good")
    first = oloproof("run", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    assert set(outcomes(root).values()) == {"PASS"}
    monkeypatch.setenv("TINY_MODE", "bad")
    second = oloproof("run", cwd=root)
    assert "up to date" not in second.stdout, second.stdout
    assert second.returncode not in (0, 2, 5), second.stdout + second.stderr  # decided, not ALLOW
    assert set(outcomes(root).values()) == {"FAIL"}


def test_an_edited_dataset_outside_the_project_folder_is_not_up_to_date(tmp_path):
    root = write_project(tmp_path / "tiny", app=ENV_APP.replace('os.environ.get("TINY_MODE") == "good"', "True"), cases=CASES)
    outside = tmp_path / "cases.jsonl"
    (root / "data" / "cases.jsonl").rename(outside)
    config = json.loads((root / "oloproof.yaml").read_text())
    config["dataset"] = "../cases.jsonl"
    (root / "oloproof.yaml").write_text(json.dumps(config, indent=2))
    first = oloproof("run", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    again = oloproof("run", cwd=root)
    assert "up to date" in again.stdout, again.stdout  # the stamp works when nothing changed
    extra = {"id": "c99", "input": {}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
    outside.write_text(outside.read_text() + json.dumps(extra) + "\n")
    edited = oloproof("run", cwd=root)
    assert "up to date" not in edited.stdout, edited.stdout
    assert edited.returncode == 0, edited.stdout + edited.stderr
    assert "c99" in outcomes(root)


def test_an_invalid_environment_variable_name_is_one_error_line(tmp_path):
    root = write_project(tmp_path / "tiny", app=ENV_APP, cases=CASES)
    text = (root / "oloproof.yaml").read_text().replace('"callable": "app:System"', '"callable": "app:System", "env": ["NOT-A-NAME"]')
    (root / "oloproof.yaml").write_text(text)
    refused = oloproof_in_process("run", cwd=root)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert "oloproof.yaml:" in lines[0] and "system.env" in lines[0], lines[0]


# -- modules found, not declared -------------------------------------------------------------

# The system's behaviour lives in a module app.py imports; `system.code_paths` names nothing.
SIBLING_APP = ENV_APP.replace("import os\n", "import os\n\nimport behaviour\n").replace(
    'os.environ.get("TINY_MODE") == "good"', "behaviour.DONE"
)


def allowed_then_edited(root: Path, module: Path, before: str, after: str) -> subprocess.CompletedProcess:
    """`module` reads `before`: a run ALLOWs, every case PASS, and a rerun is up to date. Then it
    reads `after`, which should fail every case: the run after the edit, checked to decide so."""
    module.write_text(before)
    first = oloproof("run", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    assert set(outcomes(root).values()) == {"PASS"}
    again = oloproof("run", cwd=root)
    assert "up to date" in again.stdout, again.stdout  # modules found unchanged keep the stamp
    module.write_text(after)
    edited = oloproof("run", cwd=root)
    assert "up to date" not in edited.stdout, edited.stdout
    assert edited.returncode not in (0, 2, 5), edited.stdout + edited.stderr  # decided, not ALLOW
    assert set(outcomes(root).values()) == {"FAIL"}
    return edited


def test_an_edited_module_the_system_imports_re_records_and_changes_the_gate(tmp_path):
    root = write_project(tmp_path / "tiny", app=SIBLING_APP, cases=CASES)
    edited = allowed_then_edited(root, root / "behaviour.py", "DONE = True\n", "DONE = False\n")
    assert "12 cases re-recorded: system code changed (behaviour.py)" in edited.stdout, edited.stdout


def test_an_edited_module_imported_from_outside_the_folder_is_not_up_to_date(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    app = SIBLING_APP.replace("import behaviour\n", f"import sys\nsys.path.insert(0, {str(shared)!r})\nimport behaviour\n")
    root = write_project(tmp_path / "tiny", app=app, cases=CASES)
    edited = allowed_then_edited(root, shared / "behaviour.py", "DONE = True\n", "DONE = False\n")
    assert f"12 cases re-recorded: system code changed ({shared / 'behaviour.py'})" in edited.stdout, edited.stdout


# A python grader whose rule lives in a helper module it imports.
GRADER = """
import rules


def done(case, recording):
    passed = rules.accepts(recording.state_after)
    return {"outcome": "PASS" if passed else "FAIL", "reason": "done" if passed else "not_done", "details": {}}
"""


def test_an_edited_module_a_python_grader_imports_re_judges(tmp_path):
    app = ENV_APP.replace('os.environ.get("TINY_MODE") == "good"', "True")
    evaluators = [{"type": "python", "criterion": "done", "function": "graders:done"}]
    root = write_project(tmp_path / "tiny", app=app, cases=CASES, evaluators=evaluators)
    (root / "graders.py").write_text(GRADER)
    edited = allowed_then_edited(
        root, root / "rules.py", "def accepts(state):\n    return state['done']\n", "def accepts(state):\n    return not state['done']\n"
    )
    assert "judged 12 verdicts" in edited.stdout, edited.stdout
    assert "recorded 0 cases and reused 12" in edited.stdout, edited.stdout  # the system is untouched


def test_a_dagster_home_refused_then_switched_back_is_up_to_date(tmp_path):
    root = write_project(tmp_path / "tiny", app=ENV_APP.replace('os.environ.get("TINY_MODE") == "good"', "True"), cases=CASES)
    first = oloproof("run", cwd=root)
    assert first.returncode == 0, first.stdout + first.stderr
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    away = subprocess.run([OLOPROOF, "run"], cwd=root, capture_output=True, text=True, timeout=300,
                          env={**cli_environment(), "DAGSTER_HOME": str(elsewhere)})
    assert away.returncode == 2, away.stdout + away.stderr  # not the project's instance: refused
    assert "its run history is in" in away.stderr, away.stderr
    back = oloproof("run", cwd=root)
    assert back.returncode == 0, back.stdout + back.stderr
    assert "Version 1.0.0 is up to date" in back.stdout, back.stdout


def test_a_helper_two_graders_import_is_in_both_keys_and_read_afresh(tmp_path):
    """The second grader finds the helper the first one imported already, and a project
    loaded again (a long-lived Dagster process) imports the edited helper, not the old one."""
    evaluators = [{"type": "python", "criterion": name, "function": f"graders:{name}"} for name in ("done", "again")]
    root = write_project(tmp_path / "tiny", app=ENV_APP, cases=CASES, evaluators=evaluators)
    (root / "graders.py").write_text(GRADER + "\nagain = done\n")
    (root / "rules.py").write_text("def accepts(state):\n    return state['done']\n")
    project = load_project(root)
    assert [evaluator.project_code_files(root)[1:] for evaluator in project.evaluators] == [[(root / "rules.py").resolve()]] * 2
    digests = evaluator_digests(project)
    (root / "rules.py").write_text("def accepts(state):\n    return False\n")
    again = load_project(root)
    assert all(old != new for old, new in zip(digests, evaluator_digests(again)))
    recording = RecordedRun(case_id="c00", case_digest="d", system_version="1.0.0", status="ok",
                            environment_state={"initial": "sha256:x", "state": {"done": True}})
    assert again.evaluators[0].function()(None, recording)["outcome"] == "FAIL"  # the edited helper ran


def test_a_variable_changed_in_a_long_lived_process_reaches_the_system(tmp_path, monkeypatch):
    """`dagster dev` or a notebook evaluates twice in one process: the second run's worker
    gets the variable as it is now, not as it was when the first run started the fork server."""
    from dagster import DagsterInstance

    from oloproof_pipeline.defs.launch import run_evaluation

    root = write_project(tmp_path / "tiny", app=ENV_APP, cases=CASES, extra_config="")
    config = json.loads((root / "oloproof.yaml").read_text())
    config["system"]["env"] = ["TINY_MODE"]
    (root / "oloproof.yaml").write_text(json.dumps(config, indent=2))
    (tmp_path / "instance").mkdir()
    with DagsterInstance.local_temp(tempdir=str(tmp_path / "instance")) as instance:
        monkeypatch.setenv("TINY_MODE", "good")
        run_evaluation(root, instance=instance)
        assert set(outcomes(root).values()) == {"PASS"}
        monkeypatch.setenv("TINY_MODE", "bad")
        run_evaluation(root, instance=instance)
        assert set(outcomes(root).values()) == {"FAIL"}
