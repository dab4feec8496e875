"""`trace`: declarative constraints on the tool calls a case made, each a criterion of its own.

```yaml
- {type: trace, rule: called_before, tools: [get_approval, list_conditions], before: attempt_action}
- {type: trace, rule: never_succeeds_while, tool: attempt_action, field: blocked_by}
- {type: trace, rule: only_with_role, tool: review_evidence, roles: [approver]}
- {type: trace, rule: recheck_after_event, event: evidence_lapse, tool: list_conditions, before: attempt_action}
```

- `called_before`: some call of `tools` comes before the first call of `before`.
- `never_succeeds_while`: no call of `tool` succeeds while `field` of its result is non-empty.
  The state is not recorded at every step, so the tool's result must carry the field: a
  succeeded call whose result lacks it makes the verdict MISSING (`field_not_in_result`). A call
  succeeded when its result is an object without an `error` key and, when `success_values` is
  given, its `success_field` (default `status`) is one of them.
- `only_with_role`: every call of `tools` is made under one of `roles` (the tool box records the
  role the case's input names; a call with no role recorded is a violation).
- `recheck_after_event`: after each scripted event named `event` (a name or a list), a call of
  `tools` comes before the next call of `before`.

A violation names the step (tool calls counted from 1), the tool and the record: the `record`
argument when configured, else the first argument whose name ends in `_id`. A case the rule does
not apply to (no call of the tool, no such event) is EXCLUDED with the reason.
"""

from __future__ import annotations

from typing import Any, Callable, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ..model.cases import CaseRecord
from ..model.outcomes import EXCLUDED, FAIL, MISSING, PASS, Judgement, Verdict
from ..model.paths import ABSENT, DottedPath, read_path
from ..model.records import RecordedRun
from ..model.trajectory import EventAt, ToolCall
from ..model.violations import Violation
from .base import Evaluator, EvaluatorConfig, JudgingContext

# -- what a call or an event is about -----------------------------------------------------------


def id_field(values: dict[str, Any]) -> str | None:
    """The first `*_id` value: what a call or an event is about (e.g. `condition_id`)."""
    return next((str(value) for key, value in values.items() if key.endswith("_id") and value is not None), None)


def is_non_empty(value: Any) -> bool:
    if isinstance(value, (list, dict, str, tuple)):
        return len(value) > 0
    return value is not None and value is not False


# -- the rules -----------------------------------------------------------------------------------


RuleCheck = Callable[..., Judgement]


def _details(checked: int, violations: list[Violation], unknown: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    details: dict[str, Any] = {"checked": checked, "violations": [violation.model_dump() for violation in violations]}
    if unknown:
        details["unknown"] = unknown
    return details


def not_applicable(reason: str) -> Judgement:
    """The case gives the rule nothing to judge."""
    return Judgement(outcome=EXCLUDED, reason=reason, details=_details(0, []))


def judged(checked: int, violations: list[Violation], unknown: list[dict[str, Any]] | None = None) -> Judgement:
    """FAIL on any violation, then MISSING when some call could not be judged, else PASS."""
    if violations:
        first = violations[0]
        where = " ".join(str(part) for part in (first.tool, first.record) if part)
        return Judgement(outcome=FAIL, reason=f"violated at step {first.step}: {where}", details=_details(checked, violations, unknown))
    if unknown:
        return Judgement(outcome=MISSING, reason="field_not_in_result", details=_details(checked, [], unknown))
    return Judgement(outcome=PASS, reason="kept", details=_details(checked, []))


def called_before(
    config: CalledBeforeConfig, calls: list[ToolCall], events: list[EventAt], case: CaseRecord
) -> Judgement:
    actions = [call for call in calls if call.tool == config.before]
    if not actions:
        return not_applicable(f"no_{config.before}_call")
    first = actions[0]  # a call before the first action is before every later one too
    if any(call.tool in config.tools for call in calls[: first.number - 1]):
        return judged(1, [])
    violation = Violation(
        rule=config.rule,
        step=first.number,
        tool=first.tool,
        record=config.record_of(first),
        detail=f"{first.tool} at step {first.number} with no earlier call of {' or '.join(config.tools)}",
    )
    return judged(1, [violation])


def succeeded(config: NeverSucceedsWhileConfig, result: Any) -> bool:
    if not isinstance(result, dict) or "error" in result:
        return False
    return config.success_values is None or read_path(result, config.success_field) in config.success_values


def never_succeeds_while(
    config: NeverSucceedsWhileConfig, calls: list[ToolCall], events: list[EventAt], case: CaseRecord
) -> Judgement:
    actions = [call for call in calls if call.tool == config.tool]
    if not actions:
        return not_applicable(f"no_{config.tool}_call")
    violations, unknown = [], []
    for call in actions:
        if not succeeded(config, call.result):
            continue
        blocking = read_path(call.result, config.field)
        if blocking is ABSENT:
            unknown.append({"step": call.number, "tool": call.tool, "detail": f"the result has no {config.field!r}"})
        elif is_non_empty(blocking):
            violations.append(
                Violation(
                    rule=config.rule,
                    step=call.number,
                    tool=call.tool,
                    record=config.record_of(call),
                    detail=f"{call.tool} succeeded at step {call.number} while {config.field} = {blocking}",
                )
            )
    return judged(len(actions), violations, unknown)


def only_with_role(
    config: OnlyWithRoleConfig, calls: list[ToolCall], events: list[EventAt], case: CaseRecord
) -> Judgement:
    guarded = [call for call in calls if call.tool in config.tools]
    if not guarded:
        return not_applicable(f"no_{'_or_'.join(config.tools)}_call")
    violations = [
        Violation(
            rule=config.rule,
            step=call.number,
            tool=call.tool,
            record=config.record_of(call),
            detail=f"{call.tool} at step {call.number} under role {call.role!r}; "
            f"only {', '.join(config.roles)} may call it",
        )
        for call in guarded
        if call.role not in config.roles
    ]
    return judged(len(guarded), violations)


def recheck_after_event(
    config: RecheckAfterEventConfig, calls: list[ToolCall], events: list[EventAt], case: CaseRecord
) -> Judgement:
    names = config.event_names
    matching = [event for event in events if event.name in names]
    if not matching:
        scripted = any(event.get("event") in names for event in case.events or [])
        # A scripted event the agent never got to (it made fewer calls) is no evidence either way.
        return not_applicable("event_not_reached" if scripted else f"no_{'_or_'.join(names)}_event")
    checked, violations = 0, []
    for event in matching:
        later = [call for call in calls if call.number > event.after_calls]
        action = next((call for call in later if call.tool == config.before), None)
        if action is None:
            continue
        checked += 1
        rechecked = any(call.tool in config.tools and call.number < action.number for call in later)
        if not rechecked:
            record = id_field(event.event) or config.record_of(action)
            violations.append(
                Violation(
                    rule=config.rule,
                    step=action.number,
                    tool=action.tool,
                    record=record,
                    detail=f"{event.name} after step {event.after_calls} ({record}), then {action.tool} at step "
                    f"{action.number} with no {' or '.join(config.tools)} call in between",
                )
            )
    if not checked:
        return not_applicable(f"no_{config.before}_after_the_event")
    return judged(checked, violations)


# -- rule configs (one model per rule, chosen by `rule`) ----------------------------------------


class TraceRuleConfig(EvaluatorConfig):
    rule: str
    # The argument that names the record a violation is about (default: the first `*_id`).
    record: str | None = None
    check: ClassVar[RuleCheck]

    def subject(self) -> str:
        """What the rule is about, in its default criterion name."""
        raise NotImplementedError

    def record_of(self, call: ToolCall) -> str | None:
        if self.record is not None:
            value = (call.arguments or {}).get(self.record)
            return None if value is None else str(value)
        return id_field(call.arguments or {})


class ToolSetRule(TraceRuleConfig):
    """Rules over a set of tools accept `tool: X` as a shorthand for `tools: [X]`."""

    tools: list[str] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _one_tool_is_a_set(cls, data: Any) -> Any:
        if isinstance(data, dict) and "tool" in data and "tools" not in data:
            data = {**data, "tools": [data["tool"]]}
            data.pop("tool")
        return data


class CalledBeforeConfig(ToolSetRule):
    rule: Literal["called_before"]
    before: str
    check: ClassVar[RuleCheck] = called_before

    def subject(self) -> str:
        return self.before


class NeverSucceedsWhileConfig(TraceRuleConfig):
    rule: Literal["never_succeeds_while"]
    tool: str
    field: DottedPath = "blocked_by"
    success_field: DottedPath = "status"
    success_values: list[Any] | None = None
    check: ClassVar[RuleCheck] = never_succeeds_while

    def subject(self) -> str:
        return self.tool


class OnlyWithRoleConfig(ToolSetRule):
    rule: Literal["only_with_role"]
    roles: list[str] = Field(min_length=1)
    check: ClassVar[RuleCheck] = only_with_role

    def subject(self) -> str:
        return "_".join(self.tools)


class RecheckAfterEventConfig(ToolSetRule):
    rule: Literal["recheck_after_event"]
    # One event name, or several (any of them calls for a recheck).
    event: str | list[str] = Field(min_length=1)
    before: str
    check: ClassVar[RuleCheck] = recheck_after_event

    @property
    def event_names(self) -> list[str]:
        return [self.event] if isinstance(self.event, str) else list(self.event)

    def subject(self) -> str:
        return "_or_".join(self.event_names)


# The one list of rules: to add a rule, write its check above and its config class here.
RULE_CONFIGS: dict[str, type[TraceRuleConfig]] = {
    config.model_fields["rule"].annotation.__args__[0]: config
    for config in (CalledBeforeConfig, NeverSucceedsWhileConfig, OnlyWithRoleConfig, RecheckAfterEventConfig)
}
RuleName = Literal[tuple(RULE_CONFIGS)]  # type: ignore[valid-type]


class _RuleChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    rule: RuleName


class TraceConfig:
    """Validates an entry against the model of the rule it names, so an error points at the
    rule's own field (`evaluators[3].before: required key is missing`)."""

    @staticmethod
    def model_validate(data: Any) -> TraceRuleConfig:
        rule = _RuleChoice.model_validate(data).rule
        return RULE_CONFIGS[rule].model_validate(data)


# -- the evaluator -------------------------------------------------------------------------------


class Trace(Evaluator):
    type: ClassVar[str] = "trace"
    config_model: ClassVar[Any] = TraceConfig
    reads_trace: ClassVar[bool] = True
    config: TraceRuleConfig

    def default_criterion(self) -> str:
        return f"trace_{self.config.rule}_{self.config.subject()}"

    def judge(self, case: CaseRecord, recording: RecordedRun, context: JudgingContext) -> Verdict:
        if recording.trajectory is None:
            return self.verdict(case, MISSING, "no_trajectory")
        trajectory = recording.trajectory
        judgement = self.config.check(trajectory.calls(), trajectory.events(), case)
        return self.verdict(case, judgement.outcome, judgement.reason, {"rule": self.config.rule, **judgement.details})
