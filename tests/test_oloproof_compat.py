"""An existing Oloproof project runs unchanged: its keys with Oloproof's meaning, its refusals,
the keys this pipeline does not support yet, its systems (with the `oloproof` extra), and
Oloproof's own stateful-agent example end to end with Oloproof's figures."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from conftest import write_project
from oloproof_pipeline.evaluators import JudgingContext, build_evaluators
from oloproof_pipeline.model.cases import CaseRecord, load_cases
from oloproof_pipeline.model.config import dagster_name
from oloproof_pipeline.model.digests import case_digest
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.modules import load_callable
from oloproof_pipeline.model.outcomes import EXCLUDED, FAIL, MISSING, PASS
from oloproof_pipeline.model.records import EnvironmentState, RecordedRun
from oloproof_pipeline.model.transforms import derive_cases
from oloproof_pipeline.project import load_project
from oloproof_pipeline.decide.validity import transform_blocking_reasons

BIN = Path(sys.executable).parent
OUR_COMMAND = str(BIN / "oloproof-pipeline")
HELP_LINE = "Evaluate a tool-using agent by the world it leaves behind"
SYSTEM = """
class System:
    def __init__(self):
        self.state = {}
    def reset(self, state):
        self.state = state
    def snapshot(self):
        return self.state
    def __call__(self, case_input):
        return {"answer": "refunded"}
"""
CASES = [{"id": f"c{n}", "input": {"message": f"refund ord-{n}"}, "expected": {"answer": "refunded"}} for n in range(3)]


def project_with(tmp_path: Path, *, evaluators: list[dict] | None = None, rules: list[dict] | None = None,
                 cases: list[dict] | None = None, extra_config: str = "") -> Path:
    evaluators = evaluators or [{"type": "exact_match", "criterion": "answer_correct", "field": "answer", "expected_field": "answer"}]
    rules = rules if rules is not None else [{"id": "answers", "metric": evaluators[0].get("criterion", evaluators[0]["type"]), "min": 0.5}]
    root = write_project(tmp_path / "project", app=SYSTEM, cases=cases or CASES, evaluators=evaluators, rules=rules)
    # Block YAML, as Oloproof's files are written, so a test can add keys at the end.
    for name, extra in (("oloproof.yaml", extra_config), ("release.yaml", "")):
        path = root / name
        if path.exists():
            path.write_text(yaml.safe_dump(json.loads(path.read_text()), sort_keys=False) + extra)
    return root


def refusal(root: Path) -> str:
    with pytest.raises(ProjectError) as raised:
        load_project(root)
    [problem] = raised.value.problems
    return problem


def case(case_id: str = "c1", *, expected: Any = None, initial_state: Any = None) -> CaseRecord:
    return CaseRecord(
        case_id=case_id, case_digest=case_digest(input="x", expected=expected, metadata=None, group_id=case_id),
        group_id=case_id, input="x", expected=expected, initial_state=initial_state,
    )


def recording(of: CaseRecord, *, output: Any = None, state: Any = None, status: str = "ok") -> RecordedRun:
    environment = None if state is None else EnvironmentState(initial="sha256:" + "0" * 64, state=state)
    return RecordedRun(case_id=of.case_id, case_digest=of.case_digest, system_version="v1", status=status,
                       error=None if status == "ok" else "boom", output=output, environment_state=environment)


def judged(config: dict, of: CaseRecord, run: RecordedRun) -> tuple[str, str, str]:
    [evaluator] = build_evaluators([config], file="oloproof.yaml")
    verdict = evaluator.judge_case(of, JudgingContext(cases={of.case_id: of}, recordings={run.case_id: run}))
    return verdict.outcome, verdict.reason, verdict.criterion


# -- Oloproof's keys, with Oloproof's meaning ---------------------------------------------------


def test_export_key_written_by_oloproof_is_accepted_and_checked(tmp_path: Path) -> None:
    fingerprint = "sha256:" + "a" * 64
    root = project_with(tmp_path, extra_config=f"export_key:\n  fingerprint: '{fingerprint}'\n  keyed: [output]\n")
    assert load_project(root).config.export_key.fingerprint == fingerprint
    (root / "oloproof.yaml").write_text((root / "oloproof.yaml").read_text().replace(fingerprint, "sha256:short"))
    assert "oloproof.yaml:" in refusal(root) and "export_key.fingerprint" in refusal(root)


def test_exact_match_bare_expected_field_is_a_field_of_expected() -> None:
    config = {"type": "exact_match", "criterion": "c", "field": "answer", "expected_field": "answer"}
    of = case(expected={"answer": "refunded"})
    assert judged(config, of, recording(of, output={"answer": "refunded"}))[0] == PASS
    assert judged(config, of, recording(of, output={"answer": "declined"}))[0] == FAIL
    # The prefixed form keeps its meaning.
    assert judged({**config, "expected_field": "metadata.answer"}, of, recording(of, output={"answer": "refunded"}))[0] == EXCLUDED


def test_exact_match_strips_by_default_and_casefolds_when_asked() -> None:
    config = {"type": "exact_match", "criterion": "c", "expected_field": "answer"}
    of = case(expected={"answer": "Refunded"})
    padded, lower = recording(of, output={"answer": "  Refunded\n"}), recording(of, output={"answer": "refunded"})
    assert judged(config, of, padded)[0] == PASS
    assert judged({**config, "strip": False}, of, padded)[0] == FAIL
    assert judged(config, of, lower)[0] == FAIL
    assert judged({**config, "casefold": True}, of, lower)[0] == PASS


@pytest.mark.parametrize("kind", ["exact_match", "state_matches", "state_unchanged", "metamorphic_relation"])
def test_on_execution_error_fail_counts_a_failed_run_as_a_failure(kind: str) -> None:
    config = {
        "exact_match": {"type": "exact_match", "criterion": "c"},
        "state_matches": {"type": "state_matches"},
        "state_unchanged": {"type": "state_unchanged", "paths": ["orders"]},
        "metamorphic_relation": {"type": "metamorphic_relation", "relation": "same_output"},
    }[kind]
    source = case(expected={"answer": "a", "state": {"orders": {}}}, initial_state={"orders": {}})
    of = source
    if kind == "metamorphic_relation":
        of = source.model_copy(update={"case_id": "c1~p", "source_id": "c1", "transform": "p"})
    [evaluator] = build_evaluators([config], file="oloproof.yaml")
    [failing] = build_evaluators([{**config, "on_execution_error": "fail"}], file="oloproof.yaml")
    runs = {source.case_id: recording(source, status="error"), of.case_id: recording(of, status="error")}
    context = JudgingContext(cases={source.case_id: source, of.case_id: of}, recordings=runs)
    assert evaluator.judge_case(of, context).outcome == MISSING
    assert failing.judge_case(of, context).outcome == FAIL
    with pytest.raises(ProjectError, match=r"evaluators\[0\].on_execution_error"):
        build_evaluators([{**config, "on_execution_error": "skip"}], file="oloproof.yaml")


def test_state_matches_is_exact_by_default_and_reads_expected_field() -> None:
    of = case(expected={"final": {"orders": {"o1": "refunded"}}, "state": {"orders": {"o1": "refunded"}}})
    extra = recording(of, state={"orders": {"o1": "refunded", "o2": "open"}})
    assert judged({"type": "state_matches"}, of, extra)[:3:2] == (FAIL, "state_matches")
    assert judged({"type": "state_matches", "mode": "subset"}, of, extra)[0] == PASS
    wrong = recording(of, state={"orders": {"o1": "open"}})
    assert judged({"type": "state_matches", "expected_field": "final"}, of, wrong)[0] == FAIL
    assert judged({"type": "state_matches", "expected_field": "missing"}, of, wrong)[:2] == (EXCLUDED, "no_expected_state")


def test_state_unchanged_without_criterion_is_named_state_unchanged() -> None:
    of = case(initial_state={"orders": {"o9": "open"}})
    assert judged({"type": "state_unchanged", "paths": ["orders.o9"]}, of, recording(of, state={"orders": {"o9": "open"}})) == (
        PASS, "state_unchanged", "state_unchanged")


def test_metamorphic_relation_without_transform_judges_every_transform(tmp_path: Path) -> None:
    root = project_with(tmp_path, evaluators=[{"type": "metamorphic_relation", "relation": "same_output"}],
                        rules=[{"id": "same", "metric": "same_output_under_transform", "min": 0.5}],
                        extra_config=textwrap.dedent("""
                            metamorphic:
                              transforms:
                                - {name: shout, field: message, template: "{value}!"}
                                - {name: polite, field: message, template: "please {value}"}
                        """))
    project = load_project(root)
    [relation] = project.evaluators
    assert relation.criterion == "same_output_under_transform"
    sources = load_cases(project)
    copies = [copy.as_case() for copy in derive_cases(project, sources).copies]
    runs = {c.case_id: recording(c, output={"answer": "refunded"}) for c in [*sources, *copies]}
    context = JudgingContext(cases={c.case_id: c for c in [*sources, *copies]}, recordings=runs)
    outcomes = [relation.judge_case(copy, context).outcome for copy in copies]
    assert sorted({copy.transform for copy in copies}) == ["polite", "shout"] and outcomes == [PASS] * 6
    # Both transforms must be checked by people's labels before the relation's rule can pass.
    reasons = transform_blocking_reasons(project, "same_output_under_transform", None)
    assert [reason.split(": ")[1] for _, reason in reasons] == ["shout", "polite"]


def test_group_id_on_case_rows_sets_the_cluster_and_the_digest(tmp_path: Path) -> None:
    grouped = [{**row, "group_id": "customer-1" if n < 2 else 7} for n, row in enumerate(CASES)]
    project = load_project(project_with(tmp_path, cases=grouped))
    cases = load_cases(project)
    assert [c.group_id for c in cases] == ["customer-1", "customer-1", "7"]
    row = grouped[0]
    assert cases[0].case_digest == case_digest(input=row["input"], expected=row["expected"], metadata=None, group_id="customer-1")


def test_group_id_on_some_rows_only_is_refused_with_the_line(tmp_path: Path) -> None:
    rows = [{**CASES[0], "group_id": "g"}, CASES[1], CASES[2]]
    project = load_project(project_with(tmp_path, cases=rows))
    with pytest.raises(ProjectError) as raised:
        load_cases(project)
    assert raised.value.problems == [
        f"{project.root / 'data' / 'cases.jsonl'}:2: group_id: 1 of 3 cases declare group_id; declare it on every case or on none"
    ]


def test_any_project_name_gets_a_distinct_valid_dagster_name(tmp_path: Path) -> None:
    names = ["stateful-agent-example", "stateful_agent_example", "stateful agent example", "refund_desk"]
    mapped = [dagster_name(name) for name in names]
    assert mapped[1] == "stateful_agent_example" and mapped[3] == "refund_desk"
    assert len(set(mapped)) == 4 and all(name.replace("_", "").isalnum() for name in mapped)
    root = project_with(tmp_path)
    (root / "oloproof.yaml").write_text((root / "oloproof.yaml").read_text().replace("project: tiny", "project: stateful-agent-example", 1))
    project = load_project(root)
    assert (project.name, project.dagster_name) == ("stateful-agent-example", mapped[0])


# -- Oloproof's refusals ------------------------------------------------------------------------


def test_minimum_validity_of_one_is_refused(tmp_path: Path) -> None:
    root = project_with(tmp_path, extra_config="metamorphic:\n  transforms:\n    - {name: shout, field: message, template: '{value}!', minimum_validity: 1.0}\n")
    line = (root / "oloproof.yaml").read_text().splitlines().index("    - {name: shout, field: message, template: '{value}!', minimum_validity: 1.0}") + 1
    assert refusal(root) == (
        f"{root / 'oloproof.yaml'}:{line}: metamorphic.transforms[0].minimum_validity: Input should be less than 1")


@pytest.mark.parametrize(("min_clusters", "refused"), [(9, True), (10, False)])
def test_min_clusters_below_ten_is_refused(tmp_path: Path, min_clusters: int, refused: bool) -> None:
    root = project_with(tmp_path)
    (root / "release.yaml").write_text(f"version: 1\nmin_clusters: {min_clusters}\nrules:\n  - {{id: a, metric: answer_correct, min: 0.5}}\n")
    if refused:
        assert refusal(root) == f"{root / 'release.yaml'}:2: min_clusters: Input should be greater than or equal to 10"
    else:
        assert load_project(root).release.min_clusters == 10


def test_a_rule_with_both_min_and_max_is_refused(tmp_path: Path) -> None:
    root = project_with(tmp_path, rules=[{"id": "band", "metric": "answer_correct", "min": 0.2, "max": 0.9}])
    assert refusal(root).endswith("rules[0]: Value error, rule 'band' takes 'min' or 'max', not both; write two rules")


def test_a_release_policy_with_no_rules_is_refused(tmp_path: Path) -> None:
    root = project_with(tmp_path)
    (root / "release.yaml").write_text("version: 1\nrules: []\n")
    assert refusal(root).startswith(f"{root / 'release.yaml'}:2: rules: Value error, a release policy needs at least one rule")


# -- Oloproof keys not supported yet --------------------------------------------------------------


@pytest.mark.parametrize(
    ("file", "text", "location", "key"),
    [
        ("oloproof.yaml", "replicates: 3\n", "replicates", "replicates"),
        ("oloproof.yaml", "egress: []\n", "egress", "egress"),
        ("oloproof.yaml", "predictive: {}\n", "predictive", "predictive"),
        ("release.yaml", "require_approval: true\n", "require_approval", "require_approval"),
        ("release.yaml", "difference_method: newcombe\n", "difference_method", "difference_method"),
    ],
)
def test_unsupported_oloproof_keys_say_so(tmp_path: Path, file: str, text: str, location: str, key: str) -> None:
    root = project_with(tmp_path)
    path = root / file
    lines = len(path.read_text().splitlines())
    path.write_text(path.read_text() + text)
    assert refusal(root) == f"{path}:{lines + 1}: {location}: `{key}` is an Oloproof key that oloproof_pipeline does not support yet"


def test_unsupported_nested_keys_and_evaluator_types_say_so(tmp_path: Path) -> None:
    root = project_with(tmp_path)
    config = root / "oloproof.yaml"
    config.write_text(config.read_text().replace("  callable: app:System\n", "  callable: app:System\n  http: {url: 'http://x'}\n"))
    assert refusal(root).endswith("system.http: `http` is an Oloproof key that oloproof_pipeline does not support yet")
    root = project_with(tmp_path / "judge", evaluators=[{"type": "model_classifier", "criterion": "tone"}], rules=[])
    assert refusal(root).endswith("evaluators[0].type: `model_classifier` is an Oloproof evaluator type that oloproof_pipeline does not support yet")
    root = project_with(tmp_path / "margin", rules=[{"id": "a", "metric": "answer_correct", "min": 0.5, "margin": 0.1}])
    assert refusal(root).endswith("rules[0].margin: `margin` is an Oloproof key that oloproof_pipeline does not support yet")
    # A key Oloproof does not have either is still a typo.
    root = project_with(tmp_path / "typo", extra_config="budgett: 5\n")
    assert refusal(root).endswith("budgett: unknown key")


# -- Oloproof's systems ---------------------------------------------------------------------------


def test_a_system_written_for_oloproof_without_the_extra_gets_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "p"
    root.mkdir()
    (root / "app.py").write_text("from oloproof import current_case\n\ndef desk(case):\n    return {}\n")
    for name in [name for name in sys.modules if name == "oloproof" or name.startswith("oloproof.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "oloproof", None)  # as if the extra were not installed
    with pytest.raises(ProjectError) as raised:
        load_callable(root, "app:desk")
    [problem] = raised.value.problems
    assert problem.startswith(f"{root / 'oloproof.yaml'}: system.callable: {root / 'app.py'} is written for Oloproof")
    assert problem.endswith("install the oloproof extra to run it: pip install 'oloproof-pipeline[oloproof]'")


SYNC_OLOPROOF_SYSTEM = """
from oloproof import AgentCheckpoint, AgentConstraintCheck, AgentStep, AgentTrajectory, ReplayChange, current_case

class Desk:
    replays = []

    def _run(self, fault):
        result = fault.fault_result if fault is not None else {"refunded": True}
        steps = (AgentStep(index=1, kind="tool_call", tool_name="issue_refund", arguments={"order_id": "o1"}),
                 AgentStep(index=2, kind="tool_result", tool_name="issue_refund", result=result))
        return AgentTrajectory(steps=steps, terminal_status="success",
                               checkpoints=(AgentCheckpoint(checkpoint_id="start", kind="checkpoint"),),
                               constraints=(AgentConstraintCheck(name="honest", passed=fault is None),))

    def __call__(self, case):
        current_case().agent_trajectory(self._run(None))
        return {"answer": "refunded"}

    def replay(self, trajectory, *, checkpoint, change):
        self.replays.append((type(trajectory).__name__, checkpoint.checkpoint_id, change.kind, change.step_index, change.fault))
        return self._run(change if change.kind == "inject_fault" else None)

desk = Desk()
"""


def test_an_oloproof_system_records_its_trajectory_and_replays_with_oloproofs_types(tmp_path: Path) -> None:
    pytest.importorskip("oloproof", reason="the oloproof extra is not installed")
    from oloproof_pipeline.model.trajectory import ToolChange
    from oloproof_pipeline.run.spec import build_system

    (tmp_path / "app.py").write_text(SYNC_OLOPROOF_SYSTEM)
    system = build_system(load_callable(tmp_path, "app:desk"))
    assert system({"message": "refund"}) == {"answer": "refunded"}
    recorded = system.trajectory()
    assert [(step["kind"], step["tool"]) for step in recorded["steps"]] == [("tool_call", "issue_refund"), ("tool_result", "issue_refund")]
    assert recorded["checkpoints"] == [{"step": 0, "calls_before": 0, "label": "start"}]
    assert recorded["constraints"][0]["passed"] is True
    from oloproof_pipeline.model.trajectory import Trajectory

    trajectory = Trajectory.model_validate(recorded)
    change = ToolChange(call_index=0, tool="issue_refund", arguments={"order_id": "o1"}, result={"error": "internal error"})
    faulted = system.replay(trajectory, checkpoint=trajectory.checkpoints[0], change=change)
    control = system.replay(trajectory, checkpoint=trajectory.checkpoints[0], change=None)
    assert faulted.steps[1].result == {"error": "internal error"} and not faulted.constraints[0].passed
    assert control.constraints[0].passed
    assert system.replays == [("AgentTrajectory", "start", "inject_fault", 1, "error"), ("AgentTrajectory", "start", "resume", None, None)]


def test_oloproof_terminal_statuses_map_so_an_undecided_run_never_succeeds() -> None:
    oloproof = pytest.importorskip("oloproof", reason="the oloproof extra is not installed")
    from oloproof_pipeline.run.oloproof_systems import from_agent_trajectory, to_agent_trajectory

    steps = (oloproof.AgentStep(index=1, kind="tool_call", tool_name="lookup", arguments={"id": 1}),
             oloproof.AgentStep(index=2, kind="tool_result", tool_name="lookup", error="no such order"))
    statuses = {
        (status, truncated): from_agent_trajectory(oloproof.AgentTrajectory(steps=steps, terminal_status=status, truncated=truncated))
        for status in ("success", "failure", "unknown") for truncated in (False, True)
    }
    assert {key: mapped.terminal_status for key, mapped in statuses.items()} == {
        ("success", False): "success", ("failure", False): "failure", ("unknown", False): "failure",
        ("success", True): "truncated", ("failure", True): "truncated", ("unknown", True): "truncated",
    }
    mapped = statuses[("success", False)]
    assert [call.result for call in mapped.calls()] == [{"error": "no such order"}]
    assert to_agent_trajectory(mapped).steps[0].arguments == {"id": 1}


def test_our_command_is_reachable_under_its_own_names() -> None:
    """Oloproof installs a command named `oloproof` too: `oloproof-pipeline` and
    `python -m oloproof_pipeline` are this project's whichever `oloproof` is on PATH."""
    for command in ([OUR_COMMAND, "--help"], [sys.executable, "-m", "oloproof_pipeline", "--help"]):
        shown = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert shown.returncode == 0 and HELP_LINE in shown.stdout, shown.stderr
    from importlib.metadata import entry_points

    scripts = {point.name: point.value for point in entry_points(group="console_scripts") if point.value.startswith("oloproof_pipeline")}
    assert scripts["oloproof-pipeline"] == "oloproof_pipeline.cli:main"


# -- done when: Oloproof's own example, unchanged, gives Oloproof's figures ----------------------------


def test_oloproofs_stateful_agent_example_runs_unchanged_with_oloproofs_counts(tmp_path: Path) -> None:
    pytest.importorskip("oloproof", reason="the oloproof extra is not installed")
    example = tmp_path / "stateful-agent"
    created = subprocess.run([sys.executable, "-m", "oloproof_cli", "init", "--example", "stateful-agent", str(example)],
                             capture_output=True, text=True, timeout=300)
    assert created.returncode == 0, created.stderr
    assert "project: stateful-agent-example" in (example / "oloproof.yaml").read_text()

    ran = subprocess.run([OUR_COMMAND, "run", "--project", str(example), "--json"], capture_output=True, text=True, timeout=900)
    assert ran.returncode == 1, ran.stderr  # BLOCK, a rule FAILed
    result = json.loads(ran.stdout)
    assert result["gate"]["decision"] == "BLOCK"
    counts = {rule["metric"]: rule["counts"] for rule in result["rules"]}
    verdicts = pd.read_parquet(example / ".oloproof" / "tables" / "verdicts" / "scripted-1.parquet")
    sources = verdicts[~verdicts["case_id"].str.contains("~")]
    outcome = sources[sources["criterion"] == "outcome_correct"]["outcome"].value_counts().to_dict()
    assert outcome == {PASS: 20, FAIL: 4}
    figures = {metric: (c["passed"], c["judged"], c["excluded"]) for metric, c in counts.items()}
    assert figures == {
        "state_matches": (20, 24, 0),
        "other_order_untouched": (24, 24, 0),
        "recovers_from_error_at_issue_refund": (0, 12, 12),
        "same_actions_under_paraphrase": (24, 24, 0),
        "same_state_under_injected": (16, 24, 0),
    }
