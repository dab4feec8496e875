"""`rubric_judge` against a judge stand-in on 127.0.0.1 that counts what it is asked: each
judgment kept by what the judge saw, so a rerun asks nothing and an edited rubric re-asks its
criterion only; a judge that answers out of format, or not at all, is MISSING with the reason;
at most `concurrency.judge` questions at once; the judge's tokens and cost apart from the
system's; Oloproof's own keys load unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml
from dagster import AssetKey

from conftest import write_project
from judge_standin import JudgeStandIn, sections
from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.evaluators import JudgingContext, build_evaluators, judge_cases
from oloproof_pipeline.evaluators.rubric_judge import TEMPLATE, verdict_reason
from oloproof_pipeline.model.cases import CaseRecord, load_cases
from oloproof_pipeline.model.errors import ProjectError
from oloproof_pipeline.model.judgments import JudgmentRecord
from oloproof_pipeline.model.outcomes import FAIL, MISSING, PASS
from oloproof_pipeline.model.records import RecordedRun
from oloproof_pipeline.model.trajectory import Step, Trajectory
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store.journal import Journal
from oloproof_pipeline.store.layout import judgments_path, read_table
from oloproof_pipeline.store.tables import JUDGMENTS_SCHEMA

# Answers "refunded" for even orders, "declined" for odd ones.
DESK = """
class System:
    def __call__(self, request):
        number = int(request["order"].split("-")[1])
        return {"answer": f"Order {request['order']} " + ("refunded" if number % 2 == 0 else "declined")}
"""
CASES = [{"id": f"c{n}", "input": {"order": f"ord-{n}"}, "expected": {"answer": "refunded"}} for n in range(4)]
VERSION = "1.0.0"


@pytest.fixture
def judge():
    server = JudgeStandIn().start()
    yield server
    server.stop()


def rubric_judge(criterion: str, url: str, **keys) -> dict:
    return {"type": "rubric_judge", "criterion": criterion, "provider": "openai_compatible", "model": "judge-1",
            "base_url": url, **keys}


def desk(tmp_path: Path, url: str, *, extra_evaluators: list[dict] | None = None, judge_at_once: int = 4) -> Path:
    """A project with two rubric judges (one rubric in a file, one inline)."""
    evaluators = [
        rubric_judge("says_refunded", url, rubric_file="rubrics/refunded.md"),
        rubric_judge("names_the_order", url, rubric_text="PASS when the output names the order: 'ord-'."),
        *(extra_evaluators or []),
    ]
    root = write_project(tmp_path / "desk", app=DESK, cases=CASES, evaluators=evaluators, rules=[])
    config = json.loads((root / "oloproof.yaml").read_text())
    config["concurrency"] = {"judge": judge_at_once}
    config["pricing"] = [{"model": "judge-1", "input_per_mtok": 1.0, "output_per_mtok": 10.0}]
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (root / "rubrics").mkdir()
    (root / "rubrics" / "refunded.md").write_text("PASS when the output says 'refunded'.\n")
    return root


def evaluate(root: Path, instance) -> pd.DataFrame:
    run = run_evaluation(root, ungated=True, instance=instance)
    assert run.success, run.errors
    return read_table(root, "verdicts", VERSION)


def verdict_metadata(instance, name: str = "tiny") -> dict:
    event = instance.get_latest_materialization_event(AssetKey([name, "verdicts"]))
    return {key: value.value for key, value in event.asset_materialization.metadata.items()}


def outcomes(verdicts: pd.DataFrame, criterion: str) -> dict[str, str]:
    rows = verdicts[verdicts["criterion"] == criterion]
    return dict(zip(rows["case_id"], rows["outcome"]))


def test_a_rerun_asks_the_judge_nothing_and_an_edited_rubric_re_asks_its_criterion_only(tmp_path, judge, instance):
    root = desk(tmp_path, judge.url)
    verdicts = evaluate(root, instance)
    assert len(judge.requests) == 2 * len(CASES)  # one question per case and judge
    assert {body["model"] for body in judge.requests} == {"judge-1"}
    assert outcomes(verdicts, "says_refunded") == {"c0": PASS, "c1": FAIL, "c2": PASS, "c3": FAIL}
    assert set(outcomes(verdicts, "names_the_order").values()) == {PASS}
    passed = verdicts[(verdicts["criterion"] == "says_refunded") & (verdicts["case_id"] == "c0")].iloc[0]
    assert passed["reason"] == "the output says refunded"  # the judge's rationale
    assert json.loads(passed["details"])["judge_model"] == "judge-1"

    evaluate(root, instance)  # nothing changed
    assert len(judge.requests) == 2 * len(CASES)

    # Re-recorded (another run id on every recording): every verdict is judged again, yet the
    # judge saw these very questions, so it is asked none of them.
    assert run_evaluation(root, ungated=True, instance=instance, fresh=True).success
    assert len(judge.requests) == 2 * len(CASES)
    assert verdict_metadata(instance)["verdicts_judged"] == 2 * len(CASES)
    assert verdict_metadata(instance)["judge_calls"] == 0

    (root / "rubrics" / "refunded.md").write_text("PASS when the output says 'declined'.\n")
    verdicts = evaluate(root, instance)
    asked = judge.rubrics()[2 * len(CASES):]
    assert asked == ["PASS when the output says 'declined'.\n"] * len(CASES)  # that criterion only
    assert outcomes(verdicts, "says_refunded") == {"c0": FAIL, "c1": PASS, "c2": FAIL, "c3": PASS}
    stored = Journal(judgments_path(root)).records(JudgmentRecord)
    assert len(stored) == 3 * len(CASES) and len({record.judgment_key for record in stored}) == len(stored)


def test_judge_tokens_and_cost_are_counted_apart_from_the_systems(tmp_path, judge, instance):
    root = desk(tmp_path, judge.url)
    evaluate(root, instance)
    metadata = verdict_metadata(instance)
    calls = 2 * len(CASES)
    assert metadata["judge_calls"] == len(judge.requests) == calls
    assert (metadata["judge_prompt_tokens"], metadata["judge_completion_tokens"]) == (100 * calls, 20 * calls)
    assert metadata["judge_cost_usd"] == pytest.approx(calls * (100 * 1.0 + 20 * 10.0) / 1e6)
    runs = read_table(root, "recorded_runs", VERSION)
    assert runs["model_calls"].isna().all() and runs["cost_usd"].isna().all()  # the system made no model call
    stored = Journal(judgments_path(root)).records(JudgmentRecord)
    assert {(record.judge_calls, record.judge_prompt_tokens, record.judge_completion_tokens) for record in stored} == {(1, 100, 20)}
    table = pd.read_json(judgments_path(root), lines=True)  # the journal read as the table the README shows
    assert list(table.columns) == JUDGMENTS_SCHEMA.names and len(table) == calls
    assert table["judge_cost_usd"].sum() == pytest.approx(metadata["judge_cost_usd"])


def test_a_long_rationale_is_cut_in_the_reason_and_whole_in_the_details():
    long = "the output says refunded " * 20
    record = JudgmentRecord(judgment_key="k", criterion="c", judge_model="m", passed=True, rationale=long + "\nmore", judge_calls=1)
    assert len(verdict_reason(record)) == 200 and "\n" not in verdict_reason(record)
    assert verdict_reason(record.model_copy(update={"rationale": None})) == "judge_pass"


# Answers "refunded" on its first four calls, "declined" after: trial 2 says something new.
CHANGING_DESK = """
from pathlib import Path

CALLS = Path(__file__).with_name("calls.txt")


class System:
    def __call__(self, request):
        made = len(CALLS.read_text()) if CALLS.exists() else 0
        CALLS.write_text("x" * (made + 1))
        return {"answer": f"Order {request['order']} " + ("refunded" if made < 4 else "declined")}
"""


def test_later_trials_judge_spending_is_counted_with_the_first(tmp_path, judge, instance):
    root = desk(tmp_path, judge.url)
    (root / "app.py").write_text(CHANGING_DESK)
    config = yaml.safe_load((root / "oloproof.yaml").read_text())
    config["execution"]["trials"] = 2
    (root / "oloproof.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    verdicts = evaluate(root, instance)
    assert set(outcomes(verdicts, "says_refunded").values()) == {PASS}
    trial_two = read_table(root, "trial_verdicts", VERSION)
    assert set(outcomes(trial_two, "says_refunded").values()) == {FAIL}
    # Trial 2's answers differ, so both judges have new questions for every case.
    assert len(judge.requests) == 2 * 2 * len(CASES)
    assert verdict_metadata(instance)["judge_calls"] == len(judge.requests)


def test_a_judge_answering_garbage_is_asked_once_more_then_missing_with_the_reason(tmp_path, judge, instance):
    root = desk(tmp_path, judge.url, extra_evaluators=[
        rubric_judge("garbled", judge.url, rubric_text="GARBAGE: PASS when it says 'refunded'."),
        rubric_judge("fenced", judge.url, rubric_text="FENCED: PASS when it says 'refunded'."),
    ])
    verdicts = evaluate(root, instance)
    garbled = verdicts[verdicts["criterion"] == "garbled"]
    assert set(garbled["outcome"]) == {MISSING} and set(garbled["reason"]) == {"judge_bad_answer"}
    details = json.loads(garbled.iloc[0]["details"])
    assert details["answer"] == "The assistant seems fine to me." and details["judge_calls"] == 2
    reasked = [body["messages"][-1]["content"] for body in judge.requests if "GARBAGE" in body["messages"][-1]["content"]]
    assert len(reasked) == 2 * len(CASES) and sum(text.endswith("\nReturn valid JSON only.") for text in reasked) == len(CASES)
    # A verdict in a fence among prose is read, as Oloproof reads it.
    assert outcomes(verdicts, "fenced") == {"c0": PASS, "c1": FAIL, "c2": PASS, "c3": FAIL}
    # A judge that failed is no answer to remember: the next run asks again, and only it.
    before = len(judge.requests)
    evaluate(root, instance)
    assert len(judge.requests) - before == 2 * len(CASES)
    assert all("GARBAGE" in rubric for rubric in judge.rubrics()[before:])


def test_a_judge_that_refuses_is_missing_never_a_pass(tmp_path, judge, instance):
    root = desk(tmp_path, judge.url)
    judge.refuse_with = 400
    verdicts = evaluate(root, instance)
    assert set(verdicts["outcome"]) == {MISSING} and set(verdicts["reason"]) == {"judge_error"}
    assert "HTTP 400" in json.loads(verdicts.iloc[0]["details"])["error"]
    judge.refuse_with = None
    verdicts = evaluate(root, instance)  # asked again, and answered
    assert set(verdicts["outcome"]) == {PASS, FAIL}
    assert any("judge did not answer last time" in str(value) for value in verdict_metadata(instance).values())


def test_at_most_concurrency_judge_questions_are_in_flight(tmp_path, judge):
    root = desk(tmp_path, judge.url, judge_at_once=2)
    judge.hold_for = 2  # each question waits for a second one: two overlap whenever two may
    project = load_project(root)
    cases = [case for case in load_cases(project)]
    runs = [RecordedRun(case_id=case.case_id, case_digest=case.case_digest, system_version=VERSION, status="ok",
                        output={"answer": f"Order {case.input['order']} refunded"}) for case in cases]
    frame = judge_cases(project, cases, runs, version=VERSION, judged_by_run="r1")
    assert len(judge.requests) == 2 * len(CASES) and set(frame["outcome"]) == {PASS}
    assert judge.peak == 2


def test_the_same_question_in_flight_twice_is_asked_once(tmp_path, judge):
    root = desk(tmp_path, judge.url, judge_at_once=4)
    judge.hold_for = 2  # the two judges' questions wait for each other: the twins arrive meanwhile
    project = load_project(root)
    cases = load_cases(project)
    # Every case answers alike: each judge has one question, however many cases ask it at once.
    runs = [RecordedRun(case_id=case.case_id, case_digest=case.case_digest, system_version=VERSION, status="ok",
                        output={"answer": "Order ord-0 refunded"}) for case in cases]
    twins = [case.model_copy(update={"input": {"order": "ord-0"}}) for case in cases]
    frame = judge_cases(project, twins, runs, version=VERSION, judged_by_run="r1")
    assert len(judge.requests) == 2 and set(frame["outcome"]) == {PASS}
    assert len(Journal(judgments_path(root)).records(JudgmentRecord)) == 2


# -- what the judge is shown ----------------------------------------------------------------------


def one_judge(root: Path, config: dict):
    [evaluator] = build_evaluators([config], file=root / "oloproof.yaml")
    return evaluator


def test_the_prompt_is_oloproofs_for_the_same_case(tmp_path):
    from oloproof_core.evaluators.llm_judge import RubricJudge as OloproofJudge
    from types import SimpleNamespace

    assert TEMPLATE == OloproofJudge.template
    ours = one_judge(tmp_path, rubric_judge("c", "http://127.0.0.1:1/v1", rubric_text="Be kind."))
    case = CaseRecord(case_id="c1", case_digest="sha256:" + "0" * 64, group_id="c1", input={"order": "ord-1"},
                      expected={"answer": "refunded"})
    run = RecordedRun(case_id="c1", case_digest=case.case_digest, system_version="v", status="ok", output={"answer": "refunded"})
    theirs = OloproofJudge(criterion="c", provider=SimpleNamespace(name="openai_compatible"), model="judge-1", rubric_text="Be kind.")
    context = SimpleNamespace(scenario=SimpleNamespace(input=case.input), expected=case.expected, output=run.output)
    assert ours.prompt(case, run) == theirs.template.format(rubric=theirs.rubric, **theirs.prompt_variables(context))


def test_reads_conversation_shows_the_user_and_assistant_turns_in_order(tmp_path, judge):
    judge_config = rubric_judge("kind", judge.url, rubric_text="PASS when the assistant says 'sorry'.", reads="conversation")
    evaluator = one_judge(tmp_path, judge_config)
    case = CaseRecord(case_id="c1", case_digest="sha256:" + "0" * 64, group_id="c1", input={"persona": "p"})
    calling = {"message": {"role": "assistant", "content": "Looking.", "tool_calls": [{"id": "1", "function": {"name": "lookup_order"}}]}}
    steps = [Step(kind="user", text="My order never came."), Step(kind="model", text="Looking.", result=calling),
             Step(kind="tool_call", tool="lookup_order", arguments={}),
             Step(kind="model", text="I am sorry, let me look."), Step(kind="user", text="Thanks."),
             Step(kind="model", text="Refund issued.")]
    run = RecordedRun(case_id="c1", case_digest=case.case_digest, system_version="v", status="ok",
                      output={"answer": "Refund issued."}, trajectory=Trajectory(steps=steps))
    verdict = evaluator.judge_case(case, JudgingContext(cases={"c1": case}, recordings={"c1": run}))
    assert verdict.outcome == PASS  # "sorry" is only in an earlier turn, not in the answer
    assert sections(judge.requests[-1]["messages"][-1]["content"])["output"] == (
        "User: My order never came.\nAssistant: I am sorry, let me look.\nUser: Thanks.\nAssistant: Refund issued."
    )
    silent = run.model_copy(update={"trajectory": Trajectory()})
    verdict = evaluator.judge_case(case, JudgingContext(cases={"c1": case}, recordings={"c1": silent}))
    assert (verdict.outcome, verdict.reason) == (MISSING, "no_conversation")


# -- Oloproof's keys ------------------------------------------------------------------------------


OLOPROOF_PROJECT = """\
version: 1
project: support-desk
dataset: data/cases.jsonl
system:
  name: desk
  version: 1.0.0
  callable: app:System
concurrency:
  system: 2
  judge: 3
pricing:
  - {model: judge-1, input_per_mtok: 0.5, output_per_mtok: 1.5}
evaluators:
  - type: rubric_judge
    criterion: says_refunded
    provider: openai_compatible
    model: judge-1
    base_url: URL
    api_key_env: null
    rubric_file: rubrics/refunded.md
    temperature: 0
    max_tokens: 256
    timeout_s: 30
    on_execution_error: missing
  - {type: contains, criterion: mentions_refund, field: answer, expected_field: answer}
  - {type: regex, criterion: names_an_order, field: answer, pattern: 'ord-\\d+'}
  - {type: regex, criterion: no_card_number, field: answer, pattern: '\\b\\d{16}\\b', pass_if: no_match}
  - type: json_schema
    criterion: answer_is_text
    field: answer
    schema: {type: string, minLength: 1}
"""


def test_an_oloproof_project_with_these_evaluators_loads_and_runs_unchanged(tmp_path, judge, instance):
    from oloproof_core.config import load_project_config

    root = write_project(tmp_path / "desk", app=DESK, cases=CASES, rules=[])
    (root / "oloproof.yaml").write_text(OLOPROOF_PROJECT.replace("URL", judge.url))
    (root / "rubrics").mkdir()
    (root / "rubrics" / "refunded.md").write_text("PASS when the output says 'refunded'.\n")
    load_project_config(root / "oloproof.yaml", keyed=False)  # Oloproof's own loader takes the file
    project = load_project(root)
    assert project.criteria() == ["says_refunded", "mentions_refund", "names_an_order", "no_card_number", "answer_is_text"]
    verdicts = evaluate(root, instance)
    assert outcomes(verdicts, "mentions_refund") == outcomes(verdicts, "says_refunded") == {"c0": PASS, "c1": FAIL, "c2": PASS, "c3": FAIL}
    for criterion in ("names_an_order", "no_card_number", "answer_is_text"):
        assert set(outcomes(verdicts, criterion).values()) == {PASS}


@pytest.mark.parametrize("keys, says", [
    ({"provider": "openai"}, "provider 'openai' is an Oloproof setting that oloproof_pipeline does not support yet"),
    ({"provider": "anthropic"}, "provider 'anthropic' is an Oloproof setting that oloproof_pipeline does not support yet"),
    ({"rubric_file": "rubrics/x.md"}, "exactly one of rubric_file or rubric_text"),
    ({"media": "output"}, "media"),
])
def test_what_is_not_supported_is_refused_in_one_line(tmp_path, keys: dict, says: str):
    config = {**rubric_judge("c", "http://127.0.0.1:1/v1", rubric_text="x"), **keys}
    with pytest.raises(ProjectError) as raised:
        one_judge(tmp_path, config)
    [problem] = raised.value.problems
    assert says in problem and "\n" not in problem


def test_the_key_is_oloproofs_sent_when_set_and_needed_only_off_this_machine(tmp_path, judge, monkeypatch):
    case = CaseRecord(case_id="c1", case_digest="sha256:" + "0" * 64, group_id="c1", input={"order": "ord-2"})
    run = RecordedRun(case_id="c1", case_digest=case.case_digest, system_version="v", status="ok", output={"answer": "refunded"})
    context = JudgingContext(cases={"c1": case}, recordings={"c1": run})
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    local = one_judge(tmp_path / "a", rubric_judge("c", judge.url, rubric_text="PASS when it says 'refunded'."))
    assert local.judge_case(case, context).outcome == PASS and judge.authorizations == [None]
    monkeypatch.setenv("JUDGE_KEY", "secret-1")
    keyed = one_judge(tmp_path / "b", rubric_judge("c", judge.url, rubric_text="PASS when it says 'refund'.", api_key_env="JUDGE_KEY"))
    assert keyed.judge_case(case, context).outcome == PASS and judge.authorizations[-1] == "Bearer secret-1"
    # Oloproof's default endpoint is OpenAI's, which needs a key: without one, no request goes out.
    remote_config = rubric_judge("c", judge.url, rubric_text="x")
    del remote_config["base_url"]
    remote = one_judge(tmp_path / "c", remote_config)
    assert remote.config.base_url == "https://api.openai.com/v1"
    verdict = remote.judge_case(case, context)
    assert (verdict.outcome, verdict.reason) == (MISSING, "judge_error")
    assert "environment variable OPENAI_API_KEY is not set" in verdict.details["error"]
    assert len(judge.requests) == 2


def test_a_missing_rubric_file_fails_the_load_naming_it(tmp_path):
    with pytest.raises(ProjectError) as raised:
        one_judge(tmp_path, rubric_judge("c", "http://127.0.0.1:1/v1", rubric_file="rubrics/none.md"))
    assert "evaluators[0].rubric_file: rubric file" in raised.value.problems[0] and "does not exist" in raised.value.problems[0]
