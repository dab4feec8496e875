"""Recording wall time with one sandbox against several on a local Dask cluster.

Usage: python benchmarks/scale_out.py [--cases 40] [--case-seconds 0.25] [--workers 2]

The system under test sleeps per case (a stand-in for a model call: the agent waits, the
CPU does not), so the ideal speed-up with W workers is W. On Dask the cases go in batches
(run/sandboxes.py's `BatchSizing`: as many cases per task as outlast two round trips, and a
batch in line behind each running one), so even cases as short as a Dask round trip scale.
Each arm first records a few cases as a warm-up (starting its fork servers, which import
once per process), printed as start-up; the timed recording then starts its sandboxes
afresh and records every case. Both figures come from one run of this script, since these
machines are noisy.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import textwrap
import time
from pathlib import Path

from oloproof_pipeline.run.recording import record_cases
from oloproof_pipeline.run.sandboxes import Sandboxes
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project

APP = """
import copy
import time

CASE_SECONDS = {case_seconds}


class System:
    def __init__(self):
        self.state = {{}}

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        time.sleep(CASE_SECONDS)
        self.state["answered"] = request["n"]
        return {{"answer": request["n"]}}
"""


def write_project(root: Path, cases: int, case_seconds: float, workers: int) -> Path:
    root.mkdir(parents=True)
    (root / "app.py").write_text(textwrap.dedent(APP.format(case_seconds=case_seconds)))
    (root / "data").mkdir()
    rows = [{"id": f"c{n:03d}", "input": {"n": n}, "initial_state": {"answered": None}} for n in range(cases)]
    (root / "data" / "cases.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = {
        "version": 1, "project": "bench", "dataset": "data/cases.jsonl",
        "system": {"name": "bench", "version": "1", "callable": "app:System"},
        "evaluators": [], "execution": {"workers": workers},
        # One sandbox per Dask worker, and one without Dask: not the local sandboxes a waiting system gets.
        "concurrency": {"system": 1},
    }
    (root / "oloproof.yaml").write_text(json.dumps(config))
    return root


def timed_recording(root: Path, version: str = "1") -> tuple[float, float]:
    """(seconds to start: the cluster, if any, and a warm-up recording of a few cases;
    seconds to record every case afresh)."""
    project = load_project(root)
    cases = load_cases(project)
    execution = project.config.execution
    started = time.perf_counter()
    with Sandboxes(execution) as sandboxes:
        # Two cases a sandbox: each Dask worker's fork server (or this process's) is up.
        warm_up = cases[: 2 * max(1, execution.workers)]
        record_cases(project, warm_up, version=version, run_id="warm-up", sandboxes=sandboxes)
        ready = time.perf_counter()
        runs, summary = record_cases(project, cases, version=version, run_id="benchmark", fresh=True, sandboxes=sandboxes)
        finished = time.perf_counter()
    assert summary.new == len(cases) and all(run.status == "ok" for run in runs)
    return ready - started, finished - ready


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--case-seconds", type=float, default=0.25)
    parser.add_argument("--workers", type=int, default=2)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        one_startup, one = timed_recording(write_project(Path(scratch) / "one", arguments.cases, arguments.case_seconds, 1))
        startup, many = timed_recording(
            write_project(Path(scratch) / "many", arguments.cases, arguments.case_seconds, arguments.workers)
        )
    print(f"cases: {arguments.cases} at {arguments.case_seconds:g} s each")
    print(f"1 sandbox:            {one:6.2f} s  (+{one_startup:.2f} s to start: the warm-up)")
    print(f"{arguments.workers} sandboxes on Dask:  {many:6.2f} s  (+{startup:.2f} s to start: the local cluster, the warm-up)")
    print(
        f"speed-up:             {one / many:6.2f}x (ideal {arguments.workers}x); "
        f"with start-up {(one + one_startup) / (many + startup):.2f}x"
    )


if __name__ == "__main__":
    main()
