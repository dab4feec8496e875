"""What every launched run pays whatever its size, counted (never timed): the objects the
interpreter's shutdown would walk again."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO, cli_environment

# Registered before `main` registers its own exit handler, so it runs after it (atexit runs
# the last registered first): what the interpreter's final collections would then walk. What a
# command leaves alive is stood in for by 200,000 objects made after the CLI's imports.
EXIT_PROBE = """
import atexit, gc, sys
atexit.register(lambda: print(f"frozen={gc.get_freeze_count()} tracked={len(gc.get_objects())}", file=sys.stderr))
from oloproof_pipeline.cli import main
left_alive = [[index] for index in range(200_000)]
sys.argv = ["oloproof", *sys.argv[1:]]
main()
"""


def exit_counts(*args: str) -> dict[str, int]:
    finished = subprocess.run([sys.executable, "-c", EXIT_PROBE, *args], cwd=REPO, env=cli_environment(),
                              capture_output=True, text=True)
    line = finished.stderr.strip().splitlines()[-1]
    return {key: int(value) for key, value in (item.split("=") for item in line.split())}


def test_the_command_leaves_what_it_made_out_of_the_shutdowns_collections():
    counts = exit_counts("gate", "--help")
    # The CLI's imports and what the command left are set aside: none is walked again by the
    # shutdown's full collections; only what exit handlers make afterwards is.
    assert counts["frozen"] > 300_000
    assert counts["tracked"] < 3_000


def test_the_commands_imports_are_not_walked_by_the_collector():
    script = ("import gc, json\ncount = lambda: sum(each['collections'] for each in gc.get_stats()[1:])\n"
              "before = count()\nimport oloproof_pipeline.cli\n"
              "print(json.dumps([count() - before, gc.get_freeze_count(), gc.isenabled()]))")
    finished = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=cli_environment(), capture_output=True,
                              text=True, check=True)
    collections, frozen, enabled = json.loads(finished.stdout)
    # Hundreds of thousands of objects made, no collection beyond the youngest objects run
    # meanwhile (each older one walks every import made so far), all
    # set aside from later full passes, and the collector on again for what the command makes.
    assert (collections, frozen > 100_000, enabled) == (0, True, True)


# What the interpreter's exit finds: how many fork servers (run/worker_processes.py) the command
# started for the system's worker processes.
FORK_SERVER_PROBE = """
import atexit, sys
started = lambda: getattr(sys.modules.get("oloproof_pipeline.run.worker_processes"), "fork_servers_started", 0)
atexit.register(lambda: print(f"fork_servers_started={started()}", file=sys.stderr))
from oloproof_pipeline.cli import main
sys.argv = ["oloproof", *sys.argv[1:]]
main()
"""


def fork_servers_started(project, *args: str) -> tuple[int, subprocess.CompletedProcess]:
    finished = subprocess.run([sys.executable, "-c", FORK_SERVER_PROBE, *args], cwd=project, env=cli_environment(),
                              capture_output=True, text=True)
    key, value = finished.stderr.strip().splitlines()[-1].split("=")
    assert key == "fork_servers_started", finished.stderr
    return int(value), finished


def test_only_a_run_that_records_starts_a_fork_server(refund_desk):
    # A cold run records: one fork server for all its worker processes (recording and replays),
    # started while Dagster is imported.
    started, cold = fork_servers_started(refund_desk, "run")
    assert (cold.returncode, started) == (1, 1), cold.stdout + cold.stderr  # BLOCK, as the example is
    # Nothing changed: a rerun launches nothing, and a run launched anyway reuses every
    # recording and replay; neither starts a process for the system.
    started, rerun = fork_servers_started(refund_desk, "run")
    assert (rerun.returncode, started) == (1, 0) and "is up to date" in rerun.stdout, rerun.stdout + rerun.stderr
    started, launched = fork_servers_started(refund_desk, "run", "--launch")
    assert (launched.returncode, started) == (1, 0), launched.stdout + launched.stderr
    assert "recorded 0 cases and reused 72" in launched.stdout and "replayed 0 and reused 12" in launched.stdout
