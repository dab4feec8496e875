"""A Python system's cases on several local sandboxes at once, without Dask: up to
`concurrency.system` worker processes, each its own system instance, started only when one
more pays (a system that waits, not a fast one), each case recorded once, the table the
same as one sandbox's, and a crash or a hang costing only its own case. Every assertion
counts worker processes and cases at once (from the system's own log) or compares tables,
never a duration."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.local_sandboxes import Growth
from oloproof_pipeline.run.recording import record_cases
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import table_path

from conftest import write_project
from helpers import OLOPROOF, cli_environment, oloproof, tiny_stateful_app
from test_system_isolation import journal_rows

# A system that waits (as one calling a model does) 200 ms per case, far longer than the
# pipeline's own handling of a case however loaded the machine: on a busy one each hand-over
# between processes may wait tens of milliseconds for a core, and 50 ms cases then looked
# like a fast system to Growth (its rule itself is pinned on given figures below). It writes
# a line when a case starts (with its process id) and one when it ends, each stamped with the
# machine's clock; case CRASH_AT ends its process, case HANG_AT never returns.
WAITING_APP = tiny_stateful_app() + """
import json
import os
import pathlib
import time

CRASH_AT, HANG_AT = "7", "20"


def note(**line):
    with pathlib.Path(__file__).with_name("calls.log").open("a") as log:
        log.write(json.dumps({**line, "at": time.time()}) + "\\n")


_marks_done = System.__call__


def _waiting_call(self, request):
    note(case=request["n"], pid=os.getpid())
    if request["n"] == CRASH_AT:
        os._exit(3)
    time.sleep(3600 if request["n"] == HANG_AT else WAIT_S)
    answer = _marks_done(self, request)
    note(ended=request["n"])
    return {**answer, "twice": request["n"] + request["n"]}


System.__call__ = _waiting_call
"""
TOTAL = 40
CRASH_AT, HANG_AT = "c007", "c020"


def numbered_cases(total: int) -> list[dict]:
    return [
        {"id": f"c{n:03d}", "input": {"n": str(n)}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
        for n in range(total)
    ]


def with_concurrency(root: Path, system_at_once: int) -> Path:
    """The project with `concurrency: {system: N}` (write_project writes its config as JSON)."""
    config_file = root / "oloproof.yaml"
    config = json.loads(config_file.read_text())
    config_file.write_text(json.dumps({**config, "concurrency": {"system": system_at_once}}, indent=2) + "\n")
    return root


def waiting_project(root: Path, *, system_at_once: int) -> Path:
    app = WAITING_APP.replace("WAIT_S", "0.2")  # no case but HANG_AT overruns the default 5 s deadline, however loaded
    return with_concurrency(write_project(root, app=app, cases=numbered_cases(TOTAL)), system_at_once)


def calls(root: Path) -> list[dict]:
    """Each case's start (its `case`, `pid` and `at`)."""
    lines = [json.loads(line) for line in (root / "calls.log").read_text().splitlines()]
    return [line for line in lines if "case" in line]


def most_at_once(root: Path) -> int:
    """The most cases that ran at once, by the system's own log (cases that never ended,
    the crash and the hang, left out)."""
    lines = [json.loads(line) for line in (root / "calls.log").read_text().splitlines()]
    started = {line["case"]: line["at"] for line in lines if "case" in line}
    spans = [(started[line["ended"]], line["at"]) for line in lines if "ended" in line]
    return max(sum(1 for begin, end in spans if begin <= at < end) for at, _ in spans)


def recorded(root: Path) -> pd.DataFrame:
    """The stored recordings, without what differs from run to run (its id, so the key, and the timings)."""
    table = pd.read_parquet(table_path(root, "recorded_runs", "1.0.0"))
    return table.drop(columns=["duration_s", "recorded_by_run", "recording_key"])


def test_a_waiting_system_runs_on_up_to_concurrency_system_sandboxes_and_records_what_one_records(tmp_path):
    one = waiting_project(tmp_path / "one", system_at_once=1)
    four = waiting_project(tmp_path / "four", system_at_once=4)
    for root in (one, four):
        ran = oloproof("run", cwd=root)
        assert ran.returncode == 0 and "recorded 40 cases and reused 0, 2 failed" in ran.stdout, ran.stdout + ran.stderr

    # The same table, row for row in case order, whichever way the cases ran.
    pd.testing.assert_frame_equal(recorded(one), recorded(four))
    assert list(recorded(four)["case_id"]) == [f"c{n:03d}" for n in range(TOTAL)]
    # A case that crashes or hangs its sandbox costs that case only.
    statuses = recorded(four).set_index("case_id")["status"]
    assert (statuses[CRASH_AT], statuses[HANG_AT]) == ("system_crashed", "timeout")
    assert (statuses.drop([CRASH_AT, HANG_AT]) == "ok").all()

    # Each case was called once, and journalled once: a crash is recorded, never retried.
    for root in (one, four):
        assert sorted(call["case"] for call in calls(root)) == sorted(str(n) for n in range(TOTAL))
        assert sorted(row["case_id"] for row in journal_rows(root)) == [f"c{n:03d}" for n in range(TOTAL)]

    # One sandbox, as ever: one case at a time, in one process until the crash, a fresh one
    # after it and another after the hang.
    assert most_at_once(one) == 1
    assert len({call["pid"] for call in calls(one)}) == 3
    # Four: the waiting system's cases ran side by side in several processes, never more than four at once,
    # and the crash and the hang each ended their process (how many fresh ones followed depends on how
    # many cases were still left then: on a loaded machine the other sandboxes may have run them all).
    assert 2 <= most_at_once(four) <= 4
    started = calls(four)
    assert len({call["pid"] for call in started}) >= most_at_once(four)
    for broken in (CRASH_AT, HANG_AT):
        ended = next(call for call in started if call["case"] == str(int(broken[1:])))
        assert not [call for call in started if call["pid"] == ended["pid"] and call["at"] > ended["at"]], broken


FAST_APP = WAITING_APP.replace('CRASH_AT, HANG_AT = "7", "20"', 'CRASH_AT, HANG_AT = "none", "none"')


def test_a_fast_systems_short_stage_stays_on_one_sandbox_whatever_concurrency_system_allows(tmp_path):
    """A system that answers at once gets another sandbox only on a long stage: 120 cases
    keep their one worker process, whatever `concurrency.system` allows."""
    root = with_concurrency(write_project(tmp_path / "fast", app=FAST_APP.replace("WAIT_S", "0"), cases=numbered_cases(120)), 8)
    project = load_project(root)
    runs, summary = record_cases(project, load_cases(project), version="1.0.0", run_id="fast")
    assert summary.new == 120 and all(run.status == "ok" for run in runs)
    assert len({call["pid"] for call in calls(root)}) == 1


# The waiting system, except that case HELD_AT, the first time, says so on the test's socket
# and waits on it: the test kills the run there, with the other sandboxes mid-case.
HELD_AT = 12
HELD_APP = WAITING_APP.replace('CRASH_AT, HANG_AT = "7", "20"', 'CRASH_AT, HANG_AT = "none", "none"').replace(
    "    note(case=request[\"n\"], pid=os.getpid())\n",
    "    note(case=request[\"n\"], pid=os.getpid())\n"
    "    here = pathlib.Path(__file__).parent\n"
    "    if request[\"n\"] == \"HELD_AT\" and not (here / \"held\").exists():\n"
    "        (here / \"held\").touch()\n"
    "        import socket\n"
    "        held = socket.create_connection((\"127.0.0.1\", PORT))\n"
    "        held.sendall(b\"running\")\n"
    "        held.recv(1)\n",
)


def test_a_run_killed_on_several_sandboxes_is_resumed_never_calling_a_journalled_case_again(tmp_path):
    """Each sandbox is handed its next case only once its last one is journalled: a run killed
    while several sandboxes run cases has lost at most one case per sandbox, and the rerun
    calls the system again for those only, never for a case the killed run journalled."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(120)
    app = HELD_APP.replace("HELD_AT", str(HELD_AT)).replace("PORT", str(listener.getsockname()[1])).replace("WAIT_S", "0.2")
    assert "held.recv(1)" in app
    root = with_concurrency(write_project(tmp_path / "killed", app=app, cases=numbered_cases(TOTAL)), 4)
    run = subprocess.Popen([OLOPROOF, "run", "--project", str(root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           env=cli_environment(), start_new_session=True)
    with listener, listener.accept()[0] as held:
        held.settimeout(120)
        assert held.recv(16) == b"running"
        os.killpg(run.pid, signal.SIGKILL)
        assert run.wait(timeout=120) == -signal.SIGKILL
        assert held.recv(1) == b""  # the worker went with the run that supervised it
    journalled = {row["case_id"] for row in Journal.for_partition(root, "recorded_runs", "1.0.0").rows()}
    killed_run = calls(root)
    assert len({call["pid"] for call in killed_run}) > 1  # several sandboxes were running when it was killed

    rerun = oloproof("run", cwd=root)
    assert rerun.returncode == 0 and f"recorded {TOTAL - len(journalled)} cases and reused {len(journalled)}" in rerun.stdout, rerun.stdout
    called: dict[str, int] = {}
    for call in calls(root):
        called[f"c{int(call['case']):03d}"] = called.get(f"c{int(call['case']):03d}", 0) + 1
    assert sorted(called) == [f"c{n:03d}" for n in range(TOTAL)]
    again = {case for case, count in called.items() if count > 1}
    assert f"c{HELD_AT:03d}" in again and not again & journalled  # a journalled case is never called again
    assert len(again) <= 4 and all(count == 2 for count in called.values() if count > 1)


# Growth's rule on given measurements (no clock, no processes): what it decides follows from
# the figures alone, so these hold however loaded the machine. Each result arrives as the
# driver would see it: every `per_case / sandboxes` seconds when the sandboxes set the pace
# (or every `per_case` whatever the sandboxes, for cases that slow each other down), never
# faster than the driver's own work on a result.
@dataclass(frozen=True)
class SystemResult:
    duration_s: float


def sandboxes_over_time(most: int, *, system_s: float, pipeline_s: float, driver_s: float,
                        cases: int = 200, cases_share_cores: bool = False, cores: int = 2) -> list[int]:
    growth, sandboxes, newest, counts = Growth(most, cores=cores), 1, True, []
    now = 0.0
    for _ in range(cases):
        per_result = system_s + pipeline_s if cases_share_cores else (system_s + pipeline_s) / sandboxes
        interval = max(driver_s, per_result)
        now += interval
        # Cases sharing cores each take as much longer as there are sandboxes.
        measured_s = system_s * sandboxes if cases_share_cores else system_s
        growth.observe(SystemResult(measured_s), now, waited_s=interval - driver_s, newest=newest)
        wanted = growth.wanted(sandboxes, now)
        newest = wanted > sandboxes
        sandboxes = wanted
        counts.append(sandboxes)
    return counts


def test_growth_gives_a_waiting_system_every_sandbox_allowed_within_a_few_windows():
    """A system waiting 50 ms a case beside 1 ms of pipeline work: more sandboxes pay, each
    step at most doubling, up to `concurrency.system` and never past it."""
    counts = sandboxes_over_time(4, system_s=0.05, pipeline_s=0.001, driver_s=0.0005)
    steps = [count for n, count in enumerate(counts) if n == 0 or count != counts[n - 1]]
    assert steps == [1, 2, 4] and counts.index(4) < 40 and max(counts) == 4
    assert max(sandboxes_over_time(32, system_s=0.05, pipeline_s=0.001, driver_s=0.0005)) <= 32


def test_growth_keeps_a_busy_driver_a_short_stage_or_a_single_core_on_one_sandbox():
    """Where the driver sets the pace another sandbox would only wait for it; a fast system's
    short stage does not pay for a worker's start; and a system that does not wait cannot
    share one core."""
    fast = dict(system_s=0.00005, pipeline_s=0.0008, driver_s=0.0003)
    assert set(sandboxes_over_time(8, system_s=0.05, pipeline_s=0.001, driver_s=0.06)) == {1}
    assert set(sandboxes_over_time(8, **fast, cases=120)) == {1}
    assert set(sandboxes_over_time(8, **fast, cases=2000, cores=1)) == {1}


def test_growth_gives_a_fast_system_on_a_long_stage_a_second_sandbox_while_the_driver_waits():
    """A scripted agent: its worker's 0.85 ms a case (mostly the pipeline's handling) and the
    driver's 0.3 ms wait for each other on one sandbox; a second, after a long window,
    overlaps them. A third would wait for the driver (it sets the pace at two), whatever
    the cores."""
    fast = dict(system_s=0.00005, pipeline_s=0.0008, driver_s=0.0003, cases=2000)
    for cores in (2, 4, 16):
        counts = sandboxes_over_time(8, **fast, cores=cores)
        assert max(counts) == 2 == counts[-1] and counts.index(2) >= 128, cores
    # A worker twice as slow leaves the driver waiting at two sandboxes as well: one a core.
    slower = dict(fast, pipeline_s=0.002)
    assert max(sandboxes_over_time(8, **slower, cores=3)) == 3
    assert max(sandboxes_over_time(8, **slower, cores=2)) == 2


def test_growth_stops_adding_sandboxes_that_did_not_pay():
    """Cases that slow each other down (a CPU-bound system) bring no more results per second
    on two sandboxes than on one: the second stays, no third ever comes."""
    counts = sandboxes_over_time(8, system_s=0.05, pipeline_s=0.001, driver_s=0.0005, cases_share_cores=True)
    assert max(counts) == 2 and counts[-1] == 2
