"""Cache keys narrowed to their producers, tried on a copy of the pipeline's own source: an
edit to the CLI re-records and re-judges nothing; an edit to the runner re-records every case
and names the edited file as the reason."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import oloproof_pipeline
from oloproof_pipeline.model.fingerprints import RowKeyPrefix, row_key, row_key_tail

CASES = 72  # the refund desk's 24 sources and their 48 copies
VERDICTS = CASES * 6  # its six evaluators


@pytest.fixture
def pipeline_copy(tmp_path: Path) -> Path:
    """A copy of the installed package's source, in a folder put first on PYTHONPATH."""
    folder = tmp_path / "pipeline"
    source = Path(oloproof_pipeline.__file__).parent
    shutil.copytree(source, folder / "oloproof_pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def environment(pipeline: Path) -> dict[str, str]:
    kept = {key: value for key, value in os.environ.items() if key not in {"DAGSTER_HOME", "PYTHONPATH"}}
    return {**kept, "PYTHONPATH": str(pipeline)}


def run_json(project: Path, pipeline: Path) -> dict:
    """`oloproof run --json` of the project, from the copy of the pipeline."""
    done = subprocess.run(
        [sys.executable, "-m", "oloproof_pipeline", "run", "--json"],
        cwd=project, env=environment(pipeline), capture_output=True, text=True, timeout=300,
    )
    assert done.returncode in (0, 1), done.stderr  # the refund desk's gate blocks: 1
    return json.loads(done.stdout)


def cli_module(pipeline: Path) -> Path:
    """The CLI's module, whether it is one file or a package."""
    package = pipeline / "oloproof_pipeline"
    return package / "cli.py" if (package / "cli.py").is_file() else package / "cli" / "__init__.py"


def append_comment(path: Path) -> None:
    path.write_text(path.read_text(encoding="utf-8") + "\n# an edit that changes no behaviour\n", encoding="utf-8")


def test_a_cli_edit_reuses_everything_and_a_runner_edit_re_records_every_case_naming_it(refund_desk, pipeline_copy):
    imported = subprocess.run(
        [sys.executable, "-c", "import oloproof_pipeline; print(oloproof_pipeline.__file__)"],
        cwd=refund_desk, env=environment(pipeline_copy), capture_output=True, text=True, check=True,
    )
    assert Path(imported.stdout.strip()) == pipeline_copy / "oloproof_pipeline" / "__init__.py"

    first = run_json(refund_desk, pipeline_copy)
    assert (first["counts"]["cases_recorded"], first["counts"]["verdicts_judged"]) == (CASES, VERDICTS)

    # The CLI edited: the up-to-date stamp covers the whole package, so a run is launched, and
    # it reuses every recording, replay and verdict.
    append_comment(cli_module(pipeline_copy))
    after_cli = run_json(refund_desk, pipeline_copy)
    assert after_cli["run_id"] != first["run_id"]
    counts = after_cli["counts"]
    assert (counts["cases_recorded"], counts["cases_reused"]) == (0, CASES)
    assert (counts["replays_run"], counts["verdicts_judged"], counts["verdicts_reused"]) == (0, 0, VERDICTS)
    # Not even the report is written again: its digest covers read/, decide/ and model/ only.
    assert after_cli["why"] == []

    # The runner edited: every case is recorded again, and the reason names the runner.
    append_comment(pipeline_copy / "oloproof_pipeline" / "run" / "runner.py")
    after_runner = run_json(refund_desk, pipeline_copy)
    assert (after_runner["counts"]["cases_recorded"], after_runner["counts"]["cases_reused"]) == (CASES, 0)
    assert after_runner["counts"]["verdicts_judged"] == VERDICTS
    assert f"{CASES} cases re-recorded: system code changed ((oloproof_pipeline)/run/runner.py)" in after_runner["why"]


def test_the_same_pipeline_installed_elsewhere_keys_the_verdicts_alike(refund_desk, pipeline_copy):
    """The evaluators' code is named in their verdicts' key as the package names it, not by
    where it is installed: the same code in another folder re-judges nothing."""
    def digests(pipeline: Path | None) -> list[str]:
        environment_here = environment(pipeline) if pipeline else {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
        done = subprocess.run(
            [sys.executable, "-c", "import json; import oloproof_pipeline as package; "
             "from oloproof_pipeline.evaluators.verdict_keys import evaluator_digests; from oloproof_pipeline.project import load_project; "
             "print(json.dumps([package.__file__, evaluator_digests(load_project('.'))]))"],
            cwd=refund_desk, env=environment_here, capture_output=True, text=True, check=True,
        )
        return json.loads(done.stdout)

    installed, copied = digests(None), digests(pipeline_copy)
    assert Path(copied[0]).is_relative_to(pipeline_copy) and not Path(installed[0]).is_relative_to(pipeline_copy)
    assert copied[1] == installed[1]


def test_a_key_from_a_shared_prefix_and_tails_is_the_row_key_of_all_its_parts():
    """Verdict keys are made from a prefix hashed once (`RowKeyPrefix`) and joined tails: each
    must equal `row_key` of the same parts, or every stored verdict would be judged again."""
    values = [None, "", "verdict", "sha256:" + "ab" * 32, "é ✓", "\x1f", "\x00", 7, "a\x1fb"]
    checked = 0
    for first in values:
        for second in values:
            prefix = RowKeyPrefix(first, second)
            assert prefix.key(row_key_tail(second)) == row_key(first, second, second)
            for third in values:
                for fourth in values:
                    expected = row_key(first, second, third, fourth)
                    assert prefix.key(row_key_tail(third, fourth)) == expected
                    assert prefix.key(row_key_tail(third), row_key_tail(fourth)) == expected
                    assert RowKeyPrefix(first).key(row_key_tail(second, third), row_key_tail(fourth)) == expected
                    checked += 3
    assert checked == 3 * len(values) ** 4
    assert RowKeyPrefix("a", None).key() == row_key("a", None)
    with pytest.raises(ValueError):
        row_key_tail()
