"""Oloproof's `budget:` and `pricing:` for a chat agent, against the example's stand-in model
on 127.0.0.1 (tests/test_concurrency.py's counting server): what a run spends is counted in
the stand-in's own log, never timed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.budget import BudgetExhausted
from oloproof_pipeline.run.recording import record_cases
from oloproof_pipeline.run.trials import record_trial_table
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import case_table
from oloproof_pipeline.store.layout import table_path

from helpers import oloproof
from test_chat_agent import VERSION
from test_concurrency import CountingStandIn, chat_desk  # noqa: F401 - the fixture

CONCURRENCY = 2
RATE = {"model": "standin", "input_per_mtok": 3.0, "output_per_mtok": 15.0}


def configure(root: Path, url: str, **keys: Any) -> None:
    config = yaml.safe_load((root / "oloproof.yaml").read_text())
    config["system"]["model"]["base_url"] = url
    config["concurrency"] = {"system": CONCURRENCY}
    config.update(keys)
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))


def record(root: Path, run_id: str = "run-1"):
    project = load_project(root)
    return record_cases(project, load_cases(project), version=VERSION, run_id=run_id)


def journalled(root: Path) -> list[dict[str, Any]]:
    [journal] = [path for path in (root / ".oloproof").rglob("*.jsonl") if "recorded_runs" in str(path)]
    return [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]


def test_a_model_call_budget_is_charged_at_each_request_and_never_passed(chat_desk):
    """Under `budget: {model_calls: 6}` the stand-in gets exactly six requests: each is charged
    to the run's ledger before it is sent, so the cases in flight when the sixth went out stop
    at their next request ("stopped"), the cases never handed to a sandbox are "not run", both
    are errors (never reused), and a rerun with a higher budget records exactly those."""
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, budget={"model_calls": 6})
        with pytest.raises(BudgetExhausted, match=r"budget exhausted \(model_calls 6 reached"):
            record(chat_desk)
        rows = journalled(chat_desk)
        done = [row for row in rows if row["status"] == "ok"]
        stopped = [row for row in rows if row["status"] != "ok"]
        assert len(rows) == 8 and done and stopped
        assert len(standin.log) == 6 == sum(row["model_calls"] or 0 for row in rows)
        for row in stopped:
            assert row["error"].startswith(("not run: budget exhausted (model_calls 6 reached", "stopped: budget exhausted (model_calls 6 reached"))
        # No more cases start than can be in flight once the ceiling is reached.
        assert sum(row["error"].startswith("stopped") for row in stopped) <= CONCURRENCY + 1

        before = len(standin.log)
        configure(chat_desk, standin.url, budget={"model_calls": 1000})
        runs, summary = record(chat_desk, "run-2")
    assert {run.status for run in runs} == {"ok"}
    assert summary.new == len(stopped) and summary.reused == len(done)
    assert len(standin.log) - before == sum(row["model_calls"] for row in journalled(chat_desk) if row["recorded_by_run"] == "run-2")


def test_a_dollar_budget_counts_the_priced_tokens_and_the_run_exits_incomplete(chat_desk, instance):
    """`pricing` gives each recording its `cost_usd`; under `budget: {usd: ...}` the launched
    run fails with the ceiling named (exit 5, as Oloproof's budget stop), never a gate."""
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, pricing=[RATE])
        record(chat_desk)
        stored = pd.DataFrame(journalled(chat_desk))
        expected = (stored["prompt_tokens"] * 3.0 + stored["completion_tokens"] * 15.0) / 1e6
        assert (stored["cost_usd"] - expected).abs().max() < 1e-12 and (stored["cost_usd"] > 0).all()
        one_case = float(stored["cost_usd"].max())

    (chat_desk / ".oloproof").rename(chat_desk / "old-oloproof")
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, pricing=[RATE], budget={"usd": one_case * 2})
        evaluation = run_evaluation(chat_desk, instance=instance)
    assert not evaluation.success and not evaluation.configuration_error
    [error] = evaluation.errors
    assert "budget exhausted (usd" in error and "not run" in error
    assert not table_path(chat_desk, "gate", VERSION).exists()


def test_without_a_price_the_cost_is_none_and_a_dollar_budget_stops_at_once(chat_desk):
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, budget={"usd": 5.0})
        with pytest.raises(BudgetExhausted, match="no `pricing:` rate"):
            record(chat_desk)
    rows = journalled(chat_desk)
    assert [row["cost_usd"] for row in rows if row["status"] == "ok"] == [None] * sum(row["status"] == "ok" for row in rows)
    assert sum(row["status"] == "ok" for row in rows) <= CONCURRENCY + 1


@pytest.mark.parametrize(
    ("keys", "field"),
    [
        ({"budget": {"model_calls": 0}}, "budget.model_calls"),
        ({"budget": {"usd": -1}}, "budget.usd"),
        ({"budget": {"tokens": "many"}}, "budget.tokens"),
        ({"budget": {}}, "budget"),
        ({"budget": {"calls": 4}}, "budget.calls"),
        ({"pricing": [{"model": "standin", "input_per_mtok": -1, "output_per_mtok": 1}]}, "pricing[0].input_per_mtok"),
        ({"pricing": [{"model": "standin", "input_per_mtok": 1}]}, "pricing[0].output_per_mtok"),
        ({"pricing": {"model": "standin"}}, "pricing"),
    ],
)
def test_a_bad_budget_or_pricing_is_one_line_naming_file_line_and_field(chat_desk, keys, field):
    configure(chat_desk, "http://127.0.0.1:9/v1", **keys)
    with pytest.raises(ProjectError) as refused:
        load_project(chat_desk)
    [line] = str(refused.value).splitlines()
    assert "oloproof.yaml:" in line and field in line


def test_recordings_stored_before_cost_usd_are_still_reused(chat_desk):
    """A journal written before `cost_usd` existed reads (the column null) and a rerun with
    nothing changed reuses every recording: the stand-in gets no request."""
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, pricing=[RATE], budget={"model_calls": 1000})
        record(chat_desk)
        [journal] = [path for path in (chat_desk / ".oloproof").rglob("*.jsonl") if "recorded_runs" in str(path)]
        lines = [json.loads(line) for line in journal.read_text().splitlines() if line.strip()]
        journal.write_text("".join(json.dumps({k: v for k, v in line.items() if k != "cost_usd"}) + "\n" for line in lines))
        before = len(standin.log)
        runs, summary = record(chat_desk, "run-2")
    assert len(standin.log) == before and summary.new == 0 and summary.reused == len(runs) == 8


def test_later_trials_spend_the_same_budget_as_trial_one(chat_desk):
    """One budget for the run: trial 1 fits under it, so trial 2 starts with what trial 1
    spent already counted and stops after the cases it started (on its own it would fit)."""
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url)
        record(chat_desk)
        trial_one = len(standin.log)
        shutil.rmtree(chat_desk / ".oloproof")
        configure(chat_desk, standin.url, budget={"model_calls": trial_one + 1}, execution={"timeout_s": 120, "trials": 2})
        record(chat_desk)
        project = load_project(chat_desk)
        cases = StoredTable.of(case_table(load_cases(project)))
        with pytest.raises(BudgetExhausted, match=f"model_calls {trial_one + 1} reached"):
            record_trial_table(project, cases, version=VERSION, run_id="run-1")
    trial_rows = [json.loads(line) for line in Journal.for_partition(chat_desk, "trial_runs", VERSION).path.read_text().splitlines()]
    # Trial 2 had one request left: the case that sent it stopped at its next one, and no case finished.
    assert len(trial_rows) == 8 and len(standin.log) == 2 * trial_one + 1
    assert all(row["status"] == "error" and "budget exhausted (model_calls" in row["error"] for row in trial_rows)


def test_oloproof_run_under_a_spent_budget_exits_5_naming_the_ceiling(chat_desk):
    """The real command: the requests the stand-in got never pass `model_calls`, the run is
    incomplete (exit 5, never a gate decision) and one line names the ceiling."""
    with CountingStandIn() as standin:
        configure(chat_desk, standin.url, budget={"model_calls": 5})
        finished = oloproof("run", cwd=chat_desk)
    assert finished.returncode == 5, finished.stdout + finished.stderr
    assert len(standin.log) == 5
    said = finished.stdout + finished.stderr
    assert "budget exhausted (model_calls 5 reached (5 made))" in said
    assert "Traceback" not in said and "Gate:" not in said
