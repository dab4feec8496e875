"""Run stamps: what a completed run read and left behind, so an identical rerun can be answered
from storage without launching anything.

A stamp is written only after a run that finished with every case and replay recorded. It holds
the digest of everything the run read (`model.fingerprints.run_inputs_digest`) and the size and
modification time of every file the pipeline keeps (tables, journals, reports). A rerun whose
inputs digest is the same, and that finds those files exactly as the run left them, would reuse
every recording, replay and verdict and decide the same gate: there is nothing to run.

The modules the system's workers found it imported (stored with each recording, in `code_files`)
are kept in the stamp too and read again when it is checked: one edited outside the project
folder, which the inputs digest does not cover, is not up to date either.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from ..model.fingerprints import found_changes
from .layout import journal_dir, reports_dir, run_stamp_path, tables_dir, write_text_file
from .stored import StoredTable

FileState = tuple[int, int]  # size in bytes, modification time in ns


class RunStamp(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Where the project was: a copied or moved project (its tables copied with it) launches,
    # so its instance and paths are checked and named afresh.
    project_root: str
    version: str
    ungated: bool
    inputs_digest: str
    # `$DAGSTER_HOME` as the run saw it: a run pointed at another instance goes through the
    # instance checks a launch makes, never around them.
    dagster_home_env: str | None
    run_id: str
    finished_at: str
    outputs: dict[str, FileState]
    # How to open that run in Dagster, as the run printed it (no Dagster import to say it again).
    dagster_dev: str
    # The system's code outside the project folder (declared or found imported) as its
    # recordings stored it, by path: each file is read again when the stamp is checked.
    code_files: dict[str, str] = {}


def stored_outputs(project_root: Path) -> dict[str, FileState]:
    """Every file the pipeline keeps for the project's results, with its size and time."""
    root = Path(project_root)
    state: dict[str, FileState] = {}
    for folder in (tables_dir(root), journal_dir(root), reports_dir(root)):
        if not folder.is_dir():
            continue
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                stat = path.stat()
                state[path.relative_to(root).as_posix()] = (stat.st_size, stat.st_mtime_ns)
    return state


def code_files_outside(project_root: Path, version: str) -> dict[str, str]:
    """The files of the system's code outside the project folder (named by absolute path) that
    the version's recordings, every trial, were made with: the inputs digest covers the folder."""
    files: dict[str, str] = {}
    stored = StoredTable.at(project_root, "recorded_runs", "trial_runs", partition=version)
    if stored.exists:
        # Read as a dictionary (store/stored.py REPEATED_TEXT): its few distinct texts are
        # found by their codes, not by hashing every row's few KiB.
        for text in stored.columns("code_files")["code_files"].dropna().unique():
            files.update((name, each) for name, each in json.loads(text).items() if Path(name).is_absolute())
    return files


def write_run_stamp(project_root: Path, *, version: str, ungated: bool, inputs_digest: str, run_id: str,
                    dagster_dev: str) -> RunStamp:
    stamp = RunStamp(
        project_root=str(Path(project_root).resolve()), version=version, ungated=ungated, inputs_digest=inputs_digest, dagster_home_env=os.environ.get("DAGSTER_HOME"),
        run_id=run_id,
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        outputs=stored_outputs(project_root), dagster_dev=dagster_dev,
        code_files=code_files_outside(project_root, version),
    )
    write_text_file(run_stamp_path(project_root, version), stamp.model_dump_json(indent=2))
    return stamp


def unchanged_since(project_root: Path, *, version: str, ungated: bool, inputs_digest: str) -> RunStamp | None:
    """The stamp of the last completed run of `version` when nothing it read or wrote has
    changed since; None when a run has work to do (or no stamp can be trusted)."""
    path = run_stamp_path(project_root, version)
    try:
        stamp = RunStamp.model_validate(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError, ValidationError):
        return None  # none yet, or unreadable: run, and a new stamp replaces it
    if (stamp.project_root, stamp.version, stamp.ungated, stamp.inputs_digest, stamp.dagster_home_env) != (
        str(Path(project_root).resolve()), version, ungated, inputs_digest, os.environ.get("DAGSTER_HOME")
    ):
        return None
    # A launch never deletes the stamp: it holds only while every file the pipeline keeps is as
    # that run left it, so a run that writes anything (a killed one too) voids it here, and a
    # launch refused before it writes (a foreign $DAGSTER_HOME) leaves it standing.
    if stamp.outputs != stored_outputs(project_root) or found_changes(stamp.code_files, Path(project_root)):
        return None
    return stamp
