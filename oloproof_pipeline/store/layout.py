"""Where the pipeline keeps what it writes: everything lives under the project's `.oloproof/`.

The Dagster IO manager, the core and the CLI all go through these paths, so a table written
by a run is found by `oloproof gate`, by a later incremental run, and by DuckDB alike.
"""

from __future__ import annotations

import os
import uuid
from contextlib import suppress
from pathlib import Path
from typing import Iterable, Protocol

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from ..model.config import version_problem
from ..model.errors import ProjectError
from .tables import required_columns

# Everything the pipeline writes lives here, inside the project; never read as input.
OUTPUT_DIR = ".oloproof"


def output_dir(project_root: Path) -> Path:
    return Path(project_root) / OUTPUT_DIR


def tables_dir(project_root: Path) -> Path:
    return output_dir(project_root) / "tables"


class StoredTableError(Exception):
    """A stored table that cannot be read (cut short, emptied, not Parquet, unreadable)."""

    def __init__(self, path: Path, reason: str):
        self.path = path
        # A partitioned table lives in a folder of versions; `run` rebuilds one version at a time.
        partitioned = path.parent.name != "tables"
        run = f"`oloproof run` of version {path.stem!r}" if partitioned else "`oloproof run`"
        super().__init__(f"{path}: stored table cannot be read ({reason}); {run} rebuilds it")


class StorageWriteError(Exception):
    """Writing a file failed (a full disk, a read-only folder): one line naming the path."""

    def __init__(self, path: Path, error: OSError):
        self.path = path
        super().__init__(f"{path}: cannot write: {error.strerror or error}")


def checked_partition(partition: str) -> str:
    """A version used as a file name: never a path (`../x`), always a valid partition key."""
    problem = version_problem(partition)
    if problem is not None:
        raise ProjectError(problem)
    return partition


def table_path(project_root: Path, table: str, partition: str | None = None) -> Path:
    """`tables/<table>.parquet` for unpartitioned tables, `tables/<table>/<version>.parquet` otherwise."""
    base = tables_dir(project_root) / table
    return base.with_suffix(".parquet") if partition is None else base / f"{checked_partition(partition)}.parquet"


def read_table(project_root: Path, table: str, partition: str | None = None) -> pd.DataFrame | None:
    """The stored table, None when there is none; a file that is not that table is a
    StoredTableError naming it."""
    path = table_path(project_root, table, partition)
    if not path.exists():
        return None
    frame = read_table_file(path)
    missing = [name for name in required_columns(table) if name not in frame.columns]
    if missing:
        raise StoredTableError(path, f"not a {table} table: no column {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}")
    return frame


def read_parquet(source: Path | pa.NativeFile, columns: list[str] | None = None, read_dictionary: list[str] | None = None) -> pa.Table:
    """A Parquet file as one Arrow table, one chunk per column (a file of several row groups
    reads as several, and pandas joins a column of many chunks again and again). Through
    `ParquetFile`, not `pq.read_table`: that goes through `pyarrow.dataset`, whose import alone
    adds ~7 MiB and ~17 ms to every run for nothing a single file needs. A handle passed in
    stays open."""
    with pq.ParquetFile(source, read_dictionary=read_dictionary) as file:
        return file.read(columns=columns).combine_chunks()


def read_table_file(path: Path) -> pd.DataFrame:
    """The stored table; one that cannot be read is a StoredTableError naming the file."""
    try:
        return read_parquet(path).to_pandas()  # as pd.read_parquet
    except (OSError, ValueError, pa.ArrowException) as error:
        reason = "the file is empty" if path.is_file() and path.stat().st_size == 0 else _short_reason(error)
        raise StoredTableError(path, reason) from None


def _short_reason(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return text[0] if text else type(error).__name__


class WritesParquet(Protocol):
    """A table that writes itself (`store/assembly.py`: a row group at a time)."""

    def write_parquet(self, path: Path) -> None: ...


# Rows per row group of a table written from a frame (the cases, their copies, the replays):
# a stage that decodes a few rows of it at a time reads the groups holding them, never the
# whole file (Parquet's default is one group of up to a million rows).
FRAME_GROUP_ROWS = 1024


def write_table_file(path: Path, frame: pd.DataFrame | pa.Table | WritesParquet) -> None:
    """Write next to the target and rename, so a reader never sees half a file; the name is
    the writer's own, as two runs of one version may write the same table at once."""
    partial = path.with_name(f"{path.name}.{uuid.uuid4().hex}.partial")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(frame, pd.DataFrame):
            frame.to_parquet(partial, index=False, row_group_size=FRAME_GROUP_ROWS)
        elif isinstance(frame, pa.Table):
            pq.write_table(frame, partial, row_group_size=FRAME_GROUP_ROWS)
        else:
            frame.write_parquet(partial)
        partial.rename(path)
    except BaseException as error:  # no half file left, whatever stopped the write
        with suppress(OSError):
            partial.unlink(missing_ok=True)
        if isinstance(error, OSError):  # a full disk, a read-only folder: one line naming the path
            raise StorageWriteError(path, error) from None
        raise  # e.g. a stored table it reads from cannot be read


def touch_table_file(path: Path) -> None:
    """A stored table kept as it is, marked written now (a journal is read only when newer
    than its table, `run/reuse.py`)."""
    try:
        os.utime(path)
    except OSError as error:
        raise StorageWriteError(path, error) from None


def write_text_file(path: Path, text: str | Iterable[str]) -> None:
    """A text file (a report) written in place: `-o` may name any file the user can write,
    a pipe or a device included, so no rename. The text may come a piece at a time (a large
    report is never one string). A failure names the path."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as handle:
            for part in [text] if isinstance(text, str) else text:
                handle.write(part)
    except OSError as error:
        raise StorageWriteError(path, error) from None


def stored_partitions(project_root: Path, table: str) -> list[str]:
    folder = tables_dir(project_root) / table
    return sorted(path.stem for path in folder.glob("*.parquet")) if folder.is_dir() else []


def dagster_home(project_root: Path) -> Path:
    return output_dir(project_root) / "dagster_home"


def empty_dagster_home_cache(dagster_version: str) -> Path:
    """This machine's copy of an empty Dagster home as that Dagster version makes it, which a
    project's new home starts from (`defs/instance.py`): in the user's cache folder."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "oloproof_pipeline" / f"empty-dagster-home-{dagster_version}"


def instance_pin_path(project_root: Path) -> Path:
    """Names the Dagster home that holds the project's run history (see `defs/instance.py`)."""
    return output_dir(project_root) / "dagster_instance"


def reports_dir(project_root: Path) -> Path:
    return output_dir(project_root) / "reports"


def compiled_templates_dir(project_root: Path) -> Path:
    """The report's templates as Jinja2 compiled them, kept between runs (`read/reports.py`)."""
    return reports_dir(project_root) / "compiled_templates"


def report_panels_path(project_root: Path, version: str) -> Path:
    """The case panels of a version's report as last rendered, by what each shows (`read/panels.py`)."""
    return reports_dir(project_root) / "panels" / f"{checked_partition(version)}.sqlite"


def case_lines_path(project_root: Path) -> Path:
    """The dataset's lines as last checked, by their text's digest (`store/case_lines.py`)."""
    return output_dir(project_root) / "checked_case_lines.parquet"


def journal_dir(project_root: Path) -> Path:
    return output_dir(project_root) / "journal"


def journal_path(project_root: Path, table: str, partition: str) -> Path:
    return journal_dir(project_root) / table / f"{checked_partition(partition)}.jsonl"


def judgments_path(project_root: Path) -> Path:
    """Every judgment a model judge gave, by what it saw (`store/judgments.py`): one journal for
    all versions, since the same answer under another version is the same question."""
    return journal_dir(project_root) / "judgments.jsonl"


def run_stamp_path(project_root: Path, version: str) -> Path:
    """What the last completed run of a version read and left (see `store/stamps.py`)."""
    return output_dir(project_root) / "stamps" / f"{checked_partition(version)}.json"


def budget_ledger_path(project_root: Path, table: str, partition: str) -> Path:
    """What a budgeted stage has spent, shared by the processes making its calls
    (`endpoints/ledger.py`); made new by each stage that holds the sandbox lock."""
    return output_dir(project_root) / "budget" / f"{table}-{checked_partition(partition)}.json"


def sandbox_lock_path(project_root: Path) -> Path:
    return output_dir(project_root) / "sandbox.lock"


def labels_lock_path(project_root: Path) -> Path:
    """Held while `oloproof labels import` checks and appends to the labels files."""
    return output_dir(project_root) / "labels.lock"
