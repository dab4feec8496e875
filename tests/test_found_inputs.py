"""What a system reads besides its code is an input too (issue 24): the environment variables
`system.env` names re-record when their values change, and a file `oloproof.yaml` names
outside the project folder (a dataset at `../cases.jsonl`) invalidates the up-to-date stamp."""

from __future__ import annotations

import json

import pandas as pd

from conftest import write_project
from helpers import oloproof, oloproof_in_process

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
