"""`system.kind: chat_agent` against the chat-agent example's stand-in model, a real HTTP
server on 127.0.0.1 started by each test (never the network). Model calls are counted in the
stand-in's request log, never timed."""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import yaml

from oloproof_pipeline.cli.init import example_names
from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.cases import load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.fingerprints import system_code_fingerprint
from oloproof_pipeline.model.outcomes import PASS
from oloproof_pipeline.model.trajectory import Trajectory
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.recording import record_cases
from oloproof_pipeline.run.replaying import replay_faults
from oloproof_pipeline.store.layout import table_path

from test_day_thirty import latest

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "example_project" / "chat_agent"
VERSION = "standin-1.prompt-1"


def load_standin_module():
    spec = importlib.util.spec_from_file_location("chat_agent_standin", EXAMPLE / "standin.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def standin():
    server = load_standin_module().StandIn().start()
    yield server
    server.stop()


def configure(
    root: Path, url: str, *, cases: list[str] | None = None, model: dict | None = None, timeout_s: float | None = None,
    answer: dict | None = None, concurrency: int | None = None,
) -> Path:
    """The example's project at `root`, its model at `url` (and other settings changed)."""
    config = yaml.safe_load((root / "oloproof.yaml").read_text())
    if concurrency is not None:
        config["concurrency"] = {"system": concurrency}
    config["system"]["model"].update({"base_url": url, **(model or {})})
    if answer is not None:
        config["system"]["answer"] = answer
    if timeout_s is not None:
        config["execution"]["timeout_s"] = timeout_s
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    if cases is not None:
        data = root / "data" / "cases.jsonl"
        kept = [line for line in data.read_text().splitlines() if json.loads(line)["id"] in cases]
        data.write_text("\n".join(kept) + "\n")
    return root


@pytest.fixture
def chat_desk(tmp_path: Path) -> Path:
    target = tmp_path / "chat_desk"
    shutil.copytree(EXAMPLE, target, ignore=shutil.ignore_patterns(".oloproof", "__pycache__"))
    return target


def record(root: Path):
    project = load_project(root)
    cases = load_cases(project)
    runs, _ = record_cases(project, cases, version=VERSION, run_id="run-1", fresh=True)
    return project, cases, {run.case_id: run for run in runs}


def live_turns(trajectory: dict | Trajectory | None) -> int:
    if trajectory is None:
        return 0
    if isinstance(trajectory, dict):
        trajectory = Trajectory.model_validate(trajectory)
    return sum(1 for turn in trajectory.model_turns() if not turn["served"])


def test_a_run_records_replays_and_gates_against_the_standin(chat_desk, standin, instance):
    """The example, the stand-in up, the whole graph run as `oloproof run` runs it: every
    model call recorded, the faulted replays call the model live after the fault and the
    stand-in escalates, the control replays call it never, and the gate decides. A rerun of
    the cached version calls the model zero times."""
    assert "chat-agent" in example_names()  # what `oloproof init --example chat-agent` copies
    # Two sources of each kind (with their copies): enough for every path, quick to run.
    configure(chat_desk, standin.url, cases=[f"ord-{number:03d}" for number in (1, 2, 5, 6, 9, 10, 13, 14, 17, 18, 21, 22)])
    evaluation = run_evaluation(chat_desk, instance=instance)
    assert evaluation.errors == [] and evaluation.success
    gate = pd.read_parquet(table_path(chat_desk, "gate", VERSION))
    assert set(gate["gate_decision"]) == {"BLOCK"}  # decided: the copies' transforms are not checked at this size
    assert dict(zip(gate["rule_id"], gate["decision"]))["bystanders"] == "INSUFFICIENT_EVIDENCE"

    runs = pd.read_parquet(table_path(chat_desk, "recorded_runs", VERSION))
    assert set(runs["status"]) == {"ok"} and len(runs) == 36
    assert (runs["model_calls"] >= 2).all() and (runs["prompt_tokens"] > 0).all() and (runs["model_latency_s"] > 0).all()
    replays = pd.read_parquet(table_path(chat_desk, "fault_replays", VERSION))
    replayed = replays[replays["control_status"].notna()]
    assert len(replayed) == 6 and set(replayed["outcome"]) == {PASS} and set(replayed["reason"]) == {"escalated"}
    # The control replays were answered from the recording; the faulted ones asked the model
    # only after the fault (the request with the injected error in it, and the one after).
    assert sum(live_turns(json.loads(text)) for text in replayed["control_trajectory"]) == 0
    faulted_live = sum(live_turns(json.loads(text)) for text in replayed["faulted_trajectory"])
    assert faulted_live == 2 * len(replayed)
    assert len(standin.requests) == runs["model_calls"].sum() + faulted_live
    faulted = Trajectory.model_validate(json.loads(replayed["faulted_trajectory"].iloc[0]))
    assert [call.tool for call in faulted.calls()] == ["lookup_order", "issue_refund", "escalate_to_human"]
    # The version's cost is in the materialization's metadata.
    metadata = latest(instance, "recorded_runs", project="refund_desk_chat")
    assert metadata["model_calls"] == runs["model_calls"].sum()
    assert metadata["prompt_tokens"] == runs["prompt_tokens"].sum()

    before = len(standin.requests)
    assert run_evaluation(chat_desk, instance=instance).success
    assert len(standin.requests) == before  # a cached version calls no model
    assert latest(instance, "recorded_runs", project="refund_desk_chat")["model_calls"] == metadata["model_calls"]


def test_a_control_replay_reproduces_from_recorded_responses_with_the_standin_stopped(chat_desk, standin):
    configure(chat_desk, standin.url, cases=["ord-001", "ord-002"], model={"retries": 0})
    project, cases, runs = record(chat_desk)
    assert {run.status for run in runs.values()} == {"ok"}
    recorded = len(standin.requests)
    standin.stop()

    table, _ = replay_faults(project, cases, list(runs.values()), version=VERSION, run_id="run-2")
    for row in table.itertuples():
        recording = runs[row.case_id].trajectory
        control = Trajectory.model_validate(json.loads(row.control_trajectory))
        assert row.control_status == "ok"
        assert control.call_signatures() == recording.call_signatures()
        assert control.terminal_status == recording.terminal_status
        assert live_turns(control) == 0
        # The faulted replay needs the model after the fault: with it gone, that replay is
        # an error and the verdict MISSING, never a pass.
        assert row.faulted_status == "error" and "ConnectError" in row.faulted_error
        assert row.outcome != PASS
    assert len(standin.requests) == recorded


def test_refused_requests_are_retried_with_backoff_then_cost_only_their_case(chat_desk, standin):
    # One case at a time, so the refusals below meet the first case's first request.
    configure(chat_desk, standin.url, cases=["ord-001", "ord-002"], model={"retries": 3, "backoff_s": 0.01}, concurrency=1)
    standin.failures.extend([429, 503, 500])  # the first request is refused three times, then answered
    _, _, runs = record(chat_desk)
    assert {run.status for run in runs.values()} == {"ok"}
    first_turn = runs["ord-001"].trajectory.model_turns()[0]
    assert first_turn["attempts"] == 4
    calls = sum(len(run.trajectory.model_turns()) for run in runs.values())
    assert len(standin.requests) == calls + 3

    standin.requests.clear()
    standin.failures.extend([503] * 4)  # more than the retries allow: that case is an error
    _, _, runs = record(chat_desk)
    assert runs["ord-001"].status == "error" and "failed 4 time(s)" in runs["ord-001"].error and "HTTP 503" in runs["ord-001"].error
    assert runs["ord-002"].status == "ok"


def test_a_hanging_endpoint_costs_one_case(chat_desk, standin):
    # Deadlines far above what an answered request takes on a loaded machine (a local stand-in:
    # milliseconds), so only the hanging one reaches them.
    configure(chat_desk, standin.url, cases=["ord-001", "ord-002", "ord-003"], model={"request_timeout_s": 1.5, "retries": 1, "backoff_s": 0})
    standin.hang_on = "ord-002"
    _, _, runs = record(chat_desk)
    assert runs["ord-002"].status == "error" and "ReadTimeout" in runs["ord-002"].error
    assert runs["ord-001"].status == runs["ord-003"].status == "ok"

    # A request that outlasts the case's deadline is interrupted by it: a timeout, that case only.
    configure(chat_desk, standin.url, model={"request_timeout_s": 60}, timeout_s=4)
    _, _, runs = record(chat_desk)
    assert runs["ord-002"].status == "timeout"
    assert runs["ord-001"].status == runs["ord-003"].status == "ok"


def test_the_final_message_is_the_output_as_json_or_under_a_field(chat_desk, standin):
    configure(chat_desk, standin.url, cases=["ord-001"])
    _, _, runs = record(chat_desk)
    assert runs["ord-001"].output == {"answer": "refunded"}  # JSON mode: the object the model wrote
    assert standin.requests[-1]["response_format"] == {"type": "json_object"}

    configure(chat_desk, standin.url, answer={"format": "text", "field": "reply"})
    _, _, runs = record(chat_desk)
    assert runs["ord-001"].output == {"reply": "refunded"}
    assert "response_format" not in standin.requests[-1]


def test_the_prompt_and_the_model_settings_are_the_systems_code(chat_desk):
    project = load_project(chat_desk)
    before = system_code_fingerprint(project)
    assert "prompts/desk.md" in before.files
    prompt = chat_desk / "prompts" / "desk.md"
    prompt.write_text(prompt.read_text() + "\nBe brief.\n")
    edited = system_code_fingerprint(load_project(chat_desk))
    assert edited.changes_since(before.files, chat_desk) == ["prompts/desk.md"]
    configure(chat_desk, "http://127.0.0.1:9/v1", model={"temperature": 0.7})
    assert system_code_fingerprint(load_project(chat_desk)).digest != edited.digest


def test_a_chat_agent_without_its_keys_is_one_line_naming_the_field(chat_desk):
    config = (chat_desk / "oloproof.yaml").read_text()
    (chat_desk / "oloproof.yaml").write_text(config.replace("  prompt: prompts/desk.md\n", ""))
    with pytest.raises(ProjectError) as missing:
        load_project(chat_desk)
    assert "oloproof.yaml" in str(missing.value) and "system" in str(missing.value) and "'prompt'" in str(missing.value)
    (chat_desk / "oloproof.yaml").write_text(config.replace("  kind: chat_agent\n", ""))
    with pytest.raises(ProjectError) as stray:
        load_project(chat_desk)
    assert "only go with 'kind: chat_agent'" in str(stray.value)
