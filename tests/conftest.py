"""Shared fixtures: real project folders written to a temporary directory."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest
from dagster import DagsterInstance

# pytest-xdist's workers get COLUMNS=80 and LINES=24 in their environment, and every CLI the
# tests start would inherit them; the CLI sizes its output by COLUMNS. Tests that care about
# the width set it themselves, as a user's terminal would.
# A shell that says PYTHONDONTWRITEBYTECODE would make each CLI process the tests start
# compile the whole package again (about 0.4 s each); an installed package's is compiled once.
for _name in ("COLUMNS", "LINES", "PYTHONDONTWRITEBYTECODE"):
    os.environ.pop(_name, None)

from helpers import EXAMPLE, REPO, copy_project, oloproof  # noqa: E402,F401 (after COLUMNS is gone; REPO, EXAMPLE re-exported)


@pytest.fixture
def instance(tmp_path):
    """A Dagster instance of the test's own, in its temporary folder."""
    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        yield instance


@pytest.fixture
def refund_desk(tmp_path: Path) -> Path:
    """A fresh copy of the refund-desk example."""
    return copy_project(EXAMPLE, tmp_path / "refund_desk")


def evaluated_by_cli(tmp_path_factory, example: str):
    """`oloproof init --example <example>`, then one `oloproof run --json` (both examples' gates
    BLOCK: exit 1), recorded in the project's own Dagster instance under .oloproof/."""
    root = tmp_path_factory.mktemp("evaluated") / example.replace("-", "_")
    created = oloproof("init", str(root), "--example", example, cwd=root.parent)
    assert created.returncode == 0, created.stdout + created.stderr
    ran = oloproof("run", "--json", cwd=root)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    return root, ran


@pytest.fixture(scope="session")
def evaluated_example(tmp_path_factory):
    """The refund desk evaluated once by the CLI, once per test worker: the project folder and
    the finished `run --json`. Only for tests that READ what it stored; a test that changes
    anything works on `evaluated_desk`, a copy."""
    return evaluated_by_cli(tmp_path_factory, "stateful-agent")


@pytest.fixture(scope="session")
def evaluated_approvals(tmp_path_factory):
    """The conditional-approval example evaluated once by the CLI, once per test worker, for
    tests that only READ what it stored."""
    return evaluated_by_cli(tmp_path_factory, "conditional-approval")


@pytest.fixture(scope="session")
def evaluated_in_instance(tmp_path_factory):
    """A copy of the refund desk evaluated once by `run_evaluation` into a temporary Dagster
    instance of its own: once per test worker, for tests that only READ its tables and events.
    Returns the project folder, the instance and the evaluation."""
    from oloproof_pipeline.defs.launch import run_evaluation

    folder = tmp_path_factory.mktemp("evaluated_in_instance")
    root = copy_project(EXAMPLE, folder / "refund_desk")
    (folder / "instance").mkdir()
    with DagsterInstance.local_temp(tempdir=str(folder / "instance")) as instance:
        yield root, instance, run_evaluation(root, instance=instance)


@pytest.fixture
def evaluated_desk(evaluated_example, tmp_path) -> Path:
    """A copy of the evaluated refund desk to change or break (its stored tables, journal,
    Dagster instance and history come along)."""
    return copy_project(evaluated_example[0], tmp_path / "desk", with_store=True)


def write_project(
    root: Path,
    *,
    app: str,
    cases: list[dict],
    evaluators: list[dict] | None = None,
    rules: list[dict] | None = None,
    system_version: str = "1.0.0",
    timeout_s: float = 5.0,
    extra_config: str = "",
) -> Path:
    """A small project with its own system under test, for tests that need odd systems.
    `rules=[]` writes no release.yaml: a project that can only be run `--ungated`."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text(textwrap.dedent(app), encoding="utf-8")
    (root / "data").mkdir(exist_ok=True)
    (root / "data" / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases), encoding="utf-8")
    evaluators = evaluators or [{"type": "state_matches", "mode": "subset", "criterion": "state_correct"}]
    config = {
        "version": 1,
        "project": "tiny",
        "dataset": "data/cases.jsonl",
        "system": {"name": "tiny", "version": system_version, "callable": "app:System"},
        "evaluators": evaluators,
        "execution": {"timeout_s": timeout_s},
    }
    (root / "oloproof.yaml").write_text(json.dumps(config, indent=2) + "\n" + extra_config, encoding="utf-8")
    rules = rules if rules is not None else [{"id": "state", "metric": evaluators[0].get("criterion", "state_matches"), "min": 0.5}]
    if rules:
        (root / "release.yaml").write_text(json.dumps({"version": 1, "rules": rules}, indent=2), encoding="utf-8")
    return root


def pytest_collection_modifyitems(config, items):
    """The UI tests take minutes in one file: run first, the other test workers share the rest
    meanwhile instead of waiting on them at the end (the order within each file is kept)."""
    items.sort(key=lambda item: Path(str(item.fspath)).name != "test_ui.py")
