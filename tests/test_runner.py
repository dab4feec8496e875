"""The sandbox: a misbehaving system costs the case it misbehaved on, nothing more. The
system runs in a supervised worker process (run/supervisor.py), never in this one."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from oloproof_pipeline.endpoints.deadline import CaseTimedOut, case_deadline
from oloproof_pipeline.run.recording import record_cases
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.supervisor import SupervisedSandbox
from oloproof_pipeline.run.spec import SandboxSettings
from oloproof_pipeline.run.system import system_spec

from conftest import write_project

MISBEHAVING_APP = """
import copy
import os
import signal
import sys
import threading
import time

from oloproof_pipeline.toolbox import ToolBox


class System:
    version = "1.0.0"

    def __init__(self):
        self.state = {}
        self.toolbox = ToolBox({"bump": self._bump})
        self.cases_seen = 0  # warm state: kept between the cases of one worker

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
        self.cases_seen += 1
        if kind == "raise":
            raise RuntimeError("the model said no")
        if kind == "hang":
            self.toolbox.call("bump", key="a")
            time.sleep(30)
        if kind == "stubborn":  # swallows the deadline's interrupt: only stopping its process ends it
            while True:
                try:
                    time.sleep(30)
                except BaseException:
                    pass
        if kind == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if kind == "os_exit":
            os._exit(3)
        if kind == "sys_exit":
            sys.exit(4)
        if kind == "where":
            return {"pid": os.getpid(), "cases_seen": self.cases_seen, "threads": threading.active_count()}
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


# A deadline no trivial case overruns on a loaded machine, short enough for the hangs to be cheap.
def sandbox_for(root, timeout_s: float = 3.0):
    project = load_project(root)
    return project, SupervisedSandbox(SandboxSettings(system_spec(project), "1.0.0", timeout_s))


def test_each_failure_costs_only_its_case(tmp_path):
    kinds = ["ok", "raise", "hang", "not_json", "nan", "segfault", "ok", "os_exit", "sys_exit", "stubborn", "ok"]
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case(f"{kind}-{n}", kind) for n, kind in enumerate(kinds)])
    project, sandbox = sandbox_for(root)
    with sandbox:
        runs = {run.case_id: run for run in map(sandbox.record, load_cases(project))}
    assert runs["ok-0"].status == "ok" and runs["ok-0"].output == {"answer": 1}
    assert runs["raise-1"].status == "error" and "RuntimeError: the model said no" in runs["raise-1"].error
    # The deadline interrupts the hung case and keeps what it did before it hung.
    assert runs["hang-2"].status == "timeout" and runs["hang-2"].error == "no answer within 3 s"
    assert [step.tool for step in runs["hang-2"].trajectory.steps] == ["bump", "bump"]
    assert runs["not_json-3"].status == "not_json" and "not JSON" in runs["not_json-3"].error
    assert runs["nan-4"].status == "not_json"
    assert runs["segfault-5"].status == "system_crashed"
    assert runs["segfault-5"].error == "the system's process was killed by signal SIGSEGV during this case"
    assert runs["os_exit-7"].status == "system_crashed" and "exited with code 3" in runs["os_exit-7"].error
    assert runs["sys_exit-8"].status == "system_crashed" and "exited with code 4" in runs["sys_exit-8"].error
    # A case that ignores its interrupt has its process stopped at the deadline (plus the grace).
    assert runs["stubborn-9"].status == "timeout" and "the system's process was stopped" in runs["stubborn-9"].error
    # Each case after a crash or a timeout ran on a fresh worker and was recorded normally.
    for name in ("ok-6", "ok-10"):
        assert runs[name].status == "ok" and runs[name].environment_state.state == {"counters": {"a": 1}}
    # One worker to start, then one more after each of the two timeouts and three crashes: no retries.
    assert sandbox.workers_started == 1 + 2 + 3


def test_a_worker_keeps_its_system_between_cases_and_starts_no_thread_per_call(tmp_path):
    cases = [case(f"c{n}", "where") for n in range(3)] + [case("crash", "segfault"), case("after", "where")]
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=cases)
    project, sandbox = sandbox_for(root)
    threads_before = threading.active_count()
    with sandbox:
        outputs = [run.output for run in map(sandbox.record, load_cases(project))]
        assert threading.active_count() == threads_before  # the supervisor starts no thread either
    first, second, third, crashed, after = outputs
    assert {first["pid"], second["pid"], third["pid"]} == {first["pid"]} and first["pid"] != os.getpid()
    assert [first["cases_seen"], second["cases_seen"], third["cases_seen"]] == [1, 2, 3]
    assert first["threads"] == second["threads"] == 1  # the case runs on the worker's only thread
    assert crashed is None and after["pid"] != first["pid"] and after["cases_seen"] == 1


def test_cases_queued_behind_a_crash_run_on_a_fresh_worker_and_only_the_running_case_is_lost(tmp_path):
    kinds = ["where", "where", "segfault", "where", "where", "os_exit", "where", "hang", "where"]
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case(f"{kind}-{n}", kind) for n, kind in enumerate(kinds)])
    project, sandbox = sandbox_for(root)
    with sandbox:  # record_each queues the cases after the running one on the worker's channel
        runs = list(sandbox.record_each(load_cases(project)))
    assert [run.status for run in runs] == [
        "ok", "ok", "system_crashed", "ok", "ok", "system_crashed", "ok", "timeout", "ok",
    ]
    workers = [run.output["pid"] for run in runs if run.status == "ok"]
    assert len(set(workers[:2])) == len(set(workers[2:4])) == len(set(workers[4:5])) == 1
    assert len(set(workers)) == 4 and sandbox.workers_started == 4
    # Warm state restarts with each worker: the queued cases ran once each, in order.
    assert [run.output["cases_seen"] for run in runs if run.status == "ok"] == [1, 2, 1, 2, 1, 1]


def test_a_system_that_cannot_be_built_is_one_configuration_error(tmp_path):
    from oloproof_pipeline.model.errors import ProjectError

    for body, expected in [
        ("import sys\nsys.exit(0)\n", "importing .* failed: SystemExit: 0"),
        ("import os\nos._exit(7)\n", "the system's process exited with code 7 while importing .*app.py and building app:System"),
        ("class System:\n    def __init__(self):\n        raise KeyError('no model')\n", "building app:System failed: KeyError"),
    ]:
        root = write_project(tmp_path / str(len(body)), app=MISBEHAVING_APP + body, cases=[case("ok-1", "ok")])
        project, sandbox = sandbox_for(root)
        with sandbox, pytest.raises(ProjectError, match=expected) as raised:
            sandbox.record(load_cases(project)[0])
        assert len(raised.value.problems) == 1 and "\n" not in raised.value.problems[0]


def test_recording_holds_trajectory_and_environment_state(tmp_path):
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case("ok-1", "ok")])
    project, sandbox = sandbox_for(root)
    with sandbox:
        run = sandbox.record(load_cases(project)[0])
    assert [step.kind for step in run.trajectory.steps] == ["tool_call", "tool_result"]
    assert run.trajectory.steps[0].tool == "bump" and run.trajectory.steps[0].arguments == {"key": "a"}
    assert run.trajectory.checkpoints[0].step == 0 and run.trajectory.terminal_status == "success"
    assert run.environment_state.record == "environment_state/v1"
    assert run.environment_state.initial.startswith("sha256:")


def test_reset_that_leaves_state_behind_is_not_clean(tmp_path):
    root = write_project(
        tmp_path / "p", app=MISBEHAVING_APP, cases=[case("dirty", "ok", dirty_reset=True), case("clean", "ok")]
    )
    project, sandbox = sandbox_for(root)
    with sandbox:
        dirty, clean = map(sandbox.record, load_cases(project))
    assert dirty.status == "reset_not_clean" and "leftover" in dirty.error
    assert clean.status == "ok"


def test_state_from_one_case_never_leaks_into_the_next(tmp_path):
    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case("first", "ok"), case("second", "ok")])
    project, sandbox = sandbox_for(root)
    with sandbox:
        first, second = map(sandbox.record, load_cases(project))
    assert first.output == second.output == {"answer": 1}


def test_record_cases_refuses_a_partition_that_is_not_the_loaded_version(tmp_path):
    from oloproof_pipeline.model.errors import SystemVersionMismatch

    root = write_project(tmp_path / "p", app=MISBEHAVING_APP, cases=[case("ok-1", "ok")])
    project = load_project(root)
    with pytest.raises(SystemVersionMismatch, match="refusing to record partition '0.9.0'"):
        record_cases(project, load_cases(project), version="0.9.0", run_id="r1")


def wait_for_the_deadline(bound_s: float = 60.0) -> None:
    """Work until interrupted (a bounded wait: a deadline that never fires fails the test)."""
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        time.sleep(0.005)
    raise AssertionError("the deadline never fired")


def test_a_case_deadline_interrupts_only_its_case_even_after_a_system_took_the_alarm():
    """The timer's handler stays installed between cases: an overrun raises in that case only,
    a later case runs to its end, and a system that installed its own SIGALRM handler during a
    case cannot take the next case's deadline away."""
    with pytest.raises(CaseTimedOut, match="no answer within 0.05 s"):
        with case_deadline(0.05):
            wait_for_the_deadline()
    with case_deadline(60):
        done = "ran to its end"
    assert done == "ran to its end" and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    signal.signal(signal.SIGALRM, lambda signum, frame: None)  # what a system might do
    with pytest.raises(CaseTimedOut, match="no answer within 0.02 s"):
        with case_deadline(0.02):
            wait_for_the_deadline()
    with pytest.raises(CaseTimedOut, match="no answer within 0.05 s"):  # an inner deadline, then the outer
        with case_deadline(0.05):
            with pytest.raises(CaseTimedOut, match="no answer within 0.01 s"):
                with case_deadline(0.01):
                    wait_for_the_deadline()
            wait_for_the_deadline()
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
