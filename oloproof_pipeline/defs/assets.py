"""The asset graph for one evaluation project. Each body calls the core and adds metadata.

No `from __future__ import annotations` here: Dagster reads the `context` annotation at runtime.
"""


import pandas as pd
from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetIn,
    AssetKey,
    DynamicPartitionsDefinition,
    MetadataValue,
    asset,
    asset_check,
)

from ..model.outcomes import ALLOW, BLOCK, PASS
from ..decide.certification import decide_certified_gate, exclude_uncertified
from ..decide.validity import transform_validity, validity_markdown
from ..decide.trials import project_trial_summaries, trials_markdown
from ..decide.gate import (
    GATED_TRIAL_COLUMNS,
    GATED_VERDICT_COLUMNS,
    VALIDITY_COLUMNS,
    decide_release_gate,
    gate_from_table,
    gate_inputs_digest,
    gate_table,
    reusable_gate,
)
from ..decide.slices import (
    SLICED_VERDICT_COLUMNS,
    facts_from_tables,
    project_slices_of,
    reusable_slices,
    slice_table,
    slices_from_table,
    slices_inputs_digest,
    slices_markdown,
)
from ..evaluators.judging import judge_verdict_table
from ..evaluators.trials import judge_trial_table
from ..model.cases import load_cases
from ..model.config import Project
from ..model.errors import ProjectError
from ..model.fingerprints import code_versions, copies_inputs_digest
from ..model.transforms import derive_cases
from ..read import compare as comparison
from ..read.reports import (
    PANEL_CASE_FIELDS,
    PANEL_VERDICT_FIELDS,
    REPORT_RUN_FIELDS,
    REPORT_VALIDITY_FIELDS,
    REPORTED_CASE_COLUMNS,
    REPORTED_REPLAY_COLUMNS,
    REPORTED_RUN_COLUMNS,
    REPORTED_VERDICT_COLUMNS,
    report_inputs_digest,
    report_is_current,
    report_path,
    write_html_report,
)
from ..read.results import load_results, outcome_counts, replay_rows, results_from_tables
from ..run.certification import certify_cases, flagged_rows
from ..run.recording import record_case_table
from ..run.trials import record_trial_table
from ..run.replaying import replay_fault_table
from ..store import tables
from ..store.layout import output_dir
from ..store.stored import StoredTable
from ..store.tables import model_usage_totals, reusable_copies, rows_from_frame
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
# The per-version tables the assets read back from storage (by column, see `StoredTable`).
PER_VERSION_TABLES = ("recorded_runs", "fault_replays", "verdicts", "slices", "gate", "trial_runs", "trial_verdicts")


def why(reasons: list[str]) -> dict:
    """Why anything ran again: one line per reason (`oloproof run` prints them too)."""
    return {"why": MetadataValue.json(reasons)}


def progress_step(total: int) -> int:
    """Log progress about twenty times a run: each log line is an event stored in the instance."""
    return max(10, total // 20)


def stored_tables(project: Project, version: str | None = None) -> dict[str, StoredTable]:
    """The project's stored tables as the assets read them: by column, as needed. `cases` is
    the sources and their copies stacked."""
    found = {"cases": StoredTable.at(project.root, "cases", "derived_cases"), "derived_cases": StoredTable.at(project.root, "derived_cases")}
    if version is not None:
        found.update({name: StoredTable.at(project.root, name, partition=version) for name in PER_VERSION_TABLES})
    return found


def previous(table: StoredTable, what: str) -> pd.DataFrame | None:
    """A stage's own stored output, to reuse: none when there is none or it cannot be read
    (a warning says so, and the stage computes it again)."""
    table = table.readable(f"{what} again")
    return table.whole() if table.exists else None


def write_report(
    project: Project, stored: dict[str, StoredTable], version: str, gate: pd.DataFrame, trials: list | None = None
) -> tuple:
    """The version's HTML report, written again only when what it shows changed: (path, written)."""
    runs, replays, verdicts = stored["recorded_runs"], stored["fault_replays"], stored["verdicts"]
    slices = previous(stored["slices"], "slices read")
    inputs_digest = report_inputs_digest(
        project.name, version, cases=stored["cases"].columns(*REPORTED_CASE_COLUMNS),
        runs=runs.columns(*REPORTED_RUN_COLUMNS) if runs.exists else None,
        replays=replays.columns(*REPORTED_REPLAY_COLUMNS) if replays.exists else None,
        verdicts=verdicts.columns(*REPORTED_VERDICT_COLUMNS), gate=gate, slices=slices, trials=trials,
    )
    path = report_path(project.root, version)
    if report_is_current(path, inputs_digest):
        return path, False
    results = results_from_tables(  # only the columns a report shows are read
        version, cases=stored["cases"].columns(*PANEL_CASE_FIELDS, *REPORT_VALIDITY_FIELDS), derived_cases=None,
        recorded_runs=runs.columns(*REPORT_RUN_FIELDS) if runs.exists else None,
        verdicts=verdicts.columns(*PANEL_VERDICT_FIELDS), gate=gate, slices=slices,
    )
    replay_table = replays.whole(tables.FAULT_REPLAYS_SCHEMA) if replays.exists else None
    report = write_html_report(
        project.root, results, project.name, replays=replay_rows(replay_table), inputs_digest=inputs_digest, trials=trials
    )
    return report, True


def trial_metadata(project: Project, trial_frame: pd.DataFrame | None, counts: dict) -> dict:
    """The number of trials and the counts of trials 2..k (nothing with one trial)."""
    if trial_frame is None:
        return {}
    return {"trials": project.config.execution.trials, **counts, "trial_rows": len(trial_frame)}


def stored_trial_verdicts(project: Project, table: StoredTable) -> pd.DataFrame | None:
    """The verdicts of trials 2..k the gate reads (None with one trial)."""
    if project.config.execution.trials == 1:
        return None
    table = table.readable("the gate is decided from trial 1 alone")
    return table.columns(*GATED_TRIAL_COLUMNS) if table.exists else None


def trials_metadata(trials: list) -> dict:
    """pass^k, pass@1 and the flaky cases per criterion, small enough for the asset's page."""
    return {
        "trials_summary": MetadataValue.md(trials_markdown(trials)),
        "flaky_cases": MetadataValue.json({
            each.criterion: {"count": each.flaky_cases, "flips": {case.case_id: case.flips for case in each.flaky}}
            for each in trials if each.flaky_cases
        }),
    }


CERTIFICATION = "case_certification"


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


def flags_markdown(rows: list[dict]) -> str:
    """The flagged cases as a Markdown table (case, flag, criterion, reason)."""
    if not rows:
        return "No case flagged."
    lines = ["| case | flag | criterion | reason |", "| --- | --- | --- | --- |"]
    lines += [
        f"| {row['case_id']} | {row['flag']} | {row['criterion'] or 'every criterion'} | {row['reason'].replace('|', '/')} |"
        for row in rows
    ]
    return "\n".join(lines)


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

    def upstream(*names: str) -> list[AssetKey]:
        """This project's assets of those names: read by column from storage, not loaded whole."""
        return [AssetKey([*prefix, name]) for name in names]

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
        ins={"cases": AssetIn(key_prefix=prefix)},
        code_version=code_version["derived_cases"],
        description="One copy of each case per metamorphic transform, its pair digest, and whether "
        "people's labels kept it; per transform, whether the labels check it.",
    )
    def derived_cases(
        context: AssetExecutionContext, evaluation_project: EvaluationProject, cases: pd.DataFrame
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        inputs_digest = copies_inputs_digest(loaded, cases)
        frame = reusable_copies(previous(StoredTable.at(loaded.root, "derived_cases"), "copies derived"), inputs_digest)
        labels = {}
        if frame is None:
            derived = derive_cases(loaded, tables.cases_from_table(cases))
            frame = tables.derived_case_table(derived.copies, inputs_digest=inputs_digest)
            labels = {"labels": MetadataValue.json([summary.model_dump() for summary in derived.label_summaries])}
        validity = transform_validity(frame)
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                "copies_reused": not labels,
                "validity": MetadataValue.md(validity_markdown(validity)),
                "validity_by_transform": MetadataValue.json({name: item.model_dump() for name, item in validity.items()}),
                **labels,
                "transforms_not_checked": ", ".join(name for name, item in validity.items() if not item.checked) or "none",
            }
        )
        return frame

    @asset(
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
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        cases = stored_tables(loaded)["cases"]
        progress = ProgressLog(context.log, "recorded", len(cases), every=progress_step(len(cases)))
        with sandbox_cluster.sandboxes(loaded.config.execution) as sandboxes:
            frame, summary = record_case_table(
                loaded, cases, version=context.partition_key, run_id=context.run.run_id, fresh=config.fresh,
                on_recorded=progress.step, sandboxes=sandboxes,
            )
            trial_frame, trial_summary = record_trial_table(
                loaded, cases, version=context.partition_key, run_id=context.run.run_id, fresh=config.fresh,
                on_recorded=progress.step, sandboxes=sandboxes,
            )
        context.log.info(f"recorded {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                **why(summary.reasons() + trial_summary.reasons("trial recording")),
                "status": MetadataValue.json(value_counts(frame, "status")),
                **trial_metadata(loaded, trial_frame, trial_summary.as_metadata("trial_runs")),
                # A chat agent's cost for the version: model calls, tokens, latency (summed).
                **model_usage_totals(frame),
            }
        )
        return frame

    @asset(
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
    ) -> pd.DataFrame:
        loaded = evaluation_project.load()
        stored = stored_tables(loaded, context.partition_key)
        with sandbox_cluster.sandboxes(loaded.config.execution) as sandboxes:
            frame, summary = replay_fault_table(
                loaded, stored["cases"], stored["recorded_runs"], version=context.partition_key,
                run_id=context.run.run_id, sandboxes=sandboxes,
            )
        context.log.info(f"replayed {summary.new} cases, reused {summary.reused}, {summary.failed} failed")
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                **why(summary.reasons()),
                "outcome_counts": MetadataValue.json(outcome_counts(frame)),
            }
        )
        return frame

    @asset(
        **per_version,
        deps=upstream("cases", "derived_cases", "recorded_runs", "fault_replays"),
        code_version=code_version["verdicts"],
        description="One verdict per case and criterion, naming the runs that recorded and judged it; "
        "reused while its evaluator, recording and replay hold.",
    )
    def verdicts(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        loaded = evaluation_project.load()
        stored = stored_tables(loaded, context.partition_key)
        frame, summary = judge_verdict_table(
            loaded, stored["cases"], stored["recorded_runs"], stored["fault_replays"],
            stored["verdicts"].readable("every verdict judged again"),
            version=context.partition_key, judged_by_run=context.run.run_id,
        )
        trial_frame, trial_summary = judge_trial_table(
            loaded, stored["cases"], stored["trial_runs"], stored["trial_verdicts"].readable("every later trial judged again"),
            version=context.partition_key, judged_by_run=context.run.run_id,
        )
        context.add_output_metadata(
            {
                "outcomes": outcomes_table(outcome_counts(frame)),
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                "verdicts_judged_by_criterion": MetadataValue.json(dict(summary.judged_by_criterion)),
                **why(summary.reasons() + trial_summary.reasons()),
                **trial_metadata(loaded, trial_frame, {
                    "trial_verdicts_judged": trial_summary.judged, "trial_verdicts_reused": trial_summary.reused,
                }),
            }
        )
        return frame

    @asset(
        **per_version,
        deps=upstream("cases", "derived_cases", "recorded_runs", "fault_replays", "verdicts", "slices")
        + (upstream(CERTIFICATION) if project.release.require_certified_cases else []),
        code_version=code_version["gate"],
        description="The release gate: a decision per rule with its interval, and ALLOW or BLOCK. "
        "A BLOCK is a successful evaluation: the run stays green and carries the tag oloproof/gate=BLOCK.",
    )
    def gate(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        loaded = evaluation_project.load()
        version = context.partition_key
        stored = stored_tables(loaded, version)
        validity = stored["derived_cases"].columns(*VALIDITY_COLUMNS) if stored["derived_cases"].exists else None
        flags = certification_flags(loaded)
        gated = stored["verdicts"].columns(*GATED_VERDICT_COLUMNS, "case_id")
        later_trials = stored_trial_verdicts(loaded, stored["trial_verdicts"])
        inputs_digest = gate_inputs_digest(
            loaded, gated if flags is None else exclude_uncertified(gated, flags)[0], validity, later_trials
        )
        stored_gate = previous(stored["gate"], "gate decided")
        frame = reusable_gate(stored_gate, inputs_digest)
        reused, reasons = frame is not None, []
        if frame is None:
            decision = (
                decide_release_gate(loaded, gated, validity, later_trials) if flags is None
                else decide_certified_gate(loaded, gated, validity, flags, later_trials)
            )
            frame = gate_table(decision, version=version, judged_by_run=context.run.run_id, inputs_digest=inputs_digest)
            reasons.append(
                "gate decided: first gate of this version" if stored_gate is None
                else "gate decided again: its verdicts, labels or release policy changed"
            )
        else:
            decision = gate_from_table(frame)
        # The report is written here, not downstream: with the blocking variant of the gate
        # check a BLOCK skips anything after the gate, and a blocked release is when the report
        # is read most.
        trials = project_trial_summaries(loaded, gated, later_trials)
        report, written = write_report(loaded, stored, version, frame, trials)
        if written:
            reasons.append("report written: what it shows changed")
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
                "gate_reused": reused,
                **({} if flags is None else {"uncertified_cases_excluded": len({flag["case_id"] for flag in flags})}),
                **why(reasons),
                **rule_numbers(rules),
                **({} if trials is None else trials_metadata(trials)),
            }
        )
        return frame

    @asset(
        **per_version,
        deps=upstream("cases", "derived_cases", "recorded_runs", "verdicts"),
        code_version=code_version["slices"],
        description="Exploratory rates per slice bucket (tool calls, steps, metadata) with "
        "Benjamini-Yekutieli marks; never gated.",
    )
    def slices(context: AssetExecutionContext, evaluation_project: EvaluationProject) -> pd.DataFrame:
        loaded = evaluation_project.load()
        version = context.partition_key
        stored = stored_tables(loaded, version)
        sliced = stored["verdicts"].columns(*SLICED_VERDICT_COLUMNS)
        inputs_digest = slices_inputs_digest(loaded, sliced)
        stored_slices = previous(stored["slices"], "slices computed")
        frame = reusable_slices(stored_slices, inputs_digest)
        reused, reasons = frame is not None, []
        if frame is None:
            facts = facts_from_tables(stored["cases"].columns("case_id", "metadata"), stored["recorded_runs"].columns("case_id", "trajectory"))
            rows = project_slices_of(loaded, sliced, facts)
            frame = slice_table(rows, version=version, sliced_by_run=context.run.run_id, inputs_digest=inputs_digest)
            reasons.append(
                "slices computed: first slices of this version" if stored_slices is None
                else "slices computed again: their verdicts or settings changed"
            )
        else:
            rows = slices_from_table(frame)
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                "slices_reused": reused,
                **why(reasons),
                "slices": MetadataValue.md(slices_markdown(rows)),
                "buckets_marked_different": sum(bool(row.differs) for row in rows),
            }
        )
        return frame

    @asset(
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
            loaded, cases, previous(StoredTable.at(loaded.root, CERTIFICATION), "reference runs played"),
            certified_by_run=context.run.run_id,
        )
        context.log.info(f"certified {len(frame)} cases: {summary.flagged} flagged, {summary.played} references played")
        context.add_output_metadata(
            {
                "dagster/row_count": len(frame),
                **summary.as_metadata(),
                "flags": MetadataValue.json(summary.flags),
                "flagged": MetadataValue.md(flags_markdown(flagged_rows(frame))),
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

    assets = [cases, derived_cases, recorded_runs, fault_replays, verdicts, gate, slices, version_comparison, case_certification]
    return assets, [gate_allows_release]
