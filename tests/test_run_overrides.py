"""`oloproof run --set KEY=VALUE` and `--version V`: a second configuration is a flag, not an
edit, validated exactly as oloproof.yaml is."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.fingerprints import run_inputs_digest
from oloproof_pipeline.model.overrides import apply_settings, parse_settings
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store.layout import table_path

from conftest import write_project
from helpers import oloproof, oloproof_in_process

# Leaves one key more than the case expects: exact fails, subset passes. It reports no
# version of its own: oloproof.yaml's (or --version's) is the one evaluated.
APP = """
import copy


class System:
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        self.state["done"] = True
        self.state["note"] = "extra"
        return {"answer": "ok"}
"""


def project(root: Path) -> Path:
    cases = [{"id": "c-1", "input": {"q": 1}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}]
    return write_project(root, app=APP, cases=cases, evaluators=[{"type": "state_matches", "criterion": "state_correct"}],
                         rules=[])


def test_settings_are_yaml_values_at_dotted_keys():
    data = {"system": {"name": "a"}, "evaluators": [{"type": "state_matches"}]}
    settings = parse_settings(["system.model.name=gpt-x", "evaluators.0.mode=subset", "execution.timeout_s=3",
                               "system.code_paths=[a, b]"])
    assert apply_settings(data, settings, file="oloproof.yaml") == {
        "system": {"name": "a", "model": {"name": "gpt-x"}, "code_paths": ["a", "b"]},
        "evaluators": [{"type": "state_matches", "mode": "subset"}],
        "execution": {"timeout_s": 3},
    }
    assert data == {"system": {"name": "a"}, "evaluators": [{"type": "state_matches"}]}  # a copy changed
    for bad, problem in [("system.name", "expected KEY=VALUE"), ("=x", "expected KEY=VALUE"),
                         ("evaluators.5.mode=x", "no index"), ("system.name.first=x", "not a mapping")]:
        with pytest.raises(ProjectError, match=problem):
            apply_settings(data, parse_settings([bad]), file="oloproof.yaml")


def test_a_setting_is_validated_as_the_file_is_and_enters_the_run_inputs(tmp_path):
    root = project(tmp_path / "p")
    with pytest.raises(ProjectError, match=r"oloproof\.yaml:\d+: execution\.timeout_s: .*greater than 0 \(with --set execution\.timeout_s=-1\)"):
        load_project(root, ["execution.timeout_s=-1"])
    with pytest.raises(ProjectError, match=r"system\.bogus: unknown key"):
        load_project(root, ["system.bogus=1"])
    changed = load_project(root, ["evaluators.0.mode=subset"])
    assert changed.evaluators[0].config.mode == "subset"
    assert run_inputs_digest(changed) != run_inputs_digest(load_project(root))


def test_a_bad_setting_is_one_line_and_exit_2(tmp_path):
    root = project(tmp_path / "p")
    result = oloproof_in_process("run", "--ungated", "--set", "evaluators.0.mode=fuzzy", cwd=root)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert "evaluators[0].mode" in line and "--set evaluators.0.mode=fuzzy" in line
    assert not table_path(root, "recorded_runs", "1.0.0").exists()  # nothing ran


def test_set_and_version_change_the_run_without_editing_the_file(tmp_path):
    root = project(tmp_path / "p")
    before = (root / "oloproof.yaml").read_text(encoding="utf-8")
    exact = oloproof("run", "--ungated", "--json", cwd=root)
    assert exact.returncode == 0, exact.stderr
    subset = oloproof("run", "--ungated", "--json", "--set", "evaluators.0.mode=subset", "--version", "2.0", cwd=root)
    assert subset.returncode == 0, subset.stderr
    assert (root / "oloproof.yaml").read_text(encoding="utf-8") == before
    outcomes = {
        version: pd.read_parquet(table_path(root, "verdicts", version)).set_index("case_id").loc["c-1", "outcome"]
        for version in ("1.0.0", "2.0")
    }
    assert outcomes == {"1.0.0": "FAIL", "2.0": "PASS"}  # "2.0" is text, not a YAML number
    # The same run again with the same overrides launches nothing; without them it is another run.
    again = oloproof("run", "--ungated", "--set", "evaluators.0.mode=subset", "--version", "2.0", cwd=root)
    assert again.returncode == 0 and "is up to date" in again.stdout, again.stdout + again.stderr
    plain = oloproof("run", "--ungated", "--version", "2.0", cwd=root)
    assert plain.returncode == 0 and "is up to date" not in plain.stdout, plain.stdout
    assert pd.read_parquet(table_path(root, "verdicts", "2.0")).set_index("case_id").loc["c-1", "outcome"] == "FAIL"
