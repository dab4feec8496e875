"""Run stamps: what a completed run read and left behind, so an identical rerun can be answered
from storage without launching anything.

A stamp is written only after a run that finished with every case and replay recorded. It holds
the digest of everything the run read (`model.fingerprints.run_inputs_digest`) and the size and
modification time of every file the pipeline keeps (tables, journals, reports). A rerun whose
inputs digest is the same, and that finds those files exactly as the run left them, would reuse
every recording, replay and verdict and decide the same gate: there is nothing to run.
"""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from .layout import journal_dir, reports_dir, run_stamp_path, tables_dir, write_text_file

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


def write_run_stamp(project_root: Path, *, version: str, ungated: bool, inputs_digest: str, run_id: str,
                    dagster_dev: str) -> RunStamp:
    stamp = RunStamp(
        project_root=str(Path(project_root).resolve()), version=version, ungated=ungated, inputs_digest=inputs_digest, dagster_home_env=os.environ.get("DAGSTER_HOME"),
        run_id=run_id,
        finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        outputs=stored_outputs(project_root), dagster_dev=dagster_dev,
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
    return stamp if stamp.outputs == stored_outputs(project_root) else None


def forget_run_stamp(project_root: Path, version: str) -> None:
    """A run is under way: until it completes, the last stamp says nothing about the tables."""
    run_stamp_path(project_root, version).unlink(missing_ok=True)
