"""A model-driven agent at the speed of its model: the chat-agent example against a stand-in
model that answers after a fixed latency, at several `concurrency.system` settings.

Usage:
    python benchmarks/model_latency.py [--sources 240] [--latencies 0,0.5] [--concurrency 1,4,16,64]
                                       [--workdir DIR] [--keep]

The suite is the example's cases scaled to `--sources` source cases (ids and amounts varied,
each kind keeping its share, labels re-keyed so both transforms stay checked: three cases per
source with the copies). The stand-in is the example's own scripted model (standin.py), served
in this process on 127.0.0.1, each answer held `latency` seconds; it counts the requests and
the most it had in flight at once. Each setting is a fresh project run by the command as a user
runs it (`oloproof-pipeline run`, a process of its own), and prints:

- wall time; model requests (the stand-in's count); the most requests it saw at once;
- the requests in flight at most, and on average while the stand-in had any (the time
  requests spent in it over the time it was busy: overhead between model calls left out);
- concurrency achieved: requests x latency / (wall - wall at latency 0), the model time
  overlapped per second of the model's share of the wall, against the quickest run at
  latency 0 of any setting (a noisy baseline can only make it smaller);
- the peak RSS of the run's whole process tree (the CLI, its fork server and workers, and
  any Dask worker), sampled every 50 ms and summed over the tree.

Then a rerun of the last project with nothing changed: its model requests (0: nothing is
called again). These machines are noisy: read figures taken in one sitting.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import yaml

from pipeline import OUR_COMMAND, read_jsonl, rekey_labels, scaled_cases, write_jsonl  # benchmarks/ is on the path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example_project" / "chat_agent"
SAMPLE_S = 0.05


def standin_class() -> type:
    spec = importlib.util.spec_from_file_location("chat_agent_standin", EXAMPLE / "standin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class SlowStandIn(module.StandIn):
        """The example's stand-in, each answer after `latency_s`, counting what is in flight."""

        latency_s = 0.0
        in_flight = 0
        peak = 0
        # Seconds requests spent in the stand-in, and seconds it had at least one: their ratio
        # is the requests it had in flight on average while busy (the pipeline's overhead
        # between model calls left out).
        request_s = 0.0
        busy_s = 0.0
        _busy_since = 0.0

        def answer(self, body: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
            arrived = time.monotonic()
            with self._lock:
                if self.in_flight == 0:
                    self._busy_since = arrived
                self.in_flight += 1
                self.peak = max(self.peak, self.in_flight)
            try:
                time.sleep(self.latency_s)
                return super().answer(body)
            finally:
                with self._lock:
                    left = time.monotonic()
                    self.in_flight -= 1
                    self.request_s += left - arrived
                    if self.in_flight == 0:
                        self.busy_s += left - self._busy_since

        def reset_counts(self) -> None:
            with self._lock:
                self.peak, self.request_s, self.busy_s = 0, 0.0, 0.0

    return SlowStandIn


def write_project(workdir: Path, name: str, sources: int, url: str, concurrency: int) -> Path:
    project = workdir / name
    shutil.rmtree(project, ignore_errors=True)
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    config = yaml.safe_load((project / "oloproof.yaml").read_text(encoding="utf-8"))
    config["system"]["model"]["base_url"] = url
    config["concurrency"] = {"system": concurrency}
    (project / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    data = project / config["dataset"]
    cases = scaled_cases(read_jsonl(data), sources)
    write_jsonl(data, cases)
    rekey_labels(project, config, cases)
    return project


def tree_rss(process: psutil.Process) -> int:
    """The RSS of a process and all its descendants, in bytes (those that end meanwhile: 0)."""
    total = 0
    try:
        members = [process, *process.children(recursive=True)]
    except psutil.Error:
        return 0
    for member in members:
        try:
            total += member.memory_info().rss
        except psutil.Error:
            pass
    return total


@dataclass
class Measured:
    seconds: float
    requests: int
    peak_in_flight: int
    mean_in_flight: float
    peak_rss_mib: float
    exit_code: int


def measured_run(project: Path, standin: Any) -> Measured:
    """`oloproof-pipeline run` on `project`: wall time, the stand-in's requests, peak tree RSS."""
    before = len(standin.requests)
    standin.reset_counts()
    peak = 0
    started = time.perf_counter()
    with tempfile.TemporaryFile() as out:
        child = subprocess.Popen([str(OUR_COMMAND), "run", "--project", str(project)], stdout=out, stderr=subprocess.STDOUT)
        watched = psutil.Process(child.pid)
        while child.poll() is None:
            peak = max(peak, tree_rss(watched))
            time.sleep(SAMPLE_S)
        seconds = time.perf_counter() - started
        if child.returncode not in (0, 1, 3):
            out.seek(0)
            raise SystemExit(f"the run failed ({child.returncode}) in {project}:\n{out.read().decode()[-3000:]}")
    mean = standin.request_s / standin.busy_s if standin.busy_s else 0.0
    return Measured(seconds, len(standin.requests) - before, standin.peak, mean, peak / 2**20, child.returncode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", type=int, default=240)
    parser.add_argument("--latencies", default="0,0.5")
    parser.add_argument("--concurrency", default="1,4,16,64")
    parser.add_argument("--workdir", type=Path)
    parser.add_argument("--keep", action="store_true")
    arguments = parser.parse_args()
    latencies = [float(value) for value in arguments.latencies.split(",")]
    if 0.0 not in latencies:
        latencies.insert(0, 0.0)  # concurrency achieved is measured against the run at latency 0
    settings = [int(value) for value in arguments.concurrency.split(",")]
    workdir = arguments.workdir or Path(tempfile.mkdtemp(prefix="model-latency-"))
    standin = standin_class()().start()
    print(f"chat-agent example, {arguments.sources} source cases ({3 * arguments.sources} with copies); stand-in at {standin.url}")
    print(
        f"{'latency s':>9} {'concurrency':>11} {'wall s':>8} {'requests':>8} {'peak in flight':>14} "
        f"{'mean in flight':>14} {'achieved':>8} {'peak RSS MiB':>12}"
    )
    at_zero: dict[int, float] = {}
    last = None
    try:
        for latency in sorted(latencies):
            standin.latency_s = latency
            for concurrency in settings:
                project = write_project(workdir, f"c{concurrency}-l{latency:g}", arguments.sources, standin.url, concurrency)
                result = measured_run(project, standin)
                if latency == 0:
                    at_zero[concurrency] = result.seconds
                # Against the quickest run at latency 0 (of any setting): a noisy baseline
                # can only make the figure smaller, never flatter it.
                model_share = result.seconds - min(at_zero.values(), default=0.0)
                achieved = f"{result.requests * latency / model_share:8.1f}" if latency and model_share > 0 else f"{'-':>8}"
                print(
                    f"{latency:>9g} {concurrency:>11} {result.seconds:>8.1f} {result.requests:>8} "
                    f"{result.peak_in_flight:>14} {result.mean_in_flight:>14.1f} {achieved} {result.peak_rss_mib:>12.0f}",
                    flush=True,
                )
                last = project
        if last is not None:
            rerun = measured_run(last, standin)
            print(f"rerun with nothing changed ({last.name}): {rerun.requests} model requests, {rerun.seconds:.1f} s")
    finally:
        standin.stop()
        if not arguments.keep and arguments.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
