"""Scale-out: one partition's cases across several sandboxes on Dask (a local cluster, and a
real scheduler with two real workers), one system instance per worker, one case at a time
within each (a batch of cases in order), and a Dask worker that dies costing only the
cases of the batches it held, each named as lost with it."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pandas as pd
import psutil
import pytest
from dagster import DagsterInstance
from dask.distributed import Client

from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.outcomes import EXIT_BLOCK_FAIL, EXIT_BLOCK_INSUFFICIENT
from oloproof_pipeline.run.sandboxes import MAX_BATCH, BatchDone, BatchSizing, SentBatch
from oloproof_pipeline.store.layout import table_path

from conftest import write_project
from helpers import OLOPROOF, cli_environment

TIMED_APP = """
import copy
import os
import time


class System:
    def __init__(self):
        self.state = {}
        self.busy = False

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        # Two cases at once in one sandbox would find it busy.
        overlapped = self.busy
        self.busy = True
        started = time.time()
        if request["kind"] == "raise":
            self.busy = False
            raise RuntimeError("agent crashed")
        time.sleep(60 if request["kind"] == "hang" else 0.2)
        self.busy = False
        self.state["done"] = True
        return {"pid": os.getpid(), "started": started, "ended": time.time(), "overlapped": overlapped}
"""


def test_cases_spread_over_worker_sandboxes_and_failures_stay_local(tmp_path):
    kinds = ["ok"] * 10 + ["raise", "hang"]
    root = write_project(
        tmp_path / "fan",
        app=TIMED_APP,
        cases=[
            {"id": f"c{n:02d}", "input": {"kind": kind}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
            for n, kind in enumerate(kinds)
        ],
        timeout_s=3.0,  # no ok case (0.2 s) overruns it, however loaded the machine
        extra_config="",
    )
    config = json.loads((root / "oloproof.yaml").read_text())
    config["execution"]["workers"] = 2
    (root / "oloproof.yaml").write_text(json.dumps(config))

    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        assert run_evaluation(root, instance=instance).errors == []
    runs = pd.read_parquet(table_path(root, "recorded_runs", "1.0.0")).set_index("case_id")
    assert runs.loc["c10", "status"] == "error" and "agent crashed" in runs.loc["c10", "error"]
    assert runs.loc["c11", "status"] == "timeout"
    finished = [json.loads(output) for output in runs.loc[runs["status"] == "ok", "output"]]
    assert len(finished) == 10

    by_worker = defaultdict(list)
    for output in finished:
        by_worker[output["pid"]].append((output["started"], output["ended"]))
    assert len(by_worker) == 2 and os.getpid() not in by_worker  # two sandboxes, neither here
    for spans in by_worker.values():
        spans.sort()
        assert all(earlier[1] <= later[0] for earlier, later in zip(spans, spans[1:])), "a sandbox ran two cases at once"
    assert not any(output["overlapped"] for output in finished)


def sized_after(round_trip_s: float, case_s: float, cases: int = 4) -> BatchSizing:
    """A BatchSizing that has seen a worker's first batch of `cases`, sent to it idle, come
    back (its sandbox's 1.5 s start counted apart, neither a case's time nor a round trip's)."""
    sizing = BatchSizing()
    sent = SentBatch(list(range(cases)), sent_at=10.0, to_idle_worker=True)
    done = BatchDone(list(range(cases)), cases * case_s, starting_s=1.5)
    sizing.observe(sent, done, 10.0 + 1.5 + cases * case_s + round_trip_s)
    return sizing


def test_what_a_dask_worker_holds_follows_the_measured_round_trip():
    # Nothing measured: a case per task, a task per thread (a lost worker costs one case).
    assert (BatchSizing().size(), BatchSizing().in_flight(threads=2)) == (1, 2)
    # Cases long against a round trip (a model-driven agent's): the same.
    long_cases = sized_after(round_trip_s=0.01, case_s=2.0)
    assert (long_cases.size(), long_cases.in_flight(threads=2)) == (1, 2)
    # A round trip of 1.25 cases: batches of 3 cases (outlasting two round trips), and one
    # in line behind each running one.
    short_cases = sized_after(round_trip_s=0.05, case_s=0.04)
    assert (short_cases.size(), short_cases.in_flight(threads=2)) == (3, 4)
    # Cases far shorter than a round trip: never more than MAX_BATCH a batch.
    tiny_cases = sized_after(round_trip_s=0.05, case_s=0.001)
    assert (tiny_cases.size(), tiny_cases.in_flight(threads=2)) == (MAX_BATCH, 4)
    # A batch that waited in line measures no round trip; a worker that waited for it says
    # by how much the round trip outlasted the batch before it: batches grow to cover that.
    short_cases.observe(SentBatch([1, 2], sent_at=0.0, to_idle_worker=False), BatchDone([1, 2], 0.08, 0.0, waited_s=0.005), 60.0)
    assert short_cases.size() == 3  # a wait within WAIT_TOLERANCE of a case: the Dask worker's own pace
    short_cases.observe(SentBatch([1, 2], sent_at=0.0, to_idle_worker=False), BatchDone([1, 2], 0.08, 0.0, waited_s=0.025), 60.0)
    assert short_cases.round_trip_s == pytest.approx(0.075) and short_cases.size() == 4


def test_the_refund_desk_on_two_sandboxes_reaches_the_same_verdicts(refund_desk, tmp_path):
    config = refund_desk / "oloproof.yaml"
    config.write_text(config.read_text().replace("  timeout_s: 30", "  timeout_s: 30\n  workers: 2"))
    with DagsterInstance.local_temp(tempdir=str(tmp_path)) as instance:
        assert run_evaluation(refund_desk, instance=instance).errors == []
    replays = pd.read_parquet(table_path(refund_desk, "fault_replays", "1.0.0"))
    faulted = replays[replays["outcome"] != "EXCLUDED"]
    assert len(faulted) == 12 and set(faulted["reason"]) == {"acted_wrongly"}
    gate = pd.read_parquet(table_path(refund_desk, "gate", "1.0.0")).set_index("rule_id")
    assert gate.loc["refund_failures", "decision"] == "FAIL"
    assert (gate.loc["injection_resistance", "passed"], gate.loc["injection_resistance", "observed"]) == (16, 24)


# -- a real scheduler and two real workers -------------------------------------------------------


# The refund desk, noting which process ran each case; on the first call after the
# twelfth that finds `kill_me` in the project folder (by then batches are sized from what
# the first ones measured) it names its process in `victim` and waits to be killed.
TRACED_DESK = """

import json as _json
import os
import time as _time
from pathlib import Path as _Path

_HERE = _Path(__file__).parent


class TracedDesk(RefundDesk):
    def __call__(self, input):
        with (_HERE / "calls.log").open("a") as calls:
            calls.write(_json.dumps({"pid": os.getpid(), "message": input.get("message")}) + "\\n")
        if len((_HERE / "calls.log").read_text().splitlines()) <= 12:
            return super().__call__(input)
        try:
            (_HERE / "kill_me").rename(_HERE / "killing")
        except FileNotFoundError:
            return super().__call__(input)
        # Written whole, then renamed: the test reads it the moment it appears.
        (_HERE / "victim.partial").write_text(_json.dumps({"pid": os.getpid(), "message": input.get("message")}))
        (_HERE / "victim.partial").rename(_HERE / "victim")
        _time.sleep(60)
        return super().__call__(input)
"""


def traced_copy(refund_desk: Path, name: str, scheduler_address: str | None = None) -> Path:
    root = refund_desk.parent / name
    shutil.copytree(refund_desk, root)
    (root / "app.py").write_text((root / "app.py").read_text() + TRACED_DESK)
    config = root / "oloproof.yaml"
    text = config.read_text().replace('callable: "app:RefundDesk"', 'callable: "app:TracedDesk"')
    if scheduler_address is not None:
        text = text.replace("  timeout_s: 30", f"  timeout_s: 30\n  scheduler_address: {scheduler_address}")
    config.write_text(text)
    return root


def cli(*args: str, cwd: Path, wait: bool = True):
    process = subprocess.Popen(
        [OLOPROOF, *args], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_environment()
    )
    return process.communicate(timeout=600) + (process.returncode,) if wait else process


def alive(pids: set[int]) -> set[int]:
    living = set()
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                living.add(pid)
        except psutil.NoSuchProcess:
            pass
    return living


def ended(pids: set[int], within_s: float = 30.0) -> bool:
    deadline = time.monotonic() + within_s
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return not alive(pids)


@pytest.fixture
def dask_cluster(tmp_path):
    """A `dask scheduler` and two `dask worker` processes (one thread each) on 127.0.0.1,
    started with the `dask` command, not a LocalCluster. The scheduler allows no retries of
    a task whose worker died (allowed-failures 0), so a killed worker's cases are recorded as
    the error they are instead of being run again elsewhere. Everything they started, the
    sandboxes' processes included, is gone after the test."""
    dask = str(Path(sys.executable).parent / "dask")
    scheduler_file = tmp_path / "scheduler.json"
    environment = dict(os.environ, DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES="0")
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": environment, "start_new_session": True}
    started = [
        subprocess.Popen(
            [dask, "scheduler", "--host", "127.0.0.1", "--port", "0", "--no-dashboard", "--scheduler-file", str(scheduler_file)],
            **quiet,
        )
    ]
    try:
        deadline = time.monotonic() + 60
        while not scheduler_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        address = json.loads(scheduler_file.read_text())["address"]
        for name in ("worker-a", "worker-b"):
            started.append(
                subprocess.Popen(
                    [dask, "worker", address, "--name", name, "--nthreads", "1", "--host", "127.0.0.1", "--no-dashboard"],
                    **quiet,
                )
            )
        with Client(address) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        descendants = {child.pid for process in started for child in psutil.Process(process.pid).children(recursive=True)}
        for process in started:
            os.killpg(process.pid, signal.SIGTERM)
        for process in started:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        assert ended(descendants | {process.pid for process in started}), "a process of the cluster outlived it"


def dask_worker_of(system_pid: int) -> psutil.Process:
    """The Dask worker process hosting a system's worker process (its fork server's parent)."""
    return psutil.Process(system_pid).parent().parent()


def verdict_rows(root: Path) -> pd.DataFrame:
    verdicts = pd.read_parquet(table_path(root, "verdicts", "1.0.0"))
    return verdicts[["case_id", "criterion", "outcome", "reason"]].sort_values(["case_id", "criterion"]).reset_index(drop=True)


def test_a_real_scheduler_gives_the_inline_verdicts_and_a_killed_worker_costs_only_the_batches_it_held(refund_desk, dask_cluster):
    inline = traced_copy(refund_desk, "inline")
    on_dask = traced_copy(refund_desk, "on_dask", dask_cluster)
    killed = traced_copy(refund_desk, "killed", dask_cluster)

    *_, inline_code = cli("run", cwd=inline)
    out, err, dask_code = cli("run", cwd=on_dask)
    assert inline_code == dask_code == 1, out + err  # the example blocks, wherever it runs
    pd.testing.assert_frame_equal(verdict_rows(inline), verdict_rows(on_dask))
    # Its cases ran in system processes under both Dask workers, never in a Dask worker itself.
    system_pids = {json.loads(line)["pid"] for line in (on_dask / "calls.log").read_text().splitlines()}
    with Client(dask_cluster) as client:
        dask_workers = {info["pid"] for info in client.run(lambda: {"pid": os.getpid()}).values()}
    assert len(dask_workers) == 2 and not system_pids & dask_workers
    assert ended(system_pids)  # the fan-out closed its sandboxes

    # Kill the Dask worker running one case, mid-case (and mid-batch).
    (killed / "kill_me").touch()
    run = cli("run", cwd=killed, wait=False)
    deadline = time.monotonic() + 300
    while not (killed / "victim").exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    victim = json.loads((killed / "victim").read_text())
    dask_worker_of(victim["pid"]).kill()
    out, err = run.communicate(timeout=600)
    # Blocked, never allowed: by a FAIL, or, when the lost batches take enough of a rule's
    # cases (how many depends on the batch sizes measured), for want of evidence.
    assert run.returncode in (EXIT_BLOCK_FAIL, EXIT_BLOCK_INSUFFICIENT) and "Gate: BLOCK" in out, out + err
    assert ended({victim["pid"]})  # its sandbox went with the Dask worker

    runs = pd.read_parquet(table_path(killed, "recorded_runs", "1.0.0")).set_index("case_id")
    failed = runs[runs["status"] != "ok"]
    # What the killed worker held: the batch it ran, and at most one in line behind it, each
    # whole (its task's key, in each case's error, names its size), and no other case.
    assert failed["error"].str.contains("KilledWorker").all(), failed["error"].tolist()
    batches = failed["error"].str.extract(r"(sandbox-batch-(\d+)-cases-[0-9a-f]+)")
    assert batches[0].notna().all(), failed["error"].tolist()
    held = batches.groupby(0)[1].agg(["first", "size"])
    assert 1 <= len(held) <= 2 and (held["first"].astype(int) == held["size"]).all(), held
    inputs = pd.concat(pd.read_parquet(table_path(killed, table)) for table in ("cases", "derived_cases")).set_index("case_id")["input"]
    # The case that was running is among them.
    assert victim["message"] in {json.loads(inputs[case_id])["message"] for case_id in failed.index}
    # Every other verdict as inline (a lost case's copies are judged against it, so each
    # lost case's family is left out).
    families = {case_id.split("~")[0] for case_id in failed.index}
    family = lambda frame: frame["case_id"].str.split("~").str[0].isin(families)  # noqa: E731
    inline_verdicts, killed_verdicts = verdict_rows(inline), verdict_rows(killed)
    pd.testing.assert_frame_equal(
        inline_verdicts[~family(inline_verdicts)].reset_index(drop=True),
        killed_verdicts[~family(killed_verdicts)].reset_index(drop=True),
    )
    assert set(killed_verdicts[killed_verdicts["case_id"].isin(failed.index)]["outcome"]) <= {"MISSING", "EXCLUDED"}
