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

from ..model.outcomes import ALLOW, BLOCK, PASS
from ..decide.validity import transform_validity, validity_markdown
from ..decide.gate import decide_release_gate, gate_table
from ..decide.slices import project_slices, slice_table, slices_markdown
from ..evaluators.judging import judge_cases, replays_for_judging
from ..model.cases import load_cases
from ..model.config import Project
from ..model.fingerprints import code_versions
from ..model.transforms import derive_cases
from ..read import compare as comparison
from ..read.reports import write_html_report
from ..read.results import load_results, outcome_counts, replay_rows, results_from_tables
from ..run.recording import record_cases
from ..run.replaying import replay_faults
from ..store import tables
from ..store.layout import output_dir
from ..store.tables import rows_from_frame
from .metadata import (
    GATE_TAG,
    ProgressLog,
    file_link,
    gate_log_line,
    outcomes_table,
    rule_numbers,
    rules_summary,
    rules_table,
    value_counts,
)
from .resources import ComparisonConfig, EvaluationProject, RecordingConfig, SandboxCluster

IO_MANAGER_KEY = "oloproof_parquet"


def sandbox_pool(project: Project) -> str:
    """Assets that drive the system share this pool, so two runs never drive one sandbox."""
    return f"{project.name}_sandbox"


def build_assets(
    project: Project, versions: DynamicPartitionsDefinition, *, stop_downstream_on_block: bool = False
) -> tuple[list, list]:
    """The project's assets and their asset checks. With `stop_downstream_on_block` the gate
    check is blocking: a BLOCK fails the run and skips every asset downstream of the gate."""
    prefix = [project.name]
    code_version = code_versions(project)
    common = {"key_prefix": prefix, "group_name": project.name, "io_manager_key": IO_MANAGER_KEY}
    per_version = {**common, "partitions_def": versions}

    def upstream(*names: str) -> dict[str, AssetIn]:
        """Inputs loaded from this project's assets of the same names."""
        return {name: AssetIn(key_prefix=prefix) for name in names}

    @asset(
        **common,
        code_version=code_version["cases"],
        description="The project's cases, validated, each with its digest.",
    )
    def cases(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        frame = tables.case_table(load_cases(evaluation_project.load()))
        context.add_output_metadata({"dagster/row_count": len(frame), "cases": len(frame)})
        return frame

    @asset(
        **common,
        ins=upstream("cases"),
        code_version=code_version["derived_cases"],
        description="One copy of each case per metamorphic transform, its pair digest, and whether "
        "people's labels kept it; per transform, whether the labels check it.",
    )
    def derived_cases(
        context: AssetExecutionContext, evaluation_project: EvaluationProject, cases: pd.DataFrame
    ) -> pd.DataFrame:
        derived = derive_cases(evaluation_project.load(), tables.cases_from_table(cases))
        frame = tables.derived_case_table(derived.copies)
        validity = transform_validity(frame)
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                "validity": MetadataValue.md(validity_markdown(validity)),
                "validity_by_transform": MetadataValue.json({name: item.model_dump() for name, item in validity.items()}),
                "labels": MetadataValue.json([summary.model_dump() for summary in derived.label_summaries]),
                "transforms_not_checked": ", ".join(name for name, item in validity.items() if not item.checked) or "none",
            }
        )
        return frame

    @asset(
        **per_version,
        ins=upstream("cases", "derived_cases"),
        code_version=code_version["recorded_runs"],
        pool=sandbox_pool(project),
        description="Each case run once against the system version named by the partition.",
    )
    def recorded_runs(
        context: AssetExecutionContext,
        config: RecordingConfig,
        evaluation_project: EvaluationProject,
        sandbox_cluster: SandboxCluster,
        cases: pd.DataFrame,
        derived_cases: pd.DataFrame,
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        all_cases = tables.cases_with_copies(cases, derived_cases)
        with sandbox_cluster.sandboxes(loaded.config.execution) as sandboxes:
            runs, summary = record_cases(
                loaded,
                all_cases,
                version=context.partition_key,
                run_id=context.run.run_id,
                fresh=config.fresh,
                on_recorded=ProgressLog(context.log, "recorded", len(all_cases)).step,
                sandboxes=sandboxes,
            )
        frame = tables.recorded_runs_table(runs)
        context.log.info(f"recorded {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                "status": MetadataValue.json(value_counts(frame, "status")),
            }
        )
        return frame

    @asset(
        **per_version,
        ins=upstream("cases", "recorded_runs"),
        code_version=code_version["fault_replays"],
        pool=sandbox_pool(project),
        description="Each recorded case replayed per fault plan (a control replay, then one with a tool "
        "call's result replaced by a fault), with the outcome; reused while version, recording and plan hold.",
    )
    def fault_replays(
        context: AssetExecutionContext,
        evaluation_project: EvaluationProject,
        sandbox_cluster: SandboxCluster,
        cases: pd.DataFrame,
        recorded_runs: pd.DataFrame,
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        with sandbox_cluster.sandboxes(loaded.config.execution) as sandboxes:
            frame, summary = replay_faults(
                loaded,
                tables.cases_from_table(cases),
                tables.runs_from_table(recorded_runs),
                version=context.partition_key,
                run_id=context.run.run_id,
                sandboxes=sandboxes,
            )
        context.log.info(f"replayed {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                "outcome_counts": MetadataValue.json(outcome_counts(frame)),
            }
        )
        return frame

    @asset(
        **per_version,
        ins=upstream("cases", "derived_cases", "recorded_runs", "fault_replays"),
        code_version=code_version["verdicts"],
        description="One verdict per case and criterion, naming the runs that recorded and judged it.",
    )
    def verdicts(
        context: AssetExecutionContext,
        evaluation_project: EvaluationProject,
        cases: pd.DataFrame,
        derived_cases: pd.DataFrame,
        recorded_runs: pd.DataFrame,
        fault_replays: pd.DataFrame,
    ) -> pd.DataFrame:
        runs = tables.runs_from_table(recorded_runs)
        frame = judge_cases(
            evaluation_project.load(),
            tables.cases_with_copies(cases, derived_cases),
            runs,
            version=context.partition_key,
            judged_by_run=context.run.run_id,
            replays=replays_for_judging(fault_replays, runs),
        )
        context.add_output_metadata(
            {
                "outcomes": outcomes_table(outcome_counts(frame)),
                "dagster/row_count": len(frame),
            }
        )
        return frame

    @asset(
        **per_version,
        ins=upstream("cases", "derived_cases", "recorded_runs", "fault_replays", "verdicts", "slices"),
        code_version=code_version["gate"],
        description="The release gate: a decision per rule with its interval, and ALLOW or BLOCK. "
        "A BLOCK is a successful evaluation: the run stays green and carries the tag oloproof/gate=BLOCK.",
    )
    def gate(
        context: AssetExecutionContext,
        evaluation_project: EvaluationProject,
        cases: pd.DataFrame,
        derived_cases: pd.DataFrame,
        recorded_runs: pd.DataFrame,
        fault_replays: pd.DataFrame,
        verdicts: pd.DataFrame,
        slices: pd.DataFrame,
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        version = context.partition_key
        decision = decide_release_gate(loaded, verdicts, derived_cases)
        frame = gate_table(decision, version=version, judged_by_run=context.run.run_id)
        # The report is written here, not downstream: with the blocking variant of the gate
        # check a BLOCK skips anything after the gate, and a blocked release is when the report
        # is read most.
        results = results_from_tables(
            version, cases=cases, derived_cases=derived_cases, recorded_runs=recorded_runs,
            verdicts=verdicts, gate=frame, slices=slices,
        )
        report = write_html_report(loaded.root, results, loaded.name, replays=replay_rows(fault_replays))
        context.log.info(gate_log_line(version, decision))
        # The decision is known only now, so it is tagged here, whoever launched the run.
        context.instance.add_run_tags(context.run.run_id, {GATE_TAG: decision.decision})
        rules = rows_from_frame(frame, tables.GATE_NESTED)
        context.add_output_metadata(
            {
                "rules": rules_summary(rules),
                "decision": decision.decision,
                "report": file_link(report, output_dir(loaded.root)),
                "dagster/row_count": len(frame),
                **rule_numbers(rules),
            }
        )
        return frame

    @asset(
        **per_version,
        ins=upstream("cases", "derived_cases", "recorded_runs", "verdicts"),
        code_version=code_version["slices"],
        description="Exploratory rates per slice bucket (tool calls, steps, metadata) with "
        "Benjamini-Yekutieli marks; never gated.",
    )
    def slices(
        context: AssetExecutionContext,
        evaluation_project: EvaluationProject,
        cases: pd.DataFrame,
        derived_cases: pd.DataFrame,
        recorded_runs: pd.DataFrame,
        verdicts: pd.DataFrame,
    ) -> pd.DataFrame:
        rows = project_slices(
            evaluation_project.load(),
            verdicts,
            tables.cases_with_copies(cases, derived_cases),
            tables.runs_from_table(recorded_runs),
        )
        frame = slice_table(rows, version=context.partition_key, sliced_by_run=context.run.run_id)
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                "slices": MetadataValue.md(slices_markdown(rows)),
                "buckets_marked_different": sum(bool(row.differs) for row in rows),
            }
        )
        return frame

    @asset_check(
        asset=gate,
        blocking=stop_downstream_on_block,
        partitions_def=versions,
        description="Fails (ERROR) when the gate blocks the release. Not blocking by default: a blocked "
        "release is a successful evaluation, so the run stays green; built with "
        "stop_downstream_on_block=True it fails the run and skips anything downstream of the gate.",
    )
    def gate_allows_release(gate: pd.DataFrame) -> AssetCheckResult:
        rules = rows_from_frame(gate, tables.GATE_NESTED)
        # No rows: no release policy decided anything (an ungated run), which allows nothing.
        decision = rules[0]["gate_decision"] if rules else BLOCK
        return AssetCheckResult(
            passed=decision == ALLOW,
            severity=AssetCheckSeverity.ERROR,
            metadata={
                "rules_not_passing": rules_table([rule for rule in rules if rule["decision"] != PASS]),
                "decision": decision,
            },
        )

    @asset(
        **common,
        deps=[verdicts],
        code_version=code_version["verdicts"],
        description="Two versions' verdicts paired case by case: what got fixed, what broke.",
    )
    def version_comparison(
        context: AssetExecutionContext, config: ComparisonConfig, evaluation_project: EvaluationProject
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        known = context.instance.get_dynamic_partitions(versions.name)
        base, candidate = comparison.choose_versions(loaded.root, known, config.base, config.candidate)
        comparisons = comparison.compare_versions(
            load_results(loaded.root, base), load_results(loaded.root, candidate), loaded.release.confidence_level
        )
        context.add_output_metadata(
            {
                "base": base,
                "candidate": candidate,
                "comparison": MetadataValue.md(comparison.comparison_markdown(comparisons, base, candidate)),
            }
        )
        return comparison.comparison_table(comparisons, base, candidate)

    assets = [cases, derived_cases, recorded_runs, fault_replays, verdicts, gate, slices, version_comparison]
    return assets, [gate_allows_release]
