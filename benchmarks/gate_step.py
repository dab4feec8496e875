"""The gate step alone (the gate, then the version's HTML report), in process, on a stored
project: its time (wall and the process's CPU) and the growth of its peak RSS over the loaded process's.

    python benchmarks/gate_step.py PROJECT cold|case|keep [--version V] [--profile OUT]

cold: the report, its kept panels and compiled templates removed (every panel rendered);
case: the report alone removed (every panel kept, as after one case added); keep: nothing
removed (the report kept while its inputs hold)."""

from __future__ import annotations

import argparse
import cProfile
import shutil
import threading
import time
from pathlib import Path

import psutil

from oloproof_pipeline.decide.version_gate import gate_of_version
from oloproof_pipeline.project import load_project
from oloproof_pipeline.read.version_report import write_version_report
from oloproof_pipeline.store.reuse import stored_tables


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("project", type=Path)
    parser.add_argument("mode", choices=["cold", "case", "keep"])
    parser.add_argument("--version", default="1.0.0")
    parser.add_argument("--profile", type=Path)
    options = parser.parse_args()
    reports = options.project / ".oloproof" / "reports"
    if options.mode in ("case", "cold"):
        for path in reports.glob("report-*.html"):
            path.unlink()
    if options.mode == "cold":
        shutil.rmtree(reports / "panels", ignore_errors=True)
        shutil.rmtree(reports / "compiled_templates", ignore_errors=True)
    process = psutil.Process()
    base = peak = process.memory_info().rss
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not done.wait(0.005):
            peak = max(peak, process.memory_info().rss)

    threading.Thread(target=sample, daemon=True).start()
    profile = cProfile.Profile() if options.profile else None
    started, cpu_started = time.perf_counter(), time.process_time()
    if profile:
        profile.enable()
    project = load_project(options.project)
    stored = stored_tables(project, options.version)
    decided = gate_of_version(project, stored, options.version, run_id="gate-step-benchmark", flags=None)
    gated = time.perf_counter()
    report = write_version_report(project, stored, options.version, decided.frame, decided.trials)
    ended, cpu = time.perf_counter(), time.process_time() - cpu_started
    if profile:
        profile.disable()
        profile.dump_stats(options.profile)
    done.set()
    print(
        f"{options.mode}: step {ended - started:.2f} s (gate {gated - started:.2f}, report {ended - gated:.2f}; CPU {cpu:.2f} s); "
        f"RSS {base / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB (+{(peak - base) / 2**20:.0f}); {report.panels_line()}"
    )


if __name__ == "__main__":
    main()
