"""The sandbox runner: a misbehaving system costs the case it misbehaved on, nothing more."""

from __future__ import annotations

import time

from oloproof_pipeline.run.recording import record_cases
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.runner import SandboxRunner
from oloproof_pipeline.run.system import system_spec

from conftest import write_project

MISBEHAVING_APP = """
import copy
import time

from oloproof_pipeline.toolbox import ToolBox


class System:
    version = "1.0.0"

    def __init__(self):
        self.state = {}
        self.toolbox = ToolBox({"bump": self._bump})

    def _bump(self, key):
        self.state["counters"][key] = self.state["counters"].get(key, 0) + 1
        return {"value": self.state["counters"][key]}

    def reset(self, state):
        self.state = state
        if state.get("dirty_reset"):
            self.state = dict(state, leftover=True)

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        kind = request["kind"]
        if kind == "raise":
            raise RuntimeError("the model said no")
        if kind == "hang":
            time.sleep(30)
        if kind == "not_json":
            return {"answer": {1, 2}}
        if kind == "nan":
            return {"answer": float("nan")}
        result = self.toolbox.call("bump", key="a")
        return {"answer": result["value"]}
"""


def case(case_id: str, kind: str, **state_extra) -> dict:
    return {
        "id": case_id,
        "input": {"kind": kind},
        "initial_state": {"counters": {}, **state_extra},
        "expected": {"answer": 1, "state": {"counters": {"a": 1}}},
    }


def runner_for(root):
    project = load_project(root)
    return project, SandboxRunner(system_spec(project).build, system_version="1.0.0", timeout_s=1.0)


def test_each_failure_costs_only_its_case(tmp_path):
    root = write_project(
        tmp_path / "p",
        app=MISBEHAVING_APP,
        cases=[
            case("ok-1", "ok"),
            case("raises", "raise"),
            case("hangs", "hang"),
            case("not-json", "not_json"),
            case("nan", "nan"),
            case("ok-2", "ok"),
        ],
    )
    project, runner = runner_for(root)
    started = time.perf_counter()
    runs = {run.case_id: run for run in map(runner.record, load_cases(project))}
    assert time.perf_counter() - started < 10  # the hang was cut at its 1 s timeout
    assert runs["ok-1"].status == "ok" and runs["ok-1"].output == {"answer": 1}
    assert runs["raises"].status == "error" and "RuntimeError: the model said no" in runs["raises"].error
    assert runs["hangs"].status == "timeout" and "1 s" in runs["hangs"].error
    assert runs["not-json"].status == "not_json" and "not JSON" in runs["not-json"].error
    assert runs["nan"].status == "not_json"
    # The case after the hang ran on a fresh instance and was recorded normally.
    assert runs["ok-2"].status == "ok"
    assert runs["ok-2"].environment_state.state == {"counters": {"a": 1}}


def test_recording_holds_trajectory_and_environment_state(tmp_path):
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case("ok-1", "ok")])
    project, runner = runner_for(root)
    run = runner.record(load_cases(project)[0])
    assert [step.kind for step in run.trajectory.steps] == ["tool_call", "tool_result"]
    assert run.trajectory.steps[0].tool == "bump" and run.trajectory.steps[0].arguments == {"key": "a"}
    assert run.trajectory.checkpoints[0].step == 0 and run.trajectory.terminal_status == "success"
    assert run.environment_state.record == "environment_state/v1"
    assert run.environment_state.initial.startswith("sha256:")


def test_reset_that_leaves_state_behind_is_not_clean(tmp_path):
    root = write_project(
        tmp_path / "p", app=MISBEHAVING_APP, cases=[case("dirty", "ok", dirty_reset=True), case("clean", "ok")]
    )
    project, runner = runner_for(root)
    dirty, clean = map(runner.record, load_cases(project))
    assert dirty.status == "reset_not_clean" and "leftover" in dirty.error
    assert clean.status == "ok"


def test_state_from_one_case_never_leaks_into_the_next(tmp_path):
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case("first", "ok"), case("second", "ok")])
    project, runner = runner_for(root)
    first, second = map(runner.record, load_cases(project))
    assert first.output == second.output == {"answer": 1}


def test_record_cases_refuses_a_partition_that_is_not_the_loaded_version(tmp_path):
    import pytest

    from oloproof_pipeline.model.errors import SystemVersionMismatch

    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case("ok-1", "ok")])
    project = load_project(root)
    with pytest.raises(SystemVersionMismatch, match="refusing to record partition '0.9.0'"):
        record_cases(project, load_cases(project), version="0.9.0", run_id="r1")
