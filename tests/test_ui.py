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


@pytest.fixture
def dagster_dev(refund_desk, tmp_path):
    """The example's graph served by `dagster dev` on the instance the CLI records into."""
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
        yield f"http://127.0.0.1:{port}", refund_desk
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)


def test_asset_graph_and_cli_materialization_show_in_dagster_dev(dagster_dev, tmp_path):
    base, project = dagster_dev
    graph = rendered(f"{base}/asset-groups/refund_desk", tmp_path / "profile")
    missing = [name for name in ASSETS if name not in graph]
    assert not missing, f"asset graph page lacks {missing}"

    run_id = pd.read_parquet(project / ".oloproof" / "tables" / "gate" / "1.0.0.parquet")["judged_by_run"].iloc[0]
    events = rendered(f"{base}/assets/refund_desk/gate?view=events&partition=1.0.0", tmp_path / "profile")
    assert run_id[:8] in events, "the CLI's materialization of the gate is not listed"
