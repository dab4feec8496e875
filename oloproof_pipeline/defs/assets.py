"""The asset graph for one evaluation project. Each body calls the core and adds metadata
(built in `asset_metadata.py`).

No `from __future__ import annotations` here: Dagster reads the `context` annotation at runtime.
"""


from collections.abc import Iterator

import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    DynamicPartitionsDefinition,
    MetadataValue,
    Output,
    asset,
    asset_check,
)

from ..decide.slices import slices_of_version
from ..decide.validity import transform_validity
from ..decide.version_gate import gate_of_version
from ..evaluators.judging import judge_verdict_rows
from ..evaluators.trials import judge_trial_table
from ..model.config import Project
from ..model.errors import ProjectError
from ..model.fingerprints import code_versions
from ..model.outcomes import ALLOW, BLOCK
from ..read import compare as comparison
from ..read.results import load_results
from ..read.version_report import write_version_report
from ..run.certification import certify_cases, flagged_rows
from ..run.recording import record_case_rows
from ..run.replaying import replay_fault_rows
from ..run.system import SYSTEM_TAG, ResolvedSystem
from ..run.trials import record_trial_table
from ..store import tables
from ..store.reuse import previous_at, stored_tables
from ..store.assembly import AssembledTable
from ..store.stored import StoredTable
from ..store.tables import rows_from_frame
from .asset_metadata import (
    certification_metadata,
    copies_metadata,
    gate_metadata,
    recording_metadata,
    replay_metadata,
    slices_metadata,
    verdict_metadata,
)
from .checks import gate_check_metadata, rule_check_results, rule_check_specs
from .conventions import asset_conventions
from .metadata import GATE_TAG, ProgressLog, gate_log_line
from .resources import ComparisonConfig, EvaluationProject, RecordingConfig, SandboxCluster

IO_MANAGER_KEY = "oloproof_parquet"
CERTIFICATION = "case_certification"


def progress_step(total: int) -> int:
    """Log progress at most about twenty times a run, every 25 cases at least: each log line is
    an event stored in the instance (a few milliseconds each)."""
    return max(25, total // 20)


def system_of_run(context: AssetExecutionContext) -> ResolvedSystem | None:
    """The system the launch resolved, filed on the run (`SYSTEM_TAG`), when it is of this
    partition's version; None when the run carries none (the stage resolves it then)."""
    text = context.run.tags.get(SYSTEM_TAG)
    if text is None:
        return None
    try:
        system = ResolvedSystem.from_tag(text)
    except (ValueError, TypeError):  # a tag edited by hand: as good as none
        return None
    return system if system.version == context.partition_key else None


def certification_code_version(code_version: dict[str, str]) -> str:
    """Certification judges with the evaluators and plays references on the system."""
    return f"{code_version['verdicts']}.{code_version['recorded_runs'].rsplit('-', 1)[-1]}"


def certification_flags(project: Project) -> list[dict] | None:
    """The stored certification's flags when the policy requires certified cases (else None)."""
    if not project.release.require_certified_cases:
        return None
    certification = StoredTable.at(project.root, CERTIFICATION).readable("the gate cannot leave out uncertified cases")
    if not certification.exists:
        raise ProjectError(
            f"{project.release_path}: require_certified_cases: no case certification is stored; run `oloproof certify` first"
        )
    return flagged_rows(certification.whole())


def sandbox_pool(project: Project) -> str:
    """Assets that drive the system share this pool, so two runs never drive one sandbox."""
    return f"{project.dagster_name}_sandbox"


def build_assets(
    project: Project, versions: DynamicPartitionsDefinition, *, stop_downstream_on_block: bool = False
) -> tuple[list, list]:
    """The project's assets and their asset checks. With `stop_downstream_on_block` the gate
    check is blocking: a BLOCK fails the run and skips every asset downstream of the gate."""
    prefix = [project.dagster_name]
    code_version = code_versions(project)
    common = {"key_prefix": prefix, "group_name": project.dagster_name, "io_manager_key": IO_MANAGER_KEY}
    per_version = {**common, "partitions_def": versions}
    rule_checks = rule_check_specs(project, AssetKey([*prefix, "gate"]), versions)

    def conventions(name: str) -> dict:
        return asset_conventions(project, name)

    def upstream(*names: str) -> list[AssetKey]:
        """This project's assets of those names: read by column from storage, not loaded whole."""
        return [AssetKey([*prefix, name]) for name in names]

    @asset(
        **conventions("cases"),
        **common,
        code_version=code_version["cases"],
        description="The project's cases, validated, each with its digest.",
    )
    def cases(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        frame = evaluation_project.case_table()
        context.add_output_metadata({"dagster/row_count": len(frame), "cases": len(frame)})
        return frame

    @asset(
        **conventions("derived_cases"),
        **common,
        deps=upstream("cases"),
        code_version=code_version["derived_cases"],
        description="One copy of each case per metamorphic transform, its pair digest, and whether "
        "people's labels kept it; per transform, whether the labels check it.",
    )
    def derived_cases(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> AssembledTable:
        copies = evaluation_project.copies()  # the cases are read only where copies are derived here
        context.add_output_metadata(copies_metadata(copies.table, transform_validity(copies.table.whole), copies.label_summaries))
        return copies.table

    @asset(
        **conventions("recorded_runs"),
        **per_version,
        deps=upstream("cases", "derived_cases"),
        code_version=code_version["recorded_runs"],
        pool=sandbox_pool(project),
        description="Each case run once against the system version named by the partition; reused while "
        "the case, the version and the system's code hold.",
    )
    def recorded_runs(
        context: AssetExecutionContext,
        config: RecordingConfig,
        evaluation_project: EvaluationProject,
        sandbox_cluster: SandboxCluster,
    ) -> AssembledTable:
        loaded = evaluation_project.load()
        cases = stored_tables(loaded)["cases"]
        progress = ProgressLog(context.log, "recorded", len(cases), every=progress_step(len(cases)))
        run = {"version": context.partition_key, "run_id": context.run.run_id, "fresh": config.fresh,
               "on_recorded": progress.step, "system": system_of_run(context)}
        with sandbox_cluster.sandboxes(loaded.config.execution) as sandboxes:
            table, summary = record_case_rows(loaded, cases, **run, sandboxes=sandboxes)
            trial_frame, trial_summary = record_trial_table(loaded, cases, **run, sandboxes=sandboxes)
        context.log.info(f"recorded {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(recording_metadata(loaded, table.whole, summary, trial_frame, trial_summary))
        return table

    @asset(
        **conventions("fault_replays"),
        **per_version,
        deps=upstream("cases", "recorded_runs"),
        code_version=code_version["fault_replays"],
        pool=sandbox_pool(project),
        description="Each recorded case replayed per fault plan (a control replay, then one with a tool "
        "call's result replaced by a fault), with the outcome; reused while version, recording and plan hold.",
    )
    def fault_replays(
        context: AssetExecutionContext,
        evaluation_project: EvaluationProject,
        sandbox_cluster: SandboxCluster,
    ) -> AssembledTable:
        loaded = evaluation_project.load()
        stored = stored_tables(loaded, context.partition_key)
        with sandbox_cluster.sandboxes(loaded.config.execution) as sandboxes:
            table, summary = replay_fault_rows(
                loaded, stored["cases"], stored["recorded_runs"], version=context.partition_key,
                run_id=context.run.run_id, sandboxes=sandboxes, system=system_of_run(context),
            )
        context.log.info(f"replayed {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(replay_metadata(table.whole, summary))
        return table

    @asset(
        **conventions("verdicts"),
        **per_version,
        deps=upstream("cases", "derived_cases", "recorded_runs", "fault_replays"),
        code_version=code_version["verdicts"],
        description="One verdict per case and criterion, naming the runs that recorded and judged it; "
        "reused while its evaluator, recording and replay hold.",
    )
    def verdicts(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> AssembledTable:
        loaded = evaluation_project.load()
        stored = stored_tables(loaded, context.partition_key)
        table, summary = judge_verdict_rows(
            loaded, stored["cases"], stored["recorded_runs"], stored["fault_replays"],
            stored["verdicts"].readable("every verdict judged again"),
            version=context.partition_key, judged_by_run=context.run.run_id,
        )
        trial_frame, trial_summary = judge_trial_table(
            loaded, stored["cases"], stored["trial_runs"], stored["trial_verdicts"].readable("every later trial judged again"),
            version=context.partition_key, judged_by_run=context.run.run_id,
        )
        context.add_output_metadata(verdict_metadata(loaded, table.whole, summary, trial_frame, trial_summary))
        return table

    @asset(
        **conventions("gate"),
        **per_version,
        deps=upstream("cases", "derived_cases", "recorded_runs", "fault_replays", "verdicts", "slices")
        + (upstream(CERTIFICATION) if project.release.require_certified_cases else []),
        code_version=code_version["gate"],
        check_specs=rule_checks,
        description="The release gate: a decision per rule with its interval, and ALLOW or BLOCK. The Checks "
        "tab has one check per rule (rule_<id>) and gate_allows_release, which fails on a BLOCK. A BLOCK is a "
        "successful evaluation: the materialization and the run stay green, the run tagged oloproof/gate=BLOCK.",
    )
    def gate(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> Iterator[Output | AssetCheckResult]:
        loaded, version = evaluation_project.load(), context.partition_key
        stored, flags = stored_tables(loaded, version), certification_flags(loaded)
        decided = gate_of_version(loaded, stored, version, run_id=context.run.run_id, flags=flags)
        # The report is written here, not downstream: with the blocking variant of the gate
        # check a BLOCK skips anything after the gate, and a blocked release is when the report
        # is read most.
        report = write_version_report(loaded, stored, version, decided.frame, decided.trials)
        context.log.info(report.panels_line())
        context.log.info(gate_log_line(version, decided.decision))
        # The decision is known only now, so it is tagged here, whoever launched the run.
        context.instance.add_run_tags(context.run.run_id, {GATE_TAG: decided.decision.decision})
        yield Output(decided.frame, metadata=gate_metadata(decided, report.path, report.written, flags))
        yield from rule_check_results(rule_checks, rows_from_frame(decided.frame, tables.GATE_NESTED))

    @asset(
        **conventions("slices"),
        **per_version,
        deps=upstream("cases", "derived_cases", "recorded_runs", "verdicts"),
        code_version=code_version["slices"],
        description="Exploratory rates per slice bucket (tool calls, steps, metadata) with "
        "Benjamini-Yekutieli marks; never gated.",
    )
    def slices(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        loaded, version = evaluation_project.load(), context.partition_key
        frame, rows, reuse = slices_of_version(loaded, stored_tables(loaded, version), version, run_id=context.run.run_id)
        context.add_output_metadata(slices_metadata(frame, rows, reuse))
        return frame

    @asset(
        **conventions(CERTIFICATION),
        **common,
        name=CERTIFICATION,
        deps=upstream("cases", "derived_cases"),
        code_version=certification_code_version(code_version),
        pool=sandbox_pool(project),
        description="Each case certified: a do-nothing run and its reference run (expected.actions, played "
        "through the system's tool box) judged by its own criteria, its copies and duplicates checked; the "
        "cases flagged, each flag with its reason. Reference runs are kept while the case and system code hold.",
    )
    def case_certification(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        loaded = evaluation_project.load()
        stored = stored_tables(loaded)
        cases = tables.cases_with_copies(stored["cases"].whole(tables.CASES_SCHEMA), None)
        frame, summary = certify_cases(
            loaded, cases, previous_at(loaded.root, CERTIFICATION, "reference runs played"), certified_by_run=context.run.run_id,
        )
        context.log.info(f"certified {len(frame)} cases: {summary.flagged} flagged, {summary.played} references played")
        context.add_output_metadata(certification_metadata(frame, summary, flagged_rows(frame)))
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
            metadata=gate_check_metadata(decision, rules),
        )

    @asset(
        **conventions("version_comparison"),
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

    assets = [cases, derived_cases, recorded_runs, fault_replays, verdicts, gate, slices, version_comparison, case_certification]
    return assets, [gate_allows_release]
