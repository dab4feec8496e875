"""Digests of the configuration each stage depends on: when an evaluator or a rule changes,
the stages it feeds show as stale (Dagster's `code_version`) and a backfill re-grades them."""

from __future__ import annotations

from typing import Any

from .. import __version__
from .config import Project
from .digests import digest


def code_versions(project: Project) -> dict[str, str]:
    """Per asset, a digest of the configuration it depends on: when an evaluator or a rule
    changes, the assets it feeds show as stale and a backfill re-grades them."""
    config = project.config

    def short(tag: str, value: Any) -> str:
        return f"{__version__}-" + digest(tag, value).removeprefix("sha256:")[:12]

    evaluators = config.evaluators
    return {
        "cases": short("cases", {"dataset": config.dataset}),
        "derived_cases": short("derived_cases", config.metamorphic.model_dump(mode="json")),
        "recorded_runs": short("recorded_runs", {"system": config.system.model_dump(mode="json")}),
        "fault_replays": short(
            "fault_replays", {"evaluators": [each for each in evaluators if each.get("type") == "fault_recovery"]}
        ),
        "verdicts": short("verdicts", {"evaluators": evaluators}),
        "slices": short("slices", {"slices": config.slices, "min_support": config.min_slice_support}),
        "gate": short("gate", project.release.model_dump(mode="json")),
    }
