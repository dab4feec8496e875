"""A pipeline error is never a gate decision: when the pipeline's own code fails on the cases,
`oloproof run` says so in one line naming the exception and exits 5 (incomplete), instead of
filing every case as an error and gating on that (`Gate: BLOCK`, exit 3).

The trigger is the bug issue 21 found, put back on the Dask workers only: a worker preload
(Dask's own `distributed.worker.preload` setting, read from the environment) makes each
worker key its sandboxes by the settings themselves, as the pipeline once did, which a chat
agent's settings (a dict) cannot be: `TypeError: unhashable type: 'dict'` on every case. The
evaluating process, Dagster and the CLI run unchanged, as a user runs them.

The other place the pipeline's code runs a case is the runner in the system's worker process
(inline or under a Dask worker; it answers "could not run this case"): a `sitecustomize` on
PYTHONPATH, which Python runs at every start, puts a bug into that runner
(`SandboxRunner.record` raises) and nothing else."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from oloproof_pipeline.model.outcomes import EXIT_INCOMPLETE
from oloproof_pipeline.store.layout import table_path

from conftest import write_project
from helpers import OLOPROOF, cli_environment, tiny_stateful_app
from test_chat_agent import VERSION, standin  # noqa: F401 (the stand-in fixture)
from test_dask_chat_agent import desk_copy

# The sandboxes of a Dask worker keyed as before the fix (run/sandboxes.py `_worker_sandbox`).
KEYED_BY_SETTINGS = """
from oloproof_pipeline.run import sandboxes
from oloproof_pipeline.run.supervisor import SupervisedSandbox


def keyed_by_settings(settings):
    if settings not in sandboxes._WORKER_SANDBOXES:
        sandboxes._WORKER_SANDBOXES[settings] = SupervisedSandbox(settings)
    return sandboxes._WORKER_SANDBOXES[settings]


sandboxes._worker_sandbox = keyed_by_settings
"""


# A runner that fails on every case: a bug of the pipeline's own, in the system's worker process.
FAILING_RUNNER = """
from oloproof_pipeline.run.runner import SandboxRunner


def record(self, case):
    raise RuntimeError("a bug in the runner")


SandboxRunner.record = record
"""


def run(root: Path, preload: Path | None = None, python_path: Path | None = None) -> subprocess.CompletedProcess:
    environment = cli_environment()
    if preload is not None:
        environment["DASK_DISTRIBUTED__WORKER__PRELOAD"] = repr([str(preload)])
    if python_path is not None:
        environment["PYTHONPATH"] = str(python_path)
    return subprocess.run([OLOPROOF, "run"], cwd=root, capture_output=True, text=True, timeout=300, env=environment)


def error_lines(process: subprocess.CompletedProcess) -> list[str]:
    """The command's own error lines (the CLI's `error: ...`)."""
    return [line for line in process.stderr.splitlines() if line.startswith("error: ")]


def test_a_pipeline_exception_on_every_case_exits_incomplete_naming_it(tmp_path, standin):  # noqa: F811
    root = desk_copy(tmp_path, "desk", standin.url, workers=2)
    preload = tmp_path / "keyed_by_settings.py"
    preload.write_text(KEYED_BY_SETTINGS)

    failed = run(root, preload)
    assert failed.returncode == EXIT_INCOMPLETE, failed.stdout + failed.stderr
    assert "Gate:" not in failed.stdout and "INSUFFICIENT_EVIDENCE" not in failed.stdout + failed.stderr
    [message] = error_lines(failed)  # Dask logs the task's exception too; ours is the one error
    assert "TypeError: unhashable type: 'dict'" in message and "recorded_runs" in message
    assert "the pipeline's own code failed" in message and "not in the system under test" in message
    assert not table_path(root, "recorded_runs", VERSION).exists()  # no case was filed as an error
    assert not table_path(root, "gate", VERSION).exists()

    # Nothing of it was kept: the same run on workers without the bug records every case.
    fixed = run(root)
    assert fixed.returncode == 3 and "Gate: BLOCK" in fixed.stdout, fixed.stdout + fixed.stderr
    runs = pd.read_parquet(table_path(root, "recorded_runs", VERSION))
    assert len(runs) == 12 and set(runs["status"]) == {"ok"}


@pytest.mark.parametrize("workers", [1, 2], ids=["inline", "on_dask"])
def test_the_runner_failing_in_the_systems_worker_exits_incomplete_naming_it(tmp_path, workers):
    cases = [{"id": f"c{n}", "input": {}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}} for n in range(8)]
    root = write_project(tmp_path / "tiny", app=tiny_stateful_app(), cases=cases)
    config = json.loads((root / "oloproof.yaml").read_text())
    config["execution"]["workers"] = workers
    (root / "oloproof.yaml").write_text(json.dumps(config))
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(FAILING_RUNNER)

    failed = run(root, python_path=hooks)
    assert failed.returncode == EXIT_INCOMPLETE, failed.stdout + failed.stderr
    assert "Gate:" not in failed.stdout
    [message] = error_lines(failed)
    assert "RuntimeError: a bug in the runner" in message and "recorded_runs" in message and "could not run this case" in message and "not in the system under test" in message
    assert not table_path(root, "recorded_runs", "1.0.0").exists()

    fixed = run(root)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert set(pd.read_parquet(table_path(root, "recorded_runs", "1.0.0"))["status"]) == {"ok"}
