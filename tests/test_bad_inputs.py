"""Bad inputs, as a careless user or a broken disk gives them, through the real `oloproof`
command: each is one line naming the file (and line) with the right exit code, and nothing
already recorded is lost. Failures found before anything runs (a file that does not load, a
usage error, a stored table that cannot be read) call the command's entry point in-process;
the rest run the installed command.

Three classes: configurations that could never decide or would pass comparing nothing
(refused at load, exit 2); ordinary faults (bytes that are not UTF-8, JSON nested too deep,
a grader that cannot be imported, an unreadable stored table, a full disk, a read-only
folder, usage errors); stored evidence that must be recovered from (a broken recordings
table, a foreign journal line).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from conftest import write_project
from helpers import EXAMPLE, copy_project, oloproof, oloproof_in_process
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.store.journal import Journal

RECORDINGS = Path(".oloproof/tables/recorded_runs/1.0.0.parquet")
RECORDINGS_JOURNAL = Path(".oloproof/journal/recorded_runs/1.0.0.jsonl")


def one_error_line(finished: subprocess.CompletedProcess, exit_code: int, *fragments: str) -> str:
    """The command failed with `exit_code` and said so in one line holding every fragment."""
    lines = finished.stderr.strip().splitlines()
    assert finished.returncode == exit_code, finished.stdout + finished.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), finished.stderr
    assert "Traceback" not in finished.stdout + finished.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def evidence(root: Path) -> dict[str, bytes]:
    """Every stored table and journal, byte for byte."""
    stored = root / ".oloproof"
    return {
        str(path.relative_to(root)): path.read_bytes()
        for folder in ("tables", "journal")
        for path in sorted((stored / folder).rglob("*"))
        if path.is_file()
    }


def recorded_by(root: Path) -> set[str]:
    return set(pd.read_parquet(root / RECORDINGS)["recorded_by_run"])


@pytest.fixture
def desk(evaluated_desk) -> Path:
    """A copy of the refund desk run once (recordings, replays, verdicts and a BLOCKing gate),
    to break; its Dagster instance and history come along."""
    return evaluated_desk


def line_holding(path: Path, text: str) -> int:
    return next(number for number, line in enumerate(path.read_text().splitlines(), start=1) if text in line)


def replace_in(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def append_to(path: Path, data: str | bytes) -> None:
    with path.open("ab") as handle:
        handle.write(data.encode() if isinstance(data, str) else data)


# -- 1. configurations that could never decide, or would pass comparing nothing ---------------


def duplicate_rules(root: Path) -> tuple[str, ...]:
    append_to(root / "release.yaml", "rules:\n  - {id: lenient, metric: state_correct, min: 0.1}\n")
    first = line_holding(root / "release.yaml", "rules:")
    return ("release.yaml:", f"invalid YAML: key 'rules' repeats the one on line {first}")


def duplicate_evaluators(root: Path) -> tuple[str, ...]:
    first = line_holding(root / "oloproof.yaml", "evaluators:")
    append_to(root / "oloproof.yaml", "evaluators: []\n")
    last = len((root / "oloproof.yaml").read_text().splitlines())
    return (f"oloproof.yaml:{last}: invalid YAML: key 'evaluators' repeats the one on line {first}",)


def misnamed_release_policy(root: Path) -> tuple[str, ...]:
    (root / "release.yaml").rename(root / "release.yml")
    return ("release.yaml: file not found, so nothing would be gated", "oloproof run --ungated")


def rules_that_gate_nothing(root: Path) -> tuple[str, ...]:
    (root / "release.yaml").write_text("version: 1\nrules: []\n")
    return ("release.yaml:2: rules: Value error, a release policy needs at least one rule",)


def min_above_max(root: Path) -> tuple[str, ...]:
    replace_in(root / "release.yaml", "    min: 0.85\n", "    min: 0.85\n    max: 0.5\n")
    return ("rules[2]: Value error, rule 'bystanders': min 0.85 is not below max 0.5, so it can never pass",)


def infinite_timeout(root: Path) -> tuple[str, ...]:
    replace_in(root / "oloproof.yaml", "timeout_s: 30", "timeout_s: .inf")
    line = line_holding(root / "oloproof.yaml", "timeout_s:")
    return (f"oloproof.yaml:{line}: execution.timeout_s: Input should be a finite number",)


def nan_tolerance(root: Path) -> tuple[str, ...]:
    replace_in(root / "oloproof.yaml", "    mode: subset\n", "    mode: subset\n    tolerance: .nan\n")
    line = line_holding(root / "oloproof.yaml", "tolerance: .nan")
    return (f"oloproof.yaml:{line}: evaluators[1].tolerance: Input should be a finite number",)


def overflowing_number(root: Path) -> tuple[str, ...]:
    append_to(root / "data" / "cases.jsonl", '{"id": "ord-big", "input": {"order_id": "x", "message": "hi"}, "metadata": {"n": 1e999}}\n')
    line = len((root / "data" / "cases.jsonl").read_text().splitlines())
    return (f"cases.jsonl:{line}: invalid JSON: the number 1e999 is too large to represent",)


NEVER_DECIDE = {
    "rules twice in release.yaml": duplicate_rules,
    "evaluators twice in oloproof.yaml": duplicate_evaluators,
    "release.yml instead of release.yaml": misnamed_release_policy,
    "a release policy with no rules": rules_that_gate_nothing,
    "min above max": min_above_max,
    "an infinite timeout": infinite_timeout,
    "a NaN tolerance": nan_tolerance,
    "1e999 in a case": overflowing_number,
}


@pytest.mark.parametrize("name", sorted(NEVER_DECIDE))
def test_a_configuration_that_could_never_decide_is_refused_at_load(desk, name):
    before = evidence(desk)
    fragments = NEVER_DECIDE[name](desk)
    finished = oloproof_in_process("run", cwd=desk)
    one_error_line(finished, 2, *fragments)
    assert finished.stdout == ""
    assert evidence(desk) == before  # refused before anything ran: nothing recorded is touched


def test_a_state_comparison_over_nothing_is_excluded_not_passed(tmp_path):
    """`expected.state: {}` would pass a system that deleted everything: it is EXCLUDED
    (`nothing_to_compare`), counted, and the gate cannot ALLOW on it."""
    app = """
        class System:
            def reset(self, state):
                self.state = dict(state)
            def snapshot(self):
                return self.state
            def __call__(self, request):
                self.state = {}  # deletes every record
                return {"answer": "done"}
    """
    cases = [{"id": f"c-{index}", "input": {"n": index}, "initial_state": {"orders": {"a": 1}}, "expected": {"state": {}}} for index in range(3)]
    cases.append({"id": "c-kept", "input": {"n": 9}, "initial_state": {"orders": {"a": 1}}, "expected": {"state": {"orders": {"a": 1}}}})
    root = write_project(tmp_path / "p", app=app, cases=cases)
    ran = oloproof("run", cwd=root)
    assert ran.returncode not in (0, 2, 5), ran.stdout + ran.stderr  # decided, and not ALLOW
    verdicts = pd.read_parquet(root / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet").set_index("case_id")
    assert list(verdicts.loc[["c-0", "c-1", "c-2"], "outcome"]) == ["EXCLUDED"] * 3
    assert set(verdicts.loc[["c-0", "c-1", "c-2"], "reason"]) == {"nothing_to_compare"}
    assert verdicts.loc["c-kept", "outcome"] == "FAIL"
    gate = pd.read_parquet(root / ".oloproof" / "tables" / "gate" / "1.0.0.parquet")
    assert (gate["excluded"].iloc[0], gate["failed"].iloc[0], gate["passed"].iloc[0]) == (3, 1, 0)


@pytest.mark.parametrize("command", ["gate", "inspect ord-001", "report", "export"])
def test_a_version_is_never_a_path(desk, command):
    # A planted gate table one folder up, where `--version ../x` would have looked.
    planted = desk / ".oloproof" / "tables" / "x.parquet"
    shutil.copy(desk / ".oloproof" / "tables" / "gate" / "1.0.0.parquet", planted)
    finished = oloproof_in_process(*command.split(), "--version", "../x", cwd=desk)
    one_error_line(finished, 2, "'../x' is not a valid version")
    assert not list(desk.rglob("*x.html")) and not list(desk.rglob("results-*x*"))


def test_compare_refuses_a_version_that_is_a_path(desk):
    one_error_line(oloproof_in_process("compare", "1.0.0", "../../outside", cwd=desk), 2, "'../../outside' is not a valid version")


# -- 2. ordinary faults: one line, the right exit code ---------------------------------------


def test_bytes_that_are_not_utf8_are_named_by_file_and_line(desk):
    before = evidence(desk)
    cases = desk / "data" / "cases.jsonl"
    append_to(cases, b'{"id": "ord-latin1", "input": {"order_id": "x", "message": "caf\xe9"}}\n')
    line = len(cases.read_bytes().splitlines())
    one_error_line(oloproof_in_process("run", cwd=desk), 2, f"{cases}:{line}: not UTF-8 text (byte 0xe9)")

    cases.write_bytes(cases.read_bytes().replace(b"caf\xe9", b"cafe"))
    config = desk / "oloproof.yaml"
    append_to(config, b"# r\xe9sum\xe9\n")
    line = len(config.read_bytes().splitlines())
    one_error_line(oloproof_in_process("run", cwd=desk), 2, f"{config}:{line}: not UTF-8 text")
    assert evidence(desk) == before


@pytest.mark.parametrize("depth", [150, 100_000])
def test_a_json_line_nested_too_deeply_is_one_line(desk, depth):
    cases = desk / "data" / "cases.jsonl"
    append_to(cases, '{"id": "deep", "input": ' + "[" * depth + "]" * depth + "}\n")
    line = len(cases.read_text().splitlines())
    one_error_line(oloproof_in_process("run", cwd=desk), 2, f"{cases}:{line}: invalid JSON: nested more than 100 levels deep")


def test_a_callable_that_is_not_callable_is_refused_before_recording(tmp_path):
    root = write_project(tmp_path / "p", app="class System:\n    pass\n\nSETTINGS = {'mode': 'fast'}\n", cases=[{"id": "c-1", "input": {}}])
    replace_in(root / "oloproof.yaml", '"app:System"', '"app:SETTINGS"')
    one_error_line(oloproof("run", cwd=root), 2, "system.callable: app:SETTINGS is dict", "not a class or a function")
    # Found by the worker that first imports the system (a declared version is never probed
    # before the run): the case set is stored, but nothing is recorded or journalled.
    assert not (root / ".oloproof" / "journal").exists()
    assert not (root / ".oloproof" / "tables" / "recorded_runs").exists()


def test_a_grader_that_fails_on_import_is_refused_before_any_case_is_recorded(desk):
    before = evidence(desk)
    (desk / "graders.py").write_text("import a_module_nobody_installed\n\ndef check(case, recording):\n    return None\n")
    replace_in(desk / "oloproof.yaml", "evaluators:\n", 'evaluators:\n  - {type: python, criterion: checked, function: "graders:check"}\n')
    replace_in(desk / "oloproof.yaml", 'version: "1.0.0"', 'version: "1.1.0"')  # everything would be recorded anew
    one_error_line(
        oloproof("run", cwd=desk), 2, "evaluators[0].function: importing", "graders.py failed: ModuleNotFoundError"
    )
    assert evidence(desk) == before  # no case of 1.1.0 was recorded


@pytest.mark.parametrize("table", ["gate", "verdicts", "recorded_runs"])
@pytest.mark.parametrize("damage", ["truncated", "empty", "another table"])
def test_an_unreadable_stored_table_is_one_line_naming_it(desk, table, damage):
    path = desk / ".oloproof" / "tables" / table / "1.0.0.parquet"
    if damage == "another table":
        pd.DataFrame({"note": ["written by hand"]}).to_parquet(path)
    else:
        with path.open("r+b") as handle:
            handle.truncate(0 if damage == "empty" else path.stat().st_size // 2)
    readers = {"gate": ["gate"], "verdicts": ["inspect", "report", "export"], "recorded_runs": ["inspect", "report", "export"]}
    for command in readers[table]:
        args = [command, "ord-001"] if command == "inspect" else [command]
        line = one_error_line(oloproof_in_process(*args, cwd=desk), 5, f"{path}: stored table cannot be read")
        assert "`oloproof run` of version '1.0.0' rebuilds it" in line
        if damage == "empty":
            assert "(the file is empty)" in line
        if damage == "another table":
            assert f"(not a {table} table: no column " in line


def limit_file_size(size: int):
    """A full disk, for the process: writes past `size` bytes fail (EFBIG) instead of killing it."""

    def preexec() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    return preexec


def test_a_full_disk_is_one_line_and_loses_nothing(desk):
    before = evidence(desk)
    finished = oloproof("run", "--fresh", cwd=desk, preexec_fn=limit_file_size(64_000))
    one_error_line(finished, 5, f"{desk / '.oloproof' / 'dagster_home'}: Dagster's instance database cannot be written")
    assert evidence(desk) == before
    full = oloproof("report", "-o", "/dev/full", cwd=desk)
    one_error_line(full, 5, "/dev/full: cannot write: No space left on device")


def test_a_step_that_cannot_write_its_table_fails_the_run_in_one_line(desk):
    """A failure inside a Dagster step (here the verdicts table cannot be written) is one line
    naming the path and the run, exit 5; the recordings it judged are kept."""
    verdicts = desk / ".oloproof" / "tables" / "verdicts" / "1.0.0.parquet"
    verdicts.unlink()
    (verdicts / "in_the_way").mkdir(parents=True)
    recorded = recorded_by(desk)
    journal = (desk / RECORDINGS_JOURNAL).read_bytes()
    line = one_error_line(oloproof("run", cwd=desk), 5, str(verdicts), "(Dagster run ", "failed: incomplete")
    assert line.count("error:") == 1
    assert recorded_by(desk) == recorded and (desk / RECORDINGS_JOURNAL).read_bytes() == journal


def without_root_override() -> None:
    """Root writes anywhere: drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from the bounding
    set, so after exec the command is held to file permissions like any user."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in (1, 2):
            if libc.prctl(24, capability, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def make_read_only(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)


def make_writable(root: Path) -> None:
    for path in [root, *root.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)


def test_a_read_only_project_folder_is_one_line_naming_the_path(desk, tmp_path):
    before = evidence(desk)
    fresh = copy_project(EXAMPLE, tmp_path / "never_run")
    make_read_only(desk)
    make_read_only(fresh)
    try:
        one_error_line(oloproof("run", cwd=fresh, preexec_fn=without_root_override), 5, f"{fresh / '.oloproof'}: Permission denied")
        one_error_line(oloproof("run", cwd=desk, preexec_fn=without_root_override), 5, f"{desk / '.oloproof'}", "Permission denied")
        one_error_line(
            oloproof("report", cwd=desk, preexec_fn=without_root_override), 5,
            f"{desk / '.oloproof' / 'reports' / 'report-1.0.0.html'}: cannot write: Permission denied",
        )
        # Reading needs no writing.
        assert oloproof("gate", cwd=desk, preexec_fn=without_root_override).returncode == 1
    finally:
        make_writable(desk)
        make_writable(fresh)
    assert evidence(desk) == before


def test_output_paths_that_cannot_be_written_are_usage_errors(desk, tmp_path):
    (tmp_path / "folder").mkdir()
    (tmp_path / "notes.txt").write_text("keep me")
    one_error_line(oloproof_in_process("report", "-o", str(tmp_path / "folder"), cwd=desk), 2, f"report -o {tmp_path / 'folder'}: is a folder")
    one_error_line(
        oloproof_in_process("export", "-o", str(tmp_path / "notes.txt" / "out.jsonl"), cwd=desk), 2,
        f"{tmp_path / 'notes.txt'} is a file, not a folder",
    )
    one_error_line(
        oloproof("init", str(tmp_path / "notes.txt"), "--example", "stateful-agent", cwd=tmp_path), 2,
        f"{tmp_path / 'notes.txt'}: is a file, not a folder",
    )
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    one_error_line(
        oloproof_in_process("init", str(tmp_path / "dangling"), "--example", "stateful-agent", cwd=tmp_path), 2,
        f"{tmp_path / 'dangling'}: a link to {tmp_path / 'gone'}, which does not exist",
    )
    assert (tmp_path / "notes.txt").read_text() == "keep me" and not (tmp_path / "gone").exists()


USAGE_ERRORS = {
    "an unknown command": (["frobnicate"], "No such command 'frobnicate'"),
    "init without --example": (["init", "x"], "Missing option '--example'"),
    "run with an unknown option": (["run", "--bogus"], "No such option: --bogus"),
    "gate with an unknown option": (["gate", "--bogus"], "No such option: --bogus"),
    "inspect without a case": (["inspect"], "Missing argument"),
    "report with an unknown option": (["report", "--bogus"], "No such option: --bogus"),
    "export with an unknown option": (["export", "--bogus"], "No such option: --bogus"),
    "compare without versions": (["compare"], "Missing argument"),
    "compare with one version": (["compare", "1.0.0"], "Missing argument"),
    "gate --version without a value": (["gate", "--version"], "requires an argument"),
}


@pytest.mark.parametrize("name", sorted(USAGE_ERRORS))
def test_every_usage_error_is_one_line_and_exit_2(tmp_path, name):
    args, fragment = USAGE_ERRORS[name]
    # One through the installed command; the rest never get past click's parsing.
    command = oloproof if name == "an unknown command" else oloproof_in_process
    line = one_error_line(command(*args, cwd=tmp_path), 2, fragment)
    assert line.endswith("--help`)")


def test_an_unknown_case_or_version_names_what_exists(desk):
    one_error_line(oloproof("inspect", "ord-999", cwd=desk), 2, "no case 'ord-999'", "did you mean", "ord-009")
    for args in (["inspect", "ord-001"], ["report"], ["export"]):
        one_error_line(oloproof_in_process(*args, "--version", "9.9.9", cwd=desk), 2, "no verdicts stored for version '9.9.9'", "stored: 1.0.0")
    one_error_line(oloproof_in_process("gate", "--version", "1.0.1", cwd=desk), 2, "did you mean 1.0.0?")
    one_error_line(oloproof("compare", "1.0.0", "9.9", cwd=desk), 2, "no verdicts stored for version '9.9'", "stored: 1.0.0")


# -- 3. stored evidence that is recovered from ----------------------------------------------


def test_a_truncated_recordings_table_is_recovered_from_the_journal(desk):
    recorded = recorded_by(desk)
    rows = len(pd.read_parquet(desk / RECORDINGS))
    with (desk / RECORDINGS).open("r+b") as handle:
        handle.truncate(300)
    ran = oloproof("run", cwd=desk)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stderr.splitlines() == [
        f"warning: {desk / RECORDINGS}: stored table cannot be read; using the journal {desk / RECORDINGS_JOURNAL} instead"
    ]
    # Every recording came back from the journal: none was made again.
    assert recorded_by(desk) == recorded and len(pd.read_parquet(desk / RECORDINGS)) == rows

    with (desk / RECORDINGS).open("r+b") as handle:
        handle.truncate(300)
    fresh = oloproof("run", "--fresh", cwd=desk)
    assert fresh.returncode == 1, fresh.stdout + fresh.stderr
    assert "Traceback" not in fresh.stderr and len(pd.read_parquet(desk / RECORDINGS)) == rows
    assert recorded_by(desk).isdisjoint(recorded)  # --fresh re-recorded every case, as asked


def test_a_foreign_journal_line_is_skipped_and_named(desk):
    recorded = recorded_by(desk)
    journal = desk / RECORDINGS_JOURNAL
    lines = journal.read_text().splitlines(keepends=True)
    lines.insert(4, '{"note": "pasted here by hand"}\n')
    journal.write_text("".join(lines))
    (desk / RECORDINGS).unlink()  # the journal is all there is
    ran = oloproof("run", cwd=desk)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    assert ran.stderr.splitlines() == [
        f"warning: {journal}:5: not a RecordedRun line (status: Field required); line skipped, the rest of the journal is used"
    ]
    assert recorded_by(desk) == recorded  # the other 72 lines were used: nothing recorded again


def test_a_line_cut_short_by_a_kill_never_swallows_the_next_one(tmp_path):
    journal = Journal(tmp_path / "journal.jsonl")
    first = RecordedRun(case_id="a", case_digest="sha256:a", system_version="1", status="ok")
    second = first.model_copy(update={"case_id": "b"})
    journal.append(first.model_dump(mode="json"))
    append_to(journal.path, json.dumps(second.model_dump(mode="json"))[:25])  # killed mid-write
    journal.append(second.model_dump(mode="json"))
    contents = journal.read(RecordedRun)
    assert [record.case_id for record in contents.records] == ["a", "b"]
    assert contents.skipped == [f"{journal.path}:2: not JSON (JSONDecodeError); line skipped, the rest of the journal is used"]
