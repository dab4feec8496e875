"""Digests of what produced each stored result, so a cache is reused only while it holds.

- `producer_code_version`: the pipeline's own share of a key, narrowed to the package parts
  that produce that result (`PRODUCERS`): an edit to the runner re-records, an edit to an
  evaluator re-judges, an edit to the CLI, the report (`read/`) or `defs/` does neither.
- `code_versions`: per asset, a digest of the configuration it depends on; when an evaluator
  or a rule changes, the stages it feeds show as stale (Dagster's `code_version`) and a
  backfill re-grades them.
- `system_code_fingerprint`: the system's code, read as files (never imported): the module the
  callable lives in and every file under `system.code_paths`. A recording is reused only while
  its case digest, the system version and this fingerprint are unchanged, and while every module
  the worker found the system had imported (`imported_files`, stored with the recording in
  `code_files`) still has the content it had then (`CodeFingerprint.changes_since`).
- `evaluator_digest`: an evaluator's configuration and code (and a python grader's module, with
  every module it was found to import). A verdict is reused only while it and the verdict's
  recordings and replays are unchanged.
- `row_key` and `frame_digest`: short keys joining those parts, row by row and over a table.
"""

from __future__ import annotations

import hashlib
import json
import os
import site
import sys
import sysconfig
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from .. import __version__
from .cases import dataset_files
from .config import PROJECT_FILE, Project
from .digests import canonical_json, digest
from .errors import ProjectError

if TYPE_CHECKING:  # pandas is imported where a frame is hashed: the worker processes never do
    import pandas as pd

SYSTEM_CODE_TAG = "system_code/v1"
EVALUATOR_TAG = "evaluator/v1"
# The pipeline's own code is part of what produced a recording (the runner and tool box write
# the trajectory): its release under this name in a fingerprint's files, and each of its files
# under `(oloproof_pipeline)/run/runner.py` and the like, so a changed one is named.
PIPELINE_ENTRY = "(oloproof_pipeline)"
PACKAGE = Path(__file__).resolve().parents[1]
# Per kind of result, the parts of the package (folders or modules) whose code produces it.
# Never `cli`, `read/` or `defs/`: they show and schedule results, they make none.
PRODUCERS: dict[str, tuple[str, ...]] = {
    # The lines' checks (the evaluators' among them) and the table's rows (store/case_lines.py).
    "cases": ("model", "evaluators", "store/tables.py", "store/case_lines.py"),
    "copies": ("model",),  # the transforms
    # The runner, sandboxes, worker, tool box and systems layer; the records' shapes.
    "recordings": ("run", "toolbox.py", "model"),
    "verdicts": ("evaluators", "model"),  # the evaluator kinds and the judging engine
    "decisions": ("decide", "model"),  # slices and the gate
    # The HTML report: its view models, charts and templates (every file, not only .py).
    "report": ("read", "decide", "model"),
}
# Never part of a system's code: caches, version control, and what the pipeline writes.
# Rows of one column hashed at a time by `frame_digest`.
HASHED_ROWS = 65536
SKIPPED_NAMES = {"__pycache__", ".git", ".hg", ".svn", ".oloproof", ".pytest_cache", ".mypy_cache", ".venv"}


@cache
def producer_files(producer: str) -> dict[str, str]:
    """Package-relative name -> a short digest of its content, for each file of `producer`'s
    parts (`PRODUCERS`), sorted by name."""
    files = [found for part in PRODUCERS[producer] for found in files_under(PACKAGE / part)]
    return {
        path.relative_to(PACKAGE).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()[:16]
        for path in sorted(set(files))
    }


@cache
def producer_code_version(producer: str) -> str:
    """The pipeline's release and a digest of the code that produces `producer`'s results: an
    edit to that code (a fix in an evaluator, say) is a new version of them even before the
    release number moves."""
    return f"{__version__}+" + digest(f"producer/{producer}", producer_files(producer)).removeprefix("sha256:")[:16]


@cache
def pipeline_code_version() -> str:
    """The release and a digest of every file of the package: for the up-to-date stamp only,
    where any edit (the Dagster layer's too) must launch a run; caches key on their producer."""
    hashed = hashlib.sha256()
    for path in files_under(PACKAGE):
        hashed.update(path.relative_to(PACKAGE).as_posix().encode("utf-8") + b"\x00" + path.read_bytes() + b"\x00")
    return f"{__version__}+{hashed.hexdigest()[:16]}"


def code_versions(project: Project) -> dict[str, str]:
    """Per asset, a digest of the configuration it depends on: when an evaluator or a rule
    changes, the assets it feeds show as stale and a backfill re-grades them."""
    config = project.config

    def short(tag: str, value: Any, producer: str) -> str:
        return f"{producer_code_version(producer)}-" + digest(tag, value).removeprefix("sha256:")[:12]

    evaluators = config.evaluators
    trials = {"trials": config.execution.trials} if config.execution.trials > 1 else {}
    return {
        "cases": short("cases", {"dataset": config.dataset}, "cases"),
        "derived_cases": short("derived_cases", config.metamorphic.model_dump(mode="json"), "copies"),
        # Repeated trials enter only when there are some, so one trial keeps the versions it had.
        "recorded_runs": short("recorded_runs", {"system": config.system.model_dump(mode="json"), **trials}, "recordings"),
        "fault_replays": short(
            "fault_replays", {"evaluators": [each for each, built in zip(evaluators, project.evaluators) if built.replay_driven]},
            "recordings",
        ),
        "verdicts": short("verdicts", {"evaluators": evaluators, **trials}, "verdicts"),
        "slices": short("slices", {"slices": config.slices, "min_support": config.min_slice_support}, "decisions"),
        "gate": short("gate", project.release.model_dump(mode="json"), "decisions"),
    }


# -- file contents -------------------------------------------------------------------------


def file_digest(path: Path) -> str:
    return "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()


def files_under(path: Path) -> list[Path]:
    """`path` itself, or every file below it (caches and version control left out), sorted."""
    if path.is_file():
        return [path]
    found = []
    for child in sorted(path.iterdir()):
        if child.name in SKIPPED_NAMES or child.suffix in {".pyc", ".pyo"} or (child / "pyvenv.cfg").is_file():
            continue  # a virtual environment is installed packages, not the project's files
        found.extend(files_under(child) if child.is_dir() else [child])
    return found


def relative_name(path: Path, root: Path) -> str:
    """How a file is named in fingerprints and messages: relative to the project when inside it."""
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


# -- the system's code ---------------------------------------------------------------------


@dataclass(frozen=True)
class CodeFingerprint:
    """The system's code as file digests, and one digest over them (and the callable named)."""

    digest: str
    files: dict[str, str] = field(default_factory=dict)

    @property
    def files_text(self) -> str:
        """The file digests as JSON text, as the `code_files` column holds them."""
        return canonical_json(self.files)

    def with_found(self, found: dict[str, str] | None) -> "CodeFingerprint":
        """These files and the modules a worker found the system imported (`imported_files`),
        as a recording stores them: the found ones are checked against their files when the
        recording is next considered for reuse (`changes_since`)."""
        return CodeFingerprint(self.digest, {**(found or {}), **self.files})

    def changes_since(self, earlier: dict[str, str] | None, root: Path) -> list[str]:
        """The files added, removed or edited since `earlier` (None: nothing is known of it).
        A file `earlier` has beyond these, a module found imported, is compared with its file
        as it is now (`root`: the project folder its name is relative to)."""
        if earlier is None:
            return []
        changed = [name for name in sorted(self.files) if earlier.get(name) != self.files[name]]
        found = {name: each for name, each in earlier.items() if name not in self.files}
        return changed + found_changes(found, root)

    def holds_for(self, stored_files: Iterable[str | None], root: Path) -> list[bool]:
        """Per stored `code_files` text (of a recording with this digest): whether every module
        found imported then is unchanged now. Each distinct text is checked, and each file read,
        once."""
        verdicts: dict[str | None, bool] = {}
        read: dict[Path, str | None] = {}
        for text in stored_files:
            if text not in verdicts:
                found = {} if text is None else {n: d for n, d in json.loads(text).items() if n not in self.files}
                verdicts[text] = not found_changes(found, root, read)
        return [verdicts[text] for text in stored_files]


# -- modules found imported -------------------------------------------------------------------

# Where installed code lives (the standard library, site-packages) and the pipeline itself:
# a module imported from anywhere else is the project's own code, declared or not.
INSTALLED_ROOTS = tuple(
    sorted({str(Path(path).resolve()) for path in [
        *(sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")),
        *site.getsitepackages(), site.getusersitepackages(), str(PACKAGE),
    ]})
)
_imported_digests: dict[Path, str] = {}  # a found module's file -> its digest when first found
_imported_when: tuple[int, list[Path]] = (-1, [])  # (len(sys.modules), imported_files()) last found
_imported_names: dict[tuple[Path, Path], str] = {}  # (a found module's file, root) -> its relative_name


@cache
def project_code_path(name: str) -> Path | None:
    """The module file `name` (a `__file__`) when it is code outside the installed packages and
    the pipeline; None when it is installed, or not Python source."""
    if not name.endswith(".py"):
        return None
    path = Path(name).resolve()
    text = str(path)
    if any(text == root or text.startswith(root + os.sep) for root in INSTALLED_ROOTS):
        return None
    return path


def project_code_file(module: Any) -> Path | None:
    """The file `module` was imported from when it is project code (`project_code_path`)."""
    name = getattr(module, "__file__", None)
    return project_code_path(name) if isinstance(name, str) else None


def imported_files() -> list[Path]:
    """The files of every module this process has imported from outside the installed
    packages and the pipeline: what a worker's system (or a grader) is actually made of."""
    found = {project_code_file(module) for name, module in list(sys.modules.items()) if name != "__main__"}
    return sorted(path for path in found if path is not None)


def imported_file_digests(root: Path) -> dict[str, str]:
    """`imported_files` as a fingerprint names them (relative to `root` when inside it), each
    file read once per process, when first found: the content it was imported with."""
    global _imported_when
    if _imported_when[0] != len(sys.modules):  # nothing imported since: the same modules
        _imported_when = (len(sys.modules), imported_files())
    found = _imported_when[1]
    for path in found:
        if path not in _imported_digests and path.is_file():
            _imported_digests[path] = file_digest(path)
    return {imported_name(path, root): _imported_digests[path] for path in found if path in _imported_digests}


def imported_name(path: Path, root: Path) -> str:
    """`relative_name`, worked out once per file: a worker asks after every case."""
    if (path, root) not in _imported_names:
        _imported_names[path, root] = relative_name(path, root)
    return _imported_names[path, root]


def found_changes(found: dict[str, str], root: Path, read: dict[Path, str | None] | None = None) -> list[str]:
    """The names among `found` (as `imported_file_digests` gave them) whose file changed or is
    gone (`read`: the files already read for this question, by path)."""
    read = {} if read is None else read
    changed = []
    for name, each in sorted(found.items()):
        path = root / name
        if path not in read:
            read[path] = file_digest(path) if path.is_file() else None
        if read[path] != each:
            changed.append(name)
    return changed


@contextmanager
def imports_seen() -> Iterator[list[Path]]:
    """Within: project modules already imported are put aside, so a module imported now (a
    python grader's) executes afresh with each module it imports; after, the list holds the
    files of those modules and the ones put aside and not imported again come back."""
    aside = {name: module for name, module in list(sys.modules.items())
             if name != "__main__" and project_code_file(module) is not None}
    for name in aside:
        del sys.modules[name]
    seen: list[Path] = []
    try:
        yield seen
    finally:
        seen.extend(imported_files())  # every project module left was imported within
        for name, module in aside.items():
            sys.modules.setdefault(name, module)


def callable_module_file(project: Project) -> Path:
    """The file `system.callable`'s module is imported from (as `model/modules.py` finds it)."""
    module_name = project.config.system.callable.partition(":")[0]
    return project.root.joinpath(*module_name.split(".")).with_suffix(".py")


def system_code_files(project: Project) -> list[Path]:
    """The callable's module, then every file under each `system.code_paths` entry."""
    where = f"{project.root / PROJECT_FILE}: system"
    module = callable_module_file(project)
    if not module.is_file():
        raise ProjectError(f"{where}.callable: no module file {module}")
    files = [module]
    for index, entry in enumerate(project.config.system.code_paths):
        path = (project.root / entry) if not Path(entry).is_absolute() else Path(entry)
        if not path.exists():
            raise ProjectError(f"{where}.code_paths[{index}]: no file or folder {path}")
        files.extend(found for found in files_under(path) if found not in files)
    prompt = project.config.system.prompt
    if prompt is not None:  # a chat agent's prompt is its code as much as its tools are
        path = project.root / prompt
        if not path.is_file():
            raise ProjectError(f"{where}.prompt: no file {path}")
        if path not in files:
            files.append(path)
    return files


def environment_digests(names: Iterable[str]) -> dict[str, str | None]:
    """Per `system.env` name, a digest of `name=value` (None: the variable is not set, which is
    not the same as set to ""): a changed value is a changed system, and no value is stored."""
    values = {name: os.environ.get(name) for name in names}
    return {
        name: None if value is None else "sha256:" + hashlib.sha256(f"{name}={value}".encode("utf-8")).hexdigest()
        for name, value in values.items()
    }


def system_code_fingerprint(project: Project) -> CodeFingerprint:
    """A digest of the system's code, computed from file contents without importing it."""
    files = {relative_name(path, project.root): file_digest(path) for path in system_code_files(project)}
    files[PIPELINE_ENTRY] = __version__
    files.update({f"{PIPELINE_ENTRY}/{name}": each for name, each in producer_files("recordings").items()})
    body: dict[str, Any] = {"callable": project.config.system.callable, "files": files}
    system = project.config.system
    if system.env:  # entered only when named: a project without `system.env` keeps its digest
        body["env"] = environment_digests(system.env)
    if system.is_chat_agent:  # the model, its settings and the loop's are code too (never the key)
        body["chat_agent"] = system.model_dump(mode="json", include={"model", "max_turns", "answer"}, exclude={"model": {"api_key_env"}})
    return CodeFingerprint(digest=digest(SYSTEM_CODE_TAG, body), files=files)


# -- a whole run's inputs ---------------------------------------------------------------------


def named_files(project: Project) -> list[Path]:
    """The data files `oloproof.yaml` names, wherever they live: the dataset's matches and the
    label files (the prompt and `system.code_paths` are the system's code, hashed with it)."""
    transforms = project.config.metamorphic.transforms
    labels = [transform.validity_labels for transform in transforms if transform.validity_labels]
    return dataset_files(project) + [project.root / name for name in labels]


def run_inputs_digest(project: Project) -> str:
    """Everything a run reads: every file of the project (YAML, cases, labels, snapshots, the
    system and its graders; what the pipeline writes, caches and virtual environments left out),
    the system's code wherever `system.code_paths` puts it, and the pipeline's own code. Equal
    digests, and stored tables untouched since, mean a run would reuse every result."""
    files = {relative_name(path, project.root): file_digest(path) for path in files_under(project.root)}
    graders = [path for evaluator in project.evaluators for path in evaluator.project_code_files(project.root)]
    for path in named_files(project) + graders:  # a dataset, labels or grader module outside the folder
        if path.is_file():
            files.setdefault(relative_name(path, project.root), file_digest(path))
    body = {"files": files, "system_code": system_code_fingerprint(project).digest, "pipeline": pipeline_code_version()}
    if project.settings:  # `--set` overrides are inputs too (absent otherwise: older stamps still match)
        body["settings"] = list(project.settings)
    return digest("run_inputs/v1", body)


def case_lines_context(project: Project) -> str:
    """What checking a dataset line and making its case depend on beyond the line's text: the
    snapshots (a case may start from one), the evaluators (their paths are checked against each
    case) and the code that checks lines and makes their rows."""
    snapshots = project.root / "snapshots"
    files = {relative_name(path, project.root): file_digest(path) for path in files_under(snapshots)} if snapshots.is_dir() else {}
    body = {"snapshots": files, "evaluators": project.config.evaluators, "code": producer_code_version("cases")}
    return digest("case_lines/v1", body)


# -- metamorphic copies ----------------------------------------------------------------------


def copies_inputs_digest(project: Project, cases: pd.DataFrame) -> str:
    """What the metamorphic copies are made from: every column of the cases, the transforms,
    and the content of each label file (a relabelled pair changes its copy's status)."""
    labels = {}
    for transform in project.config.metamorphic.transforms:
        path = project.root / transform.validity_labels if transform.validity_labels else None
        labels[transform.name] = file_digest(path) if path is not None and path.is_file() else None
    settings = {"metamorphic": project.config.metamorphic.model_dump(mode="json"), "labels": labels}
    return frame_digest("derived_cases/v1", cases, settings, producer="copies")


# -- evaluators ------------------------------------------------------------------------------


def evaluator_digest(config: dict[str, Any], code_files: Iterable[Path], project_root: Path) -> str:
    """An evaluator's configuration, the source of its code and of any project module it runs
    (a python grader's), and the judging code's version: a change to any re-judges its verdicts."""
    code = {code_file_name(path, project_root): file_digest(path) for path in code_files if path.is_file()}
    return digest(EVALUATOR_TAG, {"config": config, "code": code, "pipeline": producer_code_version("verdicts")})


def code_file_name(path: Path, project_root: Path) -> str:
    """A file of code as a digest names it: the pipeline's own under `PIPELINE_ENTRY`, wherever
    the package is installed (so moving an install re-judges nothing), else `relative_name`."""
    resolved = path.resolve()
    if resolved.is_relative_to(PACKAGE):
        return f"{PIPELINE_ENTRY}/{resolved.relative_to(PACKAGE).as_posix()}"
    return relative_name(resolved, project_root)


# -- keys ------------------------------------------------------------------------------------


ROW_KEY_SEPARATOR = "\x1f"
ROW_KEY_CHARACTERS = 32  # hex characters of a row key: 128 bits
ROW_KEY_NONE = "\x00"  # what a None part is hashed as


def row_key_text(parts: tuple[Any, ...]) -> str:
    """What `row_key` hashes: the parts as text (None as ROW_KEY_NONE), joined by the separator."""
    return ROW_KEY_SEPARATOR.join(ROW_KEY_NONE if part is None else str(part) for part in parts)


def row_key(*parts: Any) -> str:
    """A short key joining `parts` (text or None): what one row's cache entry is made of.
    128 bits: no two rows of one project ever meet by chance."""
    return hashlib.sha256(row_key_text(parts).encode("utf-8")).hexdigest()[:ROW_KEY_CHARACTERS]


def row_key_tail(*parts: Any) -> bytes:
    """Parts that follow others in a `row_key`, joined and encoded once: a tail shared by
    many rows (each with its own `RowKeyPrefix`) is made once, not once per row."""
    if not parts:
        raise ValueError("a row key's tail needs at least one part")
    return (ROW_KEY_SEPARATOR + row_key_text(parts)).encode("utf-8")


class RowKeyPrefix:
    """A `row_key`'s first parts, hashed once: `key(*tails)` is exactly `row_key` of these parts
    then each tail's (`row_key_tail`), the prefix's hash state copied per row."""

    __slots__ = ("_hashed",)

    def __init__(self, *parts: Any) -> None:
        if not parts:
            raise ValueError("a row key's prefix needs at least one part")
        self._hashed = hashlib.sha256(row_key_text(parts).encode("utf-8"))

    def key(self, *tails: bytes) -> str:
        row = self._hashed.copy()
        for tail in tails:
            row.update(tail)
        return row.hexdigest()[:ROW_KEY_CHARACTERS]


def settings_hash(tag: str, extra: Any = None, *, producer: str | None = None) -> Any:
    """A SHA-256 (hashlib object) begun with `tag`, `extra` (plain JSON) and the version of the
    code that makes the result (`producer`; None: the whole package): what a digest of a
    stage's inputs starts from before it takes in their rows."""
    code = pipeline_code_version() if producer is None else producer_code_version(producer)
    return hashlib.sha256((tag + "\x00" + canonical_json({"extra": extra, "pipeline": code})).encode("utf-8"))


def frame_digest(tag: str, frame: pd.DataFrame | None, extra: Any = None, *, producer: str | None = None) -> str:
    """A digest of a table's values (its columns as given), of `extra` (plain JSON) and of the
    version of the code that makes the result (`producer`; None: the whole package): whether a
    stage's inputs changed, without comparing them row by row."""
    hashed = settings_hash(tag, extra, producer=producer)
    if frame is not None:
        from pandas.util import hash_pandas_object  # only a process holding a frame has pandas

        hashed.update(canonical_json([str(column) for column in frame.columns]).encode("utf-8"))
        hashed.update(str(len(frame)).encode("utf-8"))
        for column in frame.columns:  # a column and a slice of rows at a time: no copy of the table
            values = frame[column]
            for start in range(0, len(values), HASHED_ROWS):
                part = values.iloc[start : start + HASHED_ROWS]
                hashed.update(hash_pandas_object(part, index=False).to_numpy().tobytes())
    return "sha256:" + hashed.hexdigest()
