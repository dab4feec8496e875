"""Repeated trials for agents that are not deterministic: `execution.trials: k` records each
case k times, per criterion pass^k and pass@1 with intervals, the flaky cases, gate rules over
`pass^k:` metrics; raising k records only the new trials (counted by system calls)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from oloproof_pipeline.cli import app
from oloproof_pipeline.decide.clustered import effective_clusters_interval
from oloproof_pipeline.decide.statistics import clopper_pearson
from oloproof_pipeline.decide.trials import all_trials, case_outcome, flips, trial_rate
from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.outcomes import EXCLUDED, FAIL, MISSING, PASS
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store.layout import reports_dir, table_path

from conftest import write_project
from test_day_thirty import calls, latest

# A desk that succeeds on each case with the probability the case names. Each call draws from
# a generator seeded by the case and how many times it was called before (calls.log), so the
# t-th trial of a case is the same whenever it is recorded, and trials are independent.
RANDOM_DESK = """
import pathlib, random

LOG = pathlib.Path(__file__).with_name("calls.log")
SEED = 15


class System:
    def __call__(self, request):
        case = request["case"]
        before = LOG.read_text().split().count(case) if LOG.exists() else 0
        with LOG.open("a") as log:
            log.write(case + "\\n")
        draw = random.Random(f"{SEED}:{case}:{before}").random()
        return {"answer": "done" if draw < request["p"] else "wrong"}
"""
# The true success rate of each case: 40 cases, from never to always.
PROBABILITIES = [0.0, 0.3, 0.6, 0.8, 0.9, 0.95, 1.0, 1.0] * 5
CASES = len(PROBABILITIES)
CRITERION = "answer_correct"


def random_desk(root: Path, trials: int, rules: list[dict] | None = None) -> Path:
    cases = [
        {"id": f"c{index:02d}", "input": {"case": f"c{index:02d}", "p": p}, "expected": {"answer": "done"}}
        for index, p in enumerate(PROBABILITIES)
    ]
    write_project(
        root, app=RANDOM_DESK, cases=cases,
        evaluators=[{"type": "exact_match", "criterion": CRITERION, "field": "answer", "expected_field": "expected.answer"}],
        rules=rules if rules is not None else [{"id": "always", "metric": f"pass^k:{CRITERION}", "min": 0.3}],
    )
    set_trials(root, trials)
    release = json.loads((root / "release.yaml").read_text())
    release["allow_approximate_methods"] = True
    (root / "release.yaml").write_text(json.dumps(release))
    return root


def set_trials(root: Path, trials: int) -> None:
    config = json.loads((root / "oloproof.yaml").read_text())
    config["execution"]["trials"] = trials
    (root / "oloproof.yaml").write_text(json.dumps(config))


def gate_rows(root: Path) -> dict[str, dict]:
    frame = pd.read_parquet(table_path(root, "gate", "1.0.0"))
    return {row["rule_id"]: row for row in frame.to_dict("records")}


# -- the desk, through Dagster ----------------------------------------------------------------


def test_pass_k_and_pass_at_1_cover_the_true_rates_and_raising_k_records_only_new_trials(tmp_path, instance):
    rules = [
        {"id": "every_trial", "metric": f"pass^k:{CRITERION}", "min": 0.3},
        {"id": "mean_trial", "metric": f"pass@1:{CRITERION}", "min": 0.3},
        {"id": "first_trial", "metric": CRITERION, "min": 0.3},
    ]
    root = random_desk(tmp_path / "desk", trials=3, rules=rules)
    assert run_evaluation(root, instance=instance).errors == []
    assert calls(root) == 3 * CASES
    recorded = latest(instance, "recorded_runs", "tiny")
    assert (recorded["cases_new"], recorded["trials"], recorded["trial_runs_new"]) == (CASES, 3, 2 * CASES)

    gate = gate_rows(root)
    truth = {"every_trial": np.mean(np.power(PROBABILITIES, 3)), "mean_trial": np.mean(PROBABILITIES)}
    for rule_id, true_rate in truth.items():
        row = gate[rule_id]
        assert row["lower"] <= true_rate <= row["upper"], (rule_id, true_rate, row)
    assert gate["every_trial"]["method"] == "clopper_pearson"  # one outcome per case: exact
    assert gate["mean_trial"]["method"] == "clopper_pearson_effective_clusters"  # a case's trials are one cluster
    assert gate["every_trial"]["observed"] == CASES and gate["mean_trial"]["observed"] == 3 * CASES
    # pass^k can only be lower than pass@1, which is the mean of the trials' rates.
    assert gate["every_trial"]["estimate"] <= gate["mean_trial"]["estimate"]
    later = pd.read_parquet(table_path(root, "trial_verdicts", "1.0.0"))
    first = pd.read_parquet(table_path(root, "verdicts", "1.0.0"))
    by_trial = [first["outcome"].eq(PASS).mean()] + [later[later["trial"] == t]["outcome"].eq(PASS).mean() for t in (2, 3)]
    assert gate["mean_trial"]["estimate"] == pytest.approx(np.mean(by_trial))
    assert gate["first_trial"]["estimate"] == pytest.approx(by_trial[0])  # a plain metric: trial 1, as before

    # Flaky cases are the ones with 0 < p < 1 whose verdict changed; never the certain ones.
    gate_meta = latest(instance, "gate", "tiny")
    flaky = gate_meta["flaky_cases"][CRITERION]
    assert flaky["count"] > 0
    certain = {f"c{index:02d}" for index, p in enumerate(PROBABILITIES) if p in (0.0, 1.0)}
    assert not certain & set(flaky["flips"])
    assert all(1 <= count <= 2 for count in flaky["flips"].values())
    assert "pass^k" in gate_meta["trials_summary"]
    report = (reports_dir(root) / "report-1.0.0.html").read_text()
    assert 'id="trials"' in report and next(iter(flaky["flips"])) in report

    # Raise k to 5: only trials 4 and 5 are recorded and judged; trials 1-3 are reused.
    set_trials(root, 5)
    assert run_evaluation(root, instance=instance).errors == []
    assert calls(root) == 5 * CASES
    recorded = latest(instance, "recorded_runs", "tiny")
    assert (recorded["cases_new"], recorded["trial_runs_new"], recorded["trial_runs_reused"]) == (0, 2 * CASES, 2 * CASES)
    assert f"{CASES} trial recordings recorded: new trial 4" in recorded["why"]
    verdicts = latest(instance, "verdicts", "tiny")
    assert (verdicts["verdicts_judged"], verdicts["trial_verdicts_judged"], verdicts["trial_verdicts_reused"]) == (0, 2 * CASES, 2 * CASES)
    assert gate_rows(root)["every_trial"]["observed"] == CASES
    assert gate_rows(root)["mean_trial"]["observed"] == 5 * CASES

    # Nothing changed: no call, nothing judged.
    assert run_evaluation(root, instance=instance).errors == []
    assert calls(root) == 5 * CASES
    assert latest(instance, "verdicts", "tiny")["trial_verdicts_judged"] == 0

    # `oloproof report` on the stored version shows the same trials as the gate's report.
    written = tmp_path / "report.html"
    result = CliRunner().invoke(app, ["report", "--project", str(root), "-o", str(written)])
    assert result.exit_code == 0, result.output
    section = written.read_text().split('id="trials"')[1].split("<h2")[0]
    assert f"<td>{CRITERION}</td><td>5</td>" in section
    # `oloproof gate --json` carries them too, beside the rules they back.
    result = CliRunner().invoke(app, ["gate", "--project", str(root), "--json"])
    document = json.loads(result.stdout)
    [trials] = document["trials"]
    rules = {rule["rule_id"]: rule for rule in document["rules"]}
    assert (trials["criterion"], trials["trials"]) == (CRITERION, 5)
    assert trials["pass_all"]["estimate"] == pytest.approx(rules["every_trial"]["rate"])
    assert trials["pass_at_one"]["estimate"] == pytest.approx(rules["mean_trial"]["rate"])
    assert trials["flaky_cases"] >= len(trials["flaky"]) > 0


def test_one_trial_writes_no_trial_tables_and_keeps_the_gate(tmp_path, instance):
    root = random_desk(tmp_path / "desk", trials=1)
    assert run_evaluation(root, instance=instance).errors == []
    assert calls(root) == CASES
    assert not table_path(root, "trial_runs", "1.0.0").exists()
    assert not table_path(root, "trial_verdicts", "1.0.0").exists()
    recorded = latest(instance, "recorded_runs", "tiny")
    assert "trials" not in recorded and "trials_summary" not in latest(instance, "gate", "tiny")
    assert "trials" not in json.loads(CliRunner().invoke(app, ["gate", "--project", str(root), "--json"]).stdout)
    # pass^1 is the plain pass rate of the only trial.
    first = pd.read_parquet(table_path(root, "verdicts", "1.0.0"))
    assert gate_rows(root)["always"]["estimate"] == pytest.approx(first["outcome"].eq(PASS).mean())


# -- configuration ------------------------------------------------------------------------------


@pytest.mark.parametrize("trials", [0, -1, 101, "three", 2.5])
def test_a_bad_trials_setting_is_one_line_naming_the_field(tmp_path, trials):
    root = random_desk(tmp_path / "desk", trials=1)
    set_trials(root, trials)
    with pytest.raises(ProjectError) as error:
        load_project(root)
    message = str(error.value)
    assert "\n" not in message and "oloproof.yaml" in message and "execution.trials" in message


def test_a_rule_over_trials_of_an_unknown_criterion_is_one_line(tmp_path):
    root = random_desk(tmp_path / "desk", trials=3, rules=[{"id": "r", "metric": "pass^k:answer_corect", "min": 0.5}])
    with pytest.raises(ProjectError) as error:
        load_project(root)
    message = str(error.value)
    assert "\n" not in message and "release.yaml" in message and "rules[0].metric: 'pass^k:answer_corect'" in message
    assert "pass^k:<criterion>" in message


# -- the aggregates -------------------------------------------------------------------------------


def test_a_case_passes_every_trial_only_when_none_fails_and_flips_count_changes():
    assert case_outcome([PASS, PASS, PASS]) == PASS
    assert case_outcome([PASS, FAIL, PASS]) == FAIL
    assert case_outcome([PASS, MISSING, PASS]) == MISSING
    assert case_outcome([MISSING, FAIL]) == FAIL  # a failure is known whatever the missing trial did
    assert case_outcome([EXCLUDED, EXCLUDED]) == EXCLUDED
    # pass^k over exactly k judged trials (tau-bench's definition): a case judged on fewer is
    # not known to pass all k, so it is MISSING (issue 24: [PASS, EXCLUDED, PASS] was a PASS).
    assert case_outcome([PASS, EXCLUDED, PASS]) == MISSING
    assert case_outcome([EXCLUDED, PASS]) == MISSING
    assert case_outcome([EXCLUDED, FAIL, PASS]) == FAIL
    assert case_outcome([PASS, PASS], trials=3) == MISSING  # no verdict at all in the third trial
    assert case_outcome([PASS, PASS, PASS], trials=3) == PASS
    assert flips([PASS, FAIL, PASS]) == 2 and flips([PASS, PASS, FAIL]) == 1 and flips([PASS, MISSING, PASS]) == 0


def test_trial_rates_use_the_gates_intervals_with_the_case_as_cluster():
    rows = []
    for case, outcomes in {"a": [PASS, PASS], "b": [PASS, FAIL], "c": [FAIL, FAIL]}.items():
        rows += [{"case_id": case, "group_id": case, "criterion": CRITERION, "outcome": o, "reason": "r", "trial": t + 1}
                 for t, o in enumerate(outcomes)]
    frame = pd.DataFrame(rows)
    first, later = frame[frame["trial"] == 1].drop(columns="trial"), frame[frame["trial"] > 1]
    trials = all_trials(first, later)
    every = trial_rate("pass^k", trials, CRITERION).estimate
    assert (every.passed, every.failed) == (1, 2)
    assert (every.lower, every.upper) == pytest.approx(clopper_pearson(1, 3))
    mean = trial_rate("pass@1", trials, CRITERION, allow_approximate=True).estimate
    assert mean.estimate == pytest.approx(0.5) and mean.clusters == 3
    assert (mean.lower, mean.upper) == pytest.approx(effective_clusters_interval([2, 1, 0], [2, 2, 2]))


def test_pass_k_counts_a_case_short_of_k_judged_trials_as_missing():
    """Through `trial_rate`: three trials; "short" has an EXCLUDED trial, "gap" no row in
    trial 3, "all" passed all three, "bad" failed one. Only "all" passes; the two short
    cases widen the interval as missing cases do."""
    outcomes = {"all": [PASS, PASS, PASS], "short": [PASS, EXCLUDED, PASS], "gap": [PASS, PASS], "bad": [PASS, FAIL, EXCLUDED]}
    rows = [{"case_id": case, "group_id": case, "criterion": CRITERION, "outcome": o, "reason": "r", "trial": t + 1}
            for case, trial_outcomes in outcomes.items() for t, o in enumerate(trial_outcomes)]
    frame = pd.DataFrame(rows)
    trials = all_trials(frame[frame["trial"] == 1].drop(columns="trial"), frame[frame["trial"] > 1])
    every = trial_rate("pass^k", trials, CRITERION).estimate
    assert (every.passed, every.failed, every.missing) == (1, 1, 2)
    assert every.estimate == 0.5
    assert (every.lower, every.upper) == pytest.approx((clopper_pearson(1, 4)[0], clopper_pearson(3, 4)[1]))


# -- coverage ---------------------------------------------------------------------------------------

# Designs: cases, trials, and the spread of per-case success rates (a Beta distribution;
# None: every case the same rate 0.85). Strongly spread rates make a case's trials agree.
COVERAGE_GRID = [
    (cases, trials, spread)
    for cases in (15, 60)
    for trials in (2, 3, 5)
    for spread in ((0.3, 0.3), (4.0, 1.5), (20.0, 2.0), None)
]
REPETITIONS = 300


def test_pass_k_and_pass_at_1_intervals_cover_over_a_grid():
    """Seeded simulation: per case a success rate p drawn from the design's spread, k
    independent trials at p. The truth is E[p^k] for pass^k and E[p] for pass@1; both
    intervals (the ones `trial_rate` returns) must cover it at least 93% of the time at 95%."""
    rng = np.random.default_rng(20261130)
    worst = {}
    for cases, trials, spread in COVERAGE_GRID:
        if spread is None:
            true_every, true_mean = 0.85**trials, 0.85
        else:
            a, b = spread
            true_mean = a / (a + b)
            true_every = float(np.prod([(a + i) / (a + b + i) for i in range(trials)]))  # E[p^k] of Beta(a, b)
        covered = np.zeros(2)
        for _ in range(REPETITIONS):
            rates = np.full(cases, 0.85) if spread is None else rng.beta(*spread, size=cases)
            passed = rng.binomial(trials, rates)
            every = int((passed == trials).sum())
            lower, upper = clopper_pearson(every, cases)
            covered[0] += lower <= true_every <= upper
            lower, upper = effective_clusters_interval(passed.tolist(), [trials] * cases)
            covered[1] += lower <= true_mean <= upper
        worst[(cases, trials, spread)] = covered / REPETITIONS
    low = {design: coverage for design, coverage in worst.items() if coverage.min() < 0.93}
    assert not low, low
