"""The system resolved once per launch and carried with the run: `run_evaluation` and the
sensor file it as the run tag `oloproof/system`, the run's partition is its version, and one
run loads the project once (it was loaded three times, each YAML file read twice)."""

from __future__ import annotations

from collections import Counter

from dagster import SensorResult, build_sensor_context

import oloproof_pipeline.model.config as config_module
import oloproof_pipeline.project as project_module
from oloproof_pipeline.defs import build_definitions
from oloproof_pipeline.defs.launch import run_evaluation
from oloproof_pipeline.model.fingerprints import system_code_fingerprint
from oloproof_pipeline.project import load_project
from oloproof_pipeline.run.system import SYSTEM_TAG, ResolvedSystem


def declared_system(refund_desk) -> ResolvedSystem:
    """The example declares its version, so nothing is imported to resolve it."""
    return ResolvedSystem(version="1.0.0", code_digest=system_code_fingerprint(load_project(refund_desk)).digest)


def test_a_run_carries_its_system_and_loads_the_project_once(refund_desk, instance, monkeypatch):
    expected = declared_system(refund_desk)
    loads, reads = Counter(), Counter()
    check = project_module._check_relations_name_transforms  # called once per load_project

    def counted_check(*args):
        loads["load_project"] += 1
        return check(*args)

    read = config_module.read_text_file

    def counted_read(path):
        reads[path.name] += 1
        return read(path)

    monkeypatch.setattr(project_module, "_check_relations_name_transforms", counted_check)
    monkeypatch.setattr(config_module, "read_text_file", counted_read)
    evaluation = run_evaluation(refund_desk, instance=instance)
    assert evaluation.success and evaluation.version == "1.0.0"
    run = instance.get_run_by_id(evaluation.run_id)
    assert ResolvedSystem.from_tag(run.tags[SYSTEM_TAG]) == expected
    assert run.tags["dagster/partition"] == expected.version
    assert loads["load_project"] == 1
    assert reads["release.yaml"] == 1
    # oloproof.yaml once more per derivation of the copies (for line numbers), in the launch's check and the run.
    assert reads["oloproof.yaml"] <= 3


def test_the_sensor_files_the_system_on_the_run_it_requests(refund_desk, instance):
    sensor = build_definitions(refund_desk).resolve_sensor_def("refund_desk_new_system_version")
    result = sensor(build_sensor_context(instance=instance))
    assert isinstance(result, SensorResult)
    [request] = result.run_requests
    assert ResolvedSystem.from_tag(request.tags[SYSTEM_TAG]) == declared_system(refund_desk)
