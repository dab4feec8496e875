"""A simulated user: a model that plays each case's persona (Oloproof's `system.simulated_user`).

The protocol and the prompts are Oloproof 0.1.0a20's (`oloproof_core/execution/simulated_user.py`),
so a persona meets the same user here as there: `opening()` is the persona's `opening` or the
model's first message; `reply(answer)` takes the system's answer and first asks, on its own and at
temperature 0, whether the answer met the goal (`yes` ends the conversation, `goal_reached`), then
stops at the turn budget (`turn_limit`), else asks the model for the next message (one holding
`[LEAVE]` ends it, `user_left`).

Every request goes through the chat-completions client (endpoints/chat.py: the agent's limiter,
retries and the case's deadline) and is recorded as a step of kind `user` holding the request's
digest, so a replay is answered from the recording while the conversation is the recorded one and
asks the model live once it is not (after a fault, say). Its tokens are kept apart from the
system's (`Trajectory.user_usage`). A simulator that fails (no answer after the retries, an
empty message, a goal check that says neither yes nor no) raises `SimulatedUserFailed`: the
case is an error, so every verdict of it is MISSING, never a pass.

The simulator's settings are an instrument's, not the system's: `simulator_digest` is part of
each recording's cache key (run/recording.py), never of the system's version or code.
"""

from __future__ import annotations

import json
import os
import threading
from collections import defaultdict, deque
from typing import Any, Callable
from urllib.parse import urlparse

from pydantic import ValidationError

from ..endpoints.chat import ChatModel, ModelUnavailable, api_key
from ..model.config import Persona, SimulatedUserConfig
from ..model.digests import digest
from ..model.trajectory import GOAL_CHECK, USER_MESSAGE, USER_STEP, Step, Trajectory
from .toolbox import ReplayScript, ToolBox

REQUEST_TAG = "simulated_user_request/v1"
# Bump when the prompts or the protocol change, so earlier conversations are not reused.
IMPLEMENTATION_VERSION = 1
LEAVE = "[LEAVE]"
DEFAULT_KEY_ENV = "OPENAI_API_KEY"

# Oloproof's prompts, word for word (its IMPLEMENTATION_VERSION 2).
PROMPT = """You are playing a user of an AI assistant, so that the assistant can be tested. \
Stay in character for the whole conversation and never say that you are simulated.

Who you are:
{description}

What you want from this conversation:
{goal}

What you know. Share a fact only when the assistant asks for it or the conversation needs it; \
never volunteer them all at once:
{facts}
{instructions}
Write only your next message to the assistant, as this person would write it: no labels, no \
quotation marks, no narration. In your first message, say what you want, and keep the facts until \
they are asked for.
If you would give up and leave, reply with exactly {leave}."""

GOAL_CHECK_PROMPT = """Conversation:
{transcript}

The user's goal: {goal}

Question: in its last message, did the assistant accomplish the user's goal? Answer yes or no."""

START = "(You start the conversation. Write your first message to the assistant.)"

# A recorded request's answer, served by request digest (None: ask the model).
Served = Callable[[str], "dict[str, Any] | None"]


class SimulatedUserFailed(Exception):
    """The simulated user could not go on: the case is an error (MISSING), never a pass."""


class RecordedResponses:
    """A recording's model turns (or its simulated user's requests) by request digest: what
    a replay is answered from."""

    def __init__(self, replay: ReplayScript | None, *, user: bool = False):
        self._turns: dict[str, deque[dict[str, Any]]] = defaultdict(deque)
        if replay is not None and replay.recording is not None:
            recording = replay.recording
            for turn in recording.user_requests() if user else recording.model_turns():
                self._turns[turn.get("request_digest")].append(turn)

    def take(self, request_digest: str) -> dict[str, Any] | None:
        """The recorded answer to this very request (each served once), or None."""
        waiting = self._turns.get(request_digest)
        if not waiting:
            return None
        return {**waiting.popleft(), "served": True}


def simulator_digest(config: SimulatedUserConfig | None) -> str | None:
    """What the conversations a simulator plays depend on (its model, prompts, settings; never
    its key, timeout or retries): part of each recording's cache key (None: no simulated user)."""
    if config is None:
        return None
    settings = config.model_dump(mode="json", exclude={"api_key_env", "timeout_s", "retries", "backoff_s"})
    prompts = [PROMPT, GOAL_CHECK_PROMPT, START, LEAVE]
    return digest("simulated_user/v1", {"settings": settings, "prompts": prompts, "implementation": IMPLEMENTATION_VERSION})


def persona_of(config: SimulatedUserConfig, case_input: Any) -> Persona:
    """The persona a case declares in its input, or the case's error saying what is wrong."""
    field = config.persona_field
    if not isinstance(case_input, dict) or field not in case_input:
        raise SimulatedUserFailed(f"a case for a simulated user needs a {field!r} object in its input")
    try:
        return Persona.model_validate(case_input[field])
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in item['loc']) or 'persona'}: {item['msg']}" for item in error.errors()
        )
        raise SimulatedUserFailed(f"the case's input.{field} is not a persona: {problems}") from None


def simulator_model(config: SimulatedUserConfig, requests_at_once: int) -> ChatModel:
    """The simulator's endpoint, through the same client and limiter as the agent's. Without
    `api_key_env`, Oloproof's default variable is read; a server on this machine needs none."""
    where = "oloproof.yaml: system.simulated_user.api_key_env"
    chat = config.as_chat_model()
    if config.api_key_env is not None:
        key = api_key(chat, where)
    else:
        key = os.environ.get(DEFAULT_KEY_ENV)
        host = urlparse(config.endpoint).hostname or ""
        if not key and host not in ("127.0.0.1", "localhost", "::1"):
            raise SimulatedUserFailed(f"{where}: {DEFAULT_KEY_ENV} is not set, and {config.endpoint} is not on this machine")
    return ChatModel(chat, key, requests_at_once)


class SimulatedUser:
    """One case's simulated user: `opening()`, then `reply(answer)` until it gives None."""

    def __init__(
        self, config: SimulatedUserConfig, persona: Persona, *, seed_of: Any, model: ChatModel, served: Served,
        note: Callable[[Step], None],
    ):
        self.config = config
        self.persona = persona
        self.max_turns = persona.max_turns or config.max_turns
        # Oloproof's seed, from the case: a provider that takes one plays the same user again.
        self.seed = int(digest("simulated_user_seed", seed_of)[7:15], 16)
        self._model = model
        self._served = served
        self._note = note
        self._asked: list[str] = []
        self._answers: list[str] = []
        self.ended: str | None = None
        # The first failure, kept so the case fails even if a system catches it (as Oloproof does).
        self.failure: SimulatedUserFailed | None = None

    @property
    def turns(self) -> int:
        return len(self._asked)

    def opening(self) -> str:
        """The user's first message (the persona's `opening`, when it has one)."""
        return self._kept(self._opening)

    def reply(self, answer: Any) -> str | None:
        """The user's next message after the system's `answer`, or None once it has stopped."""
        return self._kept(lambda: self._reply(_text(answer)))

    def end(self, answer: Any) -> None:
        """The system's last answer, ending the conversation from its side (a handoff)."""
        self._answers.append(_text(answer))
        self.ended = "system_ended"

    # Oloproof's asynchronous protocol, for an async system (each request still runs here).

    async def aopening(self) -> str:
        return self.opening()

    async def areply(self, answer: Any) -> str | None:
        return self.reply(answer)

    async def aend(self, answer: Any) -> None:
        self.end(answer)

    def _kept(self, step: Callable[[], Any]) -> Any:
        if self.failure is not None:
            raise self.failure
        if self.ended is not None:
            raise SimulatedUserFailed(f"the conversation has ended ({self.ended}); stop calling reply()")
        try:
            return step()
        except SimulatedUserFailed as failure:
            self.failure = failure
            raise

    def _opening(self) -> str:
        if self._asked:
            raise SimulatedUserFailed("opening() was already called; pass each answer to reply()")
        if self.persona.opening is not None:
            message: str | None = self.persona.opening
            self._note(Step(kind=USER_STEP, text=message, result={"purpose": USER_MESSAGE, "opening": True}))
        else:
            message = self._next()
        if message is None:
            raise SimulatedUserFailed("the simulated user ended the conversation before writing anything")
        self._asked.append(message)
        return message

    def _reply(self, answer: str) -> str | None:
        if len(self._answers) != len(self._asked) - 1:
            raise SimulatedUserFailed("call opening() before passing an answer to reply()")
        self._answers.append(answer)
        if self._goal_met():
            self.ended = "goal_reached"
            return None
        if len(self._asked) >= self.max_turns:
            self.ended = "turn_limit"
            return None
        message = self._next()
        if message is not None:
            self._asked.append(message)
        return message

    def _goal_met(self) -> bool:
        lines = []
        for asked, answer in zip(self._asked, self._answers):
            lines += [f"User: {asked}", f"Assistant: {answer}"]
        prompt = GOAL_CHECK_PROMPT.format(transcript="\n".join(lines), goal=self.persona.goal)
        turn = self._complete([{"role": "user", "content": prompt}], temperature=0, max_tokens=8, purpose=GOAL_CHECK)
        text = str(turn["message"].get("content") or "")
        word = text.strip().strip(".!").lower()
        if word.startswith(("yes", "no")):
            return word.startswith("yes")
        raise SimulatedUserFailed(f"the simulated user's goal check answered {text.strip()[:40]!r}, not yes or no")

    def _next(self) -> str | None:
        """The model's next message as this user, or None when it leaves."""
        turn = self._complete(self._messages(), temperature=self.config.temperature, max_tokens=self.config.max_tokens)
        text = str(turn["message"].get("content") or "").strip()
        if LEAVE.lower() in text.lower():  # a live model writes its exit at the end of a message too
            self.ended = "user_left"
            return None
        if not text:
            raise SimulatedUserFailed("the simulated user's model returned an empty message")
        return text

    def _complete(self, messages: list[dict[str, str]], *, temperature: float, max_tokens: int, purpose: str = USER_MESSAGE) -> dict[str, Any]:
        body = {
            "model": self.config.model, "messages": messages, "temperature": temperature, "max_tokens": max_tokens,
            "seed": self.seed,
        }
        request_digest = digest(REQUEST_TAG, body)
        turn = self._served(request_digest)
        if turn is None:
            try:
                turn = {**self._model.complete(body), "served": False}
            except ModelUnavailable as error:  # the simulator's failure is the case's, named as such
                raise SimulatedUserFailed(f"the simulated user's model call failed: {error}") from error
        turn.update(request_digest=request_digest, purpose=purpose)
        text = turn["message"].get("content")
        self._note(Step(kind=USER_STEP, text=None if purpose == GOAL_CHECK else str(text or "").strip() or None, result=turn))
        return turn

    def _messages(self) -> list[dict[str, str]]:
        """The conversation as the user's model sees it: its own messages are the assistant's
        turns there, and the system's answers are the user's (as in Oloproof)."""
        persona = self.persona
        facts = "\n".join(
            f"- {name}: {value if isinstance(value, str) else json.dumps(value, sort_keys=True)}"
            for name, value in persona.facts.items()
        )
        instructions = self.config.instructions
        system = PROMPT.format(
            description=persona.description, goal=persona.goal, facts=facts or "(nothing beyond who you are)",
            instructions=f"\n{instructions}\n" if instructions else "", leave=LEAVE,
        )
        messages = [{"role": "system", "content": system}, {"role": "user", "content": START}]
        for asked, answer in zip(self._asked, self._answers):
            messages += [{"role": "assistant", "content": asked}, {"role": "user", "content": answer}]
        return messages


def _text(answer: Any) -> str:
    return answer if isinstance(answer, str) else json.dumps(answer, sort_keys=True)


# -- a Python system's hook ----------------------------------------------------------------------

_current = threading.local()


def simulated_user() -> SimulatedUser:
    """The current case's simulated user, for a Python system to converse with:
    `user = simulated_user(); said = user.opening()`, then `said = user.reply(answer)` until it
    gives None (`from oloproof_pipeline.toolbox import simulated_user`)."""
    user = getattr(_current, "user", None)
    if user is None:
        raise SimulatedUserFailed("no simulated user: declare system.simulated_user in oloproof.yaml (and call this during a case)")
    return user


def current_simulated_user() -> SimulatedUser | None:
    return getattr(_current, "user", None)


class ConversingSystem:
    """A Python system with `system.simulated_user`: each call runs with its case's simulated
    user at hand (`simulated_user()`). Its requests are steps of the tool box's trajectory when
    the system has one (in order, and served in a replay from the recording); otherwise they
    follow the steps the system reports. Everything else is the system's own."""

    def __init__(self, system: Any, config: dict[str, Any]):
        self._system = system
        self._config = SimulatedUserConfig.model_validate(config)
        self._model: ChatModel | None = None
        self._steps: list[Step] = []

    def __call__(self, case_input: Any) -> Any:
        toolbox = getattr(self._system, "toolbox", None)
        toolbox = toolbox if isinstance(toolbox, ToolBox) else None
        self._steps = []
        persona = persona_of(self._config, case_input)
        if self._model is None:
            self._model = simulator_model(self._config, 1)
        served = RecordedResponses(toolbox.replaying if toolbox is not None else None, user=True).take
        note = toolbox.note if toolbox is not None else self._steps.append
        user = SimulatedUser(self._config, persona, seed_of=case_input, model=self._model, served=served, note=note)
        _current.user = user
        try:
            output = self._system(case_input)
        finally:
            _current.user = None
        if user.failure is not None:  # caught by the system: the case fails all the same
            raise user.failure
        return output

    def trajectory(self) -> dict[str, Any] | None:
        """A system without a tool box: the trajectory it reports, its user's requests after."""
        reader = getattr(self._system, "trajectory", None)
        reported = reader() if callable(reader) else None
        own = Trajectory.model_validate(reported) if reported is not None else Trajectory()
        return own.model_copy(update={"steps": [*own.steps, *self._steps]}).model_dump(mode="json")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):  # not forwarded: the wrapper's own state (copying, pickling)
            raise AttributeError(name)
        return getattr(self._system, name)
