"""`dagster dev` as a person sees it: the asset graph and a materialization made by the CLI,
rendered by headless Chromium (Debian's package)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from dagster import DagsterInstance, DagsterRunStatus

from conftest import EXAMPLE

pytestmark = pytest.mark.ui

BIN = Path(sys.executable).parent
ASSETS = ("cases", "derived_cases", "recorded_runs", "fault_replays", "verdicts", "gate")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_ready(url: str, process: subprocess.Popen, timeout_s: float = 90) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "dagster dev exited"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"dagster dev not ready at {url} within {timeout_s} s")


def rendered(url: str, profile: Path) -> str:
    """The page's DOM after its scripts ran."""
    chromium = shutil.which("chromium")
    assert chromium, "Debian's chromium is needed for the UI test (.ci/run installs it)"
    finished = subprocess.run(
        [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True, text=True, timeout=120,
    )
    return finished.stdout


@pytest.fixture(scope="module")
def dagster_dev(tmp_path_factory):
    """The example's graph served by `dagster dev` (webserver and daemon) on the instance the
    CLI records into."""
    tmp_path = tmp_path_factory.mktemp("ui")
    refund_desk = tmp_path / "refund_desk"
    shutil.copytree(EXAMPLE, refund_desk, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    home = tmp_path / "dagster_home"
    home.mkdir()
    environment = {**os.environ, "DAGSTER_HOME": str(home)}
    ran = subprocess.run([str(BIN / "oloproof"), "run", "--project", str(refund_desk)], env=environment,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1, ran.stderr  # the example's gate blocks
    workspace = tmp_path / "workspace.yaml"
    workspace.write_text(
        "load_from:\n  - python_file:\n"
        f"      relative_path: {refund_desk / 'definitions.py'}\n      location_name: refund_desk\n"
    )
    port = free_port()
    server = subprocess.Popen(
        [str(BIN / "dagster"), "dev", "-w", str(workspace), "-h", "127.0.0.1", "-p", str(port)],
        env=environment, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        wait_until_ready(f"http://127.0.0.1:{port}/server_info", server)
        yield f"http://127.0.0.1:{port}", refund_desk, home, workspace
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def test_asset_graph_and_cli_materialization_show_in_dagster_dev(dagster_dev, tmp_path):
    base, project, _, _ = dagster_dev
    graph = rendered(f"{base}/asset-groups/refund_desk", tmp_path / "profile")
    missing = [name for name in ASSETS if name not in graph]
    assert not missing, f"asset graph page lacks {missing}"

    run_id = pd.read_parquet(project / ".oloproof" / "tables" / "gate" / "1.0.0.parquet")["judged_by_run"].iloc[0]
    events = rendered(f"{base}/assets/refund_desk/gate?view=events&partition=1.0.0", tmp_path / "profile")
    assert run_id[:8] in events, "the CLI's materialization of the gate is not listed"


def wait_for_runs(home: Path, matches, count: int, timeout_s: float = 240) -> list:
    """Runs in the instance that `matches` accepts, once `count` of them have finished."""
    finished = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}
    deadline = time.monotonic() + timeout_s
    with DagsterInstance.from_config(str(home)) as instance:
        while time.monotonic() < deadline:
            runs = [run for run in instance.get_runs() if matches(run)]
            if len(runs) >= count and all(run.status in finished for run in runs):
                return runs
            time.sleep(1)
    raise AssertionError(f"fewer than {count} matching runs finished within {timeout_s} s")


def test_version_bump_is_evaluated_by_the_sensor_and_a_backfill_regrades_both(dagster_dev):
    _, project, home, workspace = dagster_dev
    config = project / "oloproof.yaml"
    config.write_text(config.read_text().replace('version: "1.0.0"', 'version: "1.1.0"'))
    # The daemon's sensor notices the new version, adds its partition and evaluates it.
    [sensor_run] = wait_for_runs(home, lambda run: run.tags.get("dagster/partition") == "1.1.0", 1)
    assert sensor_run.tags.get("dagster/sensor_name") == "refund_desk_new_system_version"
    assert pd.read_parquet(project / ".oloproof" / "tables" / "gate" / "1.1.0.parquet")["gate_decision"].iloc[0] == "BLOCK"

    launched = subprocess.run(
        [str(BIN / "dagster"), "job", "backfill", "-w", str(workspace), "-j", "regrade",
         "--partitions", "1.0.0,1.1.0", "--noprompt"],
        env={**os.environ, "DAGSTER_HOME": str(home)}, capture_output=True, text=True, timeout=120, cwd=workspace.parent,
    )
    assert launched.returncode == 0, launched.stdout + launched.stderr
    regrades = wait_for_runs(home, lambda run: run.job_name == "regrade", 2)
    by_version = {run.tags["dagster/partition"]: run.run_id for run in regrades}
    for version, run_id in by_version.items():
        verdicts = pd.read_parquet(project / ".oloproof" / "tables" / "verdicts" / f"{version}.parquet")
        assert (verdicts["judged_by_run"] == run_id).all()
        assert run_id not in set(verdicts["recorded_by_run"])  # re-graded, not re-recorded
