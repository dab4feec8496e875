"""A run's exit code says what was decided: a broken stored gate decided again exits with the
gate's code, and a missing module named by oloproof.yaml is a configuration error (2), found
however late, never the pipeline's failure (5)."""

from __future__ import annotations

import json

from oloproof_pipeline.model.outcomes import EXIT_ALLOW, EXIT_USAGE
from oloproof_pipeline.store.layout import table_path

from conftest import write_project
from helpers import oloproof, tiny_stateful_app

DONE_CASES = [
    {"id": f"c{n:02d}", "input": {}, "initial_state": {"done": False}, "expected": {"state": {"done": True}}}
    for n in range(12)
]


def test_a_broken_stored_gate_is_decided_again_and_the_run_exits_with_its_code(tmp_path):
    root = write_project(tmp_path / "tiny", app=tiny_stateful_app(), cases=DONE_CASES)
    first = oloproof("run", cwd=root)
    assert first.returncode == EXIT_ALLOW, first.stdout + first.stderr
    stored_gate = table_path(root, "gate", "1.0.0")
    stored_gate.write_bytes(b"garbage")

    again = oloproof("run", cwd=root)
    assert again.returncode == EXIT_ALLOW, again.stdout + again.stderr
    assert again.stderr.splitlines() == [f"warning: {stored_gate}: stored table cannot be read; gate decided again"]
    assert "Gate: ALLOW (exit code 0" in again.stdout
    assert oloproof("gate", cwd=root).returncode == EXIT_ALLOW  # the gate decided again was stored


def test_certify_with_a_reference_whose_module_is_missing_is_one_configuration_error(tmp_path):
    root = write_project(tmp_path / "tiny", app=tiny_stateful_app(), cases=DONE_CASES[:2])
    config = json.loads((root / "oloproof.yaml").read_text())
    (root / "oloproof.yaml").write_text(json.dumps({**config, "reference": "references:correct"}))

    certified = oloproof("certify", cwd=root)
    assert certified.returncode == EXIT_USAGE, certified.stdout + certified.stderr
    [line] = certified.stderr.splitlines()
    assert line.startswith(f"error: tiny__case_certification: {root / 'oloproof.yaml'}: reference: no module file {root / 'references.py'}")
    assert line.endswith("failed: a usage or configuration error)")
