"""What a run imports before it does anything: the launch (`oloproof_pipeline.defs.launch`, which
`oloproof run` imports) pulls in neither `scipy.stats` nor `scipy.optimize` (the slices use
decide/fisher.py, a comparison decide/paired.py on `scipy.special`), nor `httpx` (imported with
the first model client) nor `jsonschema` (with the first json_schema evaluator). Counted in a
fresh interpreter; `pytest -s` prints how many modules the launch imports in all."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO, cli_environment

NOT_ON_THE_RUN_PATH = ["scipy.stats", "scipy.optimize", "httpx", "jsonschema"]


def modules_after(statement: str) -> set[str]:
    """The modules loaded in a fresh interpreter once `statement` has run."""
    script = f"import json, sys\n{statement}\nprint(json.dumps(sorted(sys.modules)))"
    finished = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=cli_environment(), capture_output=True, text=True, check=True
    )
    return set(json.loads(finished.stdout))


def test_the_launch_imports_no_statistics_nor_model_client_it_does_not_use():
    bare = modules_after("pass")
    launch = modules_after("import oloproof_pipeline.defs.launch")
    print(f"\nimport oloproof_pipeline.defs.launch: {len(launch - bare)} modules beyond a bare interpreter's {len(bare)}")
    assert "oloproof_pipeline.decide.slices" in launch  # the run's slices are defined, and still cost nothing above
    assert sorted(set(NOT_ON_THE_RUN_PATH) & launch) == []


def test_reading_stored_tables_never_imports_pyarrow_dataset(tmp_path):
    # pq.read_table goes through pyarrow.dataset (~7 MiB and ~17 ms to import); a single
    # stored file needs none of it, however it is read: whole, by columns, or its checked lines.
    statement = f"""
import pandas as pd
from pathlib import Path
from oloproof_pipeline.store.layout import read_table_file, write_table_file, table_path, case_lines_path
from oloproof_pipeline.store.stored import StoredTable
from oloproof_pipeline.store.case_lines import LinesCheckedBefore
root = Path({str(tmp_path)!r})
write_table_file(table_path(root, "notes"), pd.DataFrame({{"case_id": ["a", "b"], "case_digest": ["x", "y"]}}))
write_table_file(case_lines_path(root), pd.DataFrame({{"line_key": ["k"], "case_id": ["a"], "declares_group": [False], "declares_state": [False], "checked_with": ["c"]}}))
assert list(read_table_file(table_path(root, "notes"))["case_id"]) == ["a", "b"]
assert list(StoredTable.at(root, "notes").columns("case_id")["case_id"]) == ["a", "b"]
assert LinesCheckedBefore.read(root, "c").case_ids[0] == "a"
"""
    loaded = modules_after(statement)
    assert "pyarrow.parquet" in loaded and "pyarrow.dataset" not in loaded
