"""`rubric_judge`: a model reads the answer (or the whole conversation) against a rubric and
says PASS or FAIL, with its rationale as the verdict's reason (Oloproof's `rubric_judge`).

```yaml
- type: rubric_judge
  criterion: no_false_refund_claim
  provider: openai_compatible
  base_url: http://127.0.0.1:8765/v1
  model: judge-1
  rubric_file: rubrics/refunds.md      # or rubric_text: "..."
  reads: conversation                  # ours: `output` (the default, Oloproof's) or `conversation`
```

Oloproof's keys and meaning: the judge gets one user message, Oloproof's TEMPLATE filled in
(the rubric, the case's input, expected and output as sorted JSON) and answers
`{"pass": true|false, "rationale": "..."}`; an answer with no such verdict is asked once
more ("Return valid JSON only."), then it is an error. `reads: conversation` puts the
trajectory's user and assistant text, turn by turn, where the output goes.

Calls go through `endpoints/chat.py`'s `ChatModel` (the agent's client and the endpoint's
limiter), at most `concurrency.judge` at once (judging.py runs them in threads). Each judgment
is kept in the judgments journal by the digest of what the judge saw (`store/judgments.py`):
the same question is never asked twice, and an edited rubric asks again for its criterion
only. A judge that errors or answers out of format is MISSING with the reason, never PASS, and
its verdict is not reused: the next run asks again. Its tokens and cost are counted apart from
the system's (`judge_*`). Providers `openai` and `anthropic` are refused until there is a
client for them; so are Oloproof's media keys other than `media: none`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import threading
from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Literal

from urllib.parse import urlparse

from pydantic import Field, model_validator

from ..endpoints.chat import ChatModel, ModelUnavailable
from ..model.cases import CaseRecord
from ..model.config import ChatModelConfig, ProjectConfig
from ..model.digests import digest
from ..model.errors import ProjectError
from ..model.judgments import JudgmentRecord
from ..model.outcomes import FAIL, MISSING, PASS, Verdict
from ..model.records import RecordedRun
from ..model.trajectory import MODEL_STEP, USER_STEP, Step
from ..store.judgments import judgment_store
from .base import Evaluator, EvaluatorConfig, JudgingContext

# Oloproof's prompt (oloproof_core/evaluators/llm_judge.py), word for word: a judge stand-in
# written for Oloproof answers it here too.
TEMPLATE = """You are an evaluation judge. Apply the rubric and return JSON only.
Rubric:
{rubric}

Input:
{input}

Expected:
{expected}

Output:
{output}

Return exactly: {{"pass": true|false, "rationale": "..."}}
"""
# What Oloproof adds to the prompt when it asks a second time.
REASK = "\nReturn valid JSON only."
NOT_YET = "is an Oloproof setting that oloproof_pipeline does not support yet"
JUDGE_ERROR, JUDGE_BAD_ANSWER, NO_CONVERSATION = "judge_error", "judge_bad_answer", "no_conversation"
SHOWN_ANSWER_CHARS = 500
DEFAULT_BASE_URL, DEFAULT_KEY_ENV = "https://api.openai.com/v1", "OPENAI_API_KEY"
SHOWN_REASON_CHARS = 200


class RubricJudgeConfig(EvaluatorConfig):
    criterion: str
    provider: Literal["anthropic", "openai", "openai_compatible"]
    model: str = Field(min_length=1)
    rubric_file: str | None = None
    rubric_text: str | None = None
    api_key_env: str | None = None
    # Oloproof's defaults: OpenAI's API, its key in OPENAI_API_KEY.
    base_url: str = Field(default=DEFAULT_BASE_URL, pattern=r"^https?://")
    temperature: float = 0
    max_tokens: int = Field(default=512, ge=1)
    timeout_s: float = Field(default=60.0, gt=0)
    # Oloproof's media keys: only their defaults (a text judge) are supported here.
    media: Literal["none", "input", "output", "all"] = "none"
    audio: Literal["transcribe", "native"] = "transcribe"
    transcriber: dict[str, Any] | None = None
    video_frames: int | list[float] = 4
    # Ours: what goes where the template says Output.
    reads: Literal["output", "conversation"] = "output"

    @model_validator(mode="after")
    def _usable_here(self) -> "RubricJudgeConfig":
        if (self.rubric_file is None) == (self.rubric_text is None):
            raise ValueError("a rubric_judge needs exactly one of rubric_file or rubric_text")
        if self.rubric_text is not None and not self.rubric_text.strip():
            raise ValueError("rubric_text must not be empty")
        if self.provider != "openai_compatible":
            raise ValueError(f"provider {self.provider!r} {NOT_YET}: use provider: openai_compatible with its base_url")
        if self.media != "none" or self.transcriber is not None:
            raise ValueError(f"a judge that sees media (media, transcriber) {NOT_YET}")
        return self


def is_loopback(url: str) -> bool:
    host = urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parsed_verdict(text: str | None) -> dict[str, Any] | None:
    """Oloproof's reading of a judge's answer: the top-level JSON objects in it (fences and prose
    allowed) with a boolean `pass`; none, or two that disagree, is no verdict."""
    if not text:
        return None
    decoder = json.JSONDecoder()
    verdicts: list[dict[str, Any]] = []
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            index = text.find("{", index + 1)
            continue
        if isinstance(value, dict) and isinstance(value.get("pass"), bool):
            verdicts.append(value)
        index = text.find("{", end)
    if not verdicts or len({verdict["pass"] for verdict in verdicts}) > 1:
        return None
    return verdicts[0]


def told_the_user(step: Step) -> str | None:
    """What a model turn told the user: its text, unless it was a turn calling tools."""
    message = step.result.get("message") if isinstance(step.result, dict) else None
    if isinstance(message, dict) and message.get("tool_calls"):
        return None
    return step.text


def transcript(recording: RecordedRun) -> str:
    """The conversation as the judge reads it: each user message and each answer the user
    was told (a model turn that called no tool), in order."""
    lines = []
    for step in recording.trajectory.steps if recording.trajectory else []:
        # A simulated user's turn; a `message` step with role `user` is one too.
        if step.kind == USER_STEP or (step.kind == "message" and step.role == "user"):
            text, speaker = step.text, "User"
        elif step.kind == MODEL_STEP or step.kind == "message":
            text, speaker = told_the_user(step), "Assistant"
        else:
            continue
        if text:
            lines.append(f"{speaker}: {text}")
    return "\n".join(lines)


class JudgeFailed(Exception):
    """No verdict from the judge: `reason` is the verdict's, `details` what a person needs."""

    def __init__(self, reason: str, details: dict[str, Any]):
        super().__init__(reason)
        self.reason, self.details = reason, details


class RubricJudge(Evaluator):
    type: ClassVar[str] = "rubric_judge"
    config_model: ClassVar[type[EvaluatorConfig]] = RubricJudgeConfig
    reads_answer: ClassVar[bool] = True
    # Its judgments call a model: judging runs them in threads, `concurrency.judge` at once.
    calls_model: ClassVar[bool] = True
    locate_key: ClassVar[str] = "rubric_file"
    config: RubricJudgeConfig

    def __init__(self, config: RubricJudgeConfig):
        super().__init__(config)
        self.rubric: str | None = config.rubric_text
        self._project_root: Path | None = None
        self._calls_at_once = 4
        self._rate = None
        self._model: ChatModel | None = None
        self._model_lock = threading.Lock()
        # What this judge spent live (calls, tokens, dollars) since it was built.
        self.spent: Counter = Counter()

    # -- set-up --------------------------------------------------------------------------------

    def project_code_files(self, project_root: Path) -> list[Path]:
        return [] if self.config.rubric_file is None else [project_root / self.config.rubric_file]

    def locate(self, project_root: Path, where: str) -> None:
        """Called by the registry: the rubric file read now, so a missing one fails the load."""
        self._project_root = project_root
        if self.config.rubric_file is None:
            return
        path = project_root / self.config.rubric_file
        try:
            self.rubric = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ProjectError(f"{where}: rubric file {path} does not exist") from None
        except (OSError, UnicodeDecodeError) as error:
            raise ProjectError(f"{where}: rubric file {path} cannot be read ({error})") from None
        if not self.rubric.strip():
            raise ProjectError(f"{where}: rubric file {path} is empty")

    def bind(self, config: ProjectConfig) -> None:
        """The project's settings a judge follows: `concurrency.judge`, and the judge model's price."""
        self._calls_at_once = config.concurrency.judge
        self._rate = next((rate for rate in config.pricing if rate.model == self.config.model), None)

    def chat_model(self) -> ChatModel:
        """The judge's endpoint. As in Oloproof, the key is read when the judge is first asked
        and sent when set; a server on this machine needs none, any other does (else each
        judgment is a `judge_error`, never a request sent without credentials)."""
        with self._model_lock:
            if self._model is None:
                key_env = self.config.api_key_env or DEFAULT_KEY_ENV
                key = os.environ.get(key_env) or None
                if key is None and not is_loopback(self.config.base_url):
                    raise ModelUnavailable(
                        f"environment variable {key_env} is not set; a key is needed for {self.config.base_url}, "
                        "which is not a server on this machine"
                    )
                settings = ChatModelConfig(
                    base_url=self.config.base_url, name=self.config.model, api_key_env=key_env,
                    temperature=self.config.temperature, request_timeout_s=self.config.timeout_s,
                )
                self._model = ChatModel(settings, key, self._calls_at_once)
            return self._model

    # -- judging -------------------------------------------------------------------------------

    def prompt(self, case: CaseRecord, recording: RecordedRun) -> str:
        if self.config.reads == "conversation":
            output = transcript(recording)
        else:
            output = json.dumps(recording.output, sort_keys=True)
        return TEMPLATE.format(
            rubric=self.rubric,
            input=json.dumps(case.input, sort_keys=True),
            expected=json.dumps(case.expected, sort_keys=True),
            output=output,
        )

    def judgment_key(self, prompt: str) -> str:
        """The digest of what the judge sees: its settings and the prompt (rubric and text)."""
        settings = self.config.model_dump(include={"provider", "base_url", "model", "temperature", "max_tokens"})
        return digest("rubric_judgment/v1", {**settings, "prompt": prompt})

    def reusable(self, verdict: Verdict) -> bool:
        """A judge that failed is asked again on the next run, not remembered as MISSING."""
        return verdict.reason not in (JUDGE_ERROR, JUDGE_BAD_ANSWER)

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        if self.config.reads == "conversation" and not transcript(recording):
            return self.verdict(case, MISSING, NO_CONVERSATION, {"error": "the trajectory holds no user or assistant text"})
        if self._project_root is None:
            raise ProjectError(f"evaluator {self.criterion!r}: the rubric judge was built without its project folder")
        prompt = self.prompt(case, recording)
        key = self.judgment_key(prompt)
        try:
            judgment, reused = judgment_store(self._project_root).get_or_make(key, lambda: self.ask(prompt, key))
        except JudgeFailed as failure:
            return self.verdict(case, MISSING, failure.reason, failure.details)
        details = {
            "rationale": judgment.rationale, "judgment_key": key, "judge_model": judgment.judge_model,
            "judgment_reused": reused,
        }
        return self.verdict(case, PASS if judgment.passed else FAIL, verdict_reason(judgment), details)

    def ask(self, prompt: str, key: str) -> JudgmentRecord:
        """The judge's verdict on `prompt`, asked once more if its first answer has none."""
        answers: list[dict[str, Any]] = []
        try:
            for content in (prompt, prompt + REASK):
                answers.append(self.chat_model().complete(self.request(content)))
                verdict = parsed_verdict(answers[-1]["message"].get("content"))
                if verdict is not None:
                    break
        except ModelUnavailable as error:
            raise JudgeFailed(JUDGE_ERROR, {"error": str(error)}) from None
        finally:
            self.count(answers)
        if verdict is None:
            text = answers[-1]["message"].get("content") or ""
            raise JudgeFailed(JUDGE_BAD_ANSWER, {
                "error": "judge response has no single JSON verdict with a boolean pass field (asked twice)",
                "answer": text[:SHOWN_ANSWER_CHARS], "judge_calls": len(answers),
            })
        rationale = verdict.get("rationale")
        prompt_tokens, completion_tokens = tokens(answers, "prompt_tokens"), tokens(answers, "completion_tokens")
        return JudgmentRecord(
            judgment_key=key, criterion=self.criterion, judge_model=self.config.model, passed=verdict["pass"],
            rationale=None if rationale is None else str(rationale), judge_calls=len(answers),
            judge_prompt_tokens=prompt_tokens, judge_completion_tokens=completion_tokens,
            judge_cost_usd=self.cost(prompt_tokens, completion_tokens),
        )

    def request(self, content: str) -> dict[str, Any]:
        return {
            "model": self.config.model,
            "messages": [{"role": "user", "content": content}],
            "temperature": self.config.temperature,
            "max_tokens": self.config.max_tokens,
        }

    def cost(self, prompt_tokens: int | None, completion_tokens: int | None) -> float | None:
        if self._rate is None or prompt_tokens is None and completion_tokens is None:
            return None
        return self._rate.usd(input_tokens=prompt_tokens or 0, output_tokens=completion_tokens or 0)

    def count(self, answers: list[dict[str, Any]]) -> None:
        """What the calls cost, kept apart from the system's (summed in the verdicts' metadata)."""
        prompt_tokens, completion_tokens = tokens(answers, "prompt_tokens"), tokens(answers, "completion_tokens")
        cost = self.cost(prompt_tokens, completion_tokens)
        with self._model_lock:
            self.spent["judge_calls"] += len(answers)
            self.spent["judge_prompt_tokens"] += prompt_tokens or 0
            self.spent["judge_completion_tokens"] += completion_tokens or 0
            if cost is not None:
                self.spent["judge_cost_usd"] += cost


def verdict_reason(judgment: JudgmentRecord) -> str:
    """The judge's rationale as the verdict's reason: its first line, cut to a table cell's
    length (the whole of it is in the details)."""
    lines = (judgment.rationale or "").strip().splitlines()
    if not lines:
        return "judge_pass" if judgment.passed else "judge_fail"
    first = lines[0].strip()
    return first if len(first) <= SHOWN_REASON_CHARS else first[: SHOWN_REASON_CHARS - 3] + "..."


def tokens(answers: list[dict[str, Any]], name: str) -> int | None:
    """A token count summed over the calls that reported one (None when none did: not zero)."""
    given = [answer["usage"].get(name) for answer in answers if answer.get("usage", {}).get(name) is not None]
    return sum(int(each) for each in given) if given else None
