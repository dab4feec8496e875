"""Day 30, not day 1: reruns that cost nothing, a new case costing one recording, a version
bump picked up by itself, a re-grade without the system, and a killed run losing nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
from dagster import AssetKey, DagsterInstance, SensorResult, build_sensor_context

from oloproof_pipeline.defs import REGRADE_JOB, build_definitions
from oloproof_pipeline.defs.instance import project_instance
from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import table_path

from conftest import write_project
from helpers import OLOPROOF, cli_environment

# Appended to a copy of the refund desk: every call of the agent (recordings and replays)
# leaves a line in calls.log, so a test can count what really ran.
COUNT_CALLS = """

_CALLS_LOG = __import__("pathlib").Path(__file__).with_name("calls.log")
_uncounted_call = RefundDesk.__call__


def _counted_call(self, request):
    with _CALLS_LOG.open("a") as log:
        log.write(request["order_id"] + "\\n")
    return _uncounted_call(self, request)


RefundDesk.__call__ = _counted_call
"""

NEW_CASE = {
    "id": "ord-025",
    "input": {"order_id": "ord-025", "message": "The kettle leaks, I would like a refund."},
    "initial_state": {
        "orders": {
            "ord-025": {"status": "delivered", "total_usd": 64.0, "days_since_delivery": 9, "customer": "Ida Berg"},
            "ord-999": {"status": "delivered", "total_usd": 50.0, "days_since_delivery": 3, "customer": "Morgan Lee"},
        }
    },
    "expected": {
        "answer": "refunded",
        "state": {"orders": {"ord-025": {"status": "refunded"}}},
    },
    "metadata": {"category": "eligible"},
}


def calls(root: Path) -> int:
    """How many times the system was called (a line per call, or a `start` line per call)."""
    log = root / "calls.log"
    lines = log.read_text().splitlines() if log.exists() else []
    return sum(1 for line in lines if not line.startswith("end "))


def latest(instance: DagsterInstance, asset: str, project: str = "refund_desk") -> dict:
    """The newest materialization's metadata values."""
    event = instance.get_latest_materialization_event(AssetKey([project, asset]))
    return {key: value.value for key, value in event.asset_materialization.metadata.items()}


def test_incremental_runs_version_bump_and_regrade_without_the_system(refund_desk, instance):
    (refund_desk / "app.py").write_text((refund_desk / "app.py").read_text() + COUNT_CALLS)
    assert run_evaluation(refund_desk, instance=instance).errors == []
    first_calls = calls(refund_desk)
    assert first_calls == 72 + 2 * 12  # 24 cases and 48 copies, then control + faulted replays of 12

    # Nothing changed: the rerun calls the system zero times.
    run_evaluation(refund_desk, instance=instance)
    assert calls(refund_desk) == first_calls
    assert (latest(instance, "recorded_runs")["cases_new"], latest(instance, "fault_replays")["replays_new"]) == (0, 0)

    # One new case: one recording, plus its two copies and its one fault replay.
    with (refund_desk / "data" / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps(NEW_CASE) + "\n")
    run_evaluation(refund_desk, instance=instance)
    assert latest(instance, "recorded_runs")["cases_new"] == 3
    assert latest(instance, "fault_replays")["replays_new"] == 1
    assert calls(refund_desk) == first_calls + 3 + 2

    # A version bump: the sensor adds the partition and asks for its run.
    config = refund_desk / "oloproof.yaml"
    config.write_text(config.read_text().replace('version: "1.0.0"', 'version: "1.1.0"'))
    definitions = build_definitions(refund_desk)
    tick = definitions.resolve_sensor_def("refund_desk_new_system_version")(build_sensor_context(instance=instance))
    assert isinstance(tick, SensorResult) and tick.run_requests[0].partition_key == "1.1.0"

    # An evaluator changes, and 1.0.0 is re-graded from storage with its system gone.
    (refund_desk / "app.py").rename(refund_desk / "app_retired.py")
    config.write_text(config.read_text().replace("paths: [orders.ord-999]", "paths: [orders.ord-999.status]"))
    regraded_definitions = build_definitions(refund_desk)
    assert (
        regraded_definitions.resolve_assets_def(AssetKey(["refund_desk", "verdicts"])).code_versions_by_key
        != definitions.resolve_assets_def(AssetKey(["refund_desk", "verdicts"])).code_versions_by_key
    ), "a changed evaluator must make the verdicts stale"
    regrade = regraded_definitions.resolve_job_def(REGRADE_JOB).execute_in_process(
        partition_key="1.0.0", instance=instance, raise_on_error=False
    )
    failed_steps = {event.step_key for event in regrade.all_events if event.event_type_value == "STEP_FAILURE"}
    assert failed_steps <= {"refund_desk__gate_gate_allows_release"}, failed_steps  # only the BLOCK itself
    verdicts = pd.read_parquet(table_path(refund_desk, "verdicts", "1.0.0"))
    bystander = verdicts[verdicts["criterion"] == "other_order_untouched"]
    assert (bystander["judged_by_run"] == regrade.run_id).all()
    assert set(bystander["recorded_by_run"]) != {regrade.run_id}
    assert json.loads(bystander["details"].iloc[0])[0]["path"] == "orders.ord-999.status"


SLOW_APP = """
import copy
import os
import pathlib
import time


class System:
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        log = pathlib.Path(__file__).with_name("calls.log")
        with log.open("a") as calls:
            calls.write(f"start {request['n']} {os.getpid()} {time.time()}\\n")
        time.sleep(0.15)
        self.state["done"] = True
        with log.open("a") as calls:
            calls.write(f"end {request['n']} {os.getpid()} {time.time()}\\n")
        return {"answer": "ok"}
"""


def slow_project(root: Path, total: int) -> Path:
    """A project of slow cases on one sandbox per run (`concurrency: {system: 1}`), so the
    calls log shows whether two runs ever run cases at once."""
    root = write_project(
        root,
        app=SLOW_APP,
        cases=[
            {"id": f"c{n:02d}", "input": {"n": str(n)}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
            for n in range(total)
        ],
    )
    config = root / "oloproof.yaml"
    config.write_text(json.dumps({**json.loads(config.read_text()), "concurrency": {"system": 1}}, indent=2) + "\n")
    return root


def start_cli_run(root: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "oloproof-pipeline"), "run", "--project", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


# A fast system (each case a line in calls.log) that, the first time it is called for case
# KILL_AT, says so on the test's socket and then waits on it: the test kills the run at that
# exact point, and learns that the worker is gone when the socket closes.
HELD_APP = """
import copy
import os
import pathlib
import socket


class System:
    def __init__(self):
        self.state = {}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        here = pathlib.Path(__file__).parent
        with (here / "calls.log").open("a") as calls:
            calls.write(f"start {request['n']}\\n")
        if request["n"] == "KILL_AT" and not (here / "held").exists():
            (here / "held").touch()
            held = socket.create_connection(("127.0.0.1", PORT))
            held.sendall(b"running")
            held.recv(1)  # until the test lets go, or this process is killed
        self.state["done"] = True
        # The case before is long to read back and journal: a worker that went on without
        # waiting for that would be well into case KILL_AT by then.
        return {"answer": "ok", "padding": "x" * (4_000_000 if request["n"] == str(KILL_AT - 1) else 0)}
"""
KILL_AT = 8


def test_a_killed_run_keeps_what_finished_and_the_rerun_records_only_the_rest(tmp_path):
    """Each case is journalled before the next is sent to the worker, so a run killed while a
    case runs has journalled every case before it, and the rerun repeats that one case only:
    one repeated call per kill and sandbox. The kill comes at a known case, however loaded the
    machine: the system itself says when it is there."""
    total = 30
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(120)
    app = HELD_APP.replace("KILL_AT", str(KILL_AT)).replace("PORT", str(listener.getsockname()[1]))
    root = write_project(
        tmp_path / "killed", app=app,
        cases=[{"id": f"c{n:02d}", "input": {"n": str(n)}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
               for n in range(total)],
    )
    journal = Journal.for_partition(root, "recorded_runs", "1.0.0")
    output = tmp_path / "killed.out"
    with output.open("w") as printed:
        run = subprocess.Popen([OLOPROOF, "run", "--project", str(root)], stdout=printed, stderr=printed,
                               env=cli_environment(), start_new_session=True)
    with listener, listener.accept()[0] as held:
        held.settimeout(120)
        assert held.recv(16) == b"running"
        assert sum(1 for _ in journal.rows()) == KILL_AT  # every case before the running one
        os.killpg(run.pid, signal.SIGKILL)
        assert run.wait(timeout=120) == -signal.SIGKILL
        assert held.recv(1) == b""  # the worker went with the run that supervised it
    assert output.read_text() == ""  # a killed run prints nothing after its kill, nor before here
    assert sum(1 for _ in journal.rows()) == KILL_AT and calls(root) == KILL_AT + 1

    # The rerun records into the instance the killed CLI run used: a project keeps one history.
    instance = project_instance(root)
    rerun = run_evaluation(root, instance=instance)
    assert rerun.errors == []
    recorded = latest(instance, "recorded_runs", project="tiny")
    assert (recorded["cases_new"], recorded["cases_reused"]) == (total - KILL_AT, KILL_AT)
    # The unfinished cases ran again: the one the kill cut off twice, the rest once.
    assert calls(root) == total + 1
    runs = pd.read_parquet(table_path(root, "recorded_runs", "1.0.0"))
    assert sorted(runs["case_id"]) == [f"c{n:02d}" for n in range(total)] and (runs["status"] == "ok").all()


def test_two_runs_at_once_share_the_sandbox_in_turn_and_record_each_case_once(tmp_path):
    total = 16
    root = slow_project(tmp_path / "busy", total)
    first, second = start_cli_run(root), start_cli_run(root)
    assert first.wait(timeout=240) == second.wait(timeout=240) == 0  # the gate allows: every state is right
    assert calls(root) == total  # the run that waited found the cases recorded and reused them
    spans = {}
    for line in (root / "calls.log").read_text().splitlines():
        kind, case, _pid, at = line.split()
        spans.setdefault(case, {})[kind] = float(at)
    ordered = sorted((span["start"], span["end"]) for span in spans.values())
    assert all(earlier[1] <= later[0] for earlier, later in zip(ordered, ordered[1:])), "two cases ran at once"
