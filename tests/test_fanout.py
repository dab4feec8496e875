"""Scale-out: one partition's cases across several sandboxes on a local Dask cluster, one
system instance per worker process, one case at a time within each."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pandas as pd
from dagster import DagsterInstance

from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.store.layout import table_path

from conftest import write_project

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
        time.sleep(3 if request["kind"] == "hang" else 0.2)
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
        timeout_s=1.0,
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
