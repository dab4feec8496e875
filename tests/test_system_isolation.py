"""A system under test can never end, wedge or fake the evaluation. The real CLI, against
systems that exit on import, crash the interpreter, exit or hang in one case, or leave a
thread running: each costs its case (or is one configuration error, exit 2), never the run,
and nothing already recorded is lost."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import psutil

from oloproof_pipeline.store.layout import journal_path, table_path

from conftest import write_project
from helpers import tiny_stateful_app

OLOPROOF = str(Path(sys.executable).parent / "oloproof-pipeline")


def oloproof(*args: str, cwd: Path, environment: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it; a run that never exits fails the test at the timeout."""
    env = {key: value for key, value in os.environ.items() if key != "DAGSTER_HOME"} | (environment or {})
    return subprocess.run([OLOPROOF, *args], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def error_lines(result: subprocess.CompletedProcess) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.strip()]


def journal_rows(root: Path, table: str = "recorded_runs", version: str = "1.0.0") -> list[dict]:
    path = journal_path(root, table, version)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def gone(pids: set[int], within_s: float = 120.0) -> bool:
    """Every process in `pids` has ended (a zombie counts as ended), as soon as they have:
    the bound is only there so that a process that never ends fails the test."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        alive = set()
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.add(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        time.sleep(0.2)
    return False


# -- a system that ends its process on import ----------------------------------------------------

PLAIN_APP = tiny_stateful_app("done")


def plain_cases(count: int) -> list[dict]:
    return [
        {"id": f"c{n}", "input": {"n": n}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
        for n in range(count)
    ]


def test_a_system_that_exits_on_import_is_one_line_and_exit_2_and_loses_nothing(tmp_path):
    root = write_project(tmp_path / "p", app=PLAIN_APP, cases=plain_cases(3))
    first = oloproof("run", cwd=root)
    assert first.returncode == 3, first.stdout + first.stderr  # three cases decide nothing yet
    recorded = table_path(root, "recorded_runs", "1.0.0").read_bytes()
    journalled = journal_rows(root)
    assert len(journalled) == 3

    app = root / "app.py"
    for on_import, says in [
        ("import sys\nsys.exit(0)\n", "failed: SystemExit: 0"),
        ("import os\nos._exit(0)\n", "the system's process exited with code 0 while importing"),
    ]:
        app.write_text(on_import + PLAIN_APP)
        result = oloproof("run", cwd=root)
        assert result.returncode == 2, (result.stdout, result.stderr)
        assert len(error_lines(result)) == 1 and says in result.stderr, result.stderr
        assert str(app) in result.stderr and "Traceback" not in result.stderr
        # Reading the stored gate never imports the system: the first run's gate, as it was.
        gate = oloproof("gate", cwd=root)
        assert gate.returncode == 3 and "Gate: BLOCK" in gate.stdout, (gate.stdout, gate.stderr)
        # Nothing recorded before is lost or changed.
        assert table_path(root, "recorded_runs", "1.0.0").read_bytes() == recorded
        assert journal_rows(root) == journalled


# -- systems that crash, exit or hang in one case, or leave a thread running -------------------

UNKIND_APP = """
import copy
import json
import os
import signal
import threading
import time
from pathlib import Path

CALLS = Path(__file__).with_name("calls.log")


def linger():
    time.sleep(3600)


class System:
    def __init__(self):
        self.state = {}
        # A stray non-daemon thread in every instance: it must keep nothing alive.
        threading.Thread(target=linger, daemon=False).start()

    def reset(self, state):
        self.state = state

    def snapshot(self):
        return copy.deepcopy(self.state)

    def __call__(self, request):
        with CALLS.open("a") as calls:
            calls.write(json.dumps({"case": request["case"], "pid": os.getpid()}) + "\\n")
        kind = request["kind"]
        if kind == "os_exit":
            os._exit(0)
        if kind == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if kind == "hang":
            time.sleep(600)
        if kind == "thread":
            threading.Thread(target=linger, daemon=False).start()
        self.state["done"] = True
        return {"answer": "done"}
"""

UNKIND_KINDS = ["ok", "os_exit", "ok", "segfault", "thread", "hang", "ok"]


def unkind_cases() -> list[dict]:
    return [
        {
            "id": f"{kind}-{n}",
            "input": {"case": f"{kind}-{n}", "kind": kind},
            "initial_state": {"done": False},
            "expected": {"state": {"done": True}},
        }
        for n, kind in enumerate(UNKIND_KINDS)
    ]


def calls_by_case(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in (root / "calls.log").read_text().splitlines():
        counts[json.loads(line)["case"]] = counts.get(json.loads(line)["case"], 0) + 1
    return counts


def test_a_crash_an_exit_a_hang_and_a_stray_thread_each_cost_one_case_and_the_cli_exits(tmp_path):
    root = write_project(tmp_path / "p", app=UNKIND_APP, cases=unkind_cases(), timeout_s=3.0)  # no ok case overruns it, however loaded
    ran = oloproof("run", cwd=root)  # returns at all: no stray thread kept it alive

    assert "Gate: BLOCK" in ran.stdout and "Traceback" not in ran.stderr, ran.stdout + ran.stderr
    assert ran.returncode == oloproof("gate", cwd=root).returncode != 0
    rows = {row["case_id"]: row for row in journal_rows(root)}
    assert sorted(rows) == sorted(case["id"] for case in unkind_cases())  # every case journalled
    assert {case_id: row["status"] for case_id, row in rows.items()} == {
        "ok-0": "ok", "os_exit-1": "system_crashed", "ok-2": "ok", "segfault-3": "system_crashed",
        "thread-4": "ok", "hang-5": "timeout", "ok-6": "ok",
    }
    assert rows["os_exit-1"]["error"] == "the system's process exited with code 0 during this case"
    assert rows["segfault-3"]["error"] == "the system's process was killed by signal SIGSEGV during this case"
    assert rows["hang-5"]["error"] == "no answer within 3 s"
    stored = pd.read_parquet(table_path(root, "recorded_runs", "1.0.0")).set_index("case_id")
    assert stored["status"].to_dict() == {case_id: row["status"] for case_id, row in rows.items()}
    verdicts = pd.read_parquet(table_path(root, "verdicts", "1.0.0")).set_index("case_id")
    assert verdicts.loc["segfault-3", "outcome"] == "MISSING" and verdicts.loc["segfault-3", "reason"] == "run_system_crashed"

    # Each case was called once: a crash is recorded, never retried.
    assert calls_by_case(root) == {case["id"]: 1 for case in unkind_cases()}
    # No worker outlives the run, stray threads and all.
    pids = {json.loads(line)["pid"] for line in (root / "calls.log").read_text().splitlines()}
    assert gone(pids)

    # A rerun records again exactly the cases that did not finish, once each, and completes.
    rerun = oloproof("run", cwd=root)
    assert rerun.returncode == ran.returncode, rerun.stdout + rerun.stderr
    assert calls_by_case(root) == {
        case["id"]: 2 if case["input"]["kind"] in ("os_exit", "segfault", "hang") else 1 for case in unkind_cases()
    }


# -- the example, with one case that crashes the interpreter ----------------------------------------

CRASHING_DESK = """

import os
import signal as _signal


class CrashingDesk(RefundDesk):
    \"\"\"The refund desk, crashing the interpreter on the message CRASH_ON_MESSAGE names.\"\"\"

    def __call__(self, input):
        if input.get("message") == os.environ.get("CRASH_ON_MESSAGE"):
            os.kill(os.getpid(), _signal.SIGSEGV)
        return super().__call__(input)
"""

CRASHED_CASE = "ord-001"


def crashing_copy(refund_desk: Path, name: str) -> Path:
    root = refund_desk.parent / name
    shutil.copytree(refund_desk, root)
    (root / "app.py").write_text((root / "app.py").read_text() + CRASHING_DESK)
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace('callable: "app:RefundDesk"', 'callable: "app:CrashingDesk"'))
    return root


def verdict_rows(root: Path) -> pd.DataFrame:
    verdicts = pd.read_parquet(table_path(root, "verdicts", "1.0.0"))
    return verdicts[["case_id", "criterion", "outcome", "reason"]].sort_values(["case_id", "criterion"]).reset_index(drop=True)


def test_the_example_with_a_case_that_segfaults_completes_with_every_other_verdict_unchanged(refund_desk):
    first_message = json.loads((refund_desk / "data" / "cases.jsonl").read_text().splitlines()[0])["input"]["message"]
    calm, crashing = crashing_copy(refund_desk, "calm"), crashing_copy(refund_desk, "crashing")

    baseline = oloproof("run", cwd=calm)
    crashed = oloproof("run", cwd=crashing, environment={"CRASH_ON_MESSAGE": first_message})
    assert baseline.returncode == crashed.returncode == 1, crashed.stdout + crashed.stderr  # BLOCK, as the example is
    assert "Gate: BLOCK" in crashed.stdout and "Traceback" not in crashed.stderr

    runs = pd.read_parquet(table_path(crashing, "recorded_runs", "1.0.0")).set_index("case_id")
    assert runs.loc[CRASHED_CASE, "status"] == "system_crashed" and "SIGSEGV" in runs.loc[CRASHED_CASE, "error"]
    assert (runs.drop(index=CRASHED_CASE)["status"] == "ok").all()
    # Every verdict equal, except those of the crashed case and the relations its copies
    # are judged by against it (they compare with its recording, which does not exist).
    family = lambda frame: frame["case_id"].str.split("~").str[0] == CRASHED_CASE  # noqa: E731
    calm_verdicts, crashed_verdicts = verdict_rows(calm), verdict_rows(crashing)
    pd.testing.assert_frame_equal(
        calm_verdicts[~family(calm_verdicts)].reset_index(drop=True),
        crashed_verdicts[~family(crashed_verdicts)].reset_index(drop=True),
    )
    own = crashed_verdicts[crashed_verdicts["case_id"] == CRASHED_CASE]
    missing = own[own["outcome"] == "MISSING"]  # the rest are the relations a source is not judged by
    assert len(missing) == 4 and set(missing["reason"]) == {"run_system_crashed"}
    assert set(own["outcome"]) == {"MISSING", "EXCLUDED"}  # never a pass

    # It crashes every time, and every rerun still completes, recording it once more.
    rerun = oloproof("run", cwd=crashing, environment={"CRASH_ON_MESSAGE": first_message})
    assert rerun.returncode == 1, rerun.stdout + rerun.stderr
    rows = journal_rows(crashing)
    assert [row["case_id"] for row in rows].count(CRASHED_CASE) == 2 and len(rows) == len(runs) + 1
