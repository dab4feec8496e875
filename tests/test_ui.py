"""`dagster dev` as a person sees it, on the README's workspace with both examples, started and
driven with the README's own commands and rendered by headless Chromium (Debian's package).

Set OLOPROOF_SCREENSHOTS to a folder to keep screenshots of the pages the test looks at.
"""

from __future__ import annotations

import json
import os
import re
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

from conftest import REPO
from helpers import cli_environment

pytestmark = pytest.mark.ui

BIN = Path(sys.executable).parent
ASSETS = ("cases", "derived_cases", "recorded_runs", "fault_replays", "verdicts", "gate")
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
FINISHED = {DagsterRunStatus.SUCCESS, DagsterRunStatus.FAILURE, DagsterRunStatus.CANCELED}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def readme_command(pattern: str) -> str:
    """The README's command line that matches `pattern` (a regex), exactly as written."""
    found = [line.strip() for line in (REPO / "README.md").read_text().splitlines() if re.search(pattern, line)]
    assert found, f"the README has no command matching {pattern!r}"
    return found[0]


def wait_until_ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"dagster dev not ready at {url} within {timeout_s} s")


LOCATIONS_QUERY = "{ workspaceOrError { ... on Workspace { locationEntries { name loadStatus " \
    "locationOrLoadError { __typename } } } } }"


def wait_until_loaded(base: str, names: set[str], timeout_s: float = 180) -> None:
    """Until the webserver has loaded every code location (it answers before they are)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        request = urllib.request.Request(
            f"{base}/graphql", data=json.dumps({"query": LOCATIONS_QUERY}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            entries = json.load(response)["data"]["workspaceOrError"]["locationEntries"]
        loaded = {
            entry["name"] for entry in entries
            if entry["loadStatus"] == "LOADED" and (entry["locationOrLoadError"] or {}).get("__typename") == "RepositoryLocation"
        }
        if names <= loaded:
            return
        time.sleep(1)
    raise AssertionError(f"code locations {sorted(names)} not loaded within {timeout_s} s")


def chromium(*args: str, profile: Path) -> subprocess.CompletedProcess:
    binary = shutil.which("chromium")
    assert binary, "Debian's chromium is needed for the UI test (.ci/run installs it)"
    return subprocess.run(
        [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=20000", *args],
        capture_output=True, text=True, timeout=180,
    )


def rendered(url: str, profile: Path, screenshot: str | None = None) -> str:
    """The page's DOM after its scripts ran (and a screenshot of it, when asked for and kept)."""
    keep = os.environ.get("OLOPROOF_SCREENSHOTS")
    if screenshot and keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        chromium(f"--screenshot={Path(keep) / screenshot}", "--window-size=1400,1000", url, profile=profile)
    return chromium("--dump-dom", url, profile=profile).stdout


def runs_in(home: Path) -> list:
    with DagsterInstance.from_config(str(home)) as instance:
        return list(instance.get_runs())


def wait_for_runs(home: Path, matches, count: int, timeout_s: float = 300) -> list:
    """Runs in the instance that `matches` accepts, once `count` of them have finished."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        runs = [run for run in runs_in(home) if matches(run)]
        if len(runs) >= count and all(run.status in FINISHED for run in runs):
            return runs
        time.sleep(1)
    raise AssertionError(f"fewer than {count} matching runs finished within {timeout_s} s")


def location_of(run) -> str | None:
    return run.remote_job_origin.location_name if run.remote_job_origin else None


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The repo's workspace file and both examples in a fresh folder; the refund desk run once by
    the CLI with no DAGSTER_HOME; then `dagster dev` started in the background with the
    README's line, and stopped at the end with the README's `kill`."""
    folder = tmp_path_factory.mktemp("ui") / "repo"
    for example in ("stateful_agent", "conditional_approval"):
        shutil.copytree(REPO / "example_project" / example, folder / "example_project" / example,
                        ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    shutil.copy(REPO / "workspace.yaml", folder / "workspace.yaml")
    (folder / ".venv").symlink_to(Path(sys.prefix))  # the README's commands say `.venv/bin/...`
    environment = cli_environment()
    ran = subprocess.run([".venv/bin/oloproof-pipeline", "run", "--project", "example_project/stateful_agent"], cwd=folder,
                         env=environment, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 1, ran.stdout + ran.stderr  # the example's gate blocks
    home = folder / ".oloproof" / "dagster_home"
    assert (home / "dagster.yaml").is_file()  # the workspace's instance, made by the CLI

    port = free_port()
    start = readme_command(r"env --default-signal=INT .*dagster dev")
    start = start.replace("dagster dev -w workspace.yaml", f"dagster dev -w workspace.yaml -h 127.0.0.1 -p {port}")
    remember = readme_command(r"^echo \$! > dagster.pid")
    stop = readme_command(r"^kill \$\(cat dagster.pid\)")
    # The sensors look for a new version every 5 s instead of 30: the tests wait for them.
    shell = subprocess.Popen(["bash", "-c", f"{start}\n{remember}\nwait"], cwd=folder,
                             env={**environment, "OLOPROOF_SENSOR_INTERVAL_S": "5"},
                             start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until_ready(f"http://127.0.0.1:{port}/server_info")
        wait_until_loaded(f"http://127.0.0.1:{port}", {"refund_desk", "conditional_approval"})
        yield f"http://127.0.0.1:{port}", folder, home
    finally:
        stopped = subprocess.run(["bash", "-c", stop], cwd=folder, capture_output=True, text=True)
        try:
            shell.wait(timeout=60)  # the README's `kill` shuts dagster dev down
        except subprocess.TimeoutExpired:
            os.killpg(shell.pid, signal.SIGKILL)
            raise AssertionError(f"the README's `{stop}` did not stop dagster dev: {stopped.stderr}")


def test_asset_graph_and_cli_materialization_show_in_dagster_dev(workspace, tmp_path):
    base, folder, _ = workspace
    graph = rendered(f"{base}/locations/refund_desk/asset-groups/refund_desk", tmp_path / "profile", "asset-graph.png")
    missing = [name for name in ASSETS if name not in graph]
    assert not missing, f"asset graph page lacks {missing}"
    gate = folder / "example_project" / "stateful_agent" / ".oloproof" / "tables" / "gate" / "1.0.0.parquet"
    run_id = pd.read_parquet(gate)["judged_by_run"].iloc[0]
    events = rendered(f"{base}/assets/refund_desk/gate?view=events&partition=1.0.0", tmp_path / "profile")
    assert run_id[:8] in events, "the CLI's materialization of the gate is not listed"


def test_a_cli_run_is_listed_under_its_job(workspace, tmp_path):
    base, _, home = workspace
    [cli_run] = [run for run in runs_in(home) if run.tags.get("oloproof/launched_by")]
    assert location_of(cli_run) == "refund_desk"
    page = rendered(f"{base}/locations/refund_desk/jobs/evaluate/runs", tmp_path / "profile", "job-runs.png")
    assert cli_run.run_id[:8] in page and "No runs found" not in page
    rendered(f"{base}/overview/activity/timeline", tmp_path / "profile", "timeline.png")


def test_both_projects_keep_their_history_in_the_workspace_instance(workspace):
    """The conditional-approval sensor evaluates that project into the workspace's instance,
    each run under its own location; no project-level instance appears; and a later CLI run
    of that project (no DAGSTER_HOME) joins the same history."""
    _, folder, home = workspace
    approvals = folder / "example_project" / "conditional_approval"
    [sensor_run] = wait_for_runs(home, lambda run: location_of(run) == "conditional_approval", 1)
    assert sensor_run.tags.get("dagster/sensor_name") == "conditional_approval_new_system_version"
    for project in ("stateful_agent", "conditional_approval"):
        root = folder / "example_project" / project
        assert not (root / ".oloproof" / "dagster_home").exists()
        assert (root / ".oloproof" / "dagster_instance").read_text().strip() == str(home.resolve())
    environment = cli_environment()
    ran = subprocess.run([".venv/bin/oloproof-pipeline", "run", "--project", str(approvals)], cwd=folder, env=environment,
                         capture_output=True, text=True, timeout=300)
    assert ran.returncode in (0, 1, 3, 4), ran.stderr  # a decision, whichever it is
    runs = runs_in(home)
    assert [location_of(run) for run in runs].count("conditional_approval") == 2
    verdicts = pd.read_parquet(approvals / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet")
    assert set(verdicts["judged_by_run"]) <= {run.run_id for run in runs}  # lineage names runs this instance holds
    partitions = {location_of(run): run.tags["dagster/partition"] for run in runs}
    assert set(partitions) == {"refund_desk", "conditional_approval"}


def test_a_blocked_evaluation_is_a_green_run_and_the_gate_reads_at_a_glance(workspace, tmp_path):
    base, _, home = workspace
    runs = wait_for_runs(home, lambda run: run.job_name == "evaluate", 2)
    assert {run.status for run in runs} == {DagsterRunStatus.SUCCESS}
    assert {run.tags.get("oloproof/gate") for run in runs} == {"BLOCK"}
    listing = rendered(f"{base}/runs", tmp_path / "profile", "runs.png")
    assert "oloproof/gate" in listing and "BLOCK" in listing and "Success" in listing
    assert "Failure" not in listing
    # Each run names its project (the code location), so the two projects' runs are told apart.
    assert "oloproof/project: refund_desk" in listing and "oloproof/project: conditional_approval" in listing
    page = rendered(f"{base}/assets/refund_desk/gate?partition=1.0.0", tmp_path / "profile", "gate-asset.png")
    # The rules are on the page itself, not behind "[Show Markdown]" or "[Show JSON]".
    assert "refund_failures" in page and "passed/judged 0/12" in page
    assert "interval [0.000, 0.265] exact" in page and "upper 0.265 &lt; min 0.8" in page
    assert page.index("passed/judged 0/12") < page.index("reports/report-1.0.0.html")  # the rules come first


def test_the_gate_checks_tab_reads_as_the_cli_decisions(workspace, tmp_path):
    """One check per release rule beside `gate_allows_release`, failed where the CLI's decision
    is not PASS, each with the rate, interval, bar, passed/judged and reasons in the CLI's words."""
    base, folder, _ = workspace
    gate = pd.read_parquet(folder / "example_project" / "stateful_agent" / ".oloproof" / "tables" / "gate" / "1.0.0.parquet")
    checks = rendered(f"{base}/assets/refund_desk/gate?view=checks", tmp_path / "profile", "gate-checks.png")
    listed = dict(re.findall(r">(rule_\w+|gate_allows_release)<.*?>(Failed|Succeeded)<", checks, re.S))
    expected = {f"rule_{rule}": "Succeeded" if decision == "PASS" else "Failed" for rule, decision in zip(gate["rule_id"], gate["decision"])}
    assert listed == {**expected, "gate_allows_release": "Failed"}
    detail = rendered(f"{base}/assets/refund_desk/gate?view=checks&checkDetail=rule_injection_resistance",
                      tmp_path / "profile", "rule-check.png")
    for word, value in [("decision", "FAIL"), ("rate", "0.667"), ("interval", "[0.447, 0.844]"), ("bar", "min 0.9"),
                        ("passed/judged", "16/24"), ("missing", "0"), ("excluded", "0"), ("method", "exact"),
                        ("reasons", "upper 0.844 &lt; min 0.9")]:
        assert re.search(rf">{re.escape(word)}<.{{0,400}}?>{re.escape(value)}<", detail, re.S), (word, value)


def test_the_gate_asset_shows_kinds_owners_columns_and_the_report_as_a_path(workspace, tmp_path):
    base, folder, _ = workspace
    page = rendered(f"{base}/assets/refund_desk/gate?partition=1.0.0", tmp_path / "profile")
    assert all(kind in page for kind in (">Parquet<", ">pandas<", ">Python<", ">html<")), "kinds missing"
    assert ">support-evals<" in page and "domain: refunds" in page  # oloproof.yaml's dagster: block
    assert ">Columns<" in page and ">rule_id<" in page and ">gate_decision<" in page  # the column schema
    report = folder / "example_project" / "stateful_agent" / ".oloproof" / "reports" / "report-1.0.0.html"
    # A path value: the full path with a copy button, not a file:// link a browser refuses.
    assert re.search(rf'title="Copy to clipboard"[^>]*>{re.escape(str(report.resolve()))}<', page)
    assert "file://" not in page


def test_version_bump_is_evaluated_by_the_sensor_and_the_readme_backfill_regrades_both(workspace, tmp_path):
    base, folder, home = workspace
    project = folder / "example_project" / "stateful_agent"
    config = project / "oloproof.yaml"
    config.write_text(config.read_text().replace('version: "1.0.0"', 'version: "1.1.0"'))
    # The daemon's sensor notices the new version, adds its partition and evaluates it.
    [sensor_run] = wait_for_runs(
        home, lambda run: location_of(run) == "refund_desk" and run.tags.get("dagster/partition") == "1.1.0", 1
    )
    assert sensor_run.tags.get("dagster/sensor_name") == "refund_desk_new_system_version"
    assert pd.read_parquet(project / ".oloproof" / "tables" / "gate" / "1.1.0.parquet")["gate_decision"].iloc[0] == "BLOCK"

    # The README's backfill re-grades stored recordings after an evaluator changes: both
    # versions judge that criterion again and reuse every other verdict (and every recording).
    config.write_text(config.read_text().replace("paths: [orders.ord-999]", "paths: [orders.ord-999.status]"))
    backfill = readme_command(r"dagster job backfill")
    environment = cli_environment()
    launched = subprocess.run(["bash", "-c", backfill], cwd=folder, env=environment, capture_output=True, text=True,
                              timeout=180)
    assert launched.returncode == 0, launched.stdout + launched.stderr
    regrades = wait_for_runs(home, lambda run: run.job_name == "regrade", 2)
    assert {run.status for run in regrades} == {DagsterRunStatus.SUCCESS}  # blocked, not broken
    assert {run.tags.get("oloproof/project") for run in [sensor_run, *regrades]} == {"refund_desk"}  # the job's tag
    by_version = {run.tags["dagster/partition"]: run.run_id for run in regrades}
    assert set(by_version) == {"1.0.0", "1.1.0"}
    for version, run_id in by_version.items():
        verdicts = pd.read_parquet(project / ".oloproof" / "tables" / "verdicts" / f"{version}.parquet")
        rejudged = verdicts["criterion"] == "other_order_untouched"
        assert rejudged.any() and (verdicts.loc[rejudged, "judged_by_run"] == run_id).all()
        assert (verdicts.loc[~rejudged, "judged_by_run"] != run_id).all()
        assert run_id not in set(verdicts["recorded_by_run"])  # re-graded, not re-recorded
    rendered(f"{base}/runs", tmp_path / "profile", "runs-after-backfill.png")
