"""The asset graph end to end on the refund desk: real runs, real Parquet, real lineage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from dagster import AssetCheckKey, AssetKey, FloatMetadataValue, IntMetadataValue, PathMetadataValue

from oloproof_pipeline.defs import EVALUATE_JOB, build_definitions, versions_partitions
from oloproof_pipeline.project import load_project
from oloproof_pipeline.store.layout import table_path

from conftest import REPO

TABLE_COLUMNS = {
    "cases": ["case_id", "case_digest", "source_id", "transform", "group_id", "input", "initial_state", "expected", "metadata"],
    "recorded_runs": [
        "case_id", "case_digest", "system_version", "status", "error", "output", "trajectory",
        "environment_state", "duration_s", "recorded_by_run",
    ],
    "verdicts": [
        "case_id", "criterion", "outcome", "reason", "details", "system_version", "recorded_by_run",
        "replayed_by_run", "judged_by_run",
    ],
    "gate": [
        "rule_id", "metric", "decision", "estimate", "lower", "upper", "method", "observed", "missing",
        "excluded", "reasons", "suite_size_to_decide", "gate_decision",
    ],
}


def test_whole_graph_writes_parquet_with_lineage(evaluated_in_instance):
    refund_desk, instance, evaluation = evaluated_in_instance
    assert evaluation.version == "1.0.0" and evaluation.errors == []
    tables = {name: pd.read_parquet(table_path(refund_desk, name, None if name == "cases" else "1.0.0")) for name in TABLE_COLUMNS}
    for name, columns in TABLE_COLUMNS.items():
        assert set(columns) <= set(tables[name].columns), name

    assert len(tables["cases"]) == 24
    runs = tables["recorded_runs"]
    assert len(runs) == 24 * 3  # each source and its two metamorphic copies
    assert (runs["status"] == "ok").all() and (runs["recorded_by_run"] == evaluation.run_id).all()
    verdicts = tables["verdicts"]
    assert len(verdicts) == len(runs) * len(load_project(refund_desk).criteria())
    assert (verdicts["judged_by_run"] == evaluation.run_id).all()
    assert (verdicts["recorded_by_run"] == evaluation.run_id).all()
    # The override cases are the desk's first flaw: refunded without a lookup.
    override = verdicts[(verdicts["case_id"] == "ord-021") & (verdicts["criterion"] == "state_correct")]
    assert override["outcome"].item() == "FAIL"
    gate = tables["gate"]
    assert {"answers", "end_state", "bystanders", "paraphrase_consistency", "injection_resistance"} <= set(gate["rule_id"])
    assert set(gate["gate_decision"]) == {"BLOCK"}
    by_rule = gate.set_index("rule_id")
    assert by_rule.loc["bystanders", "decision"] == "PASS"
    # Copies are not counted as excluded under source-only rules, nor sources under relations;
    # cases that never made the faulted call are.
    assert (by_rule.loc["bystanders", "observed"], by_rule.loc["bystanders", "excluded"]) == (24, 0)
    assert by_rule.loc["injection_resistance", "excluded"] == 0
    assert (by_rule.loc["refund_failures", "observed"], by_rule.loc["refund_failures", "excluded"]) == (12, 12)


def test_materializations_carry_counts_and_the_gate_table(evaluated_in_instance):
    refund_desk, instance, evaluation = evaluated_in_instance
    verdicts = instance.get_latest_materialization_event(AssetKey(["refund_desk", "verdicts"]))
    assert verdicts.run_id == evaluation.run_id  # the event links its run; no metadata repeats it
    metadata = verdicts.asset_materialization.metadata
    assert metadata["dagster/row_count"].value == 72 * len(load_project(refund_desk).criteria())
    # The 48 metamorphic copies are judged only by the metamorphic relations.
    outcomes = {record.data["criterion"]: record.data for record in metadata["outcomes"].value.records}
    assert outcomes["other_order_untouched"] == {
        "criterion": "other_order_untouched", "PASS": 24, "FAIL": 0, "MISSING": 0, "EXCLUDED": 48
    }
    assert not {"outcome_counts", "dagster_run"} & set(metadata)  # one entry per fact
    gate = instance.get_latest_materialization_event(AssetKey(["refund_desk", "gate"])).asset_materialization
    assert gate.partition == "1.0.0"
    assert list(gate.metadata)[:2] == ["rules", "decision"]  # what the asset page shows first
    assert gate.metadata["decision"].value == "BLOCK"
    summary = gate.metadata["rules"].value
    assert len(summary) < 1000  # shown inline by Dagster's UI, not behind "[Show Markdown]"
    assert summary.index("**FAIL** refund_failures") < summary.index("**INSUFFICIENT_EVIDENCE** answers")
    assert "**PASS** bystanders, paraphrase_consistency" in summary
    assert "- **FAIL** injection_resistance  \n  rate 0.667, interval [0.447, 0.844] " \
        "exact  \n  passed/judged 16/24  \n  upper 0.844 < min 0.9\n" in summary
    # Per rule its rate and the bound it is judged by (a `min` bar: the lower bound) are charted
    # across versions by the Plots view; no constant (a bar, the gate's row count) is charted.
    assert gate.metadata["injection_resistance.rate"].value == pytest.approx(16 / 24, abs=1e-4)
    assert gate.metadata["injection_resistance.lower"].value == pytest.approx(0.447, abs=1e-3)
    numbers = {name for name, value in gate.metadata.items() if isinstance(value, (FloatMetadataValue, IntMetadataValue))}
    rules = set(pd.read_parquet(table_path(refund_desk, "gate", "1.0.0"))["rule_id"])
    assert numbers == {f"{rule}.{number}" for rule in rules for number in ("rate", "lower")}
    assert {"table_path", "gate", "dagster_run"}.isdisjoint(gate.metadata)  # `path` names the table
    # The table and the report as path values (shown with a copy button), not markdown links.
    assert isinstance(gate.metadata["path"], PathMetadataValue)
    assert gate.metadata["path"].value == str(table_path(refund_desk, "gate", "1.0.0").resolve())
    report = Path(gate.metadata["report"].value)
    assert isinstance(gate.metadata["report"], PathMetadataValue) and report.is_file()
    assert report.name == "report-1.0.0.html" and report.is_absolute()
    recorded = instance.get_latest_materialization_event(AssetKey(["refund_desk", "recorded_runs"])).asset_materialization
    assert recorded.metadata["cases_new"].value == 72  # 24 sources and 48 copies


def test_a_blocked_release_is_a_successful_run_tagged_with_the_decision(evaluated_in_instance):
    refund_desk, instance, evaluation = evaluated_in_instance
    run = instance.get_run_by_id(evaluation.run_id)
    assert evaluation.success and evaluation.errors == []
    assert run.status.value == "SUCCESS" and run.tags["oloproof/gate"] == "BLOCK"
    assert run.tags["oloproof/project"] == "refund_desk"  # which project, in the runs list
    records = instance.event_log_storage.get_asset_check_execution_history(
        AssetCheckKey(AssetKey(["refund_desk", "gate"]), "gate_allows_release"), limit=1
    )
    assert records[0].evaluation.passed is False  # the check still says the release is not allowed
    assert records[0].evaluation.severity.value == "ERROR"
    # The decision and the rules that block it, worst first; each rule's own check says why.
    assert {name: value.value for name, value in records[0].evaluation.metadata.items()} == {
        "decision": "BLOCK", "passing": "bystanders, paraphrase_consistency",
        "blocked by": "refund_failures FAIL, injection_resistance FAIL, answers INSUFFICIENT_EVIDENCE, "
        "end_state INSUFFICIENT_EVIDENCE",
    }
    logged = [
        event.message for event in instance.all_logs(evaluation.run_id)
        if event.step_key == "refund_desk__gate" and "gate 1.0.0: BLOCK" in (event.message or "")
    ]
    assert len(logged) == 1 and "refund_failures: FAIL" in logged[0]


def test_each_rule_is_a_check_on_the_gate_with_the_cli_decision(evaluated_in_instance):
    """The gate's Checks tab reads as the CLI's decisions table: one check per rule, passed
    when it PASSes, else failed with ERROR (every other decision blocks), in the CLI's words."""
    refund_desk, instance, _ = evaluated_in_instance
    gate = pd.read_parquet(table_path(refund_desk, "gate", "1.0.0")).set_index("rule_id")
    graph = build_definitions(refund_desk).resolve_asset_graph()
    assert sorted(key.name for key in graph.asset_check_keys) == sorted(["gate_allows_release", *(f"rule_{rule}" for rule in gate.index)])
    for rule, row in gate.iterrows():
        [record] = instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey(["refund_desk", "gate"]), f"rule_{rule}"), limit=1
        )
        evaluation = record.evaluation
        assert evaluation.passed == (row["decision"] == "PASS") and evaluation.severity.value == "ERROR", rule
        assert evaluation.partition == "1.0.0"
        metadata = {name: value.value for name, value in evaluation.metadata.items()}
        # Dagster stores a check's metadata sorted by name, so only the names are asserted.
        assert set(metadata) == {"decision", "rate", "interval", "bar", "passed/judged", "missing", "excluded", "method", "reasons"}
        assert metadata["decision"] == row["decision"] and metadata["bar"] == f"min {row['bar']:g}"
        assert metadata["passed/judged"] == f"{row['passed']}/{row['passed'] + row['failed']}"
        assert (metadata["missing"], metadata["excluded"]) == (str(row["missing"]), str(row["excluded"]))
        # The rate is the check's one number, so its Plots view charts the rate and nothing flat.
        numbers = [name for name, value in evaluation.metadata.items() if isinstance(value, (FloatMetadataValue, IntMetadataValue))]
        assert numbers == (["rate"] if row["estimate"] == row["estimate"] else []), rule
    injection = {
        name: value.value for name, value in instance.event_log_storage.get_asset_check_execution_history(
            AssetCheckKey(AssetKey(["refund_desk", "gate"]), "rule_injection_resistance"), limit=1
        )[0].evaluation.metadata.items()
    }
    assert injection == {
        "decision": "FAIL", "rate": 0.667, "interval": "[0.447, 0.844]", "bar": "min 0.9", "passed/judged": "16/24",
        "missing": "0", "excluded": "0", "method": "exact", "reasons": "upper 0.844 < min 0.9",
    }


def test_assets_carry_kinds_owners_tags_and_their_stored_columns(evaluated_in_instance):
    """Dagster's conventions: kinds, the owners and tags of oloproof.yaml's `dagster:` block,
    and a column schema naming exactly the columns of the Parquet file the asset wrote."""
    refund_desk, _, _ = evaluated_in_instance
    graph = build_definitions(refund_desk).resolve_asset_graph()
    for name in ("cases", "derived_cases", "recorded_runs", "fault_replays", "verdicts", "slices", "gate"):
        node = graph.get(AssetKey(["refund_desk", name]))
        assert {"python", "pandas", "parquet"} <= node.kinds, name
        assert node.owners == ["team:support-evals"] and node.tags["domain"] == "refunds", name
        schema = node.metadata["dagster/column_schema"]
        stored = pd.read_parquet(table_path(refund_desk, name, None if name in ("cases", "derived_cases") else "1.0.0"))
        assert [column.name for column in schema.columns] == list(stored.columns), name
    assert "html" in graph.get(AssetKey(["refund_desk", "gate"])).kinds  # it writes the report


def test_blocking_variant_stops_what_depends_on_the_gate(refund_desk, instance):
    """What must not run on a blocked version depends on the gate, with the check made blocking."""
    from dagster import AssetIn, Definitions, asset

    versions = versions_partitions(load_project(refund_desk))

    @asset(key_prefix=["refund_desk"], group_name="refund_desk", partitions_def=versions,
           ins={"gate": AssetIn(key=AssetKey(["refund_desk", "gate"]))}, io_manager_key="oloproof_parquet")
    def publish(gate: pd.DataFrame) -> pd.DataFrame:
        return gate

    instance.add_dynamic_partitions(versions.name, ["1.0.0"])
    published = {}
    for blocking in (False, True):
        definitions = Definitions.merge(
            build_definitions(refund_desk, stop_downstream_on_block=blocking), Definitions(assets=[publish])
        )
        result = definitions.resolve_job_def(EVALUATE_JOB).execute_in_process(
            partition_key="1.0.0", instance=instance, raise_on_error=False
        )
        succeeded = {event.step_key for event in result.all_events if event.event_type_value == "STEP_SUCCESS"}
        published[blocking] = (result.success, "refund_desk__publish" in succeeded)
    assert published[False] == (True, True)  # by default a BLOCK is a green run and downstream runs
    assert published[True] == (False, False)  # blocking: the run fails and `publish` never runs


def test_recording_a_partition_that_is_not_the_loaded_version_is_refused(refund_desk, instance):
    project = load_project(refund_desk)
    instance.add_dynamic_partitions(versions_partitions(project).name, ["0.9.0"])
    result = build_definitions(refund_desk).resolve_job_def(EVALUATE_JOB).execute_in_process(
        partition_key="0.9.0", instance=instance, raise_on_error=False
    )
    assert not result.success
    failures = [event for event in result.all_events if event.event_type_value == "STEP_FAILURE"]
    assert "refusing to record partition '0.9.0'" in failures[0].step_failure_data.error.to_string()
    assert not table_path(refund_desk, "recorded_runs", "0.9.0").exists()


def test_workspace_validates():
    finished = subprocess.run(
        [str(Path(sys.executable).parent / "dagster"), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert finished.returncode == 0, finished.stdout + finished.stderr


@pytest.mark.parametrize("block, field", [
    ("dagster:\n  owners: [nobody]\n", "dagster.owners: Value error, owner 'nobody' is neither an email address nor 'team:<name>'"),
    ("dagster:\n  tags: {dagster/kind/x: ''}\n", "dagster.tags: Value error, tag key 'dagster/kind/x'"),
    ("dagster:\n  tags: {domain: 'has space'}\n", "dagster.tags: Value error, tag 'domain': value 'has space'"),
    ("dagster:\n  colour: red\n", "dagster.colour: unknown key"),
])
def test_a_dagster_block_dagster_would_refuse_is_one_line_naming_file_line_and_field(refund_desk, block, field):
    from oloproof_pipeline.model.errors import ProjectError

    config = refund_desk / "oloproof.yaml"
    text = config.read_text()
    text = text[: text.index("\ndagster:")] + "\n" + block  # the example's own block replaced
    config.write_text(text)
    with pytest.raises(ProjectError) as refused:
        load_project(refund_desk)
    line = len(text.splitlines()) - block.count("\n") + 2  # the block's second line
    assert str(refused.value).startswith(f"{config}:{line}: {field}") and "\n" not in str(refused.value)
