"""Oloproof's keys that oloproof_pipeline does not support yet, in one place.

Oloproof 0.1.0a20's `oloproof.yaml` and `release.yaml` accept more than this pipeline does
(HTTP and RAG systems, predictive metrics, approval and
paired-difference settings). Such a key is told apart from a typo: a person moving a project
over learns that the feature is missing, not that they misspelt it.

Locations are dotted, with `[]` for any list index (`rules[].margin`).
"""

from __future__ import annotations

from typing import Any, Iterable

UNSUPPORTED_OLOPROOF_KEYS = frozenset(
    {
        # oloproof.yaml
        "suite_role", "metrics", "predictive", "replicates",
        "egress", "adversarial",
        "system.http", "system.rag", "system.recorded", "system.held", "system.config",
        "system.timeout_s", "system.per_step", "system.environment",
        # release.yaml
        "early_stopping", "early_stopping_seed", "early_stopping_batch_size", "difference_method",
        "block_on", "warn_on", "block_on_partial_run", "require_validated_evaluators",
        "require_approval", "minimum_evaluator_agreement", "minimum_simulated_user_realism",
        "maximum_evaluator_bias", "judge_floor", "require_suite_role", "families", "proofs",
        "review_rule",
        "rules[].kind", "rules[].max_failures", "rules[].margin", "rules[].direction",
        "rules[].max_missing_fraction", "rules[].requires_manual_review", "rules[].scope",
        "rules[].min_support", "rules[].judge_bias_bar",
    }
)

UNSUPPORTED_OLOPROOF_EVALUATORS = frozenset(
    {
        "model_classifier", "probability_judge",
        "cascade", "hit_rate", "recall", "mrr", "ndcg", "citation_validity", "groundedness_judge",
        "citation_support_judge", "agent_max_steps", "agent_tool_called", "agent_no_tool_loop",
        "agent_constraints_satisfied", "agent_tool_sequence", "agent_no_undeclared_tool", "agent_route",
        "agent_tool_permissions", "agent_max_handoffs", "predictive_correct", "predictive_absolute_error",
        "predictive_brier", "predictive_log_loss", "predictive_ranking", "predictive_recall",
        "predictive_precision", "episode_return", "episode_success", "episode_cost_within",
        "off_policy_value", "off_policy_improvement", "sequential_off_policy_value",
        "sequential_off_policy_improvement", "media_check", "image_matches_reference",
        "conversation_completed", "conversation_judge", "canary_absent", "cost_per_accepted",
        "every_criterion", "every_replicate", "every_turn", "goal_reached", "human_difference",
        "human_preference", "human_score", "quantile", "ranking", "turns_to_goal",
    }
)


def key_location(loc: Iterable[Any]) -> str:
    """('rules', 2, 'margin') -> 'rules[].margin': a location with its list indexes left out."""
    text = ""
    for part in loc:
        text += "[]" if isinstance(part, int) else ("." if text else "") + str(part)
    return text


def unsupported_key(loc: Iterable[Any]) -> str | None:
    """The message for an Oloproof key this pipeline does not support yet, else None."""
    parts = tuple(loc)
    if key_location(parts) not in UNSUPPORTED_OLOPROOF_KEYS:
        return None
    return f"`{parts[-1]}` is an Oloproof key that oloproof_pipeline does not support yet"


def unsupported_evaluator(kind: Any) -> str | None:
    if kind not in UNSUPPORTED_OLOPROOF_EVALUATORS:
        return None
    return f"`{kind}` is an Oloproof evaluator type that oloproof_pipeline does not support yet"
