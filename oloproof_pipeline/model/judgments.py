"""One judgment a model judge (`rubric_judge`) gave: a line of the judgments journal.

A judgment is keyed by the digest of everything the judge saw (its settings and the prompt,
which holds the rubric and the text judged), so it is reused wherever the same question comes
again: a rerun, another version with the same answer, a verdict re-judged for another reason.
The judge's tokens and cost are its own (`judge_*`), never the system's.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class JudgmentRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    judgment_key: str
    criterion: str
    judge_model: str
    passed: bool
    rationale: str | None = None
    # Every call the judgment took (Oloproof asks once more after an answer out of format).
    judge_calls: int
    judge_prompt_tokens: int | None = None
    judge_completion_tokens: int | None = None
    # Priced by `pricing:` for the judge's model; null without a rate for it.
    judge_cost_usd: float | None = None
