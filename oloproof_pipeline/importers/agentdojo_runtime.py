"""What an imported AgentDojo project runs: the suite's own functions as a chat agent's tools
(over the suite's environment as the tools' state), the suite's `utility` as a python
grader of each case, and an injection task's `security` as a python grader of each injected
copy. The project's `tools.py` and `graders.py` are one line each over these, so the
behaviour lives here, beside the importer, and AgentDojo is imported nowhere else.

Tool results are handed to the model as JSON (pydantic models dumped, dates as ISO text); a
function that raises is `{"error": ...}`, as AgentDojo's runtime reports it to its own agents.
"""

from __future__ import annotations

import copy
import datetime
import enum
from functools import lru_cache
from typing import Any, Callable

from pydantic import BaseModel

from ..model.outcomes import FAIL, MISSING, PASS

DEFAULT_BENCHMARK = "v1"


@lru_cache(maxsize=None)
def load_suite(suite_name: str, benchmark_version: str = DEFAULT_BENCHMARK) -> Any:
    """AgentDojo's task suite (its tools, environment type and tasks)."""
    from agentdojo.task_suite.load_suites import get_suite  # the `agentdojo` extra

    return get_suite(benchmark_version, suite_name)


def as_json(value: Any) -> Any:
    """A function's result or argument as plain JSON."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(key): as_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [as_json(item) for item in value]
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, enum.Enum):
        return value.value
    return value


def tool_schemas(suite: Any) -> dict[str, dict[str, Any]]:
    """The suite's functions as a chat agent's tool schemas (AgentDojo's own definitions)."""
    return {
        function.name: {"description": function.description, "parameters": function.parameters.model_json_schema()}
        for function in suite.tools
    }


class SuiteTools:
    """A chat agent's tools over one suite (a subclass names it): `tool_schemas`, a method per
    function, and `reset`/`snapshot` over the environment as JSON."""

    suite_name: str = ""
    benchmark_version: str = DEFAULT_BENCHMARK

    def __init__(self) -> None:
        from agentdojo.functions_runtime import FunctionsRuntime  # the `agentdojo` extra

        self.suite = load_suite(self.suite_name, self.benchmark_version)
        self.runtime = FunctionsRuntime(self.suite.tools)
        self.tool_schemas = tool_schemas(self.suite)
        self.environment: Any = None

    def reset(self, state: dict[str, Any]) -> None:
        self.environment = self.suite.environment_type.model_validate(copy.deepcopy(state))

    def snapshot(self) -> dict[str, Any]:
        return self.environment.model_dump(mode="json")

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # Only reached for names that are no attribute: the suite's functions.
        schemas = self.__dict__.get("tool_schemas", {})
        if name not in schemas:
            raise AttributeError(name)
        return lambda **arguments: self.call(name, arguments)

    def call(self, name: str, arguments: dict[str, Any]) -> Any:
        result, error = self.runtime.run_function(self.environment, name, arguments, raise_on_error=False)
        return {"error": error} if error is not None else as_json(result)


def suite_tools(suite_name: str, benchmark_version: str = DEFAULT_BENCHMARK) -> type[SuiteTools]:
    """The tools class a project's `system.tools` names."""
    return type(f"{suite_name.title()}Tools", (SuiteTools,), {"suite_name": suite_name, "benchmark_version": benchmark_version})


# -- the suite's checks as graders ----------------------------------------------------------


def function_calls(recording: Any) -> list[Any]:
    """The run's tool calls as AgentDojo's FunctionCall trace."""
    from agentdojo.functions_runtime import FunctionCall  # the `agentdojo` extra

    signatures = recording.trajectory.tool_call_signatures() if recording.trajectory is not None else []
    return [FunctionCall(function=tool, args=arguments or {}) for tool, arguments in signatures]


def answer_text(output: Any) -> str:
    """The agent's final answer as the text AgentDojo's checks read."""
    if isinstance(output, dict):
        output = output.get("answer", "")
    return output if isinstance(output, str) else ""


def utility_grader(suite_name: str, benchmark_version: str = DEFAULT_BENCHMARK) -> Callable[[Any, Any], dict]:
    """A python grader `func(case, recording)` running the suite's own check of the case's user
    task (`metadata.user_task`): `utility_from_traces` where the task defines it, else `utility`
    over the starting state, the state after and the final answer."""

    def utility(case: Any, recording: Any) -> dict[str, Any]:
        suite = load_suite(suite_name, benchmark_version)
        task_id = (case.metadata or {}).get("user_task")
        if task_id is None:
            return {"outcome": MISSING, "reason": "no_user_task", "details": {"metadata": case.metadata}}
        if recording.environment_state is None:
            return {"outcome": MISSING, "reason": "no_recorded_state", "details": None}
        task, text = suite.get_user_task_by_id(task_id), answer_text(recording.output)
        held = task_check(suite, task.utility_from_traces, task.utility, case, recording)
        return {"outcome": PASS if held else FAIL, "reason": "utility_holds" if held else "utility_fails",
                "details": {"user_task": task_id, "answer": text}}

    return utility


def security_grader(
    suite_name: str, benchmark_version: str, injection_task: str
) -> Callable[[Any, Any], dict]:
    """A python grader `func(case, recording)` of each injected copy (`judges: copies`): the
    injection task's own check (`security_from_traces` where it defines it, else `security`)
    over the copy's starting world (the injection in it), the world after and the final
    answer. AgentDojo's check holds when the injection's goal was carried out: that is a FAIL."""

    def security(case: Any, recording: Any) -> dict[str, Any]:
        if recording.environment_state is None:
            return {"outcome": MISSING, "reason": "no_recorded_state", "details": None}
        suite = load_suite(suite_name, benchmark_version)
        task = suite.get_injection_task_by_id(injection_task)
        executed = task_check(suite, task.security_from_traces, task.security, case, recording)
        details = {"injection_task": injection_task, "goal": task.GOAL, "answer": answer_text(recording.output)}
        if executed:
            return {"outcome": FAIL, "reason": f"injection_executed: {injection_task}", "details": details}
        return {"outcome": PASS, "reason": f"injection_not_executed: {injection_task}", "details": details}

    return security


def task_check(suite: Any, from_traces: Callable[..., Any], from_worlds: Callable[..., Any], case: Any, recording: Any) -> bool:
    """An AgentDojo task's check as its suite runs it: by the call trace where the task
    defines that, else by the worlds before and after and the final answer."""
    pre = suite.environment_type.model_validate(case.initial_state)
    post = suite.environment_type.model_validate(recording.state_after)
    text = answer_text(recording.output)
    held = from_traces(text, pre, post, function_calls(recording))
    return bool(from_worlds(text, pre, post) if held is None else held)
