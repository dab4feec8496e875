"""The whole pipeline at scale on the refund desk: cold run, reruns, peak memory, and the floor.

Usage:
    python benchmarks/pipeline.py [--small-runs 3] [--sizes 2400,10000] [--huge] [--vs-oloproof]
                                  [--sleep-cases 2400] [--dask-cases 200]
                                  [--workdir DIR] [--keep]

First, the small example as a newcomer and an agent developer meet it (`--small-runs R`, 0 to
skip): the refund desk as shipped (24 source cases, 72 recorded, 12 replays) against
Oloproof's own stateful-agent example, a new `system.version` each run (ours: `--version`;
Oloproof's: its oloproof.yaml edited), the two run in turn R times (A B A B ...): the median
wall time and the median peak RSS of the whole process tree (every process the run started,
their resident memory summed while they run, sampled every 10 ms), and the ratios taken pair
by pair; then the same first run in an empty folder.

For each size N it generates a suite of N source cases for the refund desk
(`example_project/stateful_agent`: the same six kinds of case, ids and amounts varied, labels
re-keyed with the current pair digests so both transforms stay checked), then runs the
`oloproof` command as a user would, each run a process of its own, and prints:

- cold: nothing stored yet; every case, copy and replay recorded and judged;
- rerun: nothing changed (zero system calls and zero verdicts judged are printed too): the
  CLI finds nothing changed since the last complete run and launches nothing;
- rerun launched anyway (`--launch`): a Dagster run in which every stage reuses what it stored;
- add one case: exactly that case, its two copies and its replay recorded;
- evaluator changed: one criterion re-judged, the system not called;
- the peak RSS of each run (the process's own accounting, from `os.wait4` in a small launcher
  process: a child started by this one would start from its peak);
- the raw loop: the desk called directly over every case, copy and replay, with no pipeline
  (the floor any pipeline pays).

Then, at `--sleep-cases` source cases, the same cold run and raw loop on a desk that sleeps
1 ms per tool call (a stand-in for a tool that waits on I/O), and their ratio; and at
`--dask-cases` source cases, recording on a desk that sleeps 20 ms per tool call with one
sandbox against two on a local Dask cluster (cases sent in batches sized from the measured
round trip, `benchmarks/scale_out.py`'s timing: start-up and a warm-up apart), and the speed-up.

`--vs-oloproof` also runs Oloproof's own stateful-agent example (`oloproof init --example
stateful-agent`, with `OLOPROOF` pointing at its command, default
/work/oloproof-venv/bin/oloproof) scaled the same way to each N: cold and rerun time and peak
RSS, and the ratios. `--huge` adds N = 100,000. These machines are noisy: read ratios taken in
one sitting, not absolute times.
"""

from __future__ import annotations

import argparse
import compileall
import copy
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import psutil
import yaml

from oloproof_pipeline.model.config import TransformConfig
from oloproof_pipeline.model.transforms import copy_id, digest_of_transform, transformed_input
from oloproof_pipeline.model.digests import pair_digest
from scale_out import timed_recording  # benchmarks/ is the script's folder, so on its path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example_project" / "stateful_agent"
OUR_COMMAND = Path(sys.executable).parent / "oloproof-pipeline"  # `oloproof` may be Oloproof's own (the extra)

def oloproof_command() -> list[str]:
    """Oloproof's own CLI: `$OLOPROOF`, else its module in this interpreter (installed beside
    us, where the `oloproof` script name is ours), else an `oloproof` venv of its own."""
    if os.environ.get("OLOPROOF"):
        return [os.environ["OLOPROOF"]]
    try:
        import oloproof_cli  # noqa: F401  (only whether it is installed)
    except ImportError:
        return ["/work/oloproof-venv/bin/oloproof"]
    return [sys.executable, "-m", "oloproof_cli"]


OLOPROOF_COMMAND = oloproof_command()
# The refund desk's policy threshold: amounts are varied without crossing it, so each case
# keeps its kind (and its expected answer).
ESCALATION_THRESHOLD_USD = 200.0
BYSTANDER = "ord-999"
SLEEP_S = 0.001
DASK_SLEEP_S = 0.020

# A desk that waits 1 ms in every tool, as a tool waiting on a database or an API would.
SLEEPING_APP = '''
"""The refund desk, each tool waiting SLEEP_MS ms first (benchmarks/pipeline.py)."""
import time

from app import RefundDesk

SLEEP_S = SLEEP_MS / 1000


class SleepingDesk(RefundDesk):
    def _lookup_order(self, order_id):
        time.sleep(SLEEP_S)
        return super()._lookup_order(order_id)

    def _issue_refund(self, order_id):
        time.sleep(SLEEP_S)
        return super()._issue_refund(order_id)

    def _escalate_to_human(self, order_id):
        time.sleep(SLEEP_S)
        return super()._escalate_to_human(order_id)
'''


# -- generating a suite ----------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def varied_amount(amount: float, index: int) -> float:
    """A different amount on the same side of the escalation threshold (and of zero)."""
    step = (index % 97) / 97  # 0 .. 0.99, spread over the suite
    if amount > ESCALATION_THRESHOLD_USD:
        return round(amount + 1 + 300 * step, 2)
    return round(max(1.0, amount * (0.5 + 0.5 * step)), 2)


def renamed(value: Any, old: str, new: str) -> Any:
    """`value` with every occurrence of the id `old` (in keys and text) replaced by `new`."""
    return json.loads(json.dumps(value).replace(old, new))


def scaled_case(template: dict[str, Any], index: int) -> dict[str, Any]:
    """The template's kind of case under a new id, its order's amount varied."""
    new_id = f"ord-{index + 1:06d}"
    case = renamed(template, template["id"], new_id)
    order = case["initial_state"]["orders"][new_id]
    old_amount, order["total_usd"] = order["total_usd"], varied_amount(order["total_usd"], index)
    expected_order = ((case.get("expected") or {}).get("state") or {}).get("orders", {}).get(new_id)
    if expected_order is not None and "total_usd" in expected_order:
        assert expected_order["total_usd"] == old_amount
        expected_order["total_usd"] = order["total_usd"]
    return case


def scaled_cases(templates: list[dict[str, Any]], total: int) -> list[dict[str, Any]]:
    """`total` cases cycling through the templates (so every kind keeps its share)."""
    return [scaled_case(templates[index % len(templates)], index) for index in range(total)]


def rekey_labels(project: Path, config: dict[str, Any], cases: list[dict[str, Any]]) -> None:
    """One `kept` label per copy and transform, carrying the pair's current digest."""
    for raw in config.get("metamorphic", {}).get("transforms", []):
        transform = TransformConfig.model_validate(raw)
        if transform.validity_labels is None:
            continue
        the_digest = digest_of_transform(transform)
        labels = []
        for case in cases:
            derived = transformed_input(transform, case["input"])
            labels.append(
                {
                    "case": copy_id(case["id"], transform.name),
                    "digest": pair_digest(transform=the_digest, source_input=case["input"], derived_input=derived),
                    "kept": True,
                }
            )
        write_jsonl(project / transform.validity_labels, labels)


def dataset_file(project: Path, config: dict[str, Any]) -> Path:
    dataset = config["dataset"]
    return project / (dataset if isinstance(dataset, str) else dataset[0])


def write_suite(project: Path, total: int) -> list[dict[str, Any]]:
    """Scale the project's own cases (its six kinds) to `total` and re-key its labels."""
    config = yaml.safe_load((project / "oloproof.yaml").read_text(encoding="utf-8"))
    data = dataset_file(project, config)
    templates = read_jsonl(data)
    cases = scaled_cases(templates, total)
    write_jsonl(data, cases)
    rekey_labels(project, config, cases)
    return cases


def add_one_case(project: Path) -> None:
    config = yaml.safe_load((project / "oloproof.yaml").read_text(encoding="utf-8"))
    data = dataset_file(project, config)
    cases = read_jsonl(data)
    cases.append(scaled_case(cases[0], len(cases) + 1_000_000))  # an id no generated case has
    write_jsonl(data, cases)
    rekey_labels(project, config, cases)


def our_suite(workdir: Path, total: int, name: str = "ours") -> Path:
    project = workdir / f"{name}-{total}"
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    write_suite(project, total)
    return project


def oloproof_suite(workdir: Path, total: int) -> Path:
    """Oloproof's own example, created by its own `init`, scaled to `total` cases."""
    parent = workdir / f"oloproof-{total}"
    shutil.rmtree(parent, ignore_errors=True)
    parent.mkdir(parents=True)
    subprocess.run([*OLOPROOF_COMMAND, "init", "--example", "stateful-agent"], cwd=parent, check=True,
                   stdout=subprocess.DEVNULL)
    project = parent / "stateful-agent"
    if total:
        write_suite(project, total)
    return project


# -- timing one process ----------------------------------------------------------------------


@dataclass
class Timed:
    seconds: float
    peak_rss_mib: float
    exit_code: int
    stdout: str
    # The whole process tree's resident memory at its largest (summed over the processes
    # alive at once: the run, its fork server and workers); 0 when not sampled.
    tree_peak_mib: float = 0.0


def tree_rss_bytes(pid: int) -> int:
    """The resident memory of `pid`'s descendants now (0 for one that just ended): `pid` is
    the launcher (below), not counted."""
    try:
        processes = psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return 0
    total = 0
    for process in processes:
        with suppress(psutil.Error):
            total += process.memory_info().rss
    return total


# Both tools run as installed ones do: with their compiled bytecode cached (`pip install`
# compiles Oloproof's; this checkout's is compiled once by `main`), whatever this shell says.
INSTALLED_ENVIRONMENT = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}

# A child's peak RSS as the kernel counts it (ru_maxrss) starts from its parent's own peak:
# the child shares the parent's memory until it execs (vfork). This process holds what it
# generated (a 100,000-case suite: its peak is above a rerun's whole run). So each command
# runs under a launcher, a small interpreter whose own peak is the command's floor, which
# reports the command's ru_maxrss (KiB) to the file named first and exits with its code.
LAUNCHER = """import os, sys
pid = os.posix_spawnp(sys.argv[2], sys.argv[2:], os.environ)
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as peak:
    peak.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def timed(command: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> Timed:
    """Wall time, the command's own peak RSS (the kernel's rusage of it, from the launcher)
    and the process tree's peak RSS (sampled every 10 ms from a thread)."""
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as peak_file:
        process = subprocess.Popen([sys.executable, "-c", LAUNCHER, peak_file.name, *command], cwd=cwd, stdout=out,
                                   stderr=subprocess.STDOUT, env={**INSTALLED_ENVIRONMENT, **(env or {})})
        peak, done = [0], threading.Event()

        def sample() -> None:
            while not done.wait(0.01):
                peak[0] = max(peak[0], tree_rss_bytes(process.pid))

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        process.wait()
        seconds = time.perf_counter() - started
        done.set()
        sampler.join()
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
        own = int(peak_file.read() or 0) / 1024
    return Timed(seconds, own, process.returncode, text, tree_peak_mib=max(peak[0] / 2**20, own))


def run_ours(project: Path, *options: str) -> Timed:
    # This checkout's package, whatever the interpreter has installed.
    result = timed([str(OUR_COMMAND), "run", "--project", str(project), *options],
                   env={"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))})
    if result.exit_code not in (0, 1, 3, 4):
        raise SystemExit(f"oloproof run failed ({result.exit_code}) in {project}:\n{result.stdout[-3000:]}")
    return result


def run_oloproof(project: Path) -> Timed:
    result = timed([*OLOPROOF_COMMAND, "run"], cwd=project)
    if result.exit_code not in (0, 1, 3, 4):
        raise SystemExit(f"Oloproof's run failed ({result.exit_code}) in {project}:\n{result.stdout[-3000:]}")
    return result


def run_id_of(result: Timed) -> str:
    found = re.search(r"Dagster run (\S+) evaluated", result.stdout)
    if found is None:
        raise SystemExit(f"no run id in the output:\n{result.stdout[-2000:]}")
    return found.group(1)


@dataclass
class Work:
    """What one run of ours did, read back from its tables."""

    recorded: int
    replayed: int
    judged: int
    judged_criteria: list[str]

    def __str__(self) -> str:
        criteria = f" ({', '.join(self.judged_criteria)})" if 0 < len(self.judged_criteria) < 3 else ""
        return f"{self.recorded} recorded, {self.replayed} replayed, {self.judged} verdicts judged{criteria}"


def work_of(project: Path, result: Timed, version: str = "1.0.0") -> Work:
    if f"Version {version} is up to date" in result.stdout:
        return Work(recorded=0, replayed=0, judged=0, judged_criteria=[])  # no run was launched
    run_id = run_id_of(result)
    tables = project / ".oloproof" / "tables"
    runs = pd.read_parquet(tables / "recorded_runs" / f"{version}.parquet", columns=["recorded_by_run"])
    replays = pd.read_parquet(tables / "fault_replays" / f"{version}.parquet", columns=["replayed_by_run"])
    verdicts = pd.read_parquet(tables / "verdicts" / f"{version}.parquet", columns=["criterion", "judged_by_run"])
    judged = verdicts[verdicts["judged_by_run"] == run_id]
    return Work(
        recorded=int((runs["recorded_by_run"] == run_id).sum()),
        replayed=int((replays["replayed_by_run"] == run_id).sum()),
        judged=len(judged),
        judged_criteria=sorted(set(judged["criterion"])),
    )


# -- the raw loop ------------------------------------------------------------------------------


def raw_loop(project: Path, callable_name: str) -> float:
    """The desk called directly: every case and copy once (reset, call, snapshot), then each
    case that made an `issue_refund` call replayed twice (a control and a faulted replay) by the
    desk's own tool box. Returns the loop's seconds (imports and file reading left out)."""
    sys.path.insert(0, str(project))
    module_name, _, attribute = callable_name.partition(":")
    desk_class = getattr(__import__(module_name), attribute)
    from oloproof_pipeline.model.faults import checkpoint_before
    from oloproof_pipeline.model.trajectory import ToolChange
    from oloproof_pipeline.run.toolbox import ReplayScript

    config = yaml.safe_load((project / "oloproof.yaml").read_text(encoding="utf-8"))
    sources = read_jsonl(dataset_file(project, config))
    transforms = [TransformConfig.model_validate(raw) for raw in config["metamorphic"]["transforms"]]
    copies = [{**case, "input": transformed_input(transform, case["input"])} for transform in transforms for case in sources]
    desk = desk_class()

    def run(case: dict[str, Any], replay: ReplayScript | None = None) -> Any:
        desk.reset(copy.deepcopy(case["initial_state"]))
        desk.toolbox.begin(replay=replay)
        answer = desk(copy.deepcopy(case["input"]))
        return answer, desk.toolbox.trajectory(), desk.snapshot()

    started = time.perf_counter()
    recordings = [(case, run(case)) for case in [*sources, *copies]]
    for case, (_, trajectory, _) in recordings[: len(sources)]:
        calls = trajectory.calls()
        faulted = next((index for index, call in enumerate(calls) if call.tool == "issue_refund"), None)
        if faulted is None:
            continue
        checkpoint = checkpoint_before(trajectory, faulted)
        change = ToolChange(call_index=faulted, tool="issue_refund", arguments=calls[faulted].arguments,
                            result={"error": "internal error"})
        run(case, ReplayScript.from_recording(trajectory, checkpoint, None))
        run(case, ReplayScript.from_recording(trajectory, checkpoint, change))
    return time.perf_counter() - started


def timed_raw_loop(project: Path, callable_name: str) -> tuple[float, Timed]:
    """The raw loop in a process of its own: (the loop's seconds, the whole process)."""
    result = timed([sys.executable, __file__, "--raw-loop", str(project), callable_name])
    if result.exit_code != 0:
        raise SystemExit(f"the raw loop failed:\n{result.stdout[-3000:]}")
    return float(result.stdout.strip().splitlines()[-1]), result


def sleeping_suite(workdir: Path, total: int, sleep_s: float = SLEEP_S, name: str = "sleeping") -> Path:
    project = our_suite(workdir, total, name=name)
    (project / "sleeping_app.py").write_text(SLEEPING_APP.replace("SLEEP_MS", f"{sleep_s * 1000:g}"), encoding="utf-8")
    config = project / "oloproof.yaml"
    text = config.read_text(encoding="utf-8")
    # The sleeping desk lives in its own module; app.py, where the desk's logic is, is declared
    # as system code too, so an edit there re-records.
    text = text.replace('callable: "app:RefundDesk"', 'callable: "sleeping_app:SleepingDesk"\n  code_paths: [app.py]')
    config.write_text(text, encoding="utf-8")
    return project


# -- printing --------------------------------------------------------------------------------


def line(label: str, result: Timed, extra: str = "") -> None:
    print(f"  {label:<28} {result.seconds:8.2f} s   peak RSS {result.peak_rss_mib:6.0f} MiB "
          f"(tree {result.tree_peak_mib:6.0f} MiB)   exit {result.exit_code}"
          + (f"   {extra}" if extra else ""), flush=True)


def measure_size(workdir: Path, total: int, vs_oloproof: bool) -> None:
    print(f"\nN = {total:,} source cases ({3 * total:,} recorded cases with the two copies)", flush=True)
    project = our_suite(workdir, total)
    cold = run_ours(project)
    line("cold run", cold, str(work_of(project, cold)))
    rerun = run_ours(project)
    line("rerun, nothing changed", rerun, str(work_of(project, rerun)))
    launched = run_ours(project, "--launch")
    line("rerun, launched anyway", launched, str(work_of(project, launched)))
    add_one_case(project)
    added = run_ours(project)
    line("rerun, one case added", added, str(work_of(project, added)))
    config = project / "oloproof.yaml"
    config.write_text(config.read_text().replace("paths: [orders.ord-999]", "paths: [orders.ord-999.status]"))
    changed = run_ours(project)
    line("rerun, evaluator changed", changed, str(work_of(project, changed)))
    print(f"  rerun / cold                 {rerun.seconds / cold.seconds:8.3f}   "
          f"(launched anyway / cold {launched.seconds / cold.seconds:.3f})", flush=True)

    our_floor = our_suite(workdir, total, name="raw")
    loop_seconds, loop_process = timed_raw_loop(our_floor, "app:RefundDesk")
    print(f"  raw loop (floor)             {loop_seconds:8.2f} s   (whole process {loop_process.seconds:.2f} s, "
          f"peak RSS {loop_process.peak_rss_mib:.0f} MiB)   cold / raw loop {cold.seconds / loop_seconds:.2f}", flush=True)

    if vs_oloproof:
        theirs = oloproof_suite(workdir, total)
        their_cold = run_oloproof(theirs)
        line("Oloproof cold run", their_cold)
        their_rerun = run_oloproof(theirs)
        line("Oloproof rerun", their_rerun)
        print(f"  ours / Oloproof: cold {cold.seconds / their_cold.seconds:.2f}x, rerun "
              f"{rerun.seconds / their_rerun.seconds:.2f}x, peak RSS (cold) "
              f"{cold.peak_rss_mib / their_cold.peak_rss_mib:.2f}x (tree {cold.tree_peak_mib / their_cold.tree_peak_mib:.2f}x)",
              flush=True)


def bump_oloproof_version(project: Path, version: str) -> None:
    """Oloproof has no version flag: its oloproof.yaml's `system.version` is edited."""
    config = project / "oloproof.yaml"
    config.write_text(re.sub(r"(?m)^(  version:).*$", rf"\1 {version}", config.read_text(encoding="utf-8"), count=1),
                      encoding="utf-8")


def small_pair(workdir: Path, runs: int, *, fresh_folders: bool) -> None:
    """Ours and Oloproof's small example in turn, `runs` times, a new version each run
    (`fresh_folders`: each run the first in an empty folder)."""
    ours_project = theirs_project = None
    pairs: list[tuple[Timed, Timed]] = []
    for index in range(runs + 1):  # the first pair warms the disk caches and is not counted
        if fresh_folders or ours_project is None:
            ours_project = workdir / f"small-ours-{index}"
            shutil.rmtree(ours_project, ignore_errors=True)
            shutil.copytree(EXAMPLE, ours_project, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
            theirs_project = oloproof_suite(workdir / f"small-{index}", 0)
        version = f"bench-{index}"
        ours = run_ours(ours_project, "--version", version)
        bump_oloproof_version(theirs_project, version)
        theirs = run_oloproof(theirs_project)
        if index:
            pairs.append((ours, theirs))
    ours_seconds = statistics.median(ours.seconds for ours, _ in pairs)
    theirs_seconds = statistics.median(theirs.seconds for _, theirs in pairs)
    ours_peak = statistics.median(ours.tree_peak_mib for ours, _ in pairs)
    theirs_peak = statistics.median(theirs.tree_peak_mib for _, theirs in pairs)
    time_ratio = statistics.median(ours.seconds / theirs.seconds for ours, theirs in pairs)
    memory_ratio = statistics.median(ours.tree_peak_mib / theirs.tree_peak_mib for ours, theirs in pairs)
    print(f"  ours      {ours_seconds:7.2f} s   tree peak RSS {ours_peak:5.0f} MiB   "
          f"({', '.join(f'{ours.seconds:.2f}' for ours, _ in pairs)} s)", flush=True)
    print(f"  Oloproof  {theirs_seconds:7.2f} s   tree peak RSS {theirs_peak:5.0f} MiB   "
          f"({', '.join(f'{theirs.seconds:.2f}' for _, theirs in pairs)} s)", flush=True)
    print(f"  ours / Oloproof (median of the pairs): time {time_ratio:.2f}x, peak memory {memory_ratio:.2f}x", flush=True)


def measure_small(workdir: Path, runs: int) -> None:
    print(f"\nThe small example (24 source cases, 72 recorded, 12 replays), a new system.version each run, "
          f"{runs} runs each in turn", flush=True)
    small_pair(workdir, runs, fresh_folders=False)
    print("The same, each run the first in an empty folder", flush=True)
    small_pair(workdir, runs, fresh_folders=True)


def measure_sleeping(workdir: Path, total: int) -> None:
    print(f"\nA desk sleeping {SLEEP_S * 1000:g} ms per tool call, N = {total:,} source cases", flush=True)
    project = sleeping_suite(workdir, total)
    loop_seconds, loop_process = timed_raw_loop(project, "sleeping_app:SleepingDesk")
    cold = run_ours(project)
    line("cold run", cold, str(work_of(project, cold)))
    print(f"  raw loop                     {loop_seconds:8.2f} s   (whole process {loop_process.seconds:.2f} s)", flush=True)
    print(f"  cold / raw loop              {cold.seconds / loop_seconds:8.2f}   "
          f"(against the raw loop's whole process {cold.seconds / loop_process.seconds:.2f})", flush=True)


def measure_dask(workdir: Path, total: int, workers: int = 2) -> None:
    """Recording alone (the stage Dask spreads), one sandbox against `workers` on a local Dask
    cluster (cases in batches), on a desk whose tools wait DASK_SLEEP_S each: ideal speed-up
    `workers`. Both with `concurrency: {system: 1}`, so one sandbox is one (a Python system's
    default lets the run add local sandboxes, also shown: `concurrency.system` 8, no Dask)."""
    print(f"\nA desk sleeping {DASK_SLEEP_S * 1000:g} ms per tool call, N = {total:,} source cases, recording alone",
          flush=True)
    timings = {}
    for name, dask_workers, at_once in (("one", 1, 1), ("dask", workers, 1), ("local", 1, 8)):
        project = sleeping_suite(workdir, total, sleep_s=DASK_SLEEP_S, name=f"dask-{name}")
        config = yaml.safe_load((project / "oloproof.yaml").read_text(encoding="utf-8"))
        config.setdefault("execution", {})["workers"] = dask_workers
        config["concurrency"] = {"system": at_once}
        (project / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
        timings[name] = timed_recording(project, version=config["system"]["version"])
    (one_startup, one), (startup, many), (local_startup, local) = timings["one"], timings["dask"], timings["local"]
    print(f"  1 sandbox                    {one:8.2f} s   (+{one_startup:.2f} s to start: a warm-up)", flush=True)
    print(f"  {workers} sandboxes on Dask          {many:8.2f} s   (+{startup:.2f} s to start: the local cluster, a warm-up)",
          flush=True)
    print(f"  speed-up                     {one / many:8.2f}x  "
          f"(ideal {workers}x; with start-up {(one + one_startup) / (many + startup):.2f}x)", flush=True)
    print(f"  local sandboxes, no Dask     {local:8.2f} s   (+{local_startup:.2f} s to start; concurrency.system 8): "
          f"{one / local:.2f}x one sandbox", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--small-runs", type=int, default=3,
                        help="runs of the small example against Oloproof's, in turn (0: skip)")
    parser.add_argument("--sizes", default="2400,10000", help="source-case counts, comma separated (0 or empty: skip)")
    parser.add_argument("--huge", action="store_true", help="also N = 100,000")
    parser.add_argument("--vs-oloproof", action="store_true", help="Oloproof's own example side by side")
    parser.add_argument("--sleep-cases", type=int, default=2400, help="N for the sleeping desk (0: skip)")
    parser.add_argument("--dask-cases", type=int, default=200, help="N for the Dask speed-up, 20 ms per tool call (0: skip)")
    parser.add_argument("--workdir", type=Path, default=None, help="where the suites go (default: a temporary folder)")
    parser.add_argument("--keep", action="store_true", help="keep the generated suites")
    parser.add_argument("--raw-loop", nargs=2, metavar=("PROJECT", "CALLABLE"), help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.raw_loop:
        print(raw_loop(Path(arguments.raw_loop[0]), arguments.raw_loop[1]))
        return

    # "0", like the other counts' 0, skips the sizes rather than building an empty suite
    sizes = [int(size) for size in arguments.sizes.split(",") if size.strip() and int(size) > 0]
    if arguments.huge:
        sizes.append(100_000)
    workdir = arguments.workdir or Path(tempfile.mkdtemp(prefix="oloproof-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    print(f"Suites under {workdir}; {os.cpu_count()} CPUs; Python {sys.version.split()[0]}", flush=True)
    compileall.compile_dir(REPO / "oloproof_pipeline", quiet=1)  # as `pip install` would have
    try:
        if arguments.small_runs:
            measure_small(workdir, arguments.small_runs)
        for total in sizes:
            measure_size(workdir, total, arguments.vs_oloproof)
        if arguments.sleep_cases:
            measure_sleeping(workdir, arguments.sleep_cases)
        if arguments.dask_cases:
            measure_dask(workdir, arguments.dask_cases)
    finally:
        if not (arguments.keep or arguments.workdir):
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
