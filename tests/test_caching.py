"""Caching you can trust: a result is reused only while what produced it holds, every stage
reuses what did not change, and each run says why anything ran again. Work is counted (system
calls, verdicts judged), never timed."""

from __future__ import annotations

import copy
import json
import os
import random
import subprocess
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import DagsterInstance

from oloproof_pipeline.defs import io_manager, resources
from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.evaluators import state_matches
from oloproof_pipeline.evaluators.state_matches import StateComparison, deepdiff_differences, differences
from oloproof_pipeline.model.paths import ABSENT
from oloproof_pipeline.model import transforms
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_case_rows
from oloproof_pipeline.store import copies
from oloproof_pipeline.store.case_lines import checked_case_table
from oloproof_pipeline.store.layout import reports_dir, table_path, write_table_file
from oloproof_pipeline.store.copies import COPY_WHOLE_COLUMNS
from oloproof_pipeline.store.reuse import derived_copies
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import case_table, derived_case_table

from helpers import oloproof, watch_reads
from test_day_thirty import COUNT_CALLS, NEW_CASE, calls, latest

CRITERIA = 6  # the refund desk's evaluators
CASES = 72  # 24 sources and their 48 copies
REPLAYED = 12  # sources that call issue_refund, each replayed twice (control and faulted)
FIXED_OVERRIDE = ('if "system override" in message.lower():', "if False:")


@pytest.fixture
def counted_desk(refund_desk: Path) -> Path:
    """The refund desk, every call of its agent (recordings and replays) counted in calls.log."""
    app = refund_desk / "app.py"
    app.write_text(app.read_text() + COUNT_CALLS)
    return refund_desk


def evaluate(root: Path, instance: DagsterInstance):
    evaluation = run_evaluation(root, instance=instance)
    assert evaluation.errors == []
    return evaluation


# The assets in the order they run, whose materializations say why anything ran again.
STEPS = ("recorded_runs", "fault_replays", "verdicts", "slices", "gate")


def why(instance: DagsterInstance) -> list[str]:
    """Every step's reasons for work done again, as `oloproof run` prints them."""
    return [line for step in STEPS for line in latest(instance, step).get("why", [])]


def verdicts_table(root: Path) -> pd.DataFrame:
    return pd.read_parquet(table_path(root, "verdicts", "1.0.0"))


def test_a_launch_whose_cases_did_not_change_reads_of_the_stored_copies_only_their_digests_and_counted_columns(evaluated_example, monkeypatch):
    """The copies' texts stay in their file (240 MiB at 100,000 source cases): the derived_cases
    step keeps the file as it is."""
    project = load_project(evaluated_example[0])
    cases = checked_case_table(project)
    read_whole, groups_read = watch_reads(monkeypatch, lambda table: True)
    copies = derived_copies(project, cases)
    assert copies.label_summaries is None  # reused, not derived
    assert set(read_whole) == {"inputs_digest", *COPY_WHOLE_COLUMNS} and groups_read == []
    assert not {"input", "expected", "initial_state"} & set(COPY_WHOLE_COLUMNS)
    assert copies.table.kept_at(table_path(project.root, "derived_cases"))


def test_a_launch_with_one_case_added_keeps_the_stored_copies_texts_in_their_file(evaluated_desk, tmp_path, monkeypatch):
    """Reading the kept copies whole cost one case added to 100,000 sources 940 MiB: the launch
    reads their keys, ids and pair digests and the counted columns, and their texts only a row
    group at a time as the table is written; the table is the one a whole derivation makes."""
    with (evaluated_desk / "data" / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps(NEW_CASE) + "\n")
    project = load_project(evaluated_desk)
    cases = checked_case_table(project)
    read_whole, groups_read = watch_reads(monkeypatch, lambda table: True)
    copies = derived_copies(project, cases)
    assert [summary.copies for summary in copies.label_summaries] == [25, 25]  # derived now: 24 kept, 1 made
    assert set(read_whole) == {"inputs_digest", "copy_key", "case_id", "pair_digest", *COPY_WHOLE_COLUMNS}
    assert groups_read == []
    write_table_file(tmp_path / "copies.parquet", copies.table)
    assert groups_read  # the kept copies' texts, as they were written
    written = pd.read_parquet(tmp_path / "copies.parquet")
    assert set(written["inputs_digest"]) == {copies.inputs_digest}
    whole = derived_case_table(transforms.derive_cases(project, load_cases(project)).copies)
    columns = [name for name in whole.columns if name not in ("inputs_digest", "copy_key")]
    pd.testing.assert_frame_equal(written[columns], whole[columns])


def test_a_rerun_with_nothing_changed_records_and_judges_nothing(counted_desk, instance):
    first = evaluate(counted_desk, instance)
    called = calls(counted_desk)
    assert called == CASES + 2 * REPLAYED
    report = reports_dir(counted_desk) / "report-1.0.0.html"
    written = report.stat().st_mtime_ns

    evaluate(counted_desk, instance)
    assert calls(counted_desk) == called
    assert why(instance) == []
    recorded, replays, verdicts = (latest(instance, name) for name in ("recorded_runs", "fault_replays", "verdicts"))
    assert (recorded["cases_new"], recorded["cases_reused"]) == (0, CASES)
    assert (replays["replays_new"], replays["replays_reused"]) == (0, REPLAYED)
    assert (verdicts["verdicts_judged"], verdicts["verdicts_reused"]) == (0, CASES * CRITERIA)
    assert latest(instance, "slices")["slices_reused"] and latest(instance, "gate")["gate_reused"]
    assert latest(instance, "derived_cases")["copies_reused"]
    assert report.stat().st_mtime_ns == written  # the report shows the same tables, so it is kept
    # Every verdict still names the run that judged it: the first one.
    assert set(verdicts_table(counted_desk)["judged_by_run"]) == {first.run_id}


def test_a_table_a_rerun_reused_whole_is_kept_as_it_is_marked_written_again(counted_desk, instance):
    evaluate(counted_desk, instance)
    paths = [table_path(counted_desk, name, "1.0.0") for name in ("recorded_runs", "verdicts")] + [table_path(counted_desk, "derived_cases")]
    before = [(path.stat().st_ino, path.read_bytes(), path.stat().st_mtime_ns) for path in paths]
    for path in paths:  # a journal is read only when newer than its table: the rerun's mark shows
        os.utime(path, ns=(1, 1))

    evaluate(counted_desk, instance)
    after = [(path.stat().st_ino, path.read_bytes(), path.stat().st_mtime_ns) for path in paths]
    # Not written again (the same file, the same bytes a rewrite writes), but written now.
    assert [(inode, data) for inode, data, _ in after] == [(inode, data) for inode, data, _ in before]
    assert all(written >= earlier for (_, _, written), (_, _, earlier) in zip(after, before))

    # A case added: every row but the new ones reused, the tables written again with them.
    with (counted_desk / "data" / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps(NEW_CASE) + "\n")
    evaluate(counted_desk, instance)
    assert all(path.read_bytes() != data for path, (_, data, _) in zip(paths, after))


def test_an_edited_app_under_the_same_version_re_records_and_says_why(counted_desk, instance):
    evaluate(counted_desk, instance)
    before = verdicts_table(counted_desk)
    called = calls(counted_desk)
    app = counted_desk / "app.py"
    app.write_text(app.read_text().replace(*FIXED_OVERRIDE))  # the same version, other code

    rerun = evaluate(counted_desk, instance)
    assert f"{CASES} cases re-recorded: system code changed (app.py)" in why(instance)
    assert latest(instance, "recorded_runs")["cases_new"] == CASES
    # The fix sends the pasted overrides through the lookup, so their copies make the refund
    # call no more; the others still do, and are replayed again from their new recordings.
    replays = latest(instance, "fault_replays")
    assert replays["replays_new"] == REPLAYED - 4 and "8 replays replayed again: recording changed" in why(instance)
    assert calls(counted_desk) == called + CASES + 2 * (REPLAYED - 4)
    after = verdicts_table(counted_desk)
    override = lambda table: table.set_index(["case_id", "criterion"]).loc[("ord-021", "state_correct"), "outcome"]  # noqa: E731
    assert (override(before), override(after)) == ("FAIL", "PASS")  # the results are the code's now
    assert (after["judged_by_run"] == rerun.run_id).all()


def test_only_declared_code_counts_as_the_systems_code(counted_desk, instance):
    (counted_desk / "policy").mkdir()
    (counted_desk / "policy" / "limits.txt").write_text("refund window: 30 days\n")
    (counted_desk / "notes.txt").write_text("not the system's code\n")
    config = counted_desk / "oloproof.yaml"
    config.write_text(config.read_text().replace("  records: [orders]\n", "  records: [orders]\n  code_paths: [policy]\n"))
    evaluate(counted_desk, instance)
    called = calls(counted_desk)

    (counted_desk / "notes.txt").write_text("edited, but nobody declared it code\n")
    evaluate(counted_desk, instance)
    assert why(instance) == [] and calls(counted_desk) == called

    (counted_desk / "policy" / "limits.txt").write_text("refund window: 45 days\n")
    evaluate(counted_desk, instance)
    assert f"{CASES} cases re-recorded: system code changed (policy/limits.txt)" in why(instance)
    assert calls(counted_desk) == called + CASES + 2 * REPLAYED


def test_an_edited_evaluator_re_judges_only_its_criterion(counted_desk, instance):
    first = evaluate(counted_desk, instance)
    called = calls(counted_desk)
    config = counted_desk / "oloproof.yaml"
    config.write_text(config.read_text().replace("paths: [orders.ord-999]", "paths: [orders.ord-999.status]"))

    rerun = evaluate(counted_desk, instance)
    assert calls(counted_desk) == called
    verdicts = latest(instance, "verdicts")
    assert verdicts["verdicts_judged_by_criterion"] == {"other_order_untouched": CASES}
    assert (verdicts["verdicts_judged"], verdicts["verdicts_reused"]) == (CASES, CASES * (CRITERIA - 1))
    assert why(instance)[:1] == [f"{CASES} verdicts for other_order_untouched re-judged: evaluator changed"]
    table = verdicts_table(counted_desk)
    rejudged = table["criterion"] == "other_order_untouched"
    assert set(table.loc[rejudged, "judged_by_run"]) == {rerun.run_id}
    assert set(table.loc[~rejudged, "judged_by_run"]) == {first.run_id}
    assert json.loads(table.loc[rejudged & (table["case_id"] == "ord-001"), "details"].item())[0]["path"] == "orders.ord-999.status"


def test_adding_one_case_records_exactly_that_case_its_copies_and_its_replays(counted_desk, instance):
    evaluate(counted_desk, instance)
    called = calls(counted_desk)
    with (counted_desk / "data" / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps(NEW_CASE) + "\n")

    rerun = evaluate(counted_desk, instance)
    recorded = pd.read_parquet(table_path(counted_desk, "recorded_runs", "1.0.0"))
    new = recorded[recorded["recorded_by_run"] == rerun.run_id]
    assert sorted(new["case_id"]) == ["ord-025", "ord-025~injected", "ord-025~paraphrase"]
    assert latest(instance, "fault_replays")["replays_new"] == 1  # ord-025 makes the refund call
    assert calls(counted_desk) == called + 3 + 2
    verdicts = latest(instance, "verdicts")
    assert (verdicts["verdicts_judged"], verdicts["verdicts_reused"]) == (3 * CRITERIA, CASES * CRITERIA)
    assert "3 cases recorded: new case" in why(instance) and "1 replay replayed: new case" in why(instance)
    # The copies kept from the first run and the two derived now are those a whole derivation makes.
    stored = pd.read_parquet(table_path(counted_desk, "derived_cases")).drop(columns=["inputs_digest", "copy_key"])
    project = load_project(counted_desk)
    whole = derived_case_table(transforms.derive_cases(project, load_cases(project)).copies).drop(columns=["inputs_digest", "copy_key"])
    pd.testing.assert_frame_equal(stored, whole)


def test_a_reused_table_is_kept_only_while_its_file_is_the_one_the_stage_read(refund_desk):
    project = load_project(refund_desk)
    path = table_path(project.root, "recorded_runs", "1.0.0")
    cases = StoredTable.of(case_table(load_cases(project)))
    first, _ = record_case_rows(project, cases, version="1.0.0", run_id="r1")
    write_table_file(path, first)

    again, summary = record_case_rows(project, cases, version="1.0.0", run_id="r2")
    assert summary.new == 0 and again.kept_at(path)
    write_table_file(path, again)  # another run wrote the table meanwhile: the same rows, another file
    assert not again.kept_at(path)
    reordered, _ = record_case_rows(project, StoredTable.of(case_table(load_cases(project)[::-1])), version="1.0.0", run_id="r3")
    assert not reordered.kept_at(path)  # every row reused, but not each at its place

# Appended to the desk's app.py: each process that imports the system says whether pandas was
# already imported there (the fork server and its workers need none of it).
NOTE_PANDAS = """
with __import__("pathlib").Path(__file__).with_name("pandas.log").open("a") as _log:
    _log.write(str("pandas" in __import__("sys").modules) + "\\n")
"""


def test_a_launch_derives_each_copy_at_most_once_and_starts_one_worker_per_stage_that_imports_no_pandas(counted_desk, instance, monkeypatch):
    derived: list[str] = []  # each copy derived in this process, by id
    derive = copies.copy_row
    monkeypatch.setattr(copies, "copy_row", lambda *args, **kwargs: noted(derived, derive(*args, **kwargs)))
    cases_read: list[str] = []  # the cases' table read whole in the run (derived_cases takes the launch's copies)
    for module in (io_manager, resources):
        monkeypatch.setattr(module, "read_table_file", lambda path, read=module.read_table_file: noted_read(cases_read, read, path))
    app = counted_desk / "app.py"
    app.write_text(app.read_text() + NOTE_PANDAS)

    evaluate(counted_desk, instance)
    assert len(derived) == CASES - 24  # the launch derived them, and the run's derived_cases took the launch's
    evaluate(counted_desk, instance)
    assert len(derived) == CASES - 24  # stored from the same inputs: reused, not derived to check them
    with (counted_desk / "data" / "cases.jsonl").open("a") as cases:
        cases.write(json.dumps(NEW_CASE) + "\n")
    evaluate(counted_desk, instance)
    # One case added: its two copies derived, every other copy kept as stored.
    assert derived[CASES - 24 :] == ["ord-025~paraphrase", "ord-025~injected"]
    imported = (counted_desk / "pandas.log").read_text().split()
    assert imported and set(imported) == {"False"}, imported
    # One worker, so one import of the system, per stage that runs cases: the recordings' and the
    # replays' in the first run and in the one with a case added; none in the rerun between.
    assert len(imported) == 2 + 0 + 2
    assert cases_read == []


def noted_read(read_cases: list[str], read, path: Path) -> pd.DataFrame:
    if path.name == "cases.parquet":
        read_cases.append(str(path))
    return read(path)


def noted(derived: list[str], row):
    derived.append(row["case_id"])
    return row


def test_tables_stored_before_cache_keys_are_still_read_and_their_work_done_again(counted_desk, instance):
    evaluate(counted_desk, instance)
    called = calls(counted_desk)
    for table, keys in (("recorded_runs", ["code_fingerprint", "code_files", "recording_key"]),
                        ("verdicts", ["evaluator_digest", "recording_key", "inputs_key"])):
        path = table_path(counted_desk, table, "1.0.0")
        pd.read_parquet(path).drop(columns=keys).to_parquet(path, index=False)  # as an older release wrote it

    evaluation = evaluate(counted_desk, instance)
    # No key says which code made the recordings, so none is trusted: each is made again.
    assert f"{CASES} cases re-recorded: system code changed (no code fingerprint stored with the recording)" in why(instance)
    assert calls(counted_desk) == 2 * called
    assert f"{CASES} verdicts for state_correct re-judged: no cache key stored with the verdict" in why(instance)
    assert set(verdicts_table(counted_desk)["judged_by_run"]) == {evaluation.run_id}


# -- equality before diff ----------------------------------------------------------------------


class DeepDiffOnly(StateComparison):
    """The comparison with its quick equality walk turned off: with `differences` made
    DeepDiff's (below), DeepDiff decides every pair."""

    def agrees(self, expected, actual, keys):
        return False


LEAVES = [0, 1, 1.0, 2.5, True, False, None, "a", "b", "", [], {}, [1, 2], [{"id": "x", "v": 1}]]


def random_value(rng: random.Random, depth: int = 0):
    if depth > 2 or rng.random() < 0.4:
        return copy.deepcopy(rng.choice(LEAVES))
    if rng.random() < 0.2:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice("abcde"): random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def mutated(rng: random.Random, value):
    """A copy of `value` with at most one change somewhere: a new, dropped or changed key."""
    value = copy.deepcopy(value)
    if not isinstance(value, dict) or not value or rng.random() < 0.3:
        return value if rng.random() < 0.5 else random_value(rng)
    key = rng.choice(sorted(value))
    action = rng.choice(["add", "drop", "change", "recurse", "same"])
    if action == "add":
        value[rng.choice("fgh")] = random_value(rng)
    elif action == "drop":
        del value[key]
    elif action == "change":
        value[key] = rng.choice(LEAVES)
    elif action == "recurse":
        value[key] = mutated(rng, value[key])
    return value


@pytest.mark.parametrize("mode", ["exact", "subset"])
@pytest.mark.parametrize("tolerance", [None, 0.5])
@pytest.mark.parametrize("row_tables", [(), (("a",),)])
def test_equality_before_diff_gives_the_rows_deepdiff_gives(mode, tolerance, row_tables, monkeypatch):
    rng = random.Random(f"{mode}{tolerance}{row_tables}")
    quick, slow = StateComparison(mode, tolerance, row_tables), DeepDiffOnly(mode, tolerance, row_tables)
    shortcuts = 0
    for _ in range(400):
        expected = random_value(rng)
        actual = mutated(rng, expected)
        shortcuts += quick.agrees(expected, actual, [])
        with monkeypatch.context() as patched:
            patched.setattr(state_matches, "differences", deepdiff_differences)
            by_deepdiff = slow.rows("", expected, actual)
        assert quick.rows("", expected, actual) == by_deepdiff, (expected, actual)
    assert shortcuts > 50  # the quick path was taken often enough to be tested


def test_equality_before_diff_keeps_true_apart_from_one():
    comparison = StateComparison("exact")
    assert not comparison.agrees({"paid": True}, {"paid": 1}, [])
    assert comparison.agrees({"total": 1}, {"total": 1.0}, [])
    assert comparison.rows("", {"paid": True}, {"paid": 1})[0]["matched"] is False
    assert comparison.rows("", ABSENT, {"x": 1})[0]["matched"] is False


# -- a rerun with nothing changed launches nothing ----------------------------------------------

# Counts the agent's calls outside the project folder: a log inside it would itself be a change.
COUNT_CALLS_OUTSIDE = COUNT_CALLS.replace('with_name("calls.log")', 'parent.parent.joinpath("calls.log")')


def cli_run(root: Path, *options: str) -> subprocess.CompletedProcess:
    return oloproof("run", *options, cwd=root)


def dagster_runs(root: Path) -> int:
    with DagsterInstance.from_config(str(root / ".oloproof" / "dagster_home")) as instance:
        return instance.get_runs_count()


def gate_lines(output: str) -> list[str]:
    return output[output.index("Decisions for version"):].splitlines()


def test_a_cli_rerun_with_nothing_changed_launches_nothing_and_shows_the_stored_gate(refund_desk):
    app = refund_desk / "app.py"
    app.write_text(app.read_text() + COUNT_CALLS_OUTSIDE)
    counted = lambda: len((refund_desk.parent / "calls.log").read_text().splitlines())  # noqa: E731
    first = cli_run(refund_desk)
    assert first.returncode == 1, first.stderr
    called = counted()
    assert called == CASES + 2 * REPLAYED and dagster_runs(refund_desk) == 1

    rerun = cli_run(refund_desk)
    assert rerun.returncode == 1, rerun.stderr
    assert rerun.stdout.startswith("Version 1.0.0 is up to date:")
    assert "no run launched, nothing recorded, replayed or judged" in rerun.stdout
    assert gate_lines(rerun.stdout) == gate_lines(first.stdout)
    assert counted() == called and dagster_runs(refund_desk) == 1
    as_json = json.loads(cli_run(refund_desk, "--json").stdout)
    assert as_json["gate"]["decision"] == "BLOCK" and as_json["counts"]["verdicts_judged"] == 0

    # A stored table touched since: a run is launched, which reuses what holds.
    os.utime(table_path(refund_desk, "verdicts", "1.0.0"))
    launched = cli_run(refund_desk)
    assert "Dagster run " in launched.stdout and "judged 0 verdicts" in launched.stdout, launched.stdout
    # The system's code edited under the same version: launched, and recorded again.
    app.write_text(app.read_text().replace(*FIXED_OVERRIDE))
    assert "cases re-recorded: system code changed (app.py)" in cli_run(refund_desk).stdout
    assert counted() == 2 * called - 8 and dagster_runs(refund_desk) == 3  # 4 fewer refund calls to replay


NUMBERS_AND_ODDITIES = [0, 1, 1.0, 1.2, 2.5, True, float("nan"), float("inf"), ("t", 1)]


def wilder_value(rng: random.Random, depth: int = 0):
    """`random_value` with lists of dicts, numbers near each other, NaN, infinity, a tuple and
    keys starting `__` (which DeepDiff leaves out)."""
    if depth > 2 or rng.random() < 0.35:
        return copy.deepcopy(rng.choice(LEAVES + NUMBERS_AND_ODDITIES))
    if rng.random() < 0.25:
        return [wilder_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return {rng.choice(["a", "b", "c", "d", "__e"]): wilder_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def reordered(rng: random.Random, value, add: float = 0.0):
    """`value` with the keys of its dicts in another order, at every depth, and a new key in
    each dict with probability `add` (so added keys sit in several places)."""
    if isinstance(value, dict):
        items = list(value.items()) + ([(rng.choice(["f", "g", "__h"]), wilder_value(rng, 2))] if rng.random() < add else [])
        rng.shuffle(items)
        return {key: reordered(rng, child, add) for key, child in items}
    return value


def kinds_and_paths(found):
    """What callers read of `differences`: the added keys in order (with their values), the rest as a set."""
    added = [(keys, repr(value)) for kind, keys, value in found if kind == "dictionary_item_added"]
    others = sorted((kind, repr(keys)) for kind, keys, _ in found if kind != "dictionary_item_added")
    return added, others


@pytest.mark.parametrize("tolerance", [None, 0.5])
def test_the_walk_reports_the_differences_deepdiff_reports(tolerance):
    rng = random.Random(f"walk{tolerance}")
    walked = 0
    for _ in range(600):
        expected = wilder_value(rng)
        actual = expected
        for _ in range(rng.randint(1, 3)):
            actual = mutated(rng, actual) if rng.random() < 0.8 else wilder_value(rng)
        actual = reordered(rng, actual, add=rng.choice([0.0, 0.5]))  # DeepDiff's order follows the actual's keys
        found = differences(expected, actual, tolerance)
        assert kinds_and_paths(found) == kinds_and_paths(deepdiff_differences(expected, actual, tolerance)), (expected, actual)
        walked += bool(found)
    assert walked > 100  # pairs that differ, so the order of what is reported was tested


def test_rows_of_stacked_tables_are_read_alike_in_any_order(tmp_path):
    """Judging decodes a chunk's cases from the sources and their copies stacked: rows asked for
    across both files, out of order, read back as written (nulls, numbers, JSON text parsed)."""
    first = pd.DataFrame({"case_id": ["a", "b", "c"], "state": ['{"x": 1}', None, '{"y": [1, 2]}'], "line": [1, 2, 3]})
    second = pd.DataFrame({"case_id": ["a~p", "b~p"], "state": ['{"x": 2}', '{}'], "line": [4, 5]})
    first.to_parquet(tmp_path / "first.parquet", index=False)
    second.to_parquet(tmp_path / "second.parquet", index=False)
    in_memory = pd.DataFrame({"case_id": ["m"], "state": [None], "line": [None]}, dtype=object)
    stacked = StoredTable(tmp_path / "first.parquet", tmp_path / "second.parquet", in_memory)

    rows = stacked.rows([4, 0, 5, 1, 3], ["case_id", "state", "line"], nested=["state"])
    assert rows == [
        {"case_id": "b~p", "state": {}, "line": 5},
        {"case_id": "a", "state": {"x": 1}, "line": 1},
        {"case_id": "m", "state": None, "line": None},
        {"case_id": "b", "state": None, "line": 2},
        {"case_id": "a~p", "state": {"x": 2}, "line": 4},
    ]
    assert stacked.rows([], ["case_id"]) == []


def test_every_transform_dropped_after_a_run_leaves_no_copies(evaluated_desk):
    """The stored copies are keyed, but no transform is left to keep any under."""
    config = yaml.safe_load((evaluated_desk / "oloproof.yaml").read_text(encoding="utf-8"))
    config["metamorphic"]["transforms"] = []
    config["evaluators"] = [each for each in config["evaluators"] if each["type"] != "metamorphic_relation"]
    (evaluated_desk / "oloproof.yaml").write_text(yaml.safe_dump(config), encoding="utf-8")
    release = yaml.safe_load((evaluated_desk / "release.yaml").read_text(encoding="utf-8"))
    release["rules"] = [rule for rule in release["rules"] if "_under_" not in rule["metric"]]
    (evaluated_desk / "release.yaml").write_text(yaml.safe_dump(release), encoding="utf-8")
    project = load_project(evaluated_desk)
    copies = derived_copies(project, checked_case_table(project))
    assert (len(copies.table), copies.label_summaries) == (0, [])
