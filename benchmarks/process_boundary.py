"""The cost of running the system under test in a supervised worker process.

Usage: python benchmarks/process_boundary.py [--cases 2400] [--tool-sleep-ms 1] [--repeats 3]

Records N cases of the refund desk example (its 24 cases, ids varied) three ways, on a desk
that sleeps a little in every tool call (a stand-in for the I/O a real tool does):
- the raw loop: this process calls the desk directly (reset, the case, snapshot), nothing
  recorded or checked: the floor;
- the runner in this process (run/runner.py's SandboxRunner, as inside a worker);
- through the supervised worker process (run/sandboxes.py's record_each, the path a run
  takes), cold: the fork server and the worker are started inside the timing.
Prints each time (the median of --repeats), the per-case overhead over the raw loop in ms
and the ratio, and the start-up alone (a cold fork server and worker). Issue 11's goal: with 1 ms per tool call, a cold run at most 1.3x the raw
loop. All figures come from one run of this script, since these machines are noisy.
"""

from __future__ import annotations

import argparse
import copy
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Callable

from oloproof_pipeline.model.cases import CaseRecord, load_cases
from oloproof_pipeline.model.modules import load_callable
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.runner import SandboxRunner
from oloproof_pipeline.run.sandboxes import record_each
from oloproof_pipeline.run.supervisor import probe_system
from oloproof_pipeline.run.worker_processes import stop_fork_server
from oloproof_pipeline.run.system import system_spec

EXAMPLE = Path(__file__).resolve().parents[1] / "example_project" / "stateful_agent"

SLEEPY_DESK = """

import time as _time

TOOL_SLEEP_S = {tool_sleep_s}


class SleepyDesk(RefundDesk):
    \"\"\"The refund desk, each tool call taking TOOL_SLEEP_S (the tool box holds these methods).\"\"\"

    def _lookup_order(self, order_id):
        _time.sleep(TOOL_SLEEP_S)
        return super()._lookup_order(order_id)

    def _issue_refund(self, order_id):
        _time.sleep(TOOL_SLEEP_S)
        return super()._issue_refund(order_id)

    def _escalate_to_human(self, order_id):
        _time.sleep(TOOL_SLEEP_S)
        return super()._escalate_to_human(order_id)
"""


def write_project(root: Path, cases: int, tool_sleep_s: float) -> Path:
    """The example with its cases repeated under new order ids, and the sleepy desk."""
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns(".oloproof", "__pycache__", "labels"))
    (root / "app.py").write_text((root / "app.py").read_text() + SLEEPY_DESK.format(tool_sleep_s=tool_sleep_s))
    config = root / "oloproof.yaml"
    text = config.read_text().replace('callable: "app:RefundDesk"', 'callable: "app:SleepyDesk"')
    config.write_text(text[: text.index("metamorphic:")] + "execution:\n  timeout_s: 30\n")
    (root / "release.yaml").unlink()  # recording only: nothing is judged or gated
    templates = (EXAMPLE / "data" / "cases.jsonl").read_text().splitlines()
    rows = []
    for n in range(cases):
        template = templates[n % len(templates)]
        rows.append(template.replace(json.loads(template)["id"], f"o{n:06d}"))
    (root / "data" / "cases.jsonl").write_text("\n".join(rows) + "\n")
    return root


def raw_loop(root: Path, cases: list[CaseRecord]) -> None:
    desk = load_callable(root, "app:SleepyDesk")()
    for case in cases:
        desk.reset(copy.deepcopy(case.initial_state))
        desk.toolbox.begin()  # a fresh trajectory: the tool box otherwise counts on across cases
        desk(copy.deepcopy(case.input))
        desk.snapshot()


def in_process_runner(root: Path, cases: list[CaseRecord]) -> None:
    runner = SandboxRunner(load_callable(root, "app:SleepyDesk"), system_version="1.0.0", timeout_s=30)
    assert all(runner.record(case).status == "ok" for case in cases)


def supervised(root: Path, cases: list[CaseRecord]) -> None:
    stop_fork_server()  # cold: the fork server and the worker start inside the timing
    spec = system_spec(load_project(root))
    assert all(run.status == "ok" for run in record_each(spec, cases, version="1.0.0", timeout_s=30))


def start_up(root: Path, cases: list[CaseRecord]) -> None:
    """Starting the fork server and one worker (importing and building the system) cold."""
    stop_fork_server()
    probe_system(system_spec(load_project(root)), timeout_s=30)


def medians(variants: dict[str, Callable[[Path, list[CaseRecord]], None]], root: Path, cases: list[CaseRecord], repeats: int) -> dict[str, float]:
    """Each variant's median time; the variants take turns, so a busy spell on the machine
    falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(repeats):
        for name, work in variants.items():
            started = time.perf_counter()
            work(root, cases)
            times[name].append(time.perf_counter() - started)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=2400)
    parser.add_argument("--tool-sleep-ms", type=float, default=1.0)
    parser.add_argument("--repeats", type=int, default=3)
    arguments = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        root = write_project(Path(scratch) / "desk", arguments.cases, arguments.tool_sleep_ms / 1000)
        cases = load_cases(load_project(root))
        variants = {"raw": raw_loop, "runner": in_process_runner, "worker": supervised, "starting": start_up}
        timed = medians(variants, root, cases, arguments.repeats)
    raw, runner, worker, starting = (timed[name] for name in variants)
    per_case = lambda seconds: (seconds - raw) / len(cases) * 1000  # noqa: E731
    print(f"cases: {len(cases)}, {arguments.tool_sleep_ms:g} ms per tool call, median of {arguments.repeats}")
    print(f"raw loop (the desk called directly):   {raw:7.2f} s")
    print(f"runner in this process:                {runner:7.2f} s  +{per_case(runner):.3f} ms/case  {runner / raw:.2f}x")
    print(f"supervised worker process (cold):      {worker:7.2f} s  +{per_case(worker):.3f} ms/case  {worker / raw:.2f}x")
    print(f"the process boundary alone:            +{(worker - runner) / len(cases) * 1000:.3f} ms/case  {worker / runner:.2f}x the runner")
    print(f"  of which starting the fork server and the worker once: {starting:.2f} s")


if __name__ == "__main__":
    main()
