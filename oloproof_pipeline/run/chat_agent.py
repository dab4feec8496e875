"""`system.kind: chat_agent`: a model-driven agent with no Python of the user's but its tools.

The loop: the prompt and the case's input go to an OpenAI-compatible chat-completions endpoint
with the tools as function schemas; each tool call the model asks for is dispatched through
the tool box (so state, trajectory, checkpoints, faults and events work as for a scripted
agent) and its result handed back, until the model answers without a tool call (the case's
output) or `max_turns` model turns have passed (`truncated`).

With `system.simulated_user` the case is a conversation (run/simulated_user.py): the simulated
user opens, the loop above answers each of its messages (up to `max_turns` model turns per
answer), and the user answers back, until it stops (its goal met, it left, or its turn budget
spent); the last answer is the case's output. Each user request is a step of kind `user`,
answered in a replay from the recording by digest exactly as the model turns are.

Every model turn is a step of kind `model` in the trajectory, holding the digest of the request
and the response. A replay re-sends the same requests and is answered from the recording by
digest: a control replay reproduces the recording by construction, with no model call; a
faulted replay's requests differ from the fault on (the model sees the injected error), so
from there the model is called live. A request the endpoint refuses (connection refused, 429,
5xx, a timeout) is tried again with backoff a bounded number of times, then fails the case
(status `error`: every verdict MISSING, never a pass). The case's deadline
(`execution.timeout_s`) interrupts a request or a backoff like any other work of the system.

The tools (`system.tools: "module:attr"`) name a class or factory (called once per sandbox with
no arguments) whose instance holds the state and has:
- `tool_schemas`: {tool name: {"description": ..., "parameters": <JSON schema>}};
- a method of each tool's name, called with the model's arguments as keywords;
- `reset(state)` and `snapshot()`, and optionally `apply_event(event)` for scripted events.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..model.config import PROJECT_FILE, ChatAnswerConfig, ChatModelConfig, SimulatedUserConfig, SystemConfig
from ..model.digests import digest
from ..model.errors import ProjectError
from ..model.modules import load_callable
from ..model.trajectory import MODEL_STEP, Step
from ..endpoints.chat import SHOWN_BODY_CHARS, ChatModel, api_key
from ..endpoints.deadline import check_deadline
from ..endpoints.ledger import Ledger
from .simulated_user import RecordedResponses, SimulatedUser, persona_of, simulator_model
from .toolbox import ToolBox

REQUEST_TAG = "chat_request/v1"


class ChatAgentSettings(BaseModel):
    """What the worker needs of `system` to build the agent (plain JSON on the way there)."""

    model_config = ConfigDict(extra="forbid")

    model: ChatModelConfig
    prompt: str
    max_turns: int
    answer: ChatAnswerConfig
    # Oloproof's `concurrency.system`: cases (so requests) in flight at once, per endpoint.
    requests_at_once: int = 1
    # The run's budget ledger, charged at each model request (endpoints/ledger.py); None: no budget.
    budget: dict[str, Any] | None = None
    # Oloproof's `system.simulated_user`: each case a conversation with the persona in its input.
    simulated_user: SimulatedUserConfig | None = None


def chat_agent_settings(system: SystemConfig, requests_at_once: int = 1) -> dict[str, Any] | None:
    """The settings a chat agent's worker builds it from (None for any other kind)."""
    if not system.is_chat_agent:
        return None
    settings = system.model_dump(mode="json", include={"model", "prompt", "max_turns", "answer", "simulated_user"})
    return {**settings, "requests_at_once": requests_at_once}


def chat_agent_class(project_root: Path, tools: str, settings: dict[str, Any]) -> type:
    """A ChatAgent class bound to one project's tools and settings: built, as any system
    class is, with no arguments."""
    bound = {"project_root": project_root, "tools_name": tools, "settings": ChatAgentSettings.model_validate(settings)}
    return type("ChatAgent", (ChatAgent,), bound)


# -- the agent ------------------------------------------------------------------------------


class ChatAgent:
    """The system under test for `kind: chat_agent` (a subclass bound by `chat_agent_class`)."""

    project_root: Path
    tools_name: str
    settings: ChatAgentSettings

    def __init__(self) -> None:
        where = f"{self.project_root / PROJECT_FILE}: system"
        # A class, or a factory: called with no arguments, once per sandbox.
        self.environment = load_callable(self.project_root, self.tools_name, where=f"{where}.tools")()
        self.schemas = tool_schemas(self.environment, f"{where}.tools ({self.tools_name})")
        self.toolbox = ToolBox({name: getattr(self.environment, name) for name in self.schemas})
        self.prompt = read_prompt(self.project_root / self.settings.prompt, f"{where}.prompt")
        key = api_key(self.settings.model, f"{where}.model.api_key_env")
        ledger = Ledger.from_json(self.settings.budget) if self.settings.budget is not None else None
        self.model = ChatModel(self.settings.model, key, self.settings.requests_at_once, ledger=ledger)
        self._user_model: ChatModel | None = None

    # -- the sandbox: the tools' own state ------------------------------------------------

    def reset(self, state: Any) -> None:
        self.environment.reset(state)

    def snapshot(self) -> Any:
        return self.environment.snapshot()

    def apply_event(self, event: dict[str, Any]) -> Any:
        handler = getattr(self.environment, "apply_event", None)
        if not callable(handler):
            raise AttributeError(f"{self.tools_name} has no apply_event(event) for the case's scripted events")
        return handler(event)

    # -- one case ---------------------------------------------------------------------------

    def __call__(self, case_input: Any) -> Any:
        recorded = RecordedResponses(self.toolbox.replaying)
        messages: list[dict[str, Any]] = [{"role": "system", "content": self.prompt}]
        if self.settings.simulated_user is not None:
            return self.converse(case_input, messages, recorded)
        messages.append({"role": "user", "content": user_text(case_input)})
        answered, content = self.answer(messages, recorded)
        if not answered:
            self.toolbox.finish("truncated")
            return None
        self.toolbox.finish("success")
        return self.output(content)

    def converse(self, case_input: Any, messages: list[dict[str, Any]], recorded: RecordedResponses) -> Any:
        """The conversation with the case's simulated user: the user opens, each of its
        messages is answered, until it stops; the last answer is the output."""
        user = self.simulated_user(case_input)
        said: str | None = user.opening()
        content = None
        while said is not None:
            messages.append({"role": "user", "content": said})
            answered, content = self.answer(messages, recorded)
            if not answered:
                self.toolbox.finish("truncated")
                return None
            said = user.reply(str(content or ""))
        self.toolbox.finish("success")
        return self.output(content)

    def answer(self, messages: list[dict[str, Any]], recorded: RecordedResponses) -> tuple[bool, Any]:
        """(True, the final message's text) once the model answers without a tool call, each
        call it asks for dispatched; (False, None) after `max_turns` model turns without one."""
        for _ in range(self.settings.max_turns):
            body = self.request(messages)
            request_digest = digest(REQUEST_TAG, body)
            turn = recorded.take(request_digest) or {**self.model.complete(body), "served": False}
            turn["request_digest"] = request_digest
            message = turn["message"]
            self.toolbox.note(Step(kind=MODEL_STEP, text=message.get("content"), result=turn))
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return True, message.get("content")
            for call in calls:
                result = self.dispatch(call["function"]["name"], call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result_text(result)})
        return False, None

    def simulated_user(self, case_input: Any) -> SimulatedUser:
        """This case's simulated user, answered in a replay from the recording's user requests."""
        config = self.settings.simulated_user
        assert config is not None
        persona = persona_of(config, case_input)
        if self._user_model is None:  # built at the first conversation: a missing key costs cases, not the sandbox
            self._user_model = simulator_model(config, self.settings.requests_at_once)
        recorded = RecordedResponses(self.toolbox.replaying, user=True)
        return SimulatedUser(config, persona, seed_of=case_input, model=self._user_model, served=recorded.take, note=self.toolbox.note)

    def request(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.settings.model.name,
            "messages": messages,
            "tools": [
                {"type": "function", "function": {"name": name, **schema}} for name, schema in sorted(self.schemas.items())
            ],
            "temperature": self.settings.model.temperature,
        }
        if self.settings.answer.format == "json":
            body["response_format"] = {"type": "json_object"}
        return body

    def dispatch(self, name: Any, arguments_text: Any) -> Any:
        """Run the tool the model asked for through the tool box; a call the model got wrong
        is an error result it sees, as a real agent runtime would hand it back."""
        check_deadline()
        if name not in self.schemas:
            return {"error": f"no tool named {name!r} (tools: {', '.join(sorted(self.schemas))})"}
        try:
            arguments = json.loads(arguments_text or "{}")
        except (TypeError, ValueError):
            arguments = None
        if not isinstance(arguments, dict):
            return {"error": f"the arguments of {name} are not a JSON object: {arguments_text!r}"}
        return self.toolbox.call(name, **arguments)

    def output(self, content: Any) -> Any:
        """The final message as the case's output: under the answer field, or the JSON object
        it is (JSON mode). A final message that is not one is the case's error."""
        answer = self.settings.answer
        if answer.format == "text":
            return {answer.field: content or ""}
        try:
            value = json.loads(content or "")
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ValueError(f"the model's final message is not a JSON object: {str(content)[:SHOWN_BODY_CHARS]!r}")
        return value


def user_text(case_input: Any) -> str:
    """The case's input as the user's message: its text, or its JSON."""
    if isinstance(case_input, str):
        return case_input
    return json.dumps(case_input, ensure_ascii=False, sort_keys=True)


def result_text(result: Any) -> str:
    return json.dumps(result, ensure_ascii=False, sort_keys=True, default=repr)


def tool_schemas(environment: Any, where: str) -> dict[str, dict[str, Any]]:
    """The tools' schemas, each with a method of its name to run it."""
    schemas = getattr(environment, "tool_schemas", None)
    if not isinstance(schemas, dict) or not schemas:
        raise ProjectError(f"{where}: has no 'tool_schemas' ({{tool name: {{description, parameters}}}})")
    problems = []
    for name, schema in schemas.items():
        if not isinstance(schema, dict) or not isinstance(schema.get("parameters", {}), dict):
            problems.append(f"{where}: tool_schemas[{name!r}] is not {{description, parameters: <JSON schema>}}")
        elif not callable(getattr(environment, str(name), None)):
            problems.append(f"{where}: tool_schemas names {name!r}, but there is no method {name}(...) to run it")
    for method in ("reset", "snapshot"):
        if not callable(getattr(environment, method, None)):
            problems.append(f"{where}: has no {method}() method (the runner resets the state before each case and reads it after)")
    if problems:
        raise ProjectError(problems)
    return {str(name): dict(schema) for name, schema in schemas.items()}


def read_prompt(path: Path, where: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ProjectError(f"{where}: cannot read {path}: {error}") from None
