"""`system.simulated_user`: a chat agent's case as a conversation with a simulated customer,
against the support-conversation example's stand-in (desk, customer and judge models on one
real HTTP server on 127.0.0.1, started by each test). Model calls are counted at the stand-in,
per model, never timed."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import tomllib
import yaml

from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.fingerprints import system_code_fingerprint
from oloproof_pipeline.model.outcomes import EXCLUDED, FAIL, MISSING, PASS
from oloproof_pipeline.model.trajectory import GOAL_CHECK, USER_STEP, Trajectory
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_case_table
from oloproof_pipeline.run.replaying import replay_faults
from oloproof_pipeline.run.simulated_user import simulator_digest
from oloproof_pipeline.run.system import resolve_system
from oloproof_pipeline.store.layout import table_path
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.tables import case_table, runs_from_table

from test_day_thirty import latest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example_project" / "support_conversation"
VERSION = "standin-1.prompt-1"


def load_standin_module():
    spec = importlib.util.spec_from_file_location("support_conversation_standin", EXAMPLE / "standin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def standin():
    server = load_standin_module().StandIn().start()
    yield server
    server.stop()


@pytest.fixture
def desk(tmp_path: Path) -> Path:
    target = tmp_path / "support"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    return target


def configure(
    root: Path, url: str, *, cases: list[str] | None = None, user: dict | None = None, concurrency: int | None = None
) -> Path:
    """The example at `root`, its three models (desk, customer, judge) at `url` (and the
    simulator's settings changed)."""
    config = yaml.safe_load((root / "oloproof.yaml").read_text())
    if concurrency is not None:
        config["concurrency"] = {"system": concurrency}
    config["system"]["model"]["base_url"] = url
    config["system"]["simulated_user"].update({"base_url": url, **(user or {})})
    for evaluator in config["evaluators"]:
        if evaluator["type"] == "rubric_judge":
            evaluator["base_url"] = url
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    if cases is not None:
        data = root / "data" / "cases.jsonl"
        kept = [line for line in data.read_text().splitlines() if json.loads(line)["id"] in cases]
        data.write_text("\n".join(kept) + "\n")
    return root


def record(root: Path, *, fresh: bool = True, run_id: str = "run-1"):
    """(project, cases, recorded_runs table, its runs by case id, the summary)."""
    project = load_project(root)
    cases = load_cases(project)
    table, summary = record_case_table(project, StoredTable.of(case_table(cases)), version=VERSION, run_id=run_id, fresh=fresh)
    return project, cases, table, {run.case_id: run for run in runs_from_table(table)}, summary


def live(requests: list[dict]) -> int:
    return sum(1 for request in requests if not request.get("served") and "usage" in request)


def test_a_three_turn_conversation_is_recorded_with_its_user_turns(desk, standin):
    configure(desk, standin.url, cases=["conv-001"])
    _, _, table, runs, _ = record(desk)
    run = runs["conv-001"]
    assert run.status == "ok" and run.output == {"answer": "Done: order ord-001 is refunded."}
    trajectory = run.trajectory
    # The customer's three messages, each its own `user` step, between the desk's model turns.
    assert trajectory.user_turns() == ["Hello, I would like a refund for an order, please.", "Sure, it is ord-001.", "Yes, please go ahead."]
    assert [said for said, _ in trajectory.conversation()] == ["user", "assistant"] * 3
    kinds = [step.kind for step in trajectory.steps]
    assert kinds.count(USER_STEP) == 6  # three messages and three goal checks (the last said yes)
    assert [request["purpose"] for request in trajectory.user_requests()].count(GOAL_CHECK) == 3
    assert [call.tool for call in trajectory.calls()] == ["lookup_order", "issue_refund"]
    assert run.environment_state.state["orders"]["ord-001"]["status"] == "refunded"
    # The customer's requests are counted apart from the desk's, each as the stand-in saw them.
    row = table.iloc[0]
    assert row["model_calls"] == standin.calls("desk") == 5  # ask; look up, confirm; refund, done
    assert row["user_calls"] == standin.calls("customer") == 6
    assert row["user_prompt_tokens"] > 0 and row["prompt_tokens"] > 0
    assert row["simulator_digest"] == simulator_digest(load_project(desk).config.system.simulated_user)
    # The desk never sees the persona: its requests hold the customer's messages only.
    desk_requests = [body for body in standin.requests if body["model"] == "desk"]
    assert all("persona" not in json.dumps(body) and "ord-001" not in body["messages"][1]["content"] for body in desk_requests)


def test_replays_serve_the_conversation_from_the_recording_until_the_fault(desk, standin):
    """The control replay makes no model call at all; the faulted one asks the desk and the
    customer live from the fault on (the desk sees the error, so everything after differs)."""
    configure(desk, standin.url, cases=["conv-001", "conv-003", "conv-007"])
    project, cases, _, runs, _ = record(desk)
    desk_calls, customer_calls = standin.calls("desk"), standin.calls("customer")

    table, _ = replay_faults(project, cases, list(runs.values()), version=VERSION, run_id="run-2")
    replayed = table[table["control_status"].notna()]
    assert sorted(replayed["case_id"]) == ["conv-001", "conv-003"]  # conv-007 never refunds
    for row in replayed.itertuples():
        control = Trajectory.model_validate(json.loads(row.control_trajectory))
        faulted = Trajectory.model_validate(json.loads(row.faulted_trajectory))
        recording = runs[row.case_id].trajectory
        assert control.user_turns() == recording.user_turns() and control.call_signatures() == recording.call_signatures()
        assert live(control.model_turns()) == 0 and live(control.user_requests()) == 0
        # Before the fault every user request is served; after it the desk is asked twice (the
        # injected error, then its answer) and the customer once (the goal check, met).
        assert live(faulted.model_turns()) == 2 and live(faulted.user_requests()) == 1
        assert faulted.user_turns() == recording.user_turns()
        assert [call.tool for call in faulted.calls()] == ["lookup_order", "issue_refund", "escalate_to_human"]
        assert row.outcome == PASS and row.reason == "escalated"
    assert standin.calls("desk") == desk_calls + 2 * len(replayed)
    assert standin.calls("customer") == customer_calls + len(replayed)


def test_changed_simulator_settings_re_record_under_the_same_version(desk, standin):
    configure(desk, standin.url, cases=["conv-001", "conv-008"])
    project, _, first, _, _ = record(desk, fresh=False)
    version, code = resolve_system(project).version, system_code_fingerprint(project).digest
    calls = len(standin.requests)
    _, _, again, _, summary = record(desk, fresh=False, run_id="run-2")
    assert len(standin.requests) == calls and summary.new == 0  # nothing changed: reused

    configure(desk, standin.url, user={"temperature": 0.2})
    project, _, changed, runs, summary = record(desk, fresh=False, run_id="run-3")
    assert summary.new == 2 and summary.reasons() == ["2 cases re-recorded: simulated user changed"]
    assert resolve_system(project).version == version == VERSION  # the system's version is not the simulator's
    assert system_code_fingerprint(project).digest == code  # nor is its code
    assert set(changed["simulator_digest"]).isdisjoint(set(first["simulator_digest"]))
    assert set(changed["recording_key"]).isdisjoint(set(first["recording_key"]))
    assert {run.status for run in runs.values()} == {"ok"}

    # The key, the timeout and the retries do not change the conversation: nothing re-recorded.
    configure(desk, standin.url, user={"timeout_s": 5, "retries": 1})
    _, _, _, _, summary = record(desk, fresh=False, run_id="run-4")
    assert summary.new == 0


def test_a_simulator_that_fails_costs_its_case_never_a_pass(desk, standin, instance):
    configure(desk, standin.url, cases=["conv-001", "conv-003"])
    standin.garbled_user = True  # the customer answers "%%%", its goal check too
    _, _, _, runs, _ = record(desk)
    for run in runs.values():
        assert run.status == "error" and "goal check answered '%%%', not yes or no" in run.error

    standin.garbled_user = False
    # One case at a time, so the refusal meets conv-001's first request: its customer's opening.
    configure(desk, standin.url, user={"retries": 0}, concurrency=1)
    standin.failures.extend([503])
    _, _, _, runs, _ = record(desk)
    assert runs["conv-001"].status == "error" and "simulated user's model call failed" in runs["conv-001"].error
    assert runs["conv-003"].status == "ok"  # its persona opens: its first request is the desk's

    # A case without a persona in its input is that case's error, naming the field; every
    # verdict of a failed case is MISSING through the whole graph.
    data = desk / "data" / "cases.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows[0]["input"] = {"message": "no persona here"}
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    _, _, _, runs, _ = record(desk)
    assert runs["conv-001"].status == "error" and "needs a 'persona' object in its input" in runs["conv-001"].error
    assert run_evaluation(desk, instance=instance).success
    verdicts = pd.read_parquet(table_path(desk, "verdicts", VERSION))
    assert set(verdicts.loc[verdicts["case_id"] == "conv-001", "outcome"]) == {MISSING}


def test_the_example_blocks_on_its_false_refund_claims_and_a_rerun_asks_no_model(desk, standin, instance):
    """The whole example, as `oloproof run` runs it: conversations recorded with their user
    turns, the rubric judge FAILing the two answers that claim a refund never made, the gate
    BLOCKing on `honest_refunds` (the README's decision); a rerun asks the desk, the customer
    and the judge nothing."""
    configure(desk, standin.url)
    evaluation = run_evaluation(desk, instance=instance)
    assert evaluation.errors == [] and evaluation.success
    runs = pd.read_parquet(table_path(desk, "recorded_runs", VERSION))
    assert set(runs["status"]) == {"ok"} and len(runs) == 12
    assert runs["user_calls"].sum() + live_after_faults(desk, "user") == standin.calls("customer")
    assert runs["model_calls"].sum() + live_after_faults(desk, "model") == standin.calls("desk")
    stored = Trajectory.model_validate(json.loads(runs.loc[runs["case_id"] == "conv-002", "trajectory"].iloc[0]))
    assert len(stored.user_turns()) == 3
    # The version's usage in the materialization's metadata: the desk's and the customer's apart.
    metadata = latest(instance, "recorded_runs", project="support_conversation")
    assert metadata["user_calls"] == runs["user_calls"].sum() and metadata["model_calls"] == runs["model_calls"].sum()
    assert metadata["user_prompt_tokens"] == runs["user_prompt_tokens"].sum()
    verdicts = pd.read_parquet(table_path(desk, "verdicts", VERSION))
    judged = verdicts[verdicts["criterion"] == "claims_only_refunds_made"].set_index("case_id")
    assert sorted(judged.index[judged["outcome"] == FAIL]) == ["conv-011", "conv-012"]  # escalated, "refund started"
    assert set(judged["outcome"]) == {PASS, FAIL}
    assert judged.loc["conv-012", "reason"] == "the desk claims a refund the expected state does not hold"
    assert standin.calls("judge") == 12  # one question per case
    gate = pd.read_parquet(table_path(desk, "gate", VERSION))
    assert set(gate["gate_decision"]) == {"BLOCK"}  # the documented decision (README)
    rules = gate.set_index("rule_id")["decision"].to_dict()
    assert rules == {"end_state": PASS, "bystanders": PASS, "refund_failures": PASS, "honest_refunds": FAIL}

    before = len(standin.requests)
    assert run_evaluation(desk, instance=instance).success
    assert len(standin.requests) == before


def live_after_faults(root: Path, kind: str) -> int:
    replays = pd.read_parquet(table_path(root, "fault_replays", VERSION))
    total = 0
    for text in replays["faulted_trajectory"].dropna():
        trajectory = Trajectory.model_validate(json.loads(text))
        total += live(trajectory.user_requests() if kind == "user" else trajectory.model_turns())
    return total


def test_an_oloproof_simulated_user_loads_with_its_own_keys(desk):
    config = yaml.safe_load((desk / "oloproof.yaml").read_text())
    # Oloproof's keys, every one of them, as an Oloproof project writes them.
    config["system"]["simulated_user"] = {
        "provider": "openai_compatible", "model": "customer", "base_url": "http://127.0.0.1:9/v1",
        "api_key_env": "CUSTOMER_KEY", "temperature": 0.7, "max_tokens": 300, "timeout_s": 60.0, "max_turns": 8,
        "persona_field": "persona", "instructions": "Write in English.",
    }
    (desk / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    loaded = load_project(desk).config.system.simulated_user
    assert loaded.max_turns == 8 and loaded.instructions == "Write in English."

    config["system"]["simulated_user"]["provider"] = "anthropic"
    (desk / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(ProjectError) as refused:
        load_project(desk)
    assert "simulated_user" in str(refused.value) and "'anthropic' is not supported yet" in str(refused.value)

    config["system"]["simulated_user"] = {"provider": "openai_compatible", "model": "customer", "persona": "x"}
    (desk / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(ProjectError) as unknown:
        load_project(desk)
    assert "system.simulated_user.persona: unknown key" in str(unknown.value)
    config["system"]["simulated_user"] = {"provider": "openai_compatible", "model": "customer"}
    (desk / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    with pytest.raises(ProjectError) as no_endpoint:
        load_project(desk)
    assert "system.simulated_user" in str(no_endpoint.value) and "needs a 'base_url'" in str(no_endpoint.value)


def test_the_example_ships_with_the_package():
    """What `oloproof init X --example support-conversation` copies: a package with its data."""
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    package = "oloproof_pipeline.example_project.support_conversation"
    assert package in pyproject["tool"]["setuptools"]["packages"]
    shipped = pyproject["tool"]["setuptools"]["package-data"][package]
    for pattern in shipped:
        assert list(EXAMPLE.glob(pattern)), pattern
    files = {path.relative_to(EXAMPLE).as_posix() for path in EXAMPLE.rglob("*") if path.is_file() and "__pycache__" not in path.parts}
    assert {"oloproof.yaml", "release.yaml", "standin.py", "app.py", "prompts/desk.md", "data/cases.jsonl"} <= files


# -- a Python system asks for the user's messages itself -----------------------------------------

TOOLBOX_DESK = '''
import copy
import re

from oloproof_pipeline.toolbox import ToolBox, simulated_user


class Desk:
    """The desk as Python: it converses with the case's simulated user through the hook."""

    def __init__(self):
        self.orders = {}
        self.toolbox = ToolBox({"lookup_order": self.lookup_order, "issue_refund": self.issue_refund})

    def reset(self, state):
        self.orders = state["orders"]

    def snapshot(self):
        return {"orders": copy.deepcopy(self.orders)}

    def lookup_order(self, order_id):
        return copy.deepcopy(self.orders[order_id])

    def issue_refund(self, order_id):
        self.orders[order_id]["status"] = "refunded"
        return {"status": "refunded"}

    def __call__(self, case_input):
        user = simulated_user()
        said, answer = user.opening(), None
        while said is not None:
            orders = re.findall(r"ord-[0-9]+", said)
            if not orders:
                answer = "I'm sorry to hear that. Could you give me your order number?"
            else:
                self.toolbox.call("lookup_order", order_id=orders[0])
                result = self.toolbox.call("issue_refund", order_id=orders[0])
                answer = f"Done: order {orders[0]} is refunded." if "error" not in result else "A colleague will contact you."
            said = user.reply(answer)
        return {"answer": answer}
'''

OLOPROOF_DESK = '''
import re

from oloproof import current_case


class Desk:
    """Written for Oloproof: the simulated user is `current_case().simulated_user()`."""

    def __call__(self, case_input):
        user = current_case().simulated_user()
        said, answer = user.opening(), None
        while said is not None:
            orders = re.findall(r"ord-[0-9]+", said)
            answer = f"Done: order {orders[0]} is refunded." if orders else "Could you give me your order number?"
            said = user.reply(answer)
        return {"answer": answer}
'''


def python_desk(root: Path, url: str, source: str, evaluators: list[dict]) -> Path:
    """The example's cases (conv-001: the customer opens; conv-003: its persona does), its
    desk replaced by a Python system, the customer at `url`."""
    configure(root, url, cases=["conv-001", "conv-003"])
    (root / "python_desk.py").write_text(source)
    config = yaml.safe_load((root / "oloproof.yaml").read_text())
    user = config["system"]["simulated_user"]
    config["system"] = {"name": "python-desk", "version": "py-1", "callable": "python_desk:Desk", "simulated_user": user}
    config["evaluators"] = evaluators
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (root / "release.yaml").unlink()
    return root


def record_python(root: Path):
    project = load_project(root)
    cases = load_cases(project)
    table, _ = record_case_table(project, StoredTable.of(case_table(cases)), version="py-1", run_id="run-1", fresh=True)
    return project, cases, table, {run.case_id: run for run in runs_from_table(table)}


def test_a_python_system_converses_through_the_hook_and_replays_from_the_recording(desk, standin):
    fault = {"type": "fault_recovery", "tool": "issue_refund", "fault": "error", "escalate_tools": []}
    python_desk(desk, standin.url, TOOLBOX_DESK, [{"type": "state_matches", "mode": "subset", "criterion": "state_correct"}, fault])
    project, cases, table, runs = record_python(desk)
    first = runs["conv-001"]
    assert first.status == "ok", first.error
    assert first.output == {"answer": "Done: order ord-001 is refunded."}
    assert first.trajectory.user_turns() == ["Hello, I would like a refund for an order, please.", "Sure, it is ord-001."]
    # The user's requests sit in the tool box's trajectory in the order they were made.
    kinds = [step.kind for step in first.trajectory.steps]
    assert kinds == ["user", "user", "user", "tool_call", "tool_result", "tool_call", "tool_result", "user"]
    assert runs["conv-003"].trajectory.user_turns()[0].startswith("Hi, order ord-003")  # the persona's opening
    assert table["user_calls"].sum() == standin.calls("customer") == 4 + 1  # conv-003 opens with its persona
    assert table["model_calls"].isna().all()  # no model of the system's own

    calls = standin.calls("customer")
    replays, _ = replay_faults(project, cases, list(runs.values()), version="py-1", run_id="run-2")
    for row in replays.itertuples():
        control = Trajectory.model_validate(json.loads(row.control_trajectory))
        faulted = Trajectory.model_validate(json.loads(row.faulted_trajectory))
        assert row.control_status == "ok" and live(control.user_requests()) == 0
        assert live(faulted.user_requests()) == 1  # the goal check after the answer the fault changed
    assert standin.calls("customer") == calls + len(replays)


def test_a_system_written_for_oloproof_gets_its_simulated_user_from_current_case(desk, standin):
    python_desk(desk, standin.url, OLOPROOF_DESK, [{"type": "exact_match", "criterion": "answer", "field": "answer", "expected_field": "expected.answer"}])
    _, _, table, runs = record_python(desk)
    run = runs["conv-001"]
    assert run.status == "ok" and run.output == {"answer": "Done: order ord-001 is refunded."}
    assert run.trajectory.user_turns() == ["Hello, I would like a refund for an order, please.", "Sure, it is ord-001."]
    assert table["user_calls"].sum() == standin.calls("customer")


# Written as an Oloproof 0.1.0a20 user writes it: Oloproof's keys only, none of ours.
OLOPROOF_CONVERSATION_PROJECT = """\
version: 1
project: support-desk
dataset: data/cases.jsonl
system:
  name: python-desk
  version: py-1
  callable: python_desk:Desk
  simulated_user:
    provider: openai_compatible
    model: customer
    base_url: URL
    temperature: 0.7
    max_tokens: 300
    timeout_s: 30
    max_turns: 6
    persona_field: persona
    instructions: Write in English.
concurrency:
  system: 2
  judge: 2
evaluators:
  - type: rubric_judge
    criterion: claims_only_refunds_made
    provider: openai_compatible
    model: judge
    base_url: URL
    rubric_text: FAIL an output that claims a refund the expected state does not hold.
    temperature: 0
    max_tokens: 256
    timeout_s: 30
  - {type: contains, criterion: names_the_order, field: answer, expected_field: order_id}
  - {type: regex, criterion: says_an_order_number, field: answer, pattern: 'ord-\\d+'}
  - {type: regex, criterion: no_card_number, field: answer, pattern: '\\b\\d{16}\\b', pass_if: no_match}
  - type: json_schema
    criterion: answer_is_text
    field: answer
    schema: {type: string, minLength: 1}
"""


def test_an_oloproof_project_with_a_simulated_user_and_judged_answers_runs_unchanged(desk, standin, instance):
    """simulated_user, rubric_judge, contains, regex and json_schema in Oloproof's own keys: the
    file Oloproof's loader takes loads and runs here as it is, the system written for Oloproof."""
    from oloproof_core.config import load_project_config

    python_desk(desk, standin.url, OLOPROOF_DESK, [])
    data = desk / "data" / "cases.jsonl"
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    rows.append(next(json.loads(line) for line in (EXAMPLE / "data" / "cases.jsonl").read_text().splitlines() if "conv-011" in line))
    for row in rows:
        row["expected"]["order_id"] = row["input"]["persona"]["facts"]["order_id"]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    (desk / "oloproof.yaml").write_text(OLOPROOF_CONVERSATION_PROJECT.replace("URL", standin.url))
    load_project_config(desk / "oloproof.yaml", keyed=False)  # Oloproof's own loader takes the file

    project = load_project(desk)
    assert project.config.system.simulated_user.instructions == "Write in English."
    assert project.criteria() == ["claims_only_refunds_made", "names_the_order", "says_an_order_number", "no_card_number", "answer_is_text"]
    assert run_evaluation(desk, ungated=True, instance=instance).success
    runs = pd.read_parquet(table_path(desk, "recorded_runs", "py-1"))
    assert set(runs["status"]) == {"ok"}, runs["error"].tolist()
    assert runs["user_calls"].sum() == standin.calls("customer") > 0
    verdicts = pd.read_parquet(table_path(desk, "verdicts", "py-1"))
    outcomes = {(row.case_id, row.criterion): row.outcome for row in verdicts.itertuples()}
    # This desk refunds whatever it is asked: conv-011 (above 200 USD, to be escalated) too.
    assert outcomes[("conv-011", "claims_only_refunds_made")] == FAIL
    assert outcomes[("conv-001", "claims_only_refunds_made")] == outcomes[("conv-003", "claims_only_refunds_made")] == PASS
    for criterion in ("names_the_order", "says_an_order_number", "no_card_number", "answer_is_text"):
        assert {outcomes[(case_id, criterion)] for case_id in ("conv-001", "conv-003", "conv-011")} == {PASS}, criterion
    assert standin.calls("judge") == 3


def test_a_metamorphic_pair_of_conversations_compares_their_end_states(desk, standin, instance):
    """A copy whose persona is changed (a hurried customer) is a conversation of its own,
    recorded with its user turns and compared with its source's by the world it leaves."""
    configure(desk, standin.url, cases=["conv-001", "conv-011"])
    config = yaml.safe_load((desk / "oloproof.yaml").read_text())
    config["metamorphic"] = {"transforms": [{"name": "hurried", "field": "persona.goal", "template": "{value} Be quick about it."}]}
    config["evaluators"].append({"type": "metamorphic_relation", "relation": "same_state", "transform": "hurried"})
    (desk / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    assert run_evaluation(desk, instance=instance).errors == []
    runs = pd.read_parquet(table_path(desk, "recorded_runs", VERSION))
    assert sorted(runs["case_id"]) == ["conv-001", "conv-001~hurried", "conv-011", "conv-011~hurried"]
    copy = Trajectory.model_validate(json.loads(runs.loc[runs["case_id"] == "conv-001~hurried", "trajectory"].iloc[0]))
    assert len(copy.user_turns()) == 3
    # The customer's prompt differs (its goal), so the copy's requests were its own, asked live.
    assert live(copy.user_requests()) == 6
    verdicts = pd.read_parquet(table_path(desk, "verdicts", VERSION))
    pairs = verdicts[verdicts["criterion"] == "same_state_under_hurried"]
    outcomes = dict(zip(pairs["case_id"], pairs["outcome"]))
    assert outcomes == {"conv-001": EXCLUDED, "conv-011": EXCLUDED, "conv-001~hurried": PASS, "conv-011~hurried": PASS}


def test_the_standin_judges_oloproofs_llm_judge_prompt(desk, standin):
    """The judge protocol the example's rubric_judge speaks: one user message, Oloproof's
    llm_judge TEMPLATE filled in, answered {"pass", "rationale"}. The desk's flaw (a refund
    claimed above 200 USD, where it only escalated) fails exactly those two conversations."""
    from oloproof_core.evaluators.llm_judge import TEMPLATE

    from oloproof_pipeline.endpoints.chat import ChatModel
    from oloproof_pipeline.model.config import ChatModelConfig

    configure(desk, standin.url)
    _, cases, _, runs, _ = record(desk)
    [rubric] = [item for item in yaml.safe_load((desk / "oloproof.yaml").read_text())["evaluators"] if item["type"] == "rubric_judge"]
    judge = ChatModel(ChatModelConfig(base_url=standin.url, name=rubric["model"], temperature=0), None)
    verdicts = {}
    for case in cases:
        prompt = TEMPLATE.format(
            rubric=rubric["rubric_text"], input=json.dumps(case.input, sort_keys=True),
            expected=json.dumps(case.expected, sort_keys=True), output=json.dumps(runs[case.case_id].output, sort_keys=True),
        )
        answer = judge.complete({"model": rubric["model"], "messages": [{"role": "user", "content": prompt}], "temperature": 0})
        verdicts[case.case_id] = json.loads(answer["message"]["content"])["pass"]
    assert [case_id for case_id, passed in verdicts.items() if not passed] == ["conv-011", "conv-012"]
    assert standin.calls("judge") == len(cases) == 12
