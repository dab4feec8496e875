"""The asset graph for one evaluation project. Each body calls the core and adds metadata.

No `from __future__ import annotations` here: Dagster reads the `context` annotation at runtime.
"""


import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetIn,
    DynamicPartitionsDefinition,
    MetadataValue,
    asset,
    asset_check,
)

from .. import evaluation
from ..gate import gate_markdown
from ..project import Project
from ..storage import table_path
from .metadata import counts_markdown, run_link, value_counts
from .resources import EvaluationProject, RecordingConfig

IO_MANAGER_KEY = "oloproof_parquet"


def sandbox_pool(project: Project) -> str:
    """Assets that drive the system share this pool, so two runs never drive one sandbox."""
    return f"{project.name}_sandbox"


def build_assets(project: Project, versions: DynamicPartitionsDefinition) -> tuple[list, list]:
    """The project's assets and their asset checks."""
    prefix = [project.name]
    code_version = evaluation.code_versions(project)
    common = {"key_prefix": prefix, "group_name": project.name, "io_manager_key": IO_MANAGER_KEY}

    @asset(
        **common,
        code_version=code_version["cases"],
        description="The project's cases, validated, each with its digest.",
    )
    def cases(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        frame = evaluation.load_case_table(evaluation_project.load())
        context.add_output_metadata({"dagster/row_count": len(frame), "cases": len(frame)})
        return frame

    @asset(
        **common,
        partitions_def=versions,
        ins={"cases": AssetIn(key_prefix=prefix)},
        code_version=code_version["recorded_runs"],
        pool=sandbox_pool(project),
        description="Each case run once against the system version named by the partition.",
    )
    def recorded_runs(
        context: AssetExecutionContext,
        config: RecordingConfig,
        evaluation_project: EvaluationProject,
        cases: pd.DataFrame,
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        runs, summary = evaluation.record_cases(
            loaded,
            evaluation.cases_from_table(cases),
            version=context.partition_key,
            run_id=context.run.run_id,
            fresh=config.fresh,
        )
        frame = evaluation.recorded_runs_table(runs)
        context.log.info(f"recorded {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                "status": MetadataValue.json(value_counts(frame, "status")),
                **run_link(context.run.run_id),
            }
        )
        return frame

    @asset(
        **common,
        partitions_def=versions,
        ins={"cases": AssetIn(key_prefix=prefix), "recorded_runs": AssetIn(key_prefix=prefix)},
        code_version=code_version["verdicts"],
        description="One verdict per case and criterion, naming the runs that recorded and judged it.",
    )
    def verdicts(
        context: AssetExecutionContext,
        evaluation_project: EvaluationProject,
        cases: pd.DataFrame,
        recorded_runs: pd.DataFrame,
    ) -> pd.DataFrame:
        frame = evaluation.judge_cases(
            evaluation_project.load(),
            evaluation.cases_from_table(cases),
            evaluation.runs_from_table(recorded_runs),
            version=context.partition_key,
            judged_by_run=context.run.run_id,
        )
        counts = evaluation.outcome_counts(frame)
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                "outcomes": MetadataValue.md(counts_markdown(counts)),
                "outcome_counts": MetadataValue.json(counts),
                **run_link(context.run.run_id),
            }
        )
        return frame

    @asset(
        **common,
        partitions_def=versions,
        ins={"verdicts": AssetIn(key_prefix=prefix)},
        code_version=code_version["gate"],
        description="The release gate: a decision per rule with its interval, and ALLOW or BLOCK.",
    )
    def gate(context: AssetExecutionContext, evaluation_project: EvaluationProject, verdicts: pd.DataFrame) -> pd.DataFrame:
        loaded = evaluation_project.load()
        decision = evaluation.decide_release_gate(loaded, verdicts)
        frame = evaluation.gate_table(decision, version=context.partition_key, judged_by_run=context.run.run_id)
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                "decision": decision.decision,
                "gate": MetadataValue.md(gate_markdown(decision)),
                "table_path": MetadataValue.path(str(table_path(loaded.root, "gate", context.partition_key))),
                **run_link(context.run.run_id),
            }
        )
        return frame

    @asset_check(
        asset=gate,
        blocking=True,
        partitions_def=versions,
        description="Fails (ERROR) when the gate blocks the release.",
    )
    def gate_allows_release(gate: pd.DataFrame) -> AssetCheckResult:
        decision = str(gate["gate_decision"].iloc[0]) if len(gate) else "ALLOW"
        failing = gate[gate["decision"] != "PASS"]
        return AssetCheckResult(
            passed=decision == "ALLOW",
            severity=AssetCheckSeverity.ERROR,
            metadata={
                "decision": decision,
                "rules_not_passing": MetadataValue.json(
                    {row.rule_id: row.decision for row in failing.itertuples()}
                ),
            },
        )

    return [cases, recorded_runs, verdicts, gate], [gate_allows_release]
