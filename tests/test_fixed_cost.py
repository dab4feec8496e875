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
